//! An informer: a local copy of every key under a prefix, kept current the way Kubernetes'
//! informers keep theirs: list at revision R, then watch from R + 1 and apply each event.
//!
//! ```no_run
//! # async fn example(client: revkv_client::Client) -> Result<(), revkv_client::ClientError> {
//! use revkv_client::Informer;
//!
//! let mut informer = Informer::new(client, "app/");
//! informer.sync().await?;                       // list
//! loop {
//!     informer.next_change().await?;            // one revision's events, or a bookmark
//!     println!("{} keys at revision {}", informer.items().len(), informer.revision());
//! }
//! # }
//! ```
//!
//! When the watch reports [`ClientError::Compacted`] (the informer fell behind compaction), the
//! informer lists again and watches from the new list's revision: callers never see that error.

use std::collections::BTreeMap;

use super::error::ClientError;
use super::kv::RangeRequest;
use super::types::KeyValue;
use super::watch::{EventKind, WatchRequest, WatchUpdate, Watcher};
use super::Client;

/// Relists in a row (each caused by compaction) before [`Informer::next_change`] gives up.
pub const MOST_RELISTS_IN_A_ROW: u32 = 5;

/// A local, current copy of one prefix.
pub struct Informer {
    client: Client,
    prefix: String,
    items: BTreeMap<String, KeyValue>,
    revision: u64,
    watcher: Option<Watcher>,
}

impl Informer {
    /// An informer of every key under `prefix`; empty until [`Informer::sync`].
    pub fn new(client: Client, prefix: impl Into<String>) -> Informer {
        Informer {
            client,
            prefix: prefix.into(),
            items: BTreeMap::new(),
            revision: 0,
            watcher: None,
        }
    }

    /// The keys and values as of [`Informer::revision`].
    pub fn items(&self) -> &BTreeMap<String, KeyValue> {
        &self.items
    }

    /// The store revision the local copy reflects.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Lists the prefix (every page, at one revision) and starts watching after it.
    pub async fn sync(&mut self) -> Result<(), ClientError> {
        let mut pages = self.client.range_pages(RangeRequest::prefix(&self.prefix));
        let mut items = BTreeMap::new();
        let mut revision = 0;
        while let Some(page) = pages.next_page().await {
            let page = page?;
            revision = page.header.revision;
            items.extend(page.kvs.into_iter().map(|kv| (kv.key.clone(), kv)));
        }
        self.items = items;
        self.revision = revision;
        let request = WatchRequest::prefix(&self.prefix).from_revision(revision + 1);
        self.watcher = Some(self.client.watch(request));
        Ok(())
    }

    /// Waits for the next change and applies it; answers the revision now reflected. Lists again
    /// (at most [`MOST_RELISTS_IN_A_ROW`] times) if the watch fell behind compaction.
    pub async fn next_change(&mut self) -> Result<u64, ClientError> {
        let mut relists = 0;
        loop {
            if self.watcher.is_none() {
                self.sync().await?;
            }
            let watcher = self.watcher.as_mut().expect("synced");
            match watcher.next().await {
                Some(Ok(update)) => {
                    self.apply(update);
                    return Ok(self.revision);
                }
                Some(Err(ClientError::Compacted { .. })) if relists < MOST_RELISTS_IN_A_ROW => {
                    relists += 1;
                    self.watcher = None;
                }
                Some(Err(error)) => return Err(error),
                None => self.watcher = None,
            }
        }
    }

    fn apply(&mut self, update: WatchUpdate) {
        match update {
            WatchUpdate::Events { revision, events } => {
                for event in events {
                    match event.kind {
                        EventKind::Put => self.items.insert(event.kv.key.clone(), event.kv),
                        EventKind::Delete => self.items.remove(&event.kv.key),
                    };
                }
                self.revision = revision;
            }
            WatchUpdate::Bookmark { revision } => self.revision = self.revision.max(revision),
        }
    }
}
