//! A three-member (or larger) etcd cluster of real processes on loopback ports, for tests that
//! compare how revkv and etcd behave when members fail, not only what they answer: each member
//! can be paused (SIGSTOP) and resumed, and every member is killed on drop, with the logs of all
//! printed when a test fails. The single-member [`super::etcd::EtcdServer`] is for comparing
//! answers.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

/// How long the members may take to start and elect a leader.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

struct EtcdMember {
    child: Child,
    client_url: String,
    log_path: PathBuf,
}

/// An etcd cluster, its members numbered from 1 in start order.
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    _directory: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `size` members of `binary` with etcd's default timing, each with its data in a
    /// fresh temporary directory, and waits until every member's `/health` says healthy (it has
    /// a leader and a read through raft succeeded).
    pub async fn start(binary: &Path, size: usize) -> EtcdCluster {
        assert!((1..=7).contains(&size), "an etcd cluster of {size} members");
        let directory = tempfile::tempdir().expect("a temporary directory");
        // All ports at once, so no two probes hand out the same one.
        let addresses = super::ports::free_addresses(2 * size).expect("free loopback ports");
        let client_urls: Vec<String> = (0..size)
            .map(|index| format!("http://{}", addresses[2 * index]))
            .collect();
        let peer_urls: Vec<String> = (0..size)
            .map(|index| format!("http://{}", addresses[2 * index + 1]))
            .collect();
        let initial_cluster: Vec<String> = peer_urls
            .iter()
            .enumerate()
            .map(|(index, url)| format!("m{}={url}", index + 1))
            .collect();
        let initial_cluster = initial_cluster.join(",");
        let mut members = Vec::with_capacity(size);
        for index in 0..size {
            let name = format!("m{}", index + 1);
            let log_path = directory.path().join(format!("{name}.log"));
            let log = std::fs::File::create(&log_path).expect("create the log");
            let child = Command::new(binary)
                .args(["--name", &name])
                .arg("--data-dir")
                .arg(directory.path().join(&name))
                .args(["--listen-client-urls", &client_urls[index]])
                .args(["--advertise-client-urls", &client_urls[index]])
                .args(["--listen-peer-urls", &peer_urls[index]])
                .args(["--initial-advertise-peer-urls", &peer_urls[index]])
                .args(["--initial-cluster", &initial_cluster])
                .args(["--initial-cluster-state", "new"])
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("clone the log handle"))
                .stderr(log)
                .spawn()
                .expect("start etcd");
            members.push(EtcdMember {
                child,
                client_url: client_urls[index].clone(),
                log_path,
            });
        }
        let cluster = EtcdCluster {
            members,
            _directory: directory,
        };
        for member in 1..=size {
            cluster.wait_until_healthy(member).await;
        }
        cluster
    }

    /// Member `member`'s client URL (numbered from 1).
    pub fn client_url(&self, member: usize) -> &str {
        &self.member(member).client_url
    }

    /// The members' numbers.
    pub fn members(&self) -> Vec<usize> {
        (1..=self.members.len()).collect()
    }

    /// Stops member `member` with SIGSTOP: it keeps its sockets but answers nothing.
    pub fn pause(&self, member: usize) {
        self.signal(member, "-STOP");
    }

    /// Lets a paused member run again (SIGCONT).
    pub fn resume(&self, member: usize) {
        self.signal(member, "-CONT");
    }

    fn signal(&self, member: usize, signal: &str) {
        let pid = self.member(member).child.id().to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    fn member(&self, member: usize) -> &EtcdMember {
        assert!(
            (1..=self.members.len()).contains(&member),
            "no etcd member {member}"
        );
        &self.members[member - 1]
    }

    /// Polls member `member`'s `GET /health` until it answers healthy, or panics at the deadline.
    pub async fn wait_until_healthy(&self, member: usize) {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("a plain HTTP client always builds");
        let url = format!("{}/health", self.client_url(member));
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last_answer = String::from("no probe yet");
        while Instant::now() < deadline {
            match http.get(&url).send().await {
                Ok(answer) => {
                    let body = answer.text().await.unwrap_or_default();
                    if serde_json::from_str::<serde_json::Value>(&body)
                        .is_ok_and(|json| json["health"] == "true")
                    {
                        return;
                    }
                    last_answer = body;
                }
                Err(error) => last_answer = error.to_string(),
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        panic!("etcd member {member} not healthy within {START_TIMEOUT:?}: {last_answer}");
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            // SIGKILL ends a stopped process too.
            let _ = member.child.kill();
            let _ = member.child.wait();
        }
        if std::thread::panicking() {
            for (index, member) in self.members.iter().enumerate() {
                let log = std::fs::read_to_string(&member.log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                eprintln!(
                    "--- etcd member {} log (last lines, newest first) ---\n{}",
                    index + 1,
                    tail.join("\n")
                );
            }
        }
    }
}
