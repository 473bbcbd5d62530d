//! How a txn's compares are written in log entries and peer messages.
//!
//! A compare was written as its key, its target and its op before compares over a key range
//! existed, and log entries of that shape stay in the log until they are purged. So the codec
//! keeps that layout, and a range compare's end travels inside a target variant appended after
//! the old ones (`TargetRecord::OverRange`): a single-key compare keeps its bytes exactly, every
//! entry written before decodes unchanged, and the in-memory `Compare` has the plain shape
//! (`range_end` beside `key`). The same pattern as `MemberNodeRecord` in the raft crate; the serde
//! implementations live here rather than as derives on `Compare`, so `types.rs` does not import
//! the codec (which imports `types.rs`).
//!
//! Serializing borrows the compare (`CompareRecordRef`), so encoding an entry copies no key.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::types::{Compare, CompareOp, CompareTarget, RangeEnd};

/// A compare as it is decoded.
#[derive(Deserialize)]
struct CompareRecord {
    #[serde(with = "serde_bytes")]
    key: Vec<u8>,
    target: TargetRecord,
    op: CompareOp,
}

/// `CompareTarget`'s variants in their order, then the range form.
#[derive(Deserialize)]
enum TargetRecord {
    Value(#[serde(with = "serde_bytes")] Vec<u8>),
    Version(u64),
    CreateRevision(u64),
    ModRevision(u64),
    Lease(i64),
    /// A compare over `[key, end)`; never written with `RangeEnd::Single`.
    OverRange(RangeEnd, CompareTarget),
}

/// `CompareRecord`, borrowed, for encoding.
#[derive(Serialize)]
#[serde(rename = "CompareRecord")]
struct CompareRecordRef<'a> {
    #[serde(with = "serde_bytes")]
    key: &'a [u8],
    target: TargetRecordRef<'a>,
    op: CompareOp,
}

/// `TargetRecord`, borrowed, for encoding.
#[derive(Serialize)]
#[serde(rename = "TargetRecord")]
enum TargetRecordRef<'a> {
    Value(#[serde(with = "serde_bytes")] &'a [u8]),
    Version(u64),
    CreateRevision(u64),
    ModRevision(u64),
    Lease(i64),
    OverRange(&'a RangeEnd, &'a CompareTarget),
}

impl From<CompareRecord> for Compare {
    fn from(record: CompareRecord) -> Compare {
        let (range_end, target) = match record.target {
            TargetRecord::Value(value) => (RangeEnd::Single, CompareTarget::Value(value)),
            TargetRecord::Version(number) => (RangeEnd::Single, CompareTarget::Version(number)),
            TargetRecord::CreateRevision(number) => {
                (RangeEnd::Single, CompareTarget::CreateRevision(number))
            }
            TargetRecord::ModRevision(number) => {
                (RangeEnd::Single, CompareTarget::ModRevision(number))
            }
            TargetRecord::Lease(id) => (RangeEnd::Single, CompareTarget::Lease(id)),
            TargetRecord::OverRange(end, target) => (end, target),
        };
        Compare {
            key: record.key,
            range_end,
            target,
            op: record.op,
        }
    }
}

impl<'de> Deserialize<'de> for Compare {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        CompareRecord::deserialize(deserializer).map(Compare::from)
    }
}

impl Serialize for Compare {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let target = match (&self.range_end, &self.target) {
            (RangeEnd::Single, CompareTarget::Value(value)) => TargetRecordRef::Value(value),
            (RangeEnd::Single, CompareTarget::Version(number)) => TargetRecordRef::Version(*number),
            (RangeEnd::Single, CompareTarget::CreateRevision(number)) => {
                TargetRecordRef::CreateRevision(*number)
            }
            (RangeEnd::Single, CompareTarget::ModRevision(number)) => {
                TargetRecordRef::ModRevision(*number)
            }
            (RangeEnd::Single, CompareTarget::Lease(id)) => TargetRecordRef::Lease(*id),
            (end, target) => TargetRecordRef::OverRange(end, target),
        };
        CompareRecordRef {
            key: &self.key,
            target,
            op: self.op,
        }
        .serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};
    use crate::types::{
        DeleteRangeRequest, KeepCurrent, KeyRange, PutRequest, RangeRequest, Request, TxnOp,
        TxnRequest,
    };

    /// `Compare` as it was declared before range compares: what entries in old logs hold.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct CompareBeforeRanges {
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        target: CompareTarget,
        op: CompareOp,
    }

    #[test]
    fn a_single_key_compare_keeps_the_bytes_it_had_before_range_compares() {
        let targets = [
            CompareTarget::Value(b"v".to_vec()),
            CompareTarget::Version(3),
            CompareTarget::CreateRevision(4),
            CompareTarget::ModRevision(5),
            CompareTarget::Lease(-6),
        ];
        for target in targets {
            let old = CompareBeforeRanges {
                key: b"k".to_vec(),
                target: target.clone(),
                op: CompareOp::Greater,
            };
            let new = Compare::of_key("k", target, CompareOp::Greater);
            let old_bytes = encode(&old).unwrap();
            assert_eq!(encode(&new).unwrap(), old_bytes);
            assert_eq!(decode::<Compare>(&old_bytes).unwrap(), new);
        }
    }

    #[test]
    fn a_range_compare_round_trips_and_an_old_reader_refuses_it_whole() {
        for end in [RangeEnd::Until(b"l".to_vec()), RangeEnd::Unbounded] {
            let compare = Compare {
                key: b"k".to_vec(),
                range_end: end,
                target: CompareTarget::ModRevision(7),
                op: CompareOp::Less,
            };
            let bytes = encode(&compare).unwrap();
            assert_eq!(decode::<Compare>(&bytes).unwrap(), compare);
            // A build from before range compares does not misread it as a single-key compare.
            assert!(decode::<CompareBeforeRanges>(&bytes).is_err());
        }
    }

    /// A txn entry of the old shapes, written by hand as the codec wrote it before nested txns:
    /// format byte 1, `Request::Txn` (variant 2), one compare, one put in success, one get in
    /// failure. It must decode to the same request today.
    #[test]
    fn a_txn_entry_written_before_nested_txns_still_decodes() {
        let txn = Request::Txn(TxnRequest {
            compare: vec![Compare::of_key(
                "a",
                CompareTarget::ModRevision(2),
                CompareOp::Equal,
            )],
            success: vec![TxnOp::Put(PutRequest {
                key: b"a".to_vec(),
                value: b"x".to_vec(),
                lease: 0,
                prev_kv: false,
            })],
            failure: vec![TxnOp::Get(RangeRequest::of(KeyRange::single("a")))],
        });
        let written_before: Vec<u8> = vec![
            1, // format version
            2, // Request::Txn
            1, 1, b'a', 3, 2, 0, // one compare: key "a", ModRevision(2), Equal
            1, 0, 1, b'a', 1, b'x', 0, 0, // one op: Put { "a", "x", lease 0, prev_kv false }
            1, 2, 1, 1, b'a', 0, 0, 0, 0, 0, 0, // one op: Get of "a", every option unset
        ];
        assert_eq!(encode(&txn).unwrap(), written_before);
        assert_eq!(decode::<Request>(&written_before).unwrap(), txn);
    }

    #[test]
    fn nested_txns_and_keeping_puts_round_trip() {
        let nested = TxnRequest {
            compare: vec![Compare {
                key: b"a".to_vec(),
                range_end: RangeEnd::Until(b"b".to_vec()),
                target: CompareTarget::Version(0),
                op: CompareOp::Greater,
            }],
            success: vec![TxnOp::PutKeeping {
                put: PutRequest {
                    key: b"a1".to_vec(),
                    value: Vec::new(),
                    lease: 9,
                    prev_kv: true,
                },
                keep: KeepCurrent {
                    value: true,
                    lease: false,
                },
            }],
            failure: vec![TxnOp::DeleteRange(DeleteRangeRequest {
                range: KeyRange::prefix("a"),
                prev_kv: false,
            })],
        };
        let txn = Request::Txn(TxnRequest {
            compare: Vec::new(),
            success: vec![TxnOp::Txn(nested)],
            failure: Vec::new(),
        });
        let bytes = encode(&txn).unwrap();
        assert_eq!(decode::<Request>(&bytes).unwrap(), txn);
    }
}
