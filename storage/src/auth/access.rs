//! The access model of etcd's auth (issue 15): users hold roles, roles hold permissions, and a
//! permission grants reading, writing or both on one key, a key range or a prefix. A request is
//! allowed only when the user's permissions of the needed kind cover *every* key it touches: a
//! range read over `[a, d)` needs permissions whose ranges, merged, contain all of `[a, d)`, as
//! etcd's `isRangeOpPermitted` decides over its merged interval tree.
//!
//! This module is plain data and pure functions over it, with no storage or network: the
//! replicated store keeps these records, and the front-ends ask [`AccessRules::permits`]. The
//! `root` role may do everything.

use serde::{Deserialize, Serialize};

use crate::key_range::{KeyRange, RangeEnd};

/// The role that may do everything, including auth administration, as in etcd.
pub const ROOT_ROLE: &str = "root";

/// What a permission grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PermissionKind {
    Read,
    Write,
    ReadWrite,
}

impl PermissionKind {
    /// True when this permission grants `access`.
    pub fn grants(self, access: Access) -> bool {
        matches!(
            (self, access),
            (PermissionKind::ReadWrite, _)
                | (PermissionKind::Read, Access::Read)
                | (PermissionKind::Write, Access::Write)
        )
    }
}

/// The kind of access a request needs on a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// One permission of a role: `kind` on every key of `keys`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permission {
    pub kind: PermissionKind,
    pub keys: KeyRange,
}

/// What one user may do: the permissions of all its roles, merged per access kind into sorted,
/// disjoint half-open intervals, so that a check is one binary search.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessRules {
    is_root: bool,
    readable: MergedRanges,
    writable: MergedRanges,
}

impl AccessRules {
    /// The rules of a user holding `roles`, each a role name and its permissions.
    pub fn of_roles<'a>(roles: impl IntoIterator<Item = (&'a str, &'a [Permission])>) -> Self {
        let mut is_root = false;
        let (mut readable, mut writable) = (Vec::new(), Vec::new());
        for (name, permissions) in roles {
            is_root |= name == ROOT_ROLE;
            for permission in permissions {
                let interval = Interval::of(&permission.keys);
                if permission.kind.grants(Access::Read) {
                    readable.push(interval.clone());
                }
                if permission.kind.grants(Access::Write) {
                    writable.push(interval);
                }
            }
        }
        AccessRules {
            is_root,
            readable: MergedRanges::merge(readable),
            writable: MergedRanges::merge(writable),
        }
    }

    /// True for a user holding the `root` role.
    pub fn is_root(&self) -> bool {
        self.is_root
    }

    /// True when these rules allow `access` to every key of `keys`.
    pub fn permits(&self, access: Access, keys: &KeyRange) -> bool {
        if self.is_root {
            return true;
        }
        let merged = match access {
            Access::Read => &self.readable,
            Access::Write => &self.writable,
        };
        merged.covers(&Interval::of(keys))
    }
}

/// A half-open interval of keys `[start, end)`; `end` `None` means unbounded above.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Interval {
    start: Vec<u8>,
    end: Option<Vec<u8>>,
}

impl Interval {
    fn of(keys: &KeyRange) -> Interval {
        let end = match &keys.end {
            RangeEnd::Unbounded => None,
            _ => keys.exclusive_end(),
        };
        Interval {
            start: keys.start.clone(),
            end,
        }
    }

    fn is_empty(&self) -> bool {
        self.end.as_ref().is_some_and(|end| *end <= self.start)
    }
}

/// Sorted, disjoint, non-adjacent intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MergedRanges {
    intervals: Vec<Interval>,
}

impl MergedRanges {
    /// Merges overlapping and touching intervals (`[a, c)` and `[c, e)` become `[a, e)`).
    fn merge(mut intervals: Vec<Interval>) -> MergedRanges {
        intervals.retain(|interval| !interval.is_empty());
        intervals.sort_by(|left, right| left.start.cmp(&right.start));
        let mut merged: Vec<Interval> = Vec::with_capacity(intervals.len());
        for interval in intervals {
            match merged.last_mut() {
                Some(last) if reaches(&last.end, &interval.start) => {
                    last.end = later_end(last.end.take(), interval.end);
                }
                _ => merged.push(interval),
            }
        }
        let ranges = MergedRanges { intervals: merged };
        debug_assert!(ranges.is_sorted_and_disjoint());
        ranges
    }

    /// True when one merged interval contains all of `wanted` (an empty `wanted` is covered).
    fn covers(&self, wanted: &Interval) -> bool {
        if wanted.is_empty() {
            return true;
        }
        // The last interval starting at or before `wanted.start` is the only candidate: merged
        // intervals are disjoint and not adjacent, so no union of several can cover more.
        let candidates = self
            .intervals
            .partition_point(|interval| interval.start <= wanted.start);
        let Some(candidate) = candidates
            .checked_sub(1)
            .map(|index| &self.intervals[index])
        else {
            return false;
        };
        match (&candidate.end, &wanted.end) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(have), Some(want)) => want <= have,
        }
    }

    fn is_sorted_and_disjoint(&self) -> bool {
        self.intervals
            .windows(2)
            .all(|pair| !reaches(&pair[0].end, &pair[1].start))
    }
}

/// True when an interval ending at `end` touches or overlaps one starting at `start`.
fn reaches(end: &Option<Vec<u8>>, start: &[u8]) -> bool {
    end.as_ref().is_none_or(|end| end.as_slice() >= start)
}

fn later_end(left: Option<Vec<u8>>, right: Option<Vec<u8>>) -> Option<Vec<u8>> {
    match (left, right) {
        (Some(left), Some(right)) => Some(left.max(right)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(keys: KeyRange) -> Permission {
        Permission {
            kind: PermissionKind::Read,
            keys,
        }
    }

    fn rules(permissions: &[Permission]) -> AccessRules {
        AccessRules::of_roles([("reader", permissions)])
    }

    #[test]
    fn a_range_needs_every_key_covered_even_across_adjacent_permissions() {
        let rules = rules(&[
            read(KeyRange::between("a", "c")),
            read(KeyRange::between("c", "e")),
        ]);
        assert!(rules.permits(Access::Read, &KeyRange::between("a", "e")));
        assert!(rules.permits(Access::Read, &KeyRange::single("d")));
        assert!(!rules.permits(Access::Read, &KeyRange::between("a", "f")));
        assert!(!rules.permits(Access::Read, &KeyRange::prefix("")));
        assert!(!rules.permits(Access::Write, &KeyRange::single("b")));
    }

    #[test]
    fn a_gap_between_permissions_refuses_a_range_over_it() {
        let rules = rules(&[
            read(KeyRange::between("a", "c")),
            read(KeyRange::between("d", "f")),
        ]);
        assert!(!rules.permits(Access::Read, &KeyRange::between("b", "e")));
        assert!(!rules.permits(Access::Read, &KeyRange::single("c")));
        assert!(!rules.permits(Access::Read, &KeyRange::single("c\u{0}")));
    }

    #[test]
    fn a_prefix_permission_covers_its_keys_and_nothing_past_them() {
        let rules = rules(&[Permission {
            kind: PermissionKind::ReadWrite,
            keys: KeyRange::prefix("app/"),
        }]);
        assert!(rules.permits(Access::Write, &KeyRange::single("app/x")));
        assert!(rules.permits(Access::Read, &KeyRange::prefix("app/sub/")));
        assert!(!rules.permits(Access::Read, &KeyRange::prefix("app")));
        assert!(!rules.permits(Access::Write, &KeyRange::single("apq")));
    }

    #[test]
    fn root_may_do_everything_and_no_roles_may_do_nothing() {
        let root = AccessRules::of_roles([(ROOT_ROLE, &[][..])]);
        assert!(root.is_root());
        assert!(root.permits(Access::Write, &KeyRange::prefix("")));
        let nobody = AccessRules::of_roles([]);
        assert!(!nobody.permits(Access::Read, &KeyRange::single("a")));
    }

    /// Every key a short key over a small alphabet can be, for the brute-force model.
    fn all_short_keys() -> Vec<Vec<u8>> {
        let alphabet = [b'a', b'b', b'c', b'd'];
        let mut keys = vec![Vec::new()];
        for length in 1..=3 {
            let mut layer: Vec<Vec<u8>> = vec![Vec::new()];
            for _ in 0..length {
                layer = layer
                    .into_iter()
                    .flat_map(|key| {
                        alphabet.iter().map(move |byte| {
                            let mut next = key.clone();
                            next.push(*byte);
                            next
                        })
                    })
                    .collect();
            }
            keys.extend(layer);
        }
        keys
    }

    fn short_key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![Just(b'a'), Just(b'b'), Just(b'c'), Just(b'd')],
            0..3,
        )
    }

    fn key_range() -> impl Strategy<Value = KeyRange> {
        prop_oneof![
            short_key().prop_map(KeyRange::single),
            (short_key(), short_key()).prop_map(|(start, end)| KeyRange::between(start, end)),
            short_key().prop_map(KeyRange::prefix),
            short_key().prop_map(|start| KeyRange {
                start,
                end: RangeEnd::Unbounded
            }),
        ]
    }

    proptest! {
        /// Over a small key space the merged check answers exactly what testing every key one
        /// by one answers (on the keys that exist in that space).
        #[test]
        fn merged_check_agrees_with_checking_every_key(
            granted in proptest::collection::vec(key_range(), 0..5),
            wanted in key_range(),
        ) {
            let permissions: Vec<Permission> = granted.iter().cloned().map(read).collect();
            let rules = rules(&permissions);
            let keys = all_short_keys();
            let every_key_granted = keys
                .iter()
                .filter(|key| wanted.contains(key))
                .all(|key| granted.iter().any(|range| range.contains(key)));
            if rules.permits(Access::Read, &wanted) {
                // A permitted range never holds a key outside every grant.
                prop_assert!(every_key_granted);
            }
            if !every_key_granted {
                prop_assert!(!rules.permits(Access::Read, &wanted));
            }
        }
    }
}
