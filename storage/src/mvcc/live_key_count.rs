//! Counting the keys live at a history's end while the history is only checked, for `revkv
//! snapshot status` on an etcd file, whose bbolt history (unlike a revkv stream's header) does not
//! say how many keys are live.
//!
//! Records arrive in revision order, so a key is live when its last record is not a tombstone. The
//! counter keeps one 128-bit xxh3 hash per live key rather than the key itself: about 16 bytes
//! (plus the set's own overhead) per live key whatever the key's length, and a collision between
//! two live keys (which would undercount by one) is as likely as a 128-bit hash collision.

use std::collections::HashSet;

use xxhash_rust::xxh3::xxh3_128;

use crate::codec::VersionRecord;

/// Which keys are live so far, as hashes; `snapshot_frames` feeds it every record it checks.
#[derive(Debug, Default)]
pub(crate) struct LiveKeyCounter {
    live_key_hashes: HashSet<u128>,
}

impl LiveKeyCounter {
    /// Takes in the next record of the history, in revision order.
    pub(crate) fn observe(&mut self, record: &VersionRecord) {
        let key_hash = xxh3_128(&record.key);
        if record.tombstone {
            self.live_key_hashes.remove(&key_hash);
        } else {
            self.live_key_hashes.insert(key_hash);
        }
    }

    /// Keys whose last record so far is a put.
    pub(crate) fn live_keys(&self) -> u64 {
        self.live_key_hashes.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use crate::codec::{SnapshotFrame, VersionRecord};
    use crate::error::Error;
    use crate::mvcc::snapshot_frames::{inspect_foreign, ForeignHistory};

    fn record(revision: u64, key: &str, version: u64, tombstone: bool) -> SnapshotFrame {
        SnapshotFrame::Record {
            revision,
            position: 0,
            record: VersionRecord {
                key: key.as_bytes().to_vec(),
                value: if tombstone { Vec::new() } else { b"v".to_vec() },
                create_revision: if tombstone { 0 } else { revision + 1 - version },
                version: if tombstone { 0 } else { version },
                lease: 0,
                tombstone,
            },
        }
    }

    /// A history with an overwrite, a delete, a delete then a re-create, and a key whose create
    /// record was compacted away (it first shows at version 3): three keys are live at its end.
    #[test]
    fn a_foreign_history_counts_the_keys_whose_last_record_is_a_put() {
        let frames = vec![
            record(2, "kept-from-before-the-compaction", 3, false),
            record(3, "overwritten", 1, false),
            record(4, "overwritten", 2, false),
            record(5, "deleted", 1, false),
            record(6, "deleted", 0, true),
            record(7, "recreated", 1, false),
            record(8, "recreated", 0, true),
            record(9, "recreated", 1, false),
        ];
        let history = ForeignHistory {
            current_revision: 9,
            compact_revision: 2,
        };
        let summary = inspect_foreign::<Error>(history, |emit| {
            frames
                .into_iter()
                .try_for_each(|frame| emit(frame).map_err(Error::from))
        })
        .expect("a well-formed history");
        assert_eq!(summary.live_keys, Some(3));
        assert_eq!(summary.records, 8);
    }
}
