//! The run's compactor and its history archive. Kubernetes' API server compacts etcd every few
//! minutes; here, every few simulated seconds, the compactor compacts the store to a recent
//! revision, so members compact while they serve and watchers that resume late meet "compacted"
//! and must list again, as a reflector does.
//!
//! Compaction throws away the history the checks need, so before each compaction the compactor
//! reads every key's history back into the run's `HistoryArchive`, and compacts no further than
//! what it archived. The checks read the archive, which then holds every version the store ever
//! had, compacted or not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use revkv_node::{KvBackend, MemberBackend, ReadConsistency};
use revkv_storage::{KeyRange, RangeRequest, Request};

use crate::check::linearizability::Histories;
use crate::cluster::Cluster;
use crate::history::Version;
use crate::trace::Trace;
use crate::workload::REQUEST_DEADLINE;

/// The most versions one key-history read returns; the read pages on.
const HISTORY_PAGE: u64 = 1_000;

/// The pause between two compactions, in milliseconds.
const COMPACTION_GAP_MILLIS: std::ops::RangeInclusive<u64> = 1_000..=4_000;

/// How many revisions below what it archived the compactor may stop.
const MAX_COMPACTION_LAG: u64 = 3;

/// How long one archiving pass may take before the round is given up.
const ARCHIVE_DEADLINE: Duration = Duration::from_secs(20);

/// Every version of every key the run read back, across compactions.
#[derive(Default)]
pub struct HistoryArchive {
    versions: Mutex<BTreeMap<String, BTreeMap<u64, Option<String>>>>,
}

impl HistoryArchive {
    fn versions(&self) -> MutexGuard<'_, BTreeMap<String, BTreeMap<u64, Option<String>>>> {
        self.versions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads each key's history, linearizably, from the oldest revision the member keeps, into
    /// the archive. Answers the lowest revision the reads were answered at: every version at or
    /// below it is archived.
    pub async fn read(&self, backend: &MemberBackend, keys: &[String]) -> Result<u64, String> {
        let mut archived_through = u64::MAX;
        for key in keys {
            let mut from = None;
            loop {
                let page = backend
                    .key_history(
                        key.clone().into_bytes(),
                        from,
                        HISTORY_PAGE,
                        ReadConsistency::Linearizable,
                    )
                    .await
                    .map_err(|error| format!("{key}: {error}"))?;
                let (header, page) = page;
                let mut versions = self.versions();
                let archived = versions.entry(key.clone()).or_default();
                for version in &page.versions {
                    let value = (!version.deleted)
                        .then(|| String::from_utf8_lossy(&version.kv.value).into_owned());
                    archived.insert(version.kv.mod_revision, value);
                }
                drop(versions);
                match page.next_from_revision {
                    Some(next) => from = Some(next),
                    None => {
                        archived_through = archived_through.min(header.revision);
                        break;
                    }
                }
            }
        }
        Ok(archived_through)
    }

    /// The archived histories of `keys`, oldest version first.
    pub fn histories(&self, keys: &[String]) -> Histories {
        let versions = self.versions();
        keys.iter()
            .map(|key| {
                let history = versions.get(key).into_iter().flatten();
                let history = history.map(|(revision, value)| Version {
                    revision: *revision,
                    value: value.clone(),
                });
                (key.clone(), history.collect())
            })
            .collect()
    }
}

/// What the compactor needs: the keys the run may have written (the workload's, and every key a
/// lease client sent a put for, registered before the put was sent), and the archive.
pub struct Compactor {
    pub cluster: Arc<Cluster>,
    pub archive: Arc<HistoryArchive>,
    pub keys_written: Arc<Mutex<BTreeSet<String>>>,
    /// Every revision a compaction was sent for, acknowledged or not (the watch check needs
    /// them: a watch that starts at a compact revision is not owed the deletes there).
    pub compactions_sent: Arc<Mutex<BTreeSet<u64>>>,
    pub trace: Trace,
}

impl Compactor {
    /// Archives and compacts until the trace's clock reaches `until`; answers how many
    /// compactions were acknowledged.
    pub async fn run(self, seed: u64, until: Duration) -> u64 {
        let mut random = StdRng::seed_from_u64(seed ^ 0xC0_4AC7);
        let mut compacted_to = 0;
        let mut compactions = 0;
        while self.trace.elapsed() < until {
            let gap = random.random_range(COMPACTION_GAP_MILLIS);
            tokio::time::sleep(Duration::from_millis(gap)).await;
            let members = self.cluster.running_ids();
            if members.is_empty() {
                continue;
            }
            let member = members[random.random_range(0..members.len())];
            let Some(backend) = self.cluster.backend(member) else {
                continue;
            };
            let lag = random.random_range(0..=MAX_COMPACTION_LAG);
            let archiving = self.archive_for_compaction(&backend, lag);
            let Some(target) = self.cluster.on_member(member, archiving).await else {
                let text = "compactor: the history could not be archived".to_owned();
                self.trace.record(Some(member), None, text);
                continue;
            };
            if target <= compacted_to {
                continue;
            }
            self.compactions_sent
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(target);
            let compact = self
                .cluster
                .on_member(member, backend.write(Request::Compact { revision: target }));
            let answer = tokio::time::timeout(REQUEST_DEADLINE, compact).await;
            drop(backend);
            let outcome = match answer {
                Ok(Ok(_)) => {
                    compacted_to = target;
                    compactions += 1;
                    "done".to_owned()
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer in {REQUEST_DEADLINE:?}"),
            };
            let text = format!("compaction to revision {target}: {outcome}");
            self.trace.record(Some(member), None, text);
        }
        compactions
    }

    /// Archives every key written so far and answers the revision it is safe to compact to
    /// (`lag` below what was archived), or `None` when a read failed.
    ///
    /// The current revision is read before the list of keys is taken: a key missing from the list
    /// had its put sent after that, so the put's revision is above it, and compacting no further
    /// cannot lose a version the archive lacks.
    async fn archive_for_compaction(&self, backend: &MemberBackend, lag: u64) -> Option<u64> {
        let probe = RangeRequest::of(KeyRange::single(b"compactor-probe"));
        let read = backend.read(probe, ReadConsistency::Linearizable);
        let before_listing = tokio::time::timeout(REQUEST_DEADLINE, read)
            .await
            .ok()?
            .ok()?
            .header
            .revision;
        let keys: Vec<String> = self
            .keys_written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .cloned()
            .collect();
        let archived = self.archive.read(backend, &keys);
        let archived = tokio::time::timeout(ARCHIVE_DEADLINE, archived)
            .await
            .ok()?
            .ok()?;
        Some(before_listing.min(archived).saturating_sub(lag))
    }
}
