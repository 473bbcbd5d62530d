//! Running one etcdctl command against revkv and against etcd and comparing what each printed:
//! the command's exit status, stdout and stderr, with the parts that are ids or timing replaced
//! (`normalize`). Shared by the differential tests against etcd 3.4, 3.5.1, 3.6.16 and 3.7.3
//! (`etcdctl_vs_etcd.rs`, `etcdctl_edges_vs_etcd.rs` and the snapshot and follow tests).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use regex::Regex;
use serde_json::Value;

/// JSON fields whose values are ids, timing or implementation detail; removed wherever they occur.
/// (A `version` that is text is too: `normalize_json` says why.)
pub const IGNORED_JSON_FIELDS: &[&str] = &[
    "cluster_id",
    "member_id",
    "raft_term",
    "Endpoint",
    // The storage version etcd 3.6 and 3.7 report in `Status`: that of the release reported,
    // which revkv names only when it reports 3.6 or later (by default it reports 3.5.13, which
    // names none; node/grpc/src/etcd_version.rs).
    "storageVersion",
    "dbSize",
    "dbSizeInUse",
    "leader",
    "raftIndex",
    "raftTerm",
    "raftAppliedIndex",
    "ID",
    "name",
    "peerURLs",
    "clientURLs",
    "hash",
    // etcdctl's own log lines: their time and the client's random target name.
    "ts",
    "target",
];

/// What one etcdctl command did, normalized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub command: String,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

pub struct Etcdctl<'a> {
    pub binary: &'a Path,
    pub endpoint: String,
    /// The lease id the script granted (etcdctl's hex form), filled in by the `lease grant` step.
    pub lease: Option<String>,
    /// `NAME:PASSWORD` every command passes as `--user`, once auth is enabled.
    pub user: Option<String>,
}

impl Etcdctl<'_> {
    /// Runs `etcdctl` with `arguments` (`{lease}` replaced by the granted lease), feeding `stdin`.
    pub fn run(&mut self, arguments: &[&str], stdin: &str) -> Outcome {
        let lease = self.lease.clone().unwrap_or_default();
        let arguments: Vec<String> = arguments
            .iter()
            .map(|argument| argument.replace("{lease}", &lease))
            .collect();
        let mut child = Command::new(self.binary)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(["--dial-timeout=5s", "--command-timeout=10s"])
            .args(self.user.iter().map(|user| format!("--user={user}")))
            .args(&arguments)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run etcdctl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write etcdctl's stdin");
        let output = child.wait_with_output().expect("etcdctl finishes");
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        if let Some(granted) = Regex::new(r"lease ([0-9a-f]+) granted")
            .unwrap()
            .captures(&stdout)
        {
            self.lease = Some(granted[1].to_string());
        }
        Outcome {
            command: normalize(&arguments.join(" "), &lease),
            success: output.status.success(),
            stdout: normalize(&stdout, &lease),
            stderr: normalize(&String::from_utf8_lossy(&output.stderr), &lease),
        }
    }
}

/// Replaces the id and timing parts of etcdctl's output (see the module comment).
pub fn normalize(text: &str, lease: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(text.trim()) {
        return normalize_json(json).to_string();
    }
    // etcdctl's own log lines (stderr) and the JSON after `txn -i`'s prompts are JSON lines.
    let lines: Vec<String> = text
        .lines()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(json @ Value::Object(_)) => normalize_json(json).to_string(),
            _ => line.to_string(),
        })
        .collect();
    let mut text = lines.join("\n");
    if !lease.is_empty() {
        text = text.replace(lease, "<lease>");
    }
    text = remaining_ttl_compared_with_granted(&text);
    let replacements = [
        (r"lease [0-9a-f]+ granted", "lease <lease> granted"),
        (r"127\.0\.0\.1:\d+", "<endpoint>"),
        (r"remaining\(\d+s\)", "remaining(<n>s)"),
        (r"took = \S+", "took = <t>"),
    ];
    for (pattern, replacement) in replacements {
        text = Regex::new(pattern)
            .unwrap()
            .replace_all(&text, replacement)
            .into_owned();
    }
    text
}

/// A lease's remaining TTL depends on when it is read, so it is not compared as a number; but how
/// it is rounded is compared: etcd rounds down, so right after a grant it is below the granted TTL,
/// never equal to it (`TTL(600s), remaining(599s)`).
fn remaining_ttl_compared_with_granted(text: &str) -> String {
    let pattern = Regex::new(r"TTL\((\d+)s\), remaining\((-?\d+)s\)").unwrap();
    pattern
        .replace_all(text, |found: &regex::Captures| {
            let granted: i64 = found[1].parse().unwrap_or(0);
            let remaining: i64 = found[2].parse().unwrap_or(0);
            let relation = match remaining.cmp(&granted) {
                std::cmp::Ordering::Less => "below the TTL",
                std::cmp::Ordering::Equal => "the whole TTL",
                std::cmp::Ordering::Greater => "above the TTL",
            };
            format!("TTL({granted}s), remaining(<{relation}>s)")
        })
        .into_owned()
}

/// Drops `IGNORED_JSON_FIELDS` wherever they occur, and every `version` whose value is text:
/// the release a server reports (`Status`, which each etcd names as its own and revkv as 3.5.13).
/// A key's `version`, a count, is a number in etcdctl's JSON and is compared.
pub fn normalize_json(value: Value) -> Value {
    let ignored = |name: &str, value: &Value| {
        IGNORED_JSON_FIELDS.contains(&name) || (name == "version" && value.is_string())
    };
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(name, value)| !ignored(name, value))
                .map(|(name, value)| (name, normalize_json(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(normalize_json).collect()),
        other => other,
    }
}

/// `text` split into etcdctl's arguments at white space.
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// Asserts that every command did the same on both systems, listing every difference at once.
pub fn assert_same_outcomes(from_etcd: &[Outcome], from_revkv: &[Outcome]) {
    assert_eq!(
        from_etcd.len(),
        from_revkv.len(),
        "both ran the whole script"
    );
    let differences = differing_outcomes(from_etcd, from_revkv);
    assert!(
        differences.is_empty(),
        "{} of {} commands differ:\n{}",
        differences.len(),
        from_etcd.len(),
        differences.join("\n\n")
    );
}

/// Each pair of outcomes that differ, as `assert_same_outcomes` lists them.
pub fn differing_outcomes(from_etcd: &[Outcome], from_revkv: &[Outcome]) -> Vec<String> {
    from_etcd
        .iter()
        .zip(from_revkv)
        .filter(|(etcd_outcome, revkv_outcome)| etcd_outcome != revkv_outcome)
        .map(|(etcd_outcome, revkv_outcome)| {
            format!("etcd:  {etcd_outcome:?}\nrevkv: {revkv_outcome:?}")
        })
        .collect()
}
