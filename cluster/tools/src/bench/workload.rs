//! What each workload does: the operations a client task issues, in what order, on which keys and
//! with which values. Nothing here knows about HTTP or about which system is measured.
//!
//! Keys are built only from ASCII letters, digits, `-` and `/`, so they go into URL paths and JSON
//! strings as they are, and are the same bytes for revkv and etcd.

use std::sync::Arc;

use clap::ValueEnum;
use serde::Serialize;

/// The workload named on the command line.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// Writes of distinct keys.
    Put,
    /// Reads of pre-written keys.
    Get,
    /// Increments of a few hot counters, read-modify-write with retry-on-conflict.
    Cas,
    /// Event delivery latency with `--watchers` streams on one prefix (see `watch_latency`).
    Watch,
    /// No measurement: `--watchers` watches held, `--stalled-percent` of them never read, while
    /// another client writes (see `held_watches`).
    #[value(name = "hold-watches")]
    #[serde(rename = "hold-watches")]
    HoldWatches,
}

/// How a read is served: through the leader's read index, or from the answering member's state.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadConsistency {
    Linearizable,
    Serializable,
}

impl ReadConsistency {
    /// The word revkv's `consistency=` parameter takes.
    pub fn as_query_value(self) -> &'static str {
        match self {
            ReadConsistency::Linearizable => "linearizable",
            ReadConsistency::Serializable => "serializable",
        }
    }
}

/// A workload with its parameters. `Watch { watchers, .. }` (issue 6) is not built yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// Every operation writes a key no other operation of the run writes.
    Put { value_size: usize },
    /// Every operation reads one of `key_count` keys, chosen at random, written before the run.
    Get {
        consistency: ReadConsistency,
        key_count: u64,
        value_size: usize,
    },
    /// Every operation adds 1 to one of `hot_keys` counters, chosen at random: read the counter,
    /// write value + 1 only if its revision is unchanged, retry on conflict (client-go's
    /// `DEFAULT_RETRY`: at most 5 attempts).
    Cas { hot_keys: u64 },
}

/// One request's worth of work, independent of the target system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    Put {
        key: String,
        value: Arc<[u8]>,
    },
    Get {
        key: String,
        consistency: ReadConsistency,
    },
    /// Add 1 to the counter at `key` (several requests: reads and conditional writes).
    Increment {
        key: String,
    },
}

impl Workload {
    pub fn kind(&self) -> WorkloadKind {
        match self {
            Workload::Put { .. } => WorkloadKind::Put,
            Workload::Get { .. } => WorkloadKind::Get,
            Workload::Cas { .. } => WorkloadKind::Cas,
        }
    }

    /// One line saying what the workload does, for the report.
    pub fn describe(&self) -> String {
        match self {
            Workload::Put { value_size } => {
                format!("put: distinct keys, {value_size}-byte values")
            }
            Workload::Get {
                consistency,
                key_count,
                ..
            } => {
                let keys = if *key_count == 1 {
                    "one key".to_string()
                } else {
                    format!("{key_count} random keys")
                };
                format!("get: {} reads of {keys}", consistency.as_query_value())
            }
            Workload::Cas { hot_keys } => {
                format!("cas: increments of {hot_keys} hot key(s) with retry-on-conflict")
            }
        }
    }

    /// The writes that must happen before the measured part (the keys a get workload reads).
    pub fn setup_operations(&self) -> Vec<Operation> {
        match self {
            Workload::Put { .. } => Vec::new(),
            Workload::Cas { hot_keys } => (0..*hot_keys)
                .map(|index| Operation::Put {
                    key: cas_key(index),
                    value: Arc::from(&b"0"[..]),
                })
                .collect(),
            Workload::Get {
                key_count,
                value_size,
                ..
            } => {
                let value = value_of_size(*value_size);
                (0..*key_count)
                    .map(|index| Operation::Put {
                        key: read_key(index),
                        value: value.clone(),
                    })
                    .collect()
            }
        }
    }

    /// The operation source of client task `client_index` in the run tagged `run_tag`.
    pub fn operations_for_client(&self, client_index: usize, run_tag: &str) -> OperationSource {
        let value = match self {
            Workload::Put { value_size } => value_of_size(*value_size),
            Workload::Get { .. } | Workload::Cas { .. } => value_of_size(0),
        };
        OperationSource {
            workload: self.clone(),
            key_prefix: format!("bench/put/{run_tag}/{client_index:04}"),
            value,
            next_sequence: 0,
            random: SplitMix64::new(seed_for_client(run_tag, client_index)),
        }
    }
}

/// The endless sequence of operations of one client task (the driver decides when to stop).
#[derive(Debug, Clone)]
pub struct OperationSource {
    workload: Workload,
    key_prefix: String,
    value: Arc<[u8]>,
    next_sequence: u64,
    random: SplitMix64,
}

impl OperationSource {
    pub fn next_operation(&mut self) -> Operation {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        match &self.workload {
            Workload::Put { .. } => Operation::Put {
                key: format!("{}/{sequence:010}", self.key_prefix),
                value: self.value.clone(),
            },
            Workload::Get {
                consistency,
                key_count,
                ..
            } => Operation::Get {
                key: read_key(self.random.below(*key_count)),
                consistency: *consistency,
            },
            Workload::Cas { hot_keys } => Operation::Increment {
                key: cas_key(self.random.below(*hot_keys)),
            },
        }
    }
}

/// The name of the `index`-th key of the get workload (the same in every run, so a second run on
/// the same cluster overwrites rather than adds).
pub fn read_key(index: u64) -> String {
    format!("bench/get/{index:08}")
}

/// The name of the `index`-th counter of the cas workload (reset to 0 by every run's setup).
pub fn cas_key(index: u64) -> String {
    format!("bench/cas/{index:04}")
}

/// A value of `size` printable ASCII bytes (so it is a valid JSON string as it is).
pub fn value_of_size(size: usize) -> Arc<[u8]> {
    (0..size)
        .map(|position| b'a' + (position % 26) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn seed_for_client(run_tag: &str, client_index: usize) -> u64 {
    run_tag.bytes().fold(client_index as u64, |seed, byte| {
        seed.rotate_left(8) ^ u64::from(byte)
    })
}

/// SplitMix64: a small, fast, seedable generator, good enough to pick keys uniformly.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = self.state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^ (mixed >> 31)
    }

    /// A number in `0..bound` (`bound` > 0), by multiply-shift (bias below 2^-32 for our bounds).
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn put_keys_are_distinct_within_and_across_clients() {
        let workload = Workload::Put { value_size: 8 };
        let mut seen = HashSet::new();
        for client_index in 0..4 {
            let mut source = workload.operations_for_client(client_index, "run1");
            for _ in 0..100 {
                let Operation::Put { key, value } = source.next_operation() else {
                    panic!("a put workload issues puts");
                };
                assert_eq!(&*value, b"abcdefgh");
                assert!(seen.insert(key), "a key was written twice");
            }
        }
        assert_eq!(seen.len(), 400);
        assert!(seen.contains("bench/put/run1/0003/0000000099"));
    }

    #[test]
    fn get_reads_only_the_keys_setup_wrote_and_with_the_chosen_consistency() {
        let workload = Workload::Get {
            consistency: ReadConsistency::Serializable,
            key_count: 10,
            value_size: 4,
        };
        let written: HashSet<String> = workload
            .setup_operations()
            .into_iter()
            .map(|operation| match operation {
                Operation::Put { key, value } => {
                    assert_eq!(value.len(), 4);
                    key
                }
                Operation::Get { .. } | Operation::Increment { .. } => {
                    panic!("setup only writes")
                }
            })
            .collect();
        assert_eq!(written.len(), 10);
        let mut read = HashSet::new();
        let mut source = workload.operations_for_client(0, "run1");
        for _ in 0..1000 {
            let Operation::Get { key, consistency } = source.next_operation() else {
                panic!("a get workload issues gets");
            };
            assert_eq!(consistency, ReadConsistency::Serializable);
            assert!(written.contains(&key), "{key} was never written");
            read.insert(key);
        }
        assert_eq!(
            read.len(),
            10,
            "1000 random reads of 10 keys touch them all"
        );
    }

    #[test]
    fn cas_resets_its_hot_keys_and_increments_only_them() {
        let workload = Workload::Cas { hot_keys: 2 };
        let setup = workload.setup_operations();
        assert_eq!(setup.len(), 2);
        let mut source = workload.operations_for_client(3, "run1");
        for _ in 0..100 {
            let Operation::Increment { key } = source.next_operation() else {
                panic!("a cas workload issues increments");
            };
            assert!(key == cas_key(0) || key == cas_key(1), "{key}");
        }
    }

    #[test]
    fn a_put_workload_needs_no_setup() {
        assert!(Workload::Put { value_size: 1 }
            .setup_operations()
            .is_empty());
    }

    #[test]
    fn values_are_printable_ascii_of_the_requested_size() {
        let value = value_of_size(300);
        assert_eq!(value.len(), 300);
        assert!(value.iter().all(u8::is_ascii_lowercase));
    }

    #[test]
    fn random_picks_stay_below_the_bound() {
        let mut random = SplitMix64::new(7);
        assert!((0..10_000).all(|_| random.below(3) < 3));
        assert_eq!(random.below(1), 0);
    }

    #[test]
    fn descriptions_name_the_parameters() {
        assert_eq!(
            Workload::Put { value_size: 256 }.describe(),
            "put: distinct keys, 256-byte values"
        );
        let get = Workload::Get {
            consistency: ReadConsistency::Linearizable,
            key_count: 1000,
            value_size: 256,
        };
        assert_eq!(
            get.describe(),
            "get: linearizable reads of 1000 random keys"
        );
    }
}
