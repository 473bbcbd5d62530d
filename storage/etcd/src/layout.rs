//! etcd's bucket layout in its backend db (3.4 and 3.5; docs/design/etcd-snapshots.md lists it): bucket
//! names, the revision keys of the `key` bucket, and the `meta` keys this crate reads or writes.
//! All integers in keys are big-endian, so bbolt's byte order is revision order.

/// The buckets etcd 3.4 and 3.5 create.
pub const KEY_BUCKET: &str = "key";
pub const META_BUCKET: &str = "meta";
pub const LEASE_BUCKET: &str = "lease";
pub const AUTH_BUCKET: &str = "auth";
pub const AUTH_USERS_BUCKET: &str = "authUsers";
pub const AUTH_ROLES_BUCKET: &str = "authRoles";
pub const MEMBERS_BUCKET: &str = "members";
pub const MEMBERS_REMOVED_BUCKET: &str = "members_removed";
pub const CLUSTER_BUCKET: &str = "cluster";
pub const ALARM_BUCKET: &str = "alarm";

/// Every bucket etcd 3.4 and 3.5 know; a file with another is from a newer etcd (3.6 adds
/// schema buckets) and is refused rather than half read.
pub const KNOWN_BUCKETS: [&str; 10] = [
    ALARM_BUCKET,
    AUTH_BUCKET,
    AUTH_ROLES_BUCKET,
    AUTH_USERS_BUCKET,
    CLUSTER_BUCKET,
    KEY_BUCKET,
    LEASE_BUCKET,
    MEMBERS_BUCKET,
    MEMBERS_REMOVED_BUCKET,
    META_BUCKET,
];

/// `meta` keys.
pub const CONSISTENT_INDEX: &str = "consistent_index";
pub const FINISHED_COMPACT_REVISION: &str = "finishedCompactRev";
pub const SCHEDULED_COMPACT_REVISION: &str = "scheduledCompactRev";
/// Written by etcd 3.6 and later only: the schema's version, `MAJOR.MINOR.0` (etcd 3.6 writes
/// "3.6.0", 3.7 "3.7.0").
pub const STORAGE_VERSION: &str = "storageVersion";

/// The storage versions whose files this crate reads: 3.6's schema is 3.5's with `storageVersion`
/// added, and 3.7's is 3.6's.
pub fn storage_version_is_readable(version: &[u8]) -> bool {
    let Ok(version) = std::str::from_utf8(version) else {
        return false;
    };
    let mut parts = version.split('.');
    let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
        return false;
    };
    let patch_is_number = parts
        .next()
        .is_none_or(|patch| patch.parse::<u32>().is_ok());
    major == "3" && matches!(minor, "6" | "7") && patch_is_number && parts.next().is_none()
}

/// `auth` keys.
pub const AUTH_ENABLED: &str = "authEnabled";
pub const AUTH_REVISION: &str = "authRevision";

/// The bytes of a revision key: main revision, `_`, sub revision.
pub const REVISION_KEY_BYTES: usize = 17;
/// A tombstone's key ends with this mark after the revision.
pub const TOMBSTONE_MARK: u8 = b't';

/// One `key` bucket key: the store revision, the change's index inside it, and whether it is a
/// tombstone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevisionKey {
    pub main: u64,
    pub sub: u64,
    pub tombstone: bool,
}

impl RevisionKey {
    pub fn parse(bytes: &[u8]) -> Option<RevisionKey> {
        let tombstone = match bytes.len() {
            REVISION_KEY_BYTES => false,
            18 if bytes[REVISION_KEY_BYTES] == TOMBSTONE_MARK => true,
            _ => return None,
        };
        if bytes[8] != b'_' {
            return None;
        }
        Some(RevisionKey {
            main: u64::from_be_bytes(bytes[0..8].try_into().ok()?),
            sub: u64::from_be_bytes(bytes[9..17].try_into().ok()?),
            tombstone,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(REVISION_KEY_BYTES + 1);
        bytes.extend_from_slice(&self.main.to_be_bytes());
        bytes.push(b'_');
        bytes.extend_from_slice(&self.sub.to_be_bytes());
        if self.tombstone {
            bytes.push(TOMBSTONE_MARK);
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_keys_sort_in_revision_order_and_round_trip() {
        let keys = [
            RevisionKey {
                main: 2,
                sub: 0,
                tombstone: false,
            },
            RevisionKey {
                main: 2,
                sub: 1,
                tombstone: true,
            },
            RevisionKey {
                main: 256,
                sub: 0,
                tombstone: false,
            },
        ];
        let encoded: Vec<Vec<u8>> = keys.iter().map(RevisionKey::encode).collect();
        assert!(encoded.windows(2).all(|pair| pair[0] < pair[1]));
        for (key, bytes) in keys.iter().zip(&encoded) {
            assert_eq!(RevisionKey::parse(bytes), Some(*key));
        }
        assert_eq!(
            RevisionKey::parse(b"0123456789abcdefg"),
            None,
            "no '_' at 8"
        );
        assert_eq!(RevisionKey::parse(&encoded[0][..16]), None, "cut short");
    }
}
