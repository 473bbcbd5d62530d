//! What the recipes share: reading every key under a prefix at one revision, and waiting for keys
//! created before a revision to be deleted (etcd's `waitDeletes`), which makes waiters queue in
//! create-revision order, each watching only the key just before its own.

use crate::error::ClientError;
use crate::kv::RangeRequest;
use crate::types::KeyValue;
use crate::watch::{EventKind, WatchRequest, WatchUpdate};
use crate::Client;

/// Every key under `prefix` (all pages, one revision), and that revision.
pub(super) async fn read_prefix(
    client: &Client,
    prefix: &str,
) -> Result<(u64, Vec<KeyValue>), ClientError> {
    let mut pages = client.range_pages(RangeRequest::prefix(prefix));
    let mut kvs = Vec::new();
    let mut revision = 0;
    while let Some(page) = pages.next_page().await {
        let page = page?;
        revision = page.header.revision;
        kvs.extend(page.kvs);
    }
    Ok((revision, kvs))
}

/// The key created first (etcd's `WithFirstCreate`).
pub(super) fn first_created(kvs: &[KeyValue]) -> Option<&KeyValue> {
    kvs.iter().min_by_key(|kv| kv.create_revision)
}

/// Waits until no key under `prefix` has a create revision at or below `max_create_revision`:
/// reads the last such key, waits for its delete, and reads again.
pub(super) async fn wait_deletes(
    client: &Client,
    prefix: &str,
    max_create_revision: u64,
) -> Result<(), ClientError> {
    loop {
        let (revision, kvs) = read_prefix(client, prefix).await?;
        let last_before = kvs
            .iter()
            .filter(|kv| kv.create_revision <= max_create_revision)
            .max_by_key(|kv| kv.create_revision);
        let Some(last_before) = last_before else {
            return Ok(());
        };
        wait_delete(client, &last_before.key, revision).await?;
    }
}

/// Waits for a delete of `key` after `revision`.
pub(super) async fn wait_delete(
    client: &Client,
    key: &str,
    revision: u64,
) -> Result<(), ClientError> {
    let mut request = WatchRequest::key(key).from_revision(revision + 1);
    request.no_put = true;
    let mut watcher = client.watch(request);
    while let Some(update) = watcher.next().await {
        if let WatchUpdate::Events { events, .. } = update? {
            if events.iter().any(|event| event.kind == EventKind::Delete) {
                return Ok(());
            }
        }
    }
    Err(ClientError::WatchCanceled {
        reason: format!("the watch of {key} ended before its delete"),
    })
}
