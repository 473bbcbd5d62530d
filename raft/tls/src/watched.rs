//! A value loaded from files and loaded again when they change: the piece that makes certificate
//! rotation work without a restart.
//!
//! Every [`Watched::current`] looks at each file's modification time, size and inode (one `stat`
//! each, cheap next to a handshake). The files are read again when any of that differs from the
//! last look, or when a file was modified so shortly before the last read that a rewrite in the
//! same timestamp tick could hide behind an unchanged stamp (git's "racily clean" problem;
//! kernels stamp files with a clock that ticks every few milliseconds). The value is rebuilt only
//! when the bytes differ. If that fails (a file half written, a key that does not fit the new
//! certificate yet), the previous value stays in use and the failure is logged once; the next
//! change is tried again. So an operator may replace the certificate and the key one at a time.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::error::TlsError;

/// A file modified less than this before it was read may change again without its stamp
/// changing; it is compared byte for byte until this much time has passed.
const RACY_WINDOW: Duration = Duration::from_secs(2);

/// What `stat` says about a file's contents; `None` in a list when the file is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    length: u64,
    inode: u64,
}

fn stamps(paths: &[PathBuf]) -> Vec<Option<FileStamp>> {
    paths
        .iter()
        .map(|path| {
            let metadata = std::fs::metadata(path).ok()?;
            Some(FileStamp {
                modified: metadata.modified().ok(),
                length: metadata.len(),
                inode: metadata.ino(),
            })
        })
        .collect()
}

/// Every file's bytes, in the order of `paths`.
fn read_all(paths: &[PathBuf]) -> Result<Vec<Vec<u8>>, TlsError> {
    paths.iter().map(|path| crate::pem::read(path)).collect()
}

/// How a watched value is built from its files' bytes (in the order of its paths).
pub(crate) type Loader<T> = Box<dyn Fn(&[Vec<u8>]) -> Result<T, TlsError> + Send + Sync>;

/// A value built from `paths`, rebuilt when they change.
pub(crate) struct Watched<T> {
    /// What the value is, for log lines ("certificate", "trusted CA").
    what: &'static str,
    paths: Vec<PathBuf>,
    load: Loader<T>,
    state: Mutex<State<T>>,
}

struct State<T> {
    /// The files' stamps at the last look.
    stamps: Vec<Option<FileStamp>>,
    /// When the files were last read, and what they held (whether or not it loaded).
    read_at: SystemTime,
    contents: Vec<Vec<u8>>,
    current: Arc<T>,
}

impl<T> State<T> {
    /// True when a file was modified so close to the last read that a later rewrite could carry
    /// the same stamp.
    fn racy(&self) -> bool {
        self.stamps.iter().flatten().any(|stamp| {
            stamp
                .modified
                .is_none_or(|modified| modified + RACY_WINDOW >= self.read_at)
        })
    }
}

impl<T> Watched<T> {
    /// Loads the value now; a failure here is an error (a member must not start without it).
    pub(crate) fn load(
        what: &'static str,
        paths: Vec<PathBuf>,
        load: Loader<T>,
    ) -> Result<Watched<T>, TlsError> {
        let stamps = stamps(&paths);
        let read_at = SystemTime::now();
        let contents = read_all(&paths)?;
        let current = Arc::new(load(&contents)?);
        let state = State {
            stamps,
            read_at,
            contents,
            current,
        };
        Ok(Watched {
            what,
            paths,
            load,
            state: Mutex::new(state),
        })
    }

    /// The value for the files as they are now.
    pub(crate) fn current(&self) -> Arc<T> {
        let now = stamps(&self.paths);
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if now != state.stamps || state.racy() {
            state.stamps = now;
            self.reload_if_changed(&mut state);
        }
        state.current.clone()
    }

    /// Reads the files and rebuilds the value if their bytes differ from the last read. The bytes
    /// are remembered whatever comes of it, so a bad file is loaded and logged once per change
    /// rather than on every handshake.
    fn reload_if_changed(&self, state: &mut State<T>) {
        state.read_at = SystemTime::now();
        let contents = match read_all(&self.paths) {
            Ok(contents) => contents,
            Err(error) => {
                tracing::warn!(what = self.what, %error, "keeping the previous TLS files");
                return;
            }
        };
        if contents == state.contents {
            return;
        }
        match (self.load)(&contents) {
            Ok(value) => {
                state.current = Arc::new(value);
                tracing::info!(what = self.what, files = ?self.paths, "reloaded TLS files");
            }
            Err(error) => tracing::warn!(
                what = self.what,
                %error,
                "TLS files changed but do not load; keeping the previous ones"
            ),
        }
        state.contents = contents;
    }
}

impl<T> fmt::Debug for Watched<T> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Watched")
            .field("what", &self.what)
            .field("paths", &self.paths)
            .finish()
    }
}
