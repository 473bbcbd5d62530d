//! Two etcdctl clients contending for one `etcdctl lock` or one `etcdctl elect`ion, as the etcd
//! tools' users run them. Both commands are built on etcd's client-side concurrency recipes (a
//! lease-backed key per contender, a txn on its create revision, ranges with `max_create_revision`
//! sorted by create revision, and a watch for the deletion of the key ahead), so they exercise
//! revkv's txn, range options, leases and watches together.
//!
//! The steps, each waited for by polling with a deadline: the holder wins and prints; a waiter
//! starts and its key appears beside the holder's while it prints nothing; the holder is
//! interrupted (SIGINT), gives the lock or leadership up and exits; the waiter then wins and
//! prints. What each step showed is returned, normalized (lease ids), to compare with etcd.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use regex::Regex;

/// The longest any one step may take.
const STEP_DEADLINE: Duration = Duration::from_secs(30);

/// The pause between two looks at the contenders' keys.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// One contention: the etcdctl arguments of the holder and of the waiter, the key prefix both
/// create their keys under, and how many lines each prints once it wins.
pub struct Contention<'a> {
    pub holder: &'a [&'a str],
    pub holder_lines: usize,
    pub waiter: &'a [&'a str],
    pub waiter_lines: usize,
    pub prefix: &'a str,
}

/// A running etcdctl and the lines it printed so far; killed when dropped. Also what the watch
/// comparison reads `etcdctl watch` through.
pub struct Running {
    child: Child,
    lines: Receiver<String>,
}

impl Running {
    pub fn start(binary: &Path, endpoint: &str, arguments: &[&str]) -> Running {
        let mut child = Command::new(binary)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoint}"))
            .args(arguments)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run etcdctl");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Running { child, lines }
    }

    /// The next line it prints, if one comes before `deadline`.
    pub fn next_line(&self, deadline: Instant) -> Option<String> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.lines.recv_timeout(left).ok()
    }

    /// The next `count` lines it prints, waiting at most the step deadline for them.
    fn read_lines(&self, count: usize, what: &str) -> Vec<String> {
        let deadline = Instant::now() + STEP_DEADLINE;
        (0..count)
            .map(|_| {
                self.next_line(deadline)
                    .unwrap_or_else(|| panic!("{what} printed nothing in {STEP_DEADLINE:?}"))
            })
            .collect()
    }

    fn printed_nothing_and_runs(&mut self) -> bool {
        matches!(self.lines.try_recv(), Err(TryRecvError::Empty))
            && matches!(self.child.try_wait(), Ok(None))
    }

    /// Interrupts it as a user's Ctrl-C would and waits (with the deadline) for it to exit.
    fn interrupt(mut self, what: &str) -> String {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -INT {what}");
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for etcdctl") {
                return format!("{what} exited, success {}", status.success());
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not exit on SIGINT in {STEP_DEADLINE:?}"
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the contention against `endpoint` and answers what each step showed.
pub fn contend(binary: &Path, endpoint: &str, contention: &Contention) -> Vec<String> {
    let mut steps = Vec::new();
    let holder = Running::start(binary, endpoint, contention.holder);
    let won = holder.read_lines(contention.holder_lines, "the holder");
    steps.push(format!("holder won: {}", normalize(&won)));
    let mut waiter = Running::start(binary, endpoint, contention.waiter);
    wait_for_contender_keys(binary, endpoint, contention.prefix, 2);
    steps.push("two contender keys".to_string());
    assert!(
        waiter.printed_nothing_and_runs(),
        "the waiter must wait while the holder holds"
    );
    steps.push(holder.interrupt("holder"));
    let won = waiter.read_lines(contention.waiter_lines, "the waiter");
    steps.push(format!("waiter won: {}", normalize(&won)));
    steps
}

/// Polls the keys under `prefix` until there are `count` of them.
fn wait_for_contender_keys(binary: &Path, endpoint: &str, prefix: &str, count: usize) {
    let deadline = Instant::now() + STEP_DEADLINE;
    loop {
        let output = Command::new(binary)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoint}"))
            .args(["get", prefix, "--prefix", "--keys-only"])
            .output()
            .expect("run etcdctl get");
        let keys = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| !line.is_empty())
            .count();
        if keys == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{keys} keys under {prefix} after {STEP_DEADLINE:?}, not {count}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Lines with the lease id in each contender's key (`name/<hex lease id>`) replaced.
fn normalize(lines: &[String]) -> String {
    let lease_suffix = Regex::new(r"/[0-9a-f]+$").unwrap();
    lines
        .iter()
        .map(|line| lease_suffix.replace(line, "/<lease>").into_owned())
        .collect::<Vec<_>>()
        .join(" | ")
}
