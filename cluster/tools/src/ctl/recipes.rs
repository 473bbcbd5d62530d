//! `revkv ctl lock NAME [-- COMMAND...]` and `revkv ctl elect NAME [PROPOSAL] | --listen`, as
//! etcdctl's `lock` and `elect`: a session (a lease kept alive) per run, so a holder that dies
//! lets its lock or leadership go after the TTL.
//!
//! `lock` without a command prints the lock's key and holds it until interrupted (SIGINT or
//! SIGTERM); with a command it runs it while holding the lock (with `REVKV_LOCK_KEY` and
//! `REVKV_LOCK_REV` in its environment), and kills it if the session is lost first. `elect`
//! campaigns, prints the key and proposal once elected, and leads until interrupted; `--listen`
//! prints every leader as it changes. On a clean end the lock or leadership is released and the
//! lease revoked.

use std::io::Write;

use revkv_client::concurrency::{Election, LeaderObserver, Mutex, Session};
use revkv_client::{Client, ClientError, KeyValue};

use crate::cli::OutputFormat;

/// `revkv ctl lock`.
pub async fn lock(
    client: &Client,
    format: OutputFormat,
    name: &str,
    ttl_seconds: i64,
    command: &[String],
) -> Result<(), ClientError> {
    let session = Session::new(client, ttl_seconds).await?;
    let mut mutex = Mutex::new(&session, name);
    mutex.lock().await?;
    let outcome = match command.split_first() {
        None => {
            print_line(format, mutex.key(), "", mutex.revision());
            hold_until_interrupted(&session).await
        }
        Some((program, args)) => run_holding(&session, &mutex, program, args).await,
    };
    let released = mutex.unlock().await;
    let closed = session.close().await;
    outcome.and(released).and(closed)
}

/// Runs `program` while the lock is held; kills it if the session is lost first.
async fn run_holding(
    session: &Session,
    mutex: &Mutex,
    program: &str,
    args: &[String],
) -> Result<(), ClientError> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("REVKV_LOCK_KEY", mutex.key())
        .env("REVKV_LOCK_REV", mutex.revision().to_string())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| ClientError::Invalid {
            message: format!("cannot run {program}: {error}"),
        })?;
    tokio::select! {
        status = child.wait() => match status {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(ClientError::Invalid {
                message: format!("{program} ended with {status}"),
            }),
            Err(error) => Err(ClientError::Invalid {
                message: format!("waiting for {program}: {error}"),
            }),
        },
        _ = session.done() => {
            let _ = child.kill().await;
            Err(ClientError::SessionExpired { lease: session.lease_id() })
        }
    }
}

/// `revkv ctl elect NAME PROPOSAL`.
pub async fn elect(
    client: &Client,
    format: OutputFormat,
    name: &str,
    proposal: &str,
    ttl_seconds: i64,
) -> Result<(), ClientError> {
    let session = Session::new(client, ttl_seconds).await?;
    let mut election = Election::new(&session, name);
    election.campaign(proposal).await?;
    let leader = election.leader().await?;
    print_line(format, &leader.key, &leader.value, leader.create_revision);
    let outcome = hold_until_interrupted(&session).await;
    let resigned = election.resign().await;
    let closed = session.close().await;
    outcome.and(resigned).and(closed)
}

/// `revkv ctl elect NAME --listen`: prints every leader, until interrupted or `count` leaders.
pub async fn listen(
    client: &Client,
    format: OutputFormat,
    name: &str,
    count: Option<u64>,
) -> Result<(), ClientError> {
    let mut observer = LeaderObserver::new(client, name);
    let mut printed = 0;
    while count.is_none_or(|count| printed < count) {
        let leader: KeyValue = tokio::select! {
            leader = observer.next() => leader?,
            () = crate::interrupt::interrupted() => return Ok(()),
        };
        if !print_line(format, &leader.key, &leader.value, leader.create_revision) {
            return Ok(());
        }
        printed += 1;
    }
    Ok(())
}

/// Waits for SIGINT or SIGTERM (Ok), or the loss of the session (its error).
async fn hold_until_interrupted(session: &Session) -> Result<(), ClientError> {
    tokio::select! {
        () = crate::interrupt::interrupted() => Ok(()),
        _ = session.done() => Err(ClientError::SessionExpired { lease: session.lease_id() }),
    }
}

/// Prints `key` and `value` on two lines as etcdctl does (one JSON object with `-o json`), at
/// once; false when nobody reads standard output any more.
fn print_line(format: OutputFormat, key: &str, value: &str, revision: u64) -> bool {
    let text = match format {
        OutputFormat::Json => {
            serde_json::json!({ "key": key, "value": value, "revision": revision }).to_string()
        }
        OutputFormat::Table if value.is_empty() => key.to_string(),
        OutputFormat::Table => format!("{key}\n{value}"),
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .is_ok()
}
