//! A single-member etcd process for tests that run revkv beside the real thing (the bench's etcd
//! target, and the comparisons with etcd 3.4 to 3.7): free loopback ports, a temporary data
//! directory, a readiness probe with a deadline (`GET /health`, which needs no user), and its log
//! printed when a test fails.
//!
//! Without `/usr/bin/etcd` [`required_etcd`] lets a test pass with a note, except under `CI=true`,
//! where a missing etcd fails it (`scripts/test.sh` installs Debian's `etcd-server`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::etcd_api::{pb::RangeRequest, ConnectOptions, EtcdClient, EtcdError};

/// Where Debian's `etcd-server` package puts etcd 3.4.
pub const ETCD_BINARY: &str = "/usr/bin/etcd";

/// How long etcd may take to start and elect itself.
const ETCD_START_TIMEOUT: Duration = Duration::from_secs(60);

/// The pause between two readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// The path of etcd, or `None` (with a note) when it is missing outside CI; under `CI=true` a
/// missing etcd fails the test.
pub fn required_etcd() -> Option<PathBuf> {
    let binary = PathBuf::from(ETCD_BINARY);
    if binary.is_file() {
        return Some(binary);
    }
    let under_ci = std::env::var("CI").is_ok_and(|value| value == "true");
    assert!(
        !under_ci,
        "{ETCD_BINARY} is not installed; CI needs Debian's etcd-server package"
    );
    eprintln!("note: {ETCD_BINARY} is not installed (apt-get install etcd-server); test not run");
    None
}

/// A single-member etcd on loopback ports of its own, killed on drop (also when a test panics).
pub struct EtcdServer {
    child: Child,
    pub client_url: String,
    log_path: PathBuf,
    _directory: tempfile::TempDir,
}

impl EtcdServer {
    /// Starts `binary` with its data in a fresh temporary directory and waits until it answers.
    pub async fn start(binary: &Path) -> EtcdServer {
        EtcdServer::start_prepared(binary, |_, _| {}).await
    }

    /// Starts `binary` on a data directory that `prepare` fills first (an etcd snapshot restore),
    /// given that directory (which does not exist yet) and the member's peer URL; the member is
    /// named `default` and its initial cluster is `default=<peer URL>`.
    pub async fn start_prepared(binary: &Path, prepare: impl FnOnce(&Path, &str)) -> EtcdServer {
        EtcdServer::start_configured(binary, &[], prepare).await
    }

    /// Starts `binary` with `flags` added (a small `--quota-backend-bytes`, say) on a fresh data
    /// directory.
    pub async fn start_with_flags(binary: &Path, flags: &[&str]) -> EtcdServer {
        EtcdServer::start_configured(binary, flags, |_, _| {}).await
    }

    async fn start_configured(
        binary: &Path,
        flags: &[&str],
        prepare: impl FnOnce(&Path, &str),
    ) -> EtcdServer {
        let directory = tempfile::tempdir().expect("a temporary directory");
        // Two distinct free ports at once (two separate probes could hand out the same one).
        let addresses = super::ports::free_addresses(2).expect("free loopback ports");
        let client_url = format!("http://{}", addresses[0]);
        let peer_url = format!("http://{}", addresses[1]);
        prepare(&directory.path().join("data"), &peer_url);
        let log_path = directory.path().join("etcd.log");
        let log = std::fs::File::create(&log_path).expect("create the log");
        let child = Command::new(binary)
            .arg("--data-dir")
            .arg(directory.path().join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("start etcd");
        let server = EtcdServer {
            child,
            client_url,
            log_path,
            _directory: directory,
        };
        server.wait_until_it_answers().await;
        server
    }

    /// Polls etcd's `GET /health` on the client port until it answers healthy, or panics at
    /// the deadline. etcd answers it from 3.4 to 3.7 with no user even when auth is enabled (a
    /// member restored from a snapshot with auth on refuses an unauthenticated read, and from 3.6
    /// on an unauthenticated `Status` too), and healthy only once it has a leader and a read
    /// through raft succeeds: the readiness a test needs.
    async fn wait_until_it_answers(&self) {
        let deadline = Instant::now() + ETCD_START_TIMEOUT;
        let mut last_error = String::from("no probe yet");
        while Instant::now() < deadline {
            match self.health().await {
                Ok(()) => return,
                Err(error) => last_error = error,
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        panic!("etcd did not answer within {ETCD_START_TIMEOUT:?}: {last_error}");
    }

    /// Ok once `GET /health` answers 200 with `"health":"true"`; otherwise what it answered.
    async fn health(&self) -> Result<(), String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .map_err(|error| error.to_string())?;
        let answer = client
            .get(format!("{}/health", self.client_url))
            .send()
            .await
            .map_err(|error| error.to_string())?;
        let status = answer.status();
        let body = answer.text().await.map_err(|error| error.to_string())?;
        let healthy = serde_json::from_str::<serde_json::Value>(&body)
            .is_ok_and(|json| json["health"] == "true");
        match status.is_success() && healthy {
            true => Ok(()),
            false => Err(format!("/health answered {status}: {body}")),
        }
    }

    /// The value at `key`, read linearizably through a client of its own.
    pub async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let client = self.client().await?;
        let request = RangeRequest {
            key: key.as_bytes().to_vec(),
            ..RangeRequest::default()
        };
        let answer = client
            .kv()
            .range(request)
            .await
            .map_err(|status| EtcdError::from(status).to_string())?
            .into_inner();
        Ok(answer.kvs.into_iter().next().map(|kv| kv.value))
    }

    /// Stops etcd gracefully (SIGTERM: it commits its backend first) and waits for it to exit;
    /// answers the path of its backend file, `member/snap/db`, which stays until the server
    /// is dropped.
    pub fn stop_gracefully(&mut self) -> PathBuf {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM etcd failed");
        self.child.wait().expect("etcd exits");
        self._directory.path().join("data/member/snap/db")
    }

    async fn client(&self) -> Result<EtcdClient, String> {
        let options = ConnectOptions::new()
            .with_timeout(Duration::from_secs(2))
            .with_connect_timeout(Duration::from_secs(2));
        EtcdClient::connect(&[&self.client_url], options)
            .await
            .map_err(|error| error.to_string())
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!(
                "--- etcd log (last lines, newest first) ---\n{}",
                tail.join("\n")
            );
        }
    }
}
