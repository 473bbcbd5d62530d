//! `revkv ctl lease grant|revoke|keep-alive|ttl|list`, printed as etcdctl prints them (lease ids
//! in decimal, as the API writes them), or as the API's answers with `-o json`.

use std::io::Write;

use revkv_client::{Client, ClientError, LeaseKeeper, LeaseLoss, LeaseState};

use super::answers::print_either;
use super::LeaseCommand;
use crate::cli::OutputFormat;

/// Runs one `lease` command.
pub async fn lease(
    client: &Client,
    format: OutputFormat,
    command: LeaseCommand,
) -> Result<(), ClientError> {
    match command {
        LeaseCommand::Grant { ttl, id } => {
            let answer = client.lease_grant(ttl, id).await?;
            print_either(format, &answer, || {
                format!("lease {} granted with TTL({}s)", answer.id, answer.ttl)
            });
        }
        LeaseCommand::Revoke { id } => {
            let answer = client.lease_revoke(id).await?;
            print_either(format, &answer, || format!("lease {id} revoked"));
        }
        LeaseCommand::Ttl { id, keys } => {
            let answer = client.lease_time_to_live(id, keys).await?;
            print_either(format, &answer, || {
                let mut text = format!(
                    "lease {id} granted with TTL({}s), remaining({}s)",
                    answer.granted_ttl, answer.ttl
                );
                if let Some(keys) = &answer.keys {
                    text.push_str(&format!(", attached keys({keys:?})"));
                }
                text
            });
        }
        LeaseCommand::List => {
            let answer = client.lease_list().await?;
            print_either(format, &answer, || {
                let mut lines = vec![format!("found {} leases", answer.leases.len())];
                lines.extend(answer.leases.iter().map(|lease| lease.id.to_string()));
                lines.join("\n")
            });
        }
        LeaseCommand::KeepAlive { id, once, count } => {
            return keep_alive(client, format, id, once, count).await;
        }
    }
    Ok(())
}

/// Renews once, then (without `--once`) keeps the lease alive over the streaming keep-alive,
/// printing every renewal, until interrupted, `count` renewals, or the lease is lost.
async fn keep_alive(
    client: &Client,
    format: OutputFormat,
    id: i64,
    once: bool,
    count: Option<u64>,
) -> Result<(), ClientError> {
    let first = client.lease_keep_alive_once(id).await?;
    if !print_renewal(format, id, first.ttl) || once {
        return Ok(());
    }
    let keeper = LeaseKeeper::start(client);
    let kept = keeper.keep(id, first.ttl).await?;
    let mut states = kept.watch();
    let mut printed = 1u64;
    while count.is_none_or(|count| printed < count) {
        if states.changed().await.is_err() {
            break;
        }
        let state = *states.borrow_and_update();
        match state {
            LeaseState::Alive { ttl_seconds, .. } => {
                if !print_renewal(format, id, ttl_seconds) {
                    return Ok(());
                }
                printed += 1;
            }
            LeaseState::Lost(loss) => return Err(lost(id, loss)),
        }
    }
    Ok(())
}

/// Prints one renewal; false when nobody reads standard output any more.
fn print_renewal(format: OutputFormat, id: i64, ttl: i64) -> bool {
    let line = match format {
        OutputFormat::Json => serde_json::json!({ "id": id, "ttl": ttl }).to_string(),
        OutputFormat::Table => format!("lease {id} keepalived with TTL({ttl})"),
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .is_ok()
}

/// The error a lost lease ends `keep-alive` with (`not_found`: exit 3, as a script expects).
fn lost(id: i64, loss: LeaseLoss) -> ClientError {
    match loss {
        LeaseLoss::NotFound => ClientError::NotFound {
            message: format!("lease {id} expired or revoked"),
        },
        LeaseLoss::DeadlinePassed => ClientError::Timeout {
            message: format!("lease {id} was not renewed before its TTL ran out"),
        },
        LeaseLoss::KeeperStopped => ClientError::Invalid {
            message: "the lease keeper stopped".into(),
        },
    }
}
