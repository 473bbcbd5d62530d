//! The command line of `revkv ctl`: its global options and every command and subcommand, as clap
//! parses them. Its own file so that `commands.rs`, which runs them, and `mod.rs`, which runs
//! `commands.rs`, do not import each other; `mod.rs` re-exports it all.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::auth;
use crate::cli::{parse_duration, OutputFormat, TlsArgs};

/// The endpoints used when neither `--endpoints` nor `REVKV_ENDPOINTS` is given.
pub const DEFAULT_ENDPOINTS: &str = revkv_client::LOCAL_CLUSTER_ENDPOINTS;

/// `revkv ctl [options] COMMAND`.
#[derive(Args, Debug, Clone)]
pub struct CtlArgs {
    /// Comma-separated member URLs; calls fail over between them.
    #[arg(long, env = "REVKV_ENDPOINTS", value_delimiter = ',', default_value = DEFAULT_ENDPOINTS, global = true)]
    pub endpoints: Vec<String>,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub output: OutputFormat,

    /// Time limit of each call, failover included (e.g. 500ms, 10s).
    #[arg(long, value_parser = parse_duration, default_value = "10s", global = true)]
    pub timeout: Duration,

    #[command(flatten)]
    pub tls: TlsArgs,

    /// Call as this user when the cluster has auth enabled: NAME:PASSWORD, as etcdctl's --user.
    /// (The field is not called `user`: clap shares an id between a global option and a
    /// subcommand's argument of the same name, and `user grant-role USER ROLE` has one.)
    #[arg(
        long = "user",
        value_name = "NAME:PASSWORD",
        env = "REVKV_USER",
        global = true,
        hide_env_values = true
    )]
    pub credentials: Option<String>,

    #[command(subcommand)]
    pub command: CtlCommand,
}

/// The commands.
#[derive(Subcommand, Debug, Clone)]
pub enum CtlCommand {
    /// Read one key (exit 3 if absent).
    Get {
        key: String,
        /// Read the key as it was at this revision.
        #[arg(long)]
        revision: Option<u64>,
        /// Read from the answering member's state without a leader round (may be stale).
        #[arg(long)]
        serializable: bool,
    },
    /// Write a key (exit 4 if a precondition fails).
    Put {
        key: String,
        value: String,
        /// Write only if the key's mod revision is this one.
        #[arg(long, conflicts_with = "if_absent")]
        if_mod_revision: Option<u64>,
        /// Write only if the key does not exist.
        #[arg(long)]
        if_absent: bool,
        /// Also show the key-value before the write.
        #[arg(long)]
        prev_kv: bool,
        /// Attach the key to this lease (it is deleted when the lease ends).
        #[arg(long)]
        lease: Option<i64>,
        /// Merge the JSON value with whatever changed since this revision (the mod revision the
        /// value was read at), field by field; exit 3 with the conflicting fields when both sides
        /// changed the same one.
        #[arg(long, conflicts_with_all = ["if_mod_revision", "if_absent", "prev_kv", "lease"])]
        merge_from: Option<u64>,
    },
    /// Delete a key, or every key under a prefix.
    Del {
        key: String,
        #[arg(long)]
        prefix: bool,
        /// Delete only if the key's mod revision is this one.
        #[arg(long, conflicts_with = "prefix")]
        if_mod_revision: Option<u64>,
        /// Also show the deleted key-values.
        #[arg(long)]
        prev_kv: bool,
    },
    /// List every key under a prefix (all pages), with values.
    List {
        /// The prefix (default: every key).
        #[arg(default_value = "")]
        prefix: String,
        /// Keys per page.
        #[arg(long, default_value_t = 1000)]
        page_size: u64,
        /// Stop after this many keys.
        #[arg(long, default_value_t = 100_000)]
        max_keys: u64,
        #[arg(long)]
        revision: Option<u64>,
        #[arg(long)]
        serializable: bool,
    },
    /// Run a transaction given as the JSON body of POST /v1/txn.
    Txn {
        /// The file holding the request (`-` or absent: standard input).
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
    },
    /// Apply a JSON merge patch (RFC 7386) to the JSON value of a key.
    Patch {
        key: String,
        /// The merge patch, a JSON object such as '{"replicas": 3}'.
        patch: String,
        /// One attempt, only if the key's mod revision is this one.
        #[arg(long)]
        if_mod_revision: Option<u64>,
    },
    /// Every version of one key, oldest first (deletes as tombstones).
    History {
        key: String,
        /// Start at this revision (default: the oldest one still kept).
        #[arg(long)]
        from_revision: Option<u64>,
        /// Stop after this many versions.
        #[arg(long, default_value_t = 1000)]
        max_versions: u64,
        /// Show each version as its JSON difference from the one before.
        #[arg(long)]
        diff: bool,
    },
    /// An object's desired and observed state over its history: each version's writer (spec or
    /// status), generation, observed generation and lag, and when each generation was observed.
    Convergence {
        key: String,
        /// Start at this revision (default: the oldest one still kept).
        #[arg(long)]
        from_revision: Option<u64>,
        /// Stop after this many versions.
        #[arg(long, default_value_t = 1000)]
        max_versions: u64,
    },
    /// Print changes to a key or prefix as they happen, until interrupted.
    Watch {
        key: String,
        #[arg(long)]
        prefix: bool,
        /// Start with the changes of this revision (history).
        #[arg(long)]
        start_revision: Option<u64>,
        #[arg(long)]
        prev_kv: bool,
        /// Ask for a bookmark this often (e.g. 5s).
        #[arg(long, value_parser = parse_duration)]
        progress_notify: Option<Duration>,
        /// Stop after this many updates.
        #[arg(long)]
        count: Option<u64>,
    },
    /// The hottest conflicting keys, added up over every member.
    #[command(subcommand)]
    Conflicts(ConflictsCommand),
    /// Discard history at and below a revision.
    Compact { revision: u64 },
    /// The status of every endpoint.
    Status,
    /// Cluster membership.
    #[command(subcommand)]
    Member(MemberCommand),
    /// Leadership.
    #[command(subcommand)]
    Leader(LeaderCommand),
    /// The replica-consistency hash of every endpoint (equal on members that agree).
    Hash {
        #[arg(long)]
        revision: Option<u64>,
    },
    /// Backups.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Alarms (NOSPACE when a member's state file passed its quota, CORRUPT when its data differs
    /// from the other members').
    #[command(subcommand)]
    Alarm(AlarmCommand),
    /// Give the space compaction freed back to the filesystem, on every endpoint in turn.
    Defrag,
    /// Leases: keys that live as long as a lease is kept alive.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// Enable, disable or show auth.
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// Users (root only once auth is enabled).
    #[command(subcommand)]
    User(auth::UserCommand),
    /// Roles and their permissions (root only once auth is enabled).
    #[command(subcommand)]
    Role(auth::RoleCommand),
    /// Take a distributed lock; hold it until interrupted, or while COMMAND runs.
    Lock {
        name: String,
        /// The session's TTL in seconds: how long the lock outlives a holder that dies.
        #[arg(long, default_value_t = 10)]
        ttl: i64,
        /// The command to run while holding the lock (after `--`).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Campaign in an election with PROPOSAL and lead until interrupted, or `--listen`.
    Elect {
        name: String,
        /// The value to lead with (not with `--listen`).
        #[arg(required_unless_present = "listen", conflicts_with = "listen")]
        proposal: Option<String>,
        /// Print every leader as it changes.
        #[arg(short = 'l', long)]
        listen: bool,
        /// The session's TTL in seconds: how long leadership outlives a leader that dies.
        #[arg(long, default_value_t = 10)]
        ttl: i64,
        /// With `--listen`, stop after this many leaders.
        #[arg(long, requires = "listen")]
        count: Option<u64>,
    },
}

/// `revkv ctl conflicts ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum ConflictsCommand {
    /// The keys with the most conflicts and retries over the members' window.
    Top {
        /// How many keys.
        #[arg(long, default_value_t = 10)]
        top: u64,
    },
}

/// `revkv ctl lease ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum LeaseCommand {
    /// Grant a lease of TTL seconds (raised to the cluster's minimum).
    Grant {
        ttl: i64,
        /// The id to grant (default: one the cluster picks).
        #[arg(long)]
        id: Option<i64>,
    },
    /// Revoke a lease, deleting its keys (exit 3 if it is gone).
    Revoke { id: i64 },
    /// Keep a lease alive, printing each renewal, until interrupted or the lease is lost (exit 3).
    KeepAlive {
        id: i64,
        /// Renew once and exit.
        #[arg(long)]
        once: bool,
        /// Stop after this many renewals.
        #[arg(long)]
        count: Option<u64>,
    },
    /// The granted and remaining TTL of a lease (exit 3 if it is gone).
    Ttl {
        id: i64,
        /// Also list the keys attached to it.
        #[arg(long)]
        keys: bool,
    },
    /// Every lease's id.
    List,
}

/// `revkv ctl member ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum MemberCommand {
    /// List the members.
    List,
    /// Add a learner (every member joins as one; `--learner` says so and changes nothing).
    Add {
        id: u64,
        #[arg(long)]
        peer_url: String,
        #[arg(long)]
        client_url: String,
        /// Its etcd gRPC URL, if it serves etcd's API (`revkv serve --listen-grpc`).
        #[arg(long)]
        grpc_url: Option<String>,
        /// Join as a learner (as etcdctl's `member add --learner`); a member always does.
        #[arg(long)]
        learner: bool,
        /// Have the leader promote the learner to a voter as soon as it has caught up; the
        /// command answers once the learner is in the membership.
        #[arg(long)]
        auto_promote: bool,
        /// With --auto-promote: the most log entries behind the leader the learner may be when
        /// it is promoted (default: the leader's `revkv serve --auto-promote-max-lag`).
        #[arg(long, requires = "auto_promote", value_parser = clap::value_parser!(u64).range(1..))]
        auto_promote_max_lag: Option<u64>,
    },
    /// Make a learner a voter.
    Promote { id: u64 },
    /// Remove a member.
    Remove { id: u64 },
}

/// `revkv ctl leader ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum LeaderCommand {
    /// Hand leadership to another member.
    Transfer { to: u64 },
}

/// `revkv ctl alarm ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum AlarmCommand {
    /// The alarms raised.
    List,
    /// Clear the raised alarms (once there is room again).
    Disarm {
        /// Only this member's alarms.
        #[arg(long)]
        member_id: Option<u64>,
    },
}

/// `revkv ctl snapshot ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum SnapshotCommand {
    /// Stream a consistent backup into a file.
    Save {
        path: PathBuf,
        /// `revkv` (the default: everything revkv keeps, users and alarms included) or `etcd` (an
        /// etcd snapshot that etcd 3.4's and 3.5's `snapshot restore` take).
        #[arg(long, value_enum, default_value_t = SnapshotFormat::Revkv)]
        format: SnapshotFormat,
    },
}

/// The format `revkv ctl snapshot save` writes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotFormat {
    Revkv,
    Etcd,
}
