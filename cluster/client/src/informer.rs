//! An informer: a local copy of every key under a prefix, kept current the way Kubernetes'
//! reflector keeps its store: list every page at one revision R, then watch from R + 1 (asking for
//! progress bookmarks) and apply each event, telling the caller what changed as added, updated
//! and deleted objects with their old and new values.
//!
//! ```no_run
//! # async fn example(client: revkv_client::Client) -> Result<(), revkv_client::ClientError> {
//! use revkv_client::controller::InformerEvent;
//! use revkv_client::Informer;
//!
//! let mut informer = Informer::new(client, "app/");
//! informer.sync().await?;                              // list
//! loop {
//!     let change = informer.next_events().await?;      // one revision's events, or a bookmark
//!     for event in &change.events {
//!         if let InformerEvent::Updated { old, new } = event {
//!             println!("{}: {} -> {}", new.key, old.value, new.value);
//!         }
//!     }
//!     println!("{} keys at revision {}", informer.cache().len(), informer.revision());
//! }
//! # }
//! ```
//!
//! When the watch reports [`ClientError::Compacted`] (the informer fell behind compaction), the
//! informer lists again and watches from the new list's revision, and the difference between the
//! old and new content comes out as events: callers never see that error. The cache is shared
//! with readers ([`CacheReader`], for a controller's workers) and bounded ([`CacheLimits`]).
//! [`Informer::verify_against_store`] compares the cache with the store at the cache's revision,
//! which catches an event the watch lost (the check client-go lacks and its users ask for).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use super::controller::cache::{CacheLimits, IndexFunction, InformerEvent, ObjectCache};
use super::error::ClientError;
use super::kv::{RangeRequest, ReadOptions};
use super::types::KeyValue;
use super::watch::{EventKind, WatchRequest, WatchUpdate, Watcher};
use super::Client;

/// Relists in a row (each caused by compaction) before [`Informer::next_change`] gives up.
pub const MOST_RELISTS_IN_A_ROW: u32 = 5;

/// How an informer lists, watches and bounds its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InformerSettings {
    pub cache_limits: CacheLimits,
    /// The bookmark interval asked of the watch: the revision moves on while nothing under the
    /// prefix changes, and a silent, dead connection is noticed.
    pub progress_interval: Option<Duration>,
    /// Keys per list page (None: the member's default).
    pub list_page_size: Option<u64>,
}

impl Default for InformerSettings {
    fn default() -> Self {
        InformerSettings {
            cache_limits: CacheLimits::default(),
            progress_interval: Some(Duration::from_secs(5)),
            list_page_size: Some(1_000),
        }
    }
}

/// The cache with the revision it reflects, behind one lock.
struct CacheState {
    cache: ObjectCache,
    revision: u64,
    synced: bool,
}

/// A read-only handle on an informer's cache, cheap to clone, for a controller's workers.
#[derive(Clone)]
pub struct CacheReader {
    state: Arc<RwLock<CacheState>>,
}

impl CacheReader {
    fn read(&self) -> RwLockReadGuard<'_, CacheState> {
        // A panic while the informer held the lock leaves a cache that is still consistent
        // (every change is applied whole or refused first), so a poisoned lock is read anyway.
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.read().cache.get(key).cloned()
    }

    pub fn len(&self) -> usize {
        self.read().cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().cache.is_empty()
    }

    /// The store revision the cache reflects.
    pub fn revision(&self) -> u64 {
        self.read().revision
    }

    /// Whether the first list has been applied.
    pub fn is_synced(&self) -> bool {
        self.read().synced
    }

    /// The bytes counted against the cache's limit.
    pub fn counted_bytes(&self) -> usize {
        self.read().cache.counted_bytes()
    }

    /// The objects filed under `value` in the index `name`.
    pub fn by_index(&self, name: &str, value: &str) -> Vec<KeyValue> {
        let state = self.read();
        (state.cache.keys_by_index(name, value).iter())
            .filter_map(|key| state.cache.get(key).cloned())
            .collect()
    }

    /// Calls `reader` with every object (in key order) under the read lock; keep it short.
    pub fn with_objects<T>(&self, reader: impl FnOnce(&BTreeMap<String, KeyValue>) -> T) -> T {
        reader(self.read().cache.objects())
    }

    /// The keys held, in order.
    pub fn keys(&self) -> Vec<String> {
        self.with_objects(|objects| objects.keys().cloned().collect())
    }
}

/// What one [`Informer::next_events`] applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InformerChange {
    /// The revision the cache reflects now.
    pub revision: u64,
    /// The changes, in order; empty for a bookmark.
    pub events: Vec<InformerEvent>,
    /// Whether the events come from a relist rather than the watch.
    pub relisted: bool,
}

/// What [`Informer::verify_against_store`] found: keys whose cached state differs from the store
/// at the cache's revision. All empty means the cache is exact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheCheck {
    pub revision: u64,
    /// In the store, not in the cache (a lost put).
    pub missing: Vec<String>,
    /// In both, at different mod revisions (a lost update).
    pub stale: Vec<String>,
    /// In the cache, not in the store (a lost delete).
    pub unexpected: Vec<String>,
}

impl CacheCheck {
    pub fn is_exact(&self) -> bool {
        self.missing.is_empty() && self.stale.is_empty() && self.unexpected.is_empty()
    }
}

/// A local, current copy of one prefix.
pub struct Informer {
    client: Client,
    prefix: String,
    settings: InformerSettings,
    state: Arc<RwLock<CacheState>>,
    watcher: Option<Watcher>,
}

impl Informer {
    /// An informer of every key under `prefix`; empty until [`Informer::sync`].
    pub fn new(client: Client, prefix: impl Into<String>) -> Informer {
        Informer::with_settings(client, prefix, InformerSettings::default())
    }

    pub fn with_settings(
        client: Client,
        prefix: impl Into<String>,
        settings: InformerSettings,
    ) -> Informer {
        let state = CacheState {
            cache: ObjectCache::new(settings.cache_limits),
            revision: 0,
            synced: false,
        };
        Informer {
            client,
            prefix: prefix.into(),
            settings,
            state: Arc::new(RwLock::new(state)),
            watcher: None,
        }
    }

    /// Files every object under the values `function` gives it, as the index `name`.
    pub fn add_index(
        &mut self,
        name: impl Into<String>,
        function: IndexFunction,
    ) -> Result<(), ClientError> {
        self.write_state().cache.add_index(name, function)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A read-only handle on the cache, which follows every later change.
    pub fn cache(&self) -> CacheReader {
        CacheReader {
            state: Arc::clone(&self.state),
        }
    }

    /// The store revision the local copy reflects.
    pub fn revision(&self) -> u64 {
        self.cache().revision()
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, CacheState> {
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lists the prefix (every page, at one revision), replaces the cache with it and starts
    /// watching after it; answers what changed against the cache held before.
    pub async fn sync(&mut self) -> Result<Vec<InformerEvent>, ClientError> {
        self.watcher = None;
        let (listed, revision) = self.list(ReadOptions::default()).await?;
        let events = {
            let mut state = self.write_state();
            let events = state.cache.replace(listed)?;
            state.revision = revision;
            state.synced = true;
            events
        };
        let mut request = WatchRequest::prefix(&self.prefix).from_revision(revision + 1);
        request.progress_notify = self.settings.progress_interval;
        self.watcher = Some(self.client.watch(request));
        Ok(events)
    }

    /// Every object under the prefix, read page by page at one revision; answers the revision.
    async fn list(
        &self,
        read: ReadOptions,
    ) -> Result<(BTreeMap<String, KeyValue>, u64), ClientError> {
        let mut request = RangeRequest::prefix(&self.prefix).read_options(read);
        request.limit = self.settings.list_page_size;
        let mut pages = self.client.range_pages(request);
        let mut listed = BTreeMap::new();
        let mut revision = 0;
        while let Some(page) = pages.next_page().await {
            let page = page?;
            revision = page.header.revision;
            let limit = self.settings.cache_limits.max_objects;
            if listed.len() + page.kvs.len() > limit {
                return Err(ClientError::LimitExceeded {
                    message: format!("{} holds more than {limit} keys", self.prefix),
                });
            }
            listed.extend(page.kvs.into_iter().map(|kv| (kv.key.clone(), kv)));
        }
        Ok((listed, revision))
    }

    /// Waits for the next change and applies it; answers the revision now reflected. Lists again
    /// (at most [`MOST_RELISTS_IN_A_ROW`] times) if the watch fell behind compaction.
    pub async fn next_change(&mut self) -> Result<u64, ClientError> {
        Ok(self.next_events().await?.revision)
    }

    /// Waits for the next revision's events (or a bookmark) and applies them; a compacted watch
    /// is answered by a relist, whose difference comes back as the events.
    pub async fn next_events(&mut self) -> Result<InformerChange, ClientError> {
        let mut relists = 0;
        loop {
            if self.watcher.is_none() {
                let events = self.sync().await?;
                if relists > 0 || !events.is_empty() {
                    let revision = self.revision();
                    return Ok(InformerChange {
                        revision,
                        events,
                        relisted: true,
                    });
                }
            }
            let watcher = self.watcher.as_mut().expect("synced");
            match watcher.next().await {
                Some(Ok(update)) => return self.apply(update),
                Some(Err(ClientError::Compacted { .. })) if relists < MOST_RELISTS_IN_A_ROW => {
                    relists += 1;
                    self.watcher = None;
                }
                Some(Err(error)) => return Err(error),
                None => self.watcher = None,
            }
        }
    }

    /// Applies one watch update. A change the cache refuses (its limits) drops the watch, so the
    /// next call lists again rather than carry on from a revision only half applied.
    fn apply(&mut self, update: WatchUpdate) -> Result<InformerChange, ClientError> {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        let (revision, watch_events) = match update {
            WatchUpdate::Events { revision, events } => (revision, events),
            WatchUpdate::Bookmark { revision } => {
                state.revision = state.revision.max(revision);
                let revision = state.revision;
                return Ok(InformerChange {
                    revision,
                    events: Vec::new(),
                    relisted: false,
                });
            }
        };
        assert!(revision > state.revision, "watch events go forward");
        let mut events = Vec::with_capacity(watch_events.len());
        for event in watch_events {
            let applied = match event.kind {
                EventKind::Put => state.cache.put(event.kv),
                EventKind::Delete => Ok(state.cache.delete(&event.kv.key)),
            };
            match applied {
                Ok(change) => events.extend(change),
                Err(error) => {
                    drop(state);
                    self.watcher = None;
                    return Err(error);
                }
            }
        }
        state.revision = revision;
        Ok(InformerChange {
            revision,
            events,
            relisted: false,
        })
    }

    /// Lists the prefix at the cache's revision and compares it with the cache, key by key and
    /// mod revision by mod revision. Any difference means the watch lost an event; the caller
    /// relists ([`Informer::sync`]) to repair it. A revision already compacted away is
    /// [`ClientError::Compacted`]: nothing can be compared then.
    pub async fn verify_against_store(&self) -> Result<CacheCheck, ClientError> {
        let revision = self.revision();
        if revision == 0 {
            return Err(ClientError::Invalid {
                message: "the informer has not listed yet".to_string(),
            });
        }
        let read = ReadOptions {
            revision: Some(revision),
            ..ReadOptions::default()
        };
        let (stored, _) = self.list(read).await?;
        let mut check = CacheCheck {
            revision,
            ..CacheCheck::default()
        };
        self.cache().with_objects(|cached| {
            for (key, object) in &stored {
                match cached.get(key) {
                    None => check.missing.push(key.clone()),
                    Some(held) if held.mod_revision != object.mod_revision => {
                        check.stale.push(key.clone())
                    }
                    Some(_) => {}
                }
            }
            let unexpected = cached.keys().filter(|key| !stored.contains_key(*key));
            check.unexpected.extend(unexpected.cloned());
        });
        Ok(check)
    }
}
