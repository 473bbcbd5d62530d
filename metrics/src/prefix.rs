//! Bounded `prefix` labels: a key's leading path segments, with every prefix beyond the first
//! `max_prefixes` distinct ones folded into `other`, so a workload with millions of keys (or an
//! attacker choosing key names) cannot grow the label set without limit.
//!
//! A prefix is the key up to (not including) the `depth`-th `/` that ends a segment. A leading `/`
//! belongs to the first segment, so Kubernetes-style keys keep it: with depth 1, `app/config` is
//! `app` and `/registry/pods/default/web` is `/registry`; with depth 2 the latter is
//! `/registry/pods`. A key with fewer segments is its own prefix. Keys that are not UTF-8 are
//! shown lossily, and a prefix longer than `MAX_PREFIX_LABEL_BYTES` is cut at a character boundary.

use std::collections::HashSet;
use std::sync::RwLock;

/// The label every prefix beyond the first `max_prefixes` distinct ones is counted under.
pub const OTHER_PREFIX: &str = "other";

/// The label of requests that name no key (for example a client retry of `GET /v1/status`).
pub const NO_KEY_PREFIX: &str = "none";

/// The longest prefix label kept, in bytes; longer prefixes are cut.
pub const MAX_PREFIX_LABEL_BYTES: usize = 128;

/// How keys become `prefix` labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixLabelConfig {
    /// How many leading path segments make a prefix (at least 1).
    pub depth: usize,
    /// How many distinct prefixes get their own label; later ones are counted as `other`.
    pub max_prefixes: usize,
}

impl Default for PrefixLabelConfig {
    fn default() -> Self {
        PrefixLabelConfig {
            depth: 1,
            max_prefixes: 100,
        }
    }
}

/// Turns keys into bounded `prefix` labels. The first `max_prefixes` distinct prefixes seen keep
/// their name for the life of the member (a Prometheus series must not change its labels), and
/// every later one is `other`.
#[derive(Debug)]
pub struct PrefixFolder {
    config: PrefixLabelConfig,
    admitted: RwLock<HashSet<String>>,
}

impl PrefixFolder {
    pub fn new(config: PrefixLabelConfig) -> Self {
        PrefixFolder {
            config: PrefixLabelConfig {
                depth: config.depth.max(1),
                ..config
            },
            admitted: RwLock::new(HashSet::new()),
        }
    }

    /// The `prefix` label for `key`: its prefix if admitted (or admissible), otherwise `other`.
    pub fn label_for_key(&self, key: &[u8]) -> String {
        let prefix = key_prefix(key, self.config.depth);
        if self.is_admitted(&prefix) || self.admit(&prefix) {
            prefix
        } else {
            OTHER_PREFIX.to_string()
        }
    }

    /// How many distinct prefixes have their own label so far.
    pub fn admitted_count(&self) -> usize {
        self.admitted
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    fn is_admitted(&self, prefix: &str) -> bool {
        self.admitted
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(prefix)
    }

    /// Admits `prefix` if there is still room; answers whether it is admitted now.
    fn admit(&self, prefix: &str) -> bool {
        let mut admitted = self
            .admitted
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if admitted.contains(prefix) {
            return true;
        }
        if admitted.len() >= self.config.max_prefixes {
            return false;
        }
        admitted.insert(prefix.to_string())
    }
}

/// The first `depth` path segments of `key` (see the module documentation), before folding.
pub fn key_prefix(key: &[u8], depth: usize) -> String {
    let end = prefix_end(key, depth.max(1));
    let text = String::from_utf8_lossy(&key[..end]);
    cut_at_char_boundary(&text, MAX_PREFIX_LABEL_BYTES).to_string()
}

/// The byte position where the prefix of `depth` segments ends.
fn prefix_end(key: &[u8], depth: usize) -> usize {
    // A leading '/' is part of the first segment, not a separator.
    let search_from = usize::from(key.first() == Some(&b'/'));
    let mut segments_seen = 0;
    for (position, byte) in key.iter().enumerate().skip(search_from) {
        if *byte == b'/' {
            segments_seen += 1;
            if segments_seen == depth {
                return position;
            }
        }
    }
    key.len()
}

fn cut_at_char_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(depth: usize, max_prefixes: usize) -> PrefixFolder {
        PrefixFolder::new(PrefixLabelConfig {
            depth,
            max_prefixes,
        })
    }

    #[test]
    fn the_first_segment_is_the_prefix_at_depth_one() {
        assert_eq!(key_prefix(b"app/config", 1), "app");
        assert_eq!(key_prefix(b"app/a/b/c", 1), "app");
        assert_eq!(key_prefix(b"counter", 1), "counter");
        assert_eq!(key_prefix(b"app/", 1), "app");
    }

    #[test]
    fn a_leading_slash_stays_with_the_first_segment() {
        assert_eq!(key_prefix(b"/registry/pods/default/web", 1), "/registry");
        assert_eq!(
            key_prefix(b"/registry/pods/default/web", 2),
            "/registry/pods"
        );
        assert_eq!(key_prefix(b"/", 1), "/");
    }

    #[test]
    fn deeper_prefixes_take_more_segments_and_short_keys_are_their_own_prefix() {
        assert_eq!(key_prefix(b"a/b/c/d", 2), "a/b");
        assert_eq!(key_prefix(b"a/b/c/d", 3), "a/b/c");
        assert_eq!(key_prefix(b"a/b", 5), "a/b");
    }

    #[test]
    fn depth_zero_is_treated_as_one() {
        assert_eq!(key_prefix(b"a/b", 0), "a");
        assert_eq!(folder(0, 10).label_for_key(b"a/b"), "a");
    }

    #[test]
    fn non_utf8_keys_are_shown_lossily_and_long_prefixes_are_cut() {
        assert_eq!(key_prefix(&[0xff, b'/', b'x'], 1), "\u{fffd}");
        let long = "é".repeat(100);
        let label = key_prefix(long.as_bytes(), 1);
        assert!(label.len() <= MAX_PREFIX_LABEL_BYTES);
        assert!(label.chars().all(|character| character == 'é'));
    }

    #[test]
    fn prefixes_beyond_the_limit_fold_into_other() {
        let folder = folder(1, 2);
        assert_eq!(folder.label_for_key(b"a/1"), "a");
        assert_eq!(folder.label_for_key(b"b/1"), "b");
        assert_eq!(folder.label_for_key(b"c/1"), OTHER_PREFIX);
        assert_eq!(folder.label_for_key(b"d/1"), OTHER_PREFIX);
        assert_eq!(folder.admitted_count(), 2);
    }

    #[test]
    fn admitted_prefixes_keep_their_label_after_the_limit_is_reached() {
        let folder = folder(1, 1);
        assert_eq!(folder.label_for_key(b"hot/1"), "hot");
        assert_eq!(folder.label_for_key(b"cold/1"), OTHER_PREFIX);
        assert_eq!(folder.label_for_key(b"hot/2"), "hot");
    }

    #[test]
    fn a_limit_of_zero_folds_everything() {
        assert_eq!(folder(1, 0).label_for_key(b"a/b"), OTHER_PREFIX);
    }

    #[test]
    fn concurrent_callers_never_admit_more_than_the_limit() {
        let folder = std::sync::Arc::new(folder(1, 5));
        let threads: Vec<_> = (0..8)
            .map(|thread| {
                let folder = folder.clone();
                std::thread::spawn(move || {
                    for key in 0..50 {
                        folder.label_for_key(format!("p{}/{thread}", key % 20).as_bytes());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(folder.admitted_count(), 5);
    }
}
