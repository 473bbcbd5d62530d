//! What each `revkv ctl` command does: one client call (or one per endpoint for `status` and
//! `hash`), then its answer printed in the chosen format.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

// `ask_each_endpoint` lives in `answers.rs`, which the subcommand files share; its public path
// through this file stays.
pub use super::answers::{ask_each_endpoint, EndpointAnswers};

use super::answers::print_either;
use super::conflicts::conflicts_top;
use super::convergence::convergence;
use super::history::history;
use super::lease::lease;
use super::maintenance;
use super::output;
use super::recipes;
use super::{
    ConflictsCommand, CtlArgs, CtlCommand, LeaderCommand, MemberCommand, SnapshotCommand,
    DEFAULT_ENDPOINTS,
};
use crate::cli::OutputFormat;
use revkv_client::{
    Client, ClientError, Consistency, Credentials, DeleteRequest, PutRequest, RangeRequest,
    ReadOptions, WatchRequest,
};

/// The largest txn request read from a file or stdin (the member's body limit is 1.5 MiB).
pub const LARGEST_TXN_REQUEST_BYTES: u64 = 2 * 1024 * 1024;

/// Runs one command.
pub async fn execute(args: CtlArgs) -> Result<(), ClientError> {
    let client = client_from_args(&args)?;
    execute_key_write_command(&client, args.output, args.command).await
}

/// The client the global options describe: the endpoints (made `https://` by default when a CA
/// is given), the time limit of each call, TLS and the user to call as.
fn client_from_args(args: &CtlArgs) -> Result<Client, ClientError> {
    let defaults: Vec<String> = DEFAULT_ENDPOINTS.split(',').map(String::from).collect();
    let endpoints = args
        .tls
        .adjust_default_endpoints(args.endpoints.clone(), &defaults);
    // An empty `REVKV_USER` means no user, as an unset one does.
    let user = args.credentials.as_deref().filter(|user| !user.is_empty());
    let credentials = user.map(Credentials::parse).transpose()?;
    Client::builder(endpoints)
        .request_timeout(args.timeout)
        .tls(args.tls.client_tls())
        .credentials(credentials)
        .build()
}

/// Runs `command` if it writes keys; every other command goes on to
/// [`execute_key_read_command`], and from there to [`execute_cluster_command`]. Handing the rest
/// on, rather than sorting the commands in the caller, keeps the compiler checking that every
/// command is handled somewhere.
async fn execute_key_write_command(
    client: &Client,
    format: OutputFormat,
    command: CtlCommand,
) -> Result<(), ClientError> {
    match command {
        CtlCommand::Put {
            key,
            value,
            merge_from: Some(read_revision),
            ..
        } => merge_put(client, format, &key, &value, read_revision).await,
        CtlCommand::Put {
            key,
            value,
            if_mod_revision,
            if_absent,
            prev_kv,
            lease,
            merge_from: None,
        } => {
            let request = put_request(key, value, if_mod_revision, if_absent, prev_kv)
                .with_lease(lease.unwrap_or(0));
            put(client, format, &request).await
        }
        CtlCommand::Del {
            key,
            prefix,
            if_mod_revision,
            prev_kv,
        } => {
            let request = delete_request(key, prefix, if_mod_revision, prev_kv);
            delete(client, format, &request).await
        }
        CtlCommand::Txn { file } => txn(client, format, file.as_deref()).await,
        CtlCommand::Patch {
            key,
            patch,
            if_mod_revision,
        } => patch_key(client, format, &key, &patch, if_mod_revision).await,
        not_a_write => execute_key_read_command(client, format, not_a_write).await,
    }
}

/// Runs `command` if it reads keys, their history or their changes (watch); every other command
/// goes on to [`execute_cluster_command`].
async fn execute_key_read_command(
    client: &Client,
    format: OutputFormat,
    command: CtlCommand,
) -> Result<(), ClientError> {
    match command {
        CtlCommand::Get {
            key,
            revision,
            serializable,
        } => get(client, format, &key, read_options(revision, serializable)).await,
        CtlCommand::List {
            prefix,
            page_size,
            max_keys,
            revision,
            serializable,
        } => {
            let request = list_request(prefix, page_size, read_options(revision, serializable));
            list(client, format, request, max_keys).await
        }
        CtlCommand::Conflicts(ConflictsCommand::Top { top }) => {
            conflicts_top(client, format, top).await
        }
        CtlCommand::History {
            key,
            from_revision,
            max_versions,
            diff,
        } => history(client, format, &key, from_revision, max_versions, diff).await,
        CtlCommand::Convergence {
            key,
            from_revision,
            max_versions,
        } => convergence(client, format, &key, from_revision, max_versions).await,
        CtlCommand::Watch {
            key,
            prefix,
            start_revision,
            prev_kv,
            progress_notify,
            count,
        } => {
            let request = watch_request(key, prefix, start_revision, prev_kv, progress_notify);
            watch(client, format, request, count).await
        }
        cluster_command => execute_cluster_command(client, format, cluster_command).await,
    }
}

/// Runs a command on the cluster rather than on keys: compaction, status, membership,
/// leadership, hashes, snapshots, leases, auth, alarms, defragmentation, locks and elections.
async fn execute_cluster_command(
    client: &Client,
    format: OutputFormat,
    command: CtlCommand,
) -> Result<(), ClientError> {
    match command {
        CtlCommand::Compact { revision } => compact(client, format, revision).await,
        CtlCommand::Status => status(client, format).await,
        CtlCommand::Member(command) => member(client, format, command).await,
        CtlCommand::Leader(LeaderCommand::Transfer { to }) => {
            transfer_leader(client, format, to).await
        }
        CtlCommand::Hash { revision } => hash(client, format, revision).await,
        CtlCommand::Snapshot(SnapshotCommand::Save {
            path,
            format: snapshot_format,
        }) => super::snapshot::save(client, format, &path, snapshot_format).await,
        CtlCommand::Lease(command) => lease(client, format, command).await,
        CtlCommand::Auth(command) => super::auth::auth(client, format, command).await,
        CtlCommand::User(command) => super::auth::user(client, format, command).await,
        CtlCommand::Role(command) => super::auth::role(client, format, command).await,
        CtlCommand::Alarm(command) => maintenance::alarm(client, format, command).await,
        CtlCommand::Defrag => maintenance::defrag(client, format).await,
        CtlCommand::Lock { name, ttl, command } => {
            recipes::lock(client, format, &name, ttl, &command).await
        }
        CtlCommand::Elect {
            name,
            proposal,
            listen,
            ttl,
            count,
        } => elect_or_listen(client, format, &name, proposal, listen, ttl, count).await,
        key_value_command @ (CtlCommand::Get { .. }
        | CtlCommand::Put { .. }
        | CtlCommand::Del { .. }
        | CtlCommand::List { .. }
        | CtlCommand::Txn { .. }
        | CtlCommand::Patch { .. }
        | CtlCommand::Conflicts(_)
        | CtlCommand::History { .. }
        | CtlCommand::Convergence { .. }
        | CtlCommand::Watch { .. }) => unreachable!(
            "the key commands run {key_value_command:?} themselves and never hand it on"
        ),
    }
}

fn read_options(revision: Option<u64>, serializable: bool) -> ReadOptions {
    ReadOptions {
        consistency: if serializable {
            Consistency::Serializable
        } else {
            Consistency::Linearizable
        },
        revision,
        min_revision: None,
    }
}

fn put_request(
    key: String,
    value: String,
    if_mod_revision: Option<u64>,
    if_absent: bool,
    prev_kv: bool,
) -> PutRequest {
    let mut request = PutRequest::new(key, value);
    if let Some(revision) = if_mod_revision {
        request = request.if_mod_revision(revision);
    }
    if if_absent {
        request = request.if_absent();
    }
    if prev_kv {
        request = request.with_prev_kv();
    }
    request
}

fn delete_request(
    key: String,
    prefix: bool,
    if_mod_revision: Option<u64>,
    prev_kv: bool,
) -> DeleteRequest {
    let mut request = if prefix {
        DeleteRequest::prefix(key)
    } else {
        DeleteRequest::key(key)
    };
    if let Some(revision) = if_mod_revision {
        request = request.if_mod_revision(revision);
    }
    if prev_kv {
        request = request.with_prev_kv();
    }
    request
}

/// The range `list` pages through: every key under `prefix`, `page_size` keys a page (at least
/// one).
fn list_request(prefix: String, page_size: u64, options: ReadOptions) -> RangeRequest {
    RangeRequest::prefix(prefix)
        .limit(page_size.max(1))
        .read_options(options)
}

/// The watch of `key`, or of every key under it with `prefix`, with the options of `ctl watch`
/// (`progress_notify`: how often to ask for a bookmark).
fn watch_request(
    key: String,
    prefix: bool,
    start_revision: Option<u64>,
    prev_kv: bool,
    progress_notify: Option<Duration>,
) -> WatchRequest {
    WatchRequest {
        prefix,
        start_revision,
        prev_kv,
        progress_notify,
        ..WatchRequest::key(key)
    }
}

async fn get(
    client: &Client,
    format: OutputFormat,
    key: &str,
    options: ReadOptions,
) -> Result<(), ClientError> {
    let answer = client.get_with(key, options).await?;
    print_either(format, &answer, || {
        output::kv_table(std::slice::from_ref(&answer.kv))
    });
    Ok(())
}

async fn put(
    client: &Client,
    format: OutputFormat,
    request: &PutRequest,
) -> Result<(), ClientError> {
    let answer = client.put_with(request).await?;
    print_either(format, &answer, || {
        let mut text = format!("OK (revision {})", answer.header.revision);
        if let Some(previous) = &answer.prev_kv {
            text.push_str(&format!(
                "\nprevious:\n{}",
                output::kv_table(std::slice::from_ref(previous))
            ));
        }
        text
    });
    Ok(())
}

async fn delete(
    client: &Client,
    format: OutputFormat,
    request: &DeleteRequest,
) -> Result<(), ClientError> {
    let answer = client.delete(request).await?;
    print_either(format, &answer, || {
        let mut text = format!(
            "deleted {} (revision {})",
            answer.deleted, answer.header.revision
        );
        if let Some(previous) = answer.prev_kvs.as_deref().filter(|kvs| !kvs.is_empty()) {
            text.push_str(&format!("\n{}", output::kv_table(previous)));
        }
        text
    });
    Ok(())
}

async fn list(
    client: &Client,
    format: OutputFormat,
    request: RangeRequest,
    max_keys: u64,
) -> Result<(), ClientError> {
    let mut pages = client.range_pages(request);
    let mut kvs = Vec::new();
    let mut revision = 0;
    let mut count = 0;
    while let Some(page) = pages.next_page().await {
        let page = page?;
        revision = page.header.revision;
        // Later pages count only the keys from their resume point on.
        if kvs.is_empty() {
            count = page.count;
        }
        kvs.extend(page.kvs);
        if kvs.len() as u64 >= max_keys {
            kvs.truncate(max_keys as usize);
            break;
        }
    }
    let answer = serde_json::json!({ "revision": revision, "count": count, "kvs": kvs });
    print_either(format, &answer, || {
        let shown = kvs.len();
        let mut text = output::kv_table(&kvs);
        text.push_str(&format!("\n{shown} of {count} keys at revision {revision}"));
        text
    });
    Ok(())
}

async fn txn(
    client: &Client,
    format: OutputFormat,
    file: Option<&Path>,
) -> Result<(), ClientError> {
    let body = read_txn_request(file)?;
    let answer = client.txn_json(body).await?;
    print_either(format, &answer, || {
        let outcome = if answer.succeeded {
            "SUCCESS"
        } else {
            "FAILURE"
        };
        let mut lines = vec![format!("{outcome} (revision {})", answer.header.revision)];
        for response in &answer.responses {
            lines.push(serde_json::to_string(response).expect("answers always serialise"));
        }
        lines.join("\n")
    });
    Ok(())
}

/// The txn request from `file`, or from stdin when absent or `-`; at most
/// [`LARGEST_TXN_REQUEST_BYTES`].
fn read_txn_request(file: Option<&Path>) -> Result<Value, ClientError> {
    let mut text = String::new();
    let read = match file.filter(|path| path.as_os_str() != "-") {
        Some(path) => std::fs::File::open(path).and_then(|file| {
            file.take(LARGEST_TXN_REQUEST_BYTES)
                .read_to_string(&mut text)
        }),
        None => std::io::stdin()
            .take(LARGEST_TXN_REQUEST_BYTES)
            .read_to_string(&mut text),
    };
    read.map_err(|error| ClientError::Invalid {
        message: format!("cannot read the txn request: {error}"),
    })?;
    serde_json::from_str(&text).map_err(|error| ClientError::Invalid {
        message: format!("the txn request is not JSON: {error}"),
    })
}

async fn patch_key(
    client: &Client,
    format: OutputFormat,
    key: &str,
    patch: &str,
    if_mod_revision: Option<u64>,
) -> Result<(), ClientError> {
    let patch: Value = serde_json::from_str(patch).map_err(|error| ClientError::Invalid {
        message: format!("the patch is not JSON: {error}"),
    })?;
    let answer = client.patch(key, &patch, if_mod_revision).await?;
    print_either(format, &answer, || {
        format!(
            "patched {key} (revision {}, attempts {})\n{}",
            answer.header.revision, answer.attempts, answer.kv.value
        )
    });
    Ok(())
}

async fn merge_put(
    client: &Client,
    format: OutputFormat,
    key: &str,
    value: &str,
    read_revision: u64,
) -> Result<(), ClientError> {
    let value: Value = serde_json::from_str(value).map_err(|error| ClientError::Invalid {
        message: format!("a merged value must be JSON: {error}"),
    })?;
    let answer = client.merge_put(key, &value, read_revision).await?;
    print_either(format, &answer, || {
        let how = if answer.merged {
            format!("merged with {}", answer.merged_fields.join(", "))
        } else {
            "no newer change to merge".to_string()
        };
        format!(
            "put {key} (revision {}, {how})\n{}",
            answer.header.revision, answer.kv.value
        )
    });
    Ok(())
}

/// `ctl compact`: discards every version superseded at or before `revision`, and says so.
async fn compact(client: &Client, format: OutputFormat, revision: u64) -> Result<(), ClientError> {
    let answer = client.compact(revision).await?;
    print_either(format, &answer, || {
        format!("compacted at revision {revision}")
    });
    Ok(())
}

/// `ctl leader transfer`: hands leadership to member `to` and says so.
async fn transfer_leader(
    client: &Client,
    format: OutputFormat,
    to: u64,
) -> Result<(), ClientError> {
    let answer = client.transfer_leader(to).await?;
    print_either(format, &answer, || {
        format!("leadership transferred to member {to}")
    });
    Ok(())
}

/// `ctl elect`: with `--listen`, prints the election's leaders (up to `count`); otherwise
/// campaigns with `proposal` (empty if none was given; the options require one without
/// `--listen`) and leads until interrupted.
async fn elect_or_listen(
    client: &Client,
    format: OutputFormat,
    name: &str,
    proposal: Option<String>,
    listen: bool,
    ttl_seconds: i64,
    count: Option<u64>,
) -> Result<(), ClientError> {
    if listen {
        return recipes::listen(client, format, name, count).await;
    }
    let proposal = proposal.unwrap_or_default();
    recipes::elect(client, format, name, &proposal, ttl_seconds).await
}

async fn watch(
    client: &Client,
    format: OutputFormat,
    request: WatchRequest,
    count: Option<u64>,
) -> Result<(), ClientError> {
    let mut watcher = client.watch(request);
    let mut printed = 0u64;
    while count.is_none_or(|count| printed < count) {
        let Some(update) = watcher.next().await else {
            return Ok(());
        };
        let update = update?;
        let text = match format {
            OutputFormat::Json => serde_json::to_string(&update).expect("updates serialise"),
            OutputFormat::Table => output::watch_update_lines(&update),
        };
        let mut stdout = std::io::stdout().lock();
        // A closed stdout (the reader went away) ends the watch quietly.
        if writeln!(stdout, "{text}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return Ok(());
        }
        printed += 1;
    }
    Ok(())
}

async fn status(client: &Client, format: OutputFormat) -> Result<(), ClientError> {
    let asked = ask_each_endpoint(client, |member| async move { member.status().await }).await?;
    let rows: Vec<_> = asked
        .answers
        .iter()
        .map(|(endpoint, answer)| output::status_row(endpoint, answer))
        .collect();
    let printed: Vec<_> = asked
        .answers
        .iter()
        .map(|(endpoint, answer)| serde_json::json!({ "endpoint": endpoint, "status": answer }))
        .collect();
    print_either(format, &printed, || {
        output::table(&output::STATUS_HEADERS, &rows)
    });
    asked.outcome()
}

async fn hash(
    client: &Client,
    format: OutputFormat,
    revision: Option<u64>,
) -> Result<(), ClientError> {
    let asked =
        ask_each_endpoint(client, |member| async move { member.hash(revision).await }).await?;
    let rows: Vec<_> = asked
        .answers
        .iter()
        .map(|(endpoint, answer)| {
            vec![
                endpoint.clone(),
                answer.header.member_id.to_string(),
                answer.hash.to_string(),
                answer.revision.to_string(),
                answer.compact_revision.to_string(),
            ]
        })
        .collect();
    let printed: Vec<_> = asked
        .answers
        .iter()
        .map(|(endpoint, answer)| serde_json::json!({ "endpoint": endpoint, "hash": answer }))
        .collect();
    let headers = ["ENDPOINT", "ID", "HASH", "REVISION", "COMPACT"];
    print_either(format, &printed, || output::table(&headers, &rows));
    asked.outcome()
}

async fn member(
    client: &Client,
    format: OutputFormat,
    command: MemberCommand,
) -> Result<(), ClientError> {
    let (answer, done) = match command {
        MemberCommand::List => (client.members().await?, String::new()),
        MemberCommand::Add {
            id,
            peer_url,
            client_url,
            grpc_url,
            learner: _,
            auto_promote: false,
            ..
        } => (
            client
                .add_learner(id, &peer_url, &client_url, grpc_url.as_deref())
                .await?,
            format!("added member {id} as a learner\n"),
        ),
        MemberCommand::Add {
            id,
            peer_url,
            client_url,
            grpc_url,
            auto_promote: true,
            auto_promote_max_lag,
            ..
        } => {
            let urls = (peer_url.as_str(), client_url.as_str(), grpc_url.as_deref());
            let answer = client
                .add_learner_to_promote(id, urls, auto_promote_max_lag)
                .await?;
            let done = format!(
                "added member {id} as a learner; the leader promotes it once it has caught up\n"
            );
            (answer, done)
        }
        MemberCommand::Promote { id } => (
            client.promote_member(id).await?,
            format!("promoted member {id}\n"),
        ),
        MemberCommand::Remove { id } => (
            client.remove_member(id).await?,
            format!("removed member {id}\n"),
        ),
    };
    print_either(format, &answer, || {
        format!("{done}{}", output::member_table(&answer.members))
    });
    Ok(())
}
