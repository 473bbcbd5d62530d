//! One `revkv serve` process and what it takes to start it again as the same member: its binary,
//! flags, environment, ports, data directory and log file. Both the process cluster of the
//! end-to-end tests and the chaos harness's members are made of these, and start with the same
//! fast flags ([`fast_serve_flags`]).

use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// Raft heartbeat of harness members: short, so that faults cause elections within a second.
pub const HEARTBEAT_MS: u64 = 50;
/// Minimum election timeout of harness members.
pub const ELECTION_TIMEOUT_MS: u64 = 300;

/// The `revkv serve` flags every harness member starts with: identity, addresses, data and fast
/// timing. Callers add their own (founding cluster or `--join`, proxies, snapshot thresholds).
pub fn fast_serve_flags(
    id: u64,
    data_dir: &Path,
    client_address: SocketAddr,
    peer_address: SocketAddr,
    request_timeout_ms: u64,
) -> Vec<String> {
    [
        "--id".to_string(),
        id.to_string(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--listen-client".into(),
        client_address.to_string(),
        "--listen-peer".into(),
        peer_address.to_string(),
        "--heartbeat-ms".into(),
        HEARTBEAT_MS.to_string(),
        "--election-timeout-ms".into(),
        ELECTION_TIMEOUT_MS.to_string(),
        "--request-timeout-ms".into(),
        request_timeout_ms.to_string(),
    ]
    .to_vec()
}

/// Everything a member process is started with, fixed for its whole life (restarts included).
#[derive(Clone, Debug)]
pub struct MemberLaunch {
    pub id: u64,
    /// The `revkv` binary to run as `revkv serve`.
    pub binary: PathBuf,
    pub client_address: SocketAddr,
    pub peer_address: SocketAddr,
    pub data_dir: PathBuf,
    /// Receives the process's stdout and stderr, appended across restarts.
    pub log_path: PathBuf,
    /// The `serve` flags (see [`fast_serve_flags`] for the common ones).
    pub arguments: Vec<String>,
    pub environment: Vec<(String, String)>,
    /// Whether the member's listeners have TLS (its URLs are then `https://`).
    pub https: bool,
}

/// A member process that can be killed, stopped, paused, resumed and restarted.
pub struct MemberProcess {
    pub id: u64,
    pub client_address: SocketAddr,
    pub peer_address: SocketAddr,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    launch: MemberLaunch,
    child: Option<Child>,
    paused: bool,
}

impl MemberProcess {
    /// A member that is not running yet; [`spawn`](Self::spawn) starts it.
    pub fn new(launch: MemberLaunch) -> MemberProcess {
        MemberProcess {
            id: launch.id,
            client_address: launch.client_address,
            peer_address: launch.peer_address,
            data_dir: launch.data_dir.clone(),
            log_path: launch.log_path.clone(),
            launch,
            child: None,
            paused: false,
        }
    }

    /// The running process's id, if it runs.
    pub fn process_id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn client_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.client_address)
    }

    pub fn peer_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.peer_address)
    }

    fn scheme(&self) -> &'static str {
        if self.launch.https {
            "https"
        } else {
            "http"
        }
    }

    /// Makes the next start listen for peers at `address` instead (a member moved to another
    /// host or port): its `--listen-peer` and its own `--initial-cluster` entry change. Only for a
    /// member that is not running.
    pub fn move_peer_listener(&mut self, address: SocketAddr) -> Result<(), String> {
        if self.child.is_some() {
            return Err(format!("member {} runs; stop it before moving it", self.id));
        }
        let old = self.peer_address.to_string();
        let new = address.to_string();
        for argument in &mut self.launch.arguments {
            *argument = argument.replace(&old, &new);
        }
        self.launch.peer_address = address;
        self.peer_address = address;
        Ok(())
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Runs and is not paused.
    pub fn is_serving(&self) -> bool {
        self.child.is_some() && !self.paused
    }

    /// Starts the process with its log file opened for appending, after a line that marks the
    /// start (so a restarted member's log shows both lives).
    pub fn spawn(&mut self) -> Result<(), String> {
        if self.child.is_some() {
            return Err(format!("member {} already runs", self.id));
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|error| format!("open {}: {error}", self.log_path.display()))?;
        writeln!(log, "==== revkv harness: starting member {} ====", self.id)
            .map_err(|error| format!("write {}: {error}", self.log_path.display()))?;
        let stderr = log.try_clone().map_err(|error| error.to_string())?;
        let mut command = Command::new(&self.launch.binary);
        command
            .arg("serve")
            .args(&self.launch.arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .env("RUST_BACKTRACE", "1")
            // Plain log files: tracing colours its output unless told not to.
            .env("NO_COLOR", "1");
        for (name, value) in &self.launch.environment {
            command.env(name, value);
        }
        let child = command
            .spawn()
            .map_err(|error| format!("spawn {}: {error}", self.launch.binary.display()))?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// SIGKILL, then reap the process: it dies mid-whatever, with no chance to flush.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// SIGTERM (a graceful stop), then waits for the process to exit and returns how it ended.
    pub fn terminate(&mut self) -> Result<ExitStatus, String> {
        self.signal("TERM")?;
        let mut child = self.child.take().expect("signal checked that it runs");
        self.paused = false;
        child.wait().map_err(|error| error.to_string())
    }

    /// SIGSTOP: the member freezes with its connections open.
    pub fn pause(&mut self) -> Result<(), String> {
        self.signal("STOP")?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT: a paused member runs again.
    pub fn resume(&mut self) -> Result<(), String> {
        self.signal("CONT")?;
        self.paused = false;
        Ok(())
    }

    /// The exit status if the process has ended by itself (it then counts as not running).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// Sends a signal by name (`TERM`, `STOP`, `CONT`) to the running process.
    fn signal(&self, signal: &str) -> Result<(), String> {
        let child = self
            .child
            .as_ref()
            .ok_or_else(|| format!("member {} does not run", self.id))?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .map_err(|error| format!("run kill: {error}"))?;
        if !status.success() {
            return Err(format!("kill -{signal} member {}: {status}", self.id));
        }
        Ok(())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `lines` lines of the member's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for MemberProcess {
    /// No member process outlives the harness value that started it.
    fn drop(&mut self) {
        self.kill();
    }
}
