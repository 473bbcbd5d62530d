//! `revkv follow-etcd`: the online half of moving from etcd, for stores too large to stop while
//! a snapshot is restored. After `revkv snapshot restore` of an etcd snapshot taken at revision
//! R, revkv is at R; this watches etcd from R + 1 and replays each etcd revision as one revkv
//! transaction (`replay.rs`), so revkv passes through the same revisions with the same keys,
//! create and mod revisions, versions, values and leases. Leases etcd grants meanwhile are
//! granted on revkv with the same id and TTL, and revkv's copies are kept alive until etcd
//! ends them (`leases.rs`), so none expires on revkv on its own clock.
//!
//! Both ends are spoken to over etcd's gRPC API (revkv's `--listen-grpc`), so keys and values
//! stay bytes. Every replayed transaction compares each key it changes with what etcd says the
//! key was, and its revision must come out as etcd's: a write made to revkv during the follow,
//! or a revkv that was not restored from this etcd, stops the follow with an error instead of
//! diverging. Not followed: compactions (revkv keeps the longer history until it is compacted
//! itself) and changes to users and roles.

mod error;
mod leases;
mod replay;

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::cli::parse_duration;
use crate::etcd_api::pb::{RangeRequest, WatchCreateRequest, WatchResponse};
use crate::etcd_api::{prefix_range, ConnectOptions, EtcdClient, WatchStream};
pub use error::FollowError;
use leases::LeaseMirror;
use replay::{group_by_revision, replay_revision};

/// `revkv follow-etcd ...`.
#[derive(Args, Debug, Clone)]
pub struct FollowEtcdArgs {
    /// etcd's client endpoints, the source: `host:port` or `http://host:port`, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub etcd_endpoints: Vec<String>,
    /// `NAME:PASSWORD` for etcd, when it has auth enabled.
    #[arg(long)]
    pub etcd_user: Option<String>,
    /// revkv's gRPC endpoints (each member's `--listen-grpc`), the target.
    #[arg(long, value_delimiter = ',', required = true)]
    pub revkv_endpoints: Vec<String>,
    /// `NAME:PASSWORD` for revkv, when it has auth enabled (a restore keeps etcd's users).
    #[arg(long)]
    pub revkv_user: Option<String>,
    /// Exit once revkv has reached the revision etcd was at when this started, rather than
    /// following until interrupted: the last step of the switch, once etcd takes no writes.
    #[arg(long)]
    pub until_caught_up: bool,
    /// How often leases are checked on both sides and revkv's copies kept alive; keep it well
    /// under the shortest lease TTL.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub lease_check_interval: Duration,
}

/// Runs `revkv follow-etcd`; the reason it stopped goes to stderr.
pub async fn run(args: FollowEtcdArgs) -> ExitCode {
    match follow(&args).await {
        Ok(revision) => {
            println!("revkv is at etcd's revision {revision}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("revkv follow-etcd: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Follows etcd into revkv; answers the last revision replayed when `--until-caught-up` ends it.
pub async fn follow(args: &FollowEtcdArgs) -> Result<u64, FollowError> {
    let etcd = connect(&args.etcd_endpoints, args.etcd_user.as_deref(), "etcd").await?;
    let revkv = connect(&args.revkv_endpoints, args.revkv_user.as_deref(), "revkv").await?;
    let mut applied = current_revision(&revkv, "revkv").await?;
    let etcd_revision = current_revision(&etcd, "etcd").await?;
    if etcd_revision < applied {
        return Err(FollowError::Refused(format!(
            "etcd is at revision {etcd_revision}, behind revkv's {applied}: revkv was not \
             restored from this etcd, or was written to since"
        )));
    }
    let mut leases = LeaseMirror::default();
    leases.refresh(&etcd, &revkv).await?;
    let target = args.until_caught_up.then_some(etcd_revision);
    if target.is_some_and(|target| applied >= target) {
        return Ok(applied);
    }
    let (key, range_end) = prefix_range(b"");
    let every_key_since_revkv = WatchCreateRequest {
        key,
        range_end,
        start_revision: signed(applied + 1),
        prev_kv: true,
        ..WatchCreateRequest::default()
    };
    let mut stream = WatchStream::open(&mut etcd.watch(), every_key_since_revkv)
        .await
        .map_err(|error| FollowError::Etcd("watching etcd", error))?;
    let mut lease_checks = tokio::time::interval(args.lease_check_interval);
    loop {
        tokio::select! {
            message = stream.message() => {
                let response = message
                    .map_err(|error| FollowError::Etcd("etcd's watch", error))?
                    .ok_or_else(|| FollowError::Refused("etcd ended the watch".into()))?;
                if response.canceled {
                    return Err(watch_canceled(&response, applied));
                }
                for (revision, events) in group_by_revision(&response.events) {
                    leases.grant_missing(events, &etcd, &revkv).await?;
                    replay_revision(&revkv, revision, events, applied).await?;
                    applied = revision;
                }
                if target.is_some_and(|target| applied >= target) {
                    return Ok(applied);
                }
            }
            _ = lease_checks.tick() => leases.refresh(&etcd, &revkv).await?,
        }
    }
}

fn watch_canceled(response: &WatchResponse, applied: u64) -> FollowError {
    if response.compact_revision > 0 {
        return FollowError::Refused(format!(
            "etcd has compacted past revkv's revision {applied} (to {}): take a new snapshot and \
             restore again, or follow sooner after the restore",
            response.compact_revision
        ));
    }
    FollowError::Refused(format!(
        "etcd canceled the watch: {}",
        response.cancel_reason
    ))
}

async fn connect(
    endpoints: &[String],
    user: Option<&str>,
    side: &'static str,
) -> Result<EtcdClient, FollowError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(30));
    if let Some(user) = user {
        let (name, password) = user
            .split_once(':')
            .ok_or_else(|| FollowError::Refused(format!("the {side} user is NAME:PASSWORD")))?;
        options = options.with_user(name, password);
    }
    EtcdClient::connect(endpoints, options)
        .await
        .map_err(|error| FollowError::Etcd(side, error))
}

/// The store's current revision, from a read's header.
async fn current_revision(client: &EtcdClient, side: &'static str) -> Result<u64, FollowError> {
    let probe = RangeRequest {
        key: b"revkv-follow-etcd-probe".to_vec(),
        count_only: true,
        ..RangeRequest::default()
    };
    let answer = client
        .kv()
        .range(probe)
        .await
        .map_err(FollowError::call(side))?
        .into_inner();
    let revision = answer.header.map_or(0, |header| header.revision);
    Ok(u64::try_from(revision).unwrap_or(0))
}

fn signed(revision: u64) -> i64 {
    i64::try_from(revision).unwrap_or(i64::MAX)
}
