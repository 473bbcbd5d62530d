//! Patroni (PostgreSQL high availability) keeps its leader lock in the store through etcd's JSON
//! gateway; issue 63 reported that on revkv its replicas never joined. Here three Patroni members
//! run one PostgreSQL 15 cluster against a three-member revkv (all three gRPC ports, where the
//! gateway is served) and against etcd 3.6.16, and the same scenario must pass on both: the three
//! bootstrap (one primary, two streaming replicas), a row is written on the primary, the primary's
//! Patroni and postmaster are killed with SIGKILL, a replica is promoted once the leader key's
//! lease lapses, a planned switchover (Patroni's REST `POST /switchover`) hands the primary role
//! to the other survivor, and every committed row is still there on the new primary.
//!
//! The Patroni is Debian's `patroni` package (3.0.2 on Debian 12), not PyPI's in the private
//! virtual environment: it is the one issue 63 names, its etcd3 client is what a Debian user runs,
//! and it is installed under /usr, where the `postgres` user that runs it can read it (the private
//! environment lives under the invoking user's home, which is root's, and PostgreSQL refuses to
//! run as root). Debian's package enables no running service without a configuration file of its
//! own, so installing it changes nothing that runs. The PostgreSQL is Debian's `postgresql-15`.
//! `scripts/install-test-deps.sh` installs both.
//!
//! When the test runs as root, Patroni and PostgreSQL run as the `postgres` user (which Debian's
//! PostgreSQL packages create) in a temporary directory handed to that user; otherwise as the
//! user running the test. Without Patroni, PostgreSQL 15 or etcd 3.6 the test passes with a note,
//! except under `CI=true`.

use crate::etcd_history;
use crate::process_cluster;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use base64::Engine as _;
use etcd_history::etcd_3_minor;
use process_cluster::{cluster_options, wait_until, ProcessCluster};
use revkv_tools::harness::etcd::EtcdServer;
use revkv_tools::harness::free_addresses;
use serde_json::Value;
use tokio::time::Instant;

/// Debian's Patroni.
const PATRONI: &str = "/usr/bin/patroni";
/// Debian's PostgreSQL 15 server programs (initdb, postgres, pg_ctl, pg_basebackup, psql).
const POSTGRES_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";
/// The Patroni cluster's name, and so its keys' prefix in the store (`/service/<scope>/`).
const SCOPE: &str = "issue63";

/// Patroni's timing, small so that the whole scenario takes well under a minute per system: the
/// leader key's lease lives `TTL_SECONDS`, the HA loop runs every `LOOP_WAIT_SECONDS`, and a store
/// request is retried for `RETRY_TIMEOUT_SECONDS` (Patroni requires loop_wait + 2 × retry_timeout
/// ≤ ttl).
const TTL_SECONDS: u64 = 10;
const LOOP_WAIT_SECONDS: u64 = 2;
const RETRY_TIMEOUT_SECONDS: u64 = 4;

/// The longest one step may take: a bootstrap (initdb, then two base backups) on a loaded machine,
/// or a promotion, which waits at least for the lease to lapse.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// Patroni and PostgreSQL, or None with a note when one is missing outside CI.
fn required_patroni() -> Option<()> {
    let needed = [
        (PATRONI.to_string(), "patroni"),
        (format!("{POSTGRES_BIN_DIR}/postgres"), "postgresql-15"),
    ];
    let missing: Vec<&str> = needed
        .iter()
        .filter(|(path, _)| !Path::new(path).is_file())
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Some(());
    }
    let under_ci = std::env::var("CI").is_ok_and(|value| value == "true");
    assert!(
        !under_ci,
        "Debian's {} is missing: run scripts/install-test-deps.sh",
        missing.join(" and ")
    );
    eprintln!(
        "note: Debian's {} is not installed (scripts/install-test-deps.sh); test not run",
        missing.join(" and ")
    );
    None
}

/// The user id and group id to run Patroni and PostgreSQL as: the `postgres` user when the test
/// runs as root (PostgreSQL will not run as root), else none (the test's own user).
fn server_user() -> Option<(u32, u32)> {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let effective_uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .expect("a Uid line");
    if effective_uid != "0" {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let entry = passwd
        .lines()
        .find(|line| line.starts_with("postgres:"))
        .expect("a postgres user (Debian's postgresql packages create it) to run PostgreSQL as");
    let fields: Vec<&str> = entry.split(':').collect();
    Some((
        fields[2].parse().expect("a uid"),
        fields[3].parse().expect("a gid"),
    ))
}

/// One Patroni member: its process, its REST API and its PostgreSQL.
struct PatroniMember {
    name: String,
    rest_url: String,
    postgres_port: u16,
    data_directory: PathBuf,
    log_path: PathBuf,
    patroni: Option<Child>,
    /// Set once the member was killed: its stale postmaster.pid then names a process that is
    /// gone, whose pid another process may have since.
    killed: bool,
}

impl PatroniMember {
    /// Kills this member's Patroni and its postmaster with SIGKILL, as a machine that dies would
    /// leave them: the postmaster's backends notice its death and exit on their own.
    fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        if let Some(mut patroni) = self.patroni.take() {
            let _ = patroni.kill();
            let _ = patroni.wait();
        }
        // The postmaster's pid is the first line of postmaster.pid while it runs.
        if let Ok(pid_file) = std::fs::read_to_string(self.data_directory.join("postmaster.pid")) {
            if let Some(pid) = pid_file.lines().next().filter(|pid| !pid.is_empty()) {
                let _ = std::process::Command::new("kill")
                    .args(["-9", pid])
                    .stderr(Stdio::null())
                    .status();
                wait_for_exit(pid);
            }
        }
    }
}

/// Waits, for a bounded time, until process `pid` has exited (or is a zombie nobody reaped yet):
/// the postmaster is not the test's child, and its data directory should not be removed under it.
fn wait_for_exit(pid: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        });
        if !alive {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Three Patroni members of one PostgreSQL cluster, all killed on drop (also when a test panics,
/// then with their logs printed).
struct PatroniCluster {
    members: Vec<PatroniMember>,
    /// Kept for its removal on drop, after the members are killed.
    _directory: tempfile::TempDir,
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            member.kill();
        }
        if std::thread::panicking() {
            for member in &self.members {
                let log = std::fs::read_to_string(&member.log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                eprintln!("--- the last lines of {}'s log:", member.name);
                for line in tail.into_iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// The Patroni configuration of member `name`, its store at `hosts`.
fn patroni_configuration(
    directory: &Path,
    name: &str,
    rest_address: &str,
    postgres_address: &str,
    hosts: &str,
) -> String {
    let data_directory = directory.join(name).join("data");
    let home = directory.join(name);
    let home = home.display();
    let data_directory = data_directory.display();
    let sockets = directory.display();
    // Replication and local connections are trusted on loopback: the test is about the store, not
    // PostgreSQL's authentication.
    format!(
        "scope: {SCOPE}
name: {name}
restapi:
  listen: {rest_address}
  connect_address: {rest_address}
etcd3:
  hosts: {hosts}
bootstrap:
  dcs:
    ttl: {TTL_SECONDS}
    loop_wait: {LOOP_WAIT_SECONDS}
    retry_timeout: {RETRY_TIMEOUT_SECONDS}
    maximum_lag_on_failover: 1048576
    postgresql:
      parameters:
        wal_level: replica
        max_wal_senders: 10
        max_replication_slots: 10
        hot_standby: 'on'
  initdb:
  - encoding: UTF8
  - auth: trust
  pg_hba:
  - local all all trust
  - host replication replicator 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
postgresql:
  listen: {postgres_address}
  connect_address: {postgres_address}
  data_dir: {data_directory}
  bin_dir: {POSTGRES_BIN_DIR}
  pgpass: {home}/pgpass
  authentication:
    replication:
      username: replicator
      password: replicator
    superuser:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: {sockets}
log:
  level: INFO
"
    )
}

impl PatroniCluster {
    /// Starts three Patroni members of a new PostgreSQL cluster on the store at `hosts`
    /// (`host:port,host:port,...`).
    fn start(hosts: &str) -> PatroniCluster {
        let user = server_user();
        let directory = tempfile::tempdir().expect("a temporary directory");
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(directory.path(), Some(uid), Some(gid))
                .expect("hand the temporary directory to the postgres user");
        }
        let addresses = free_addresses(6).expect("free loopback ports");
        let mut members = Vec::new();
        for index in 0..3 {
            let name = format!("pg{}", index + 1);
            let rest_address = addresses[index].to_string();
            let postgres_address = addresses[3 + index];
            let home = directory.path().join(&name);
            std::fs::create_dir(&home).expect("the member's directory");
            let configuration = patroni_configuration(
                directory.path(),
                &name,
                &rest_address,
                &postgres_address.to_string(),
                hosts,
            );
            let configuration_path = home.join("patroni.yml");
            std::fs::write(&configuration_path, configuration).expect("write the configuration");
            let log_path = home.join("patroni.log");
            let log = std::fs::File::create(&log_path).expect("create the log");
            if let Some((uid, gid)) = user {
                for path in [&home, &configuration_path, &log_path] {
                    std::os::unix::fs::chown(path, Some(uid), Some(gid))
                        .expect("hand the member's files to the postgres user");
                }
            }
            let mut command = std::process::Command::new(PATRONI);
            command
                .arg(&configuration_path)
                .current_dir(&home)
                .env("HOME", &home)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("clone the log handle"))
                .stderr(log);
            if let Some((uid, gid)) = user {
                command.uid(uid).gid(gid);
            }
            let patroni = command.spawn().expect("start patroni");
            members.push(PatroniMember {
                name,
                rest_url: format!("http://{rest_address}"),
                postgres_port: postgres_address.port(),
                data_directory: home.join("data"),
                log_path,
                patroni: Some(patroni),
                killed: false,
            });
        }
        PatroniCluster {
            members,
            _directory: directory,
        }
    }

    fn member(&self, name: &str) -> &PatroniMember {
        self.members
            .iter()
            .find(|member| member.name == name)
            .expect("a member of that name")
    }

    fn member_mut(&mut self, name: &str) -> &mut PatroniMember {
        self.members
            .iter_mut()
            .find(|member| member.name == name)
            .expect("a member of that name")
    }

    /// The members still running, as (name, role, state) from `GET /cluster` of the first one
    /// that answers; None when none answers.
    async fn roles(&self) -> Option<Vec<(String, String, String)>> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        for member in self
            .members
            .iter()
            .filter(|member| member.patroni.is_some())
        {
            let Ok(answer) = client
                .get(format!("{}/cluster", member.rest_url))
                .send()
                .await
            else {
                continue;
            };
            let Ok(cluster) = answer.json::<Value>().await else {
                continue;
            };
            let members = cluster["members"].as_array()?;
            return Some(
                members
                    .iter()
                    .map(|member| {
                        let field = |name: &str| member[name].as_str().unwrap_or("").to_string();
                        (field("name"), field("role"), field("state"))
                    })
                    .collect(),
            );
        }
        None
    }

    /// Waits until `members` (names) are all running, one of them the leader (out of recovery)
    /// and the others replicas, and answers the leader's name.
    async fn wait_for_leader_among(&self, members: &[&str], what: &str) -> String {
        wait_until(what, STEP_TIMEOUT, async || {
            let roles = self.roles().await?;
            let running = |name: &str| {
                roles
                    .iter()
                    .find(|(member, _, _)| member == name)
                    .filter(|(_, _, state)| state == "running" || state == "streaming")
                    .map(|(_, role, _)| role.clone())
            };
            let member_roles: Option<Vec<String>> =
                members.iter().map(|name| running(name)).collect();
            let member_roles = member_roles?;
            let leaders: Vec<&str> = members
                .iter()
                .zip(&member_roles)
                .filter(|(_, role)| *role == "leader")
                .map(|(name, _)| *name)
                .collect();
            let replicas = member_roles
                .iter()
                .filter(|role| *role == "replica")
                .count();
            if leaders.len() != 1 || replicas != members.len() - 1 {
                return None;
            }
            // Patroni names a member leader as soon as it holds the leader key, while its
            // PostgreSQL may still be leaving recovery: wait until it takes writes.
            let in_recovery = self.psql(leaders[0], "SELECT pg_is_in_recovery()").await;
            (in_recovery.ok()? == "f").then(|| leaders[0].to_string())
        })
        .await
    }

    /// Runs `sql` with psql on member `name`'s PostgreSQL; its output, or psql's error.
    async fn psql(&self, name: &str, sql: &str) -> Result<String, String> {
        let port = self.member(name).postgres_port.to_string();
        let output = tokio::process::Command::new(format!("{POSTGRES_BIN_DIR}/psql"))
            .args(["-X", "-A", "-t", "-q", "-h", "127.0.0.1", "-p", &port])
            .args(["-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1"])
            .args(["-c", sql])
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|error| error.to_string())?;
        match output.status.success() {
            true => Ok(String::from_utf8_lossy(&output.stdout).trim().to_string()),
            false => Err(String::from_utf8_lossy(&output.stderr).trim().to_string()),
        }
    }

    /// Writes `sql` on the primary `name`, failing the test if it does not commit.
    async fn write(&self, name: &str, sql: &str) {
        if let Err(error) = self.psql(name, sql).await {
            panic!("{sql} on the primary {name} failed: {error}");
        }
    }

    /// The rows of the test's table on member `name`, in order.
    async fn rows(&self, name: &str) -> Result<String, String> {
        self.psql(name, "SELECT string_agg(v::text, ',' ORDER BY v) FROM rows")
            .await
    }

    /// Waits until member `name` has replayed exactly `rows`: asynchronous replication may lag,
    /// and a kill or switchover before the replica has the row would test PostgreSQL's
    /// replication, not the store.
    async fn wait_for_rows(&self, name: &str, rows: &str) {
        wait_until(
            format!("{name} to have replayed the rows {rows}"),
            STEP_TIMEOUT,
            async || (self.rows(name).await.ok()? == rows).then_some(()),
        )
        .await
    }
}

/// The leader key's value in the store: the name of the member holding the lock, or None when
/// there is no leader key.
async fn leader_key(hosts: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let key = base64::engine::general_purpose::STANDARD.encode(format!("/service/{SCOPE}/leader"));
    for host in hosts.split(',') {
        let Ok(answer) = client
            .post(format!("http://{host}/v3/kv/range"))
            .json(&serde_json::json!({ "key": key }))
            .send()
            .await
        else {
            continue;
        };
        let Ok(range) = answer.json::<Value>().await else {
            continue;
        };
        let value = range["kvs"][0]["value"].as_str()?;
        let value = base64::engine::general_purpose::STANDARD
            .decode(value)
            .ok()?;
        return String::from_utf8(value).ok();
    }
    None
}

/// How long each part of the scenario took, and how often Patroni's requests to the store failed
/// (reported, never asserted: a loaded machine may time a request out on either system).
#[derive(Default)]
struct Timings {
    bootstrap: Duration,
    failover: Duration,
    switchover: Duration,
    failed_requests: usize,
}

impl PatroniCluster {
    /// The lines of the members' logs where a request to the store failed (issue 63's symptom:
    /// `Request to server ... failed: ReadTimeoutError`).
    fn failed_store_requests(&self) -> usize {
        self.members
            .iter()
            .map(|member| {
                std::fs::read_to_string(&member.log_path)
                    .unwrap_or_default()
                    .lines()
                    .filter(|line| line.contains("ERROR: Request to server"))
                    .count()
            })
            .sum()
    }
}

/// The scenario on the store at `hosts`; fails the test on the first step that does not happen.
async fn run_scenario(system: &str, hosts: &str) -> Timings {
    let mut timings = Timings::default();
    let started = Instant::now();
    let mut cluster = PatroniCluster::start(hosts);
    let all = ["pg1", "pg2", "pg3"];
    let first_primary = cluster
        .wait_for_leader_among(
            &all,
            &format!("three Patroni members on {system} to bootstrap"),
        )
        .await;
    timings.bootstrap = started.elapsed();
    cluster
        .write(
            &first_primary,
            "CREATE TABLE rows (v integer PRIMARY KEY); INSERT INTO rows VALUES (1)",
        )
        .await;
    let survivors: Vec<&str> = all
        .into_iter()
        .filter(|name| *name != first_primary)
        .collect();
    for replica in &survivors {
        cluster.wait_for_rows(replica, "1").await;
    }
    assert_eq!(
        leader_key(hosts).await.as_deref(),
        Some(first_primary.as_str()),
        "the leader key on {system} names the primary"
    );

    // The primary's machine dies: nobody deletes the leader key, whose lease must lapse first.
    let killed = Instant::now();
    cluster.member_mut(&first_primary).kill();
    let second_primary = cluster
        .wait_for_leader_among(
            &survivors,
            &format!("a replica to be promoted on {system} after {first_primary} was killed"),
        )
        .await;
    timings.failover = killed.elapsed();
    wait_until(
        format!("the leader key on {system} to name {second_primary}"),
        STEP_TIMEOUT,
        async || (leader_key(hosts).await? == second_primary).then_some(()),
    )
    .await;
    cluster
        .write(&second_primary, "INSERT INTO rows VALUES (2)")
        .await;
    let candidate = survivors
        .iter()
        .find(|name| **name != second_primary)
        .expect("another survivor")
        .to_string();
    cluster.wait_for_rows(&candidate, "1,2").await;

    // A planned switchover to the other survivor, asked of the primary's REST API.
    let switch_started = Instant::now();
    let answer = reqwest::Client::new()
        .post(format!(
            "{}/switchover",
            cluster.member(&second_primary).rest_url
        ))
        .json(&serde_json::json!({ "leader": second_primary, "candidate": candidate }))
        .timeout(STEP_TIMEOUT)
        .send()
        .await
        .expect("POST /switchover");
    let status = answer.status();
    let body = answer.text().await.unwrap_or_default();
    assert!(
        status.is_success(),
        "the switchover on {system} answered {status}: {body}"
    );
    let third_primary = cluster
        .wait_for_leader_among(
            &survivors,
            &format!("the switchover to {candidate} on {system}"),
        )
        .await;
    assert_eq!(
        third_primary, candidate,
        "the switchover on {system} promoted the candidate"
    );
    timings.switchover = switch_started.elapsed();
    wait_until(
        format!("the leader key on {system} to name {candidate}"),
        STEP_TIMEOUT,
        async || (leader_key(hosts).await? == candidate).then_some(()),
    )
    .await;

    // Every committed row is on the new primary, which takes writes; the old one follows it.
    cluster
        .write(&candidate, "INSERT INTO rows VALUES (3)")
        .await;
    assert_eq!(
        cluster.rows(&candidate).await.as_deref(),
        Ok("1,2,3"),
        "the rows on the new primary on {system}"
    );
    cluster.wait_for_rows(&second_primary, "1,2,3").await;
    timings.failed_requests = cluster.failed_store_requests();
    timings
}

/// A line for the test's output: how long each part took on `system`.
fn describe(system: &str, timings: &Timings) -> String {
    format!(
        "{system}: bootstrap {:.1?}, failover {:.1?}, switchover {:.1?}, {} failed store requests",
        timings.bootstrap, timings.failover, timings.switchover, timings.failed_requests
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patroni_bootstraps_fails_over_and_switches_over_on_revkv_as_on_etcd_3_6() {
    let (Some(()), Some(etcd_36)) = (required_patroni(), etcd_3_minor(6)) else {
        return;
    };
    let etcd = EtcdServer::start(&etcd_36.etcd).await;
    let etcd_hosts = etcd.client_url.trim_start_matches("http://").to_string();
    let on_etcd = run_scenario("etcd 3.6", &etcd_hosts).await;
    drop(etcd);
    eprintln!("{}", describe("etcd 3.6", &on_etcd));

    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let revkv_hosts = revkv.grpc_endpoints().join(",");
    let on_revkv = run_scenario("revkv", &revkv_hosts).await;
    eprintln!("{}", describe("revkv", &on_revkv));
}
