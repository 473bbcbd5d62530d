//! The etcd version revkv reports to etcd's clients (`Maintenance.Status`, `GET /version`), and
//! `--emulated-etcd-version`, which lets an operator report another.
//!
//! Clients switch features on by this version, so it must name what revkv really serves and no
//! more. Kubernetes' storage layer is the one that matters: its feature checker
//! (k8s.io/apiserver `pkg/storage/feature`) uses `RequestWatchProgress` only on 3.4.31 or later,
//! 3.5.13 or later, or 3.6+, the releases in which etcd's progress answers stopped arriving before
//! the events of their revision. revkv answers a progress request only once every watch of the
//! stream has sent everything up to the answered revision (`watch_progress.rs`), so it reports
//! 3.5.13: etcd 3.5's API with working progress requests. It does not claim 3.6: it serves no
//! Downgrade, and its compaction drops a delete at the compact revision as 3.5.13 does (etcd
//! keeps it from 3.5.16 and 3.6.0 on), so a watch from that revision misses it.
//!
//! What etcd reports beside its own version follows the version reported: from 3.6 on etcd names
//! its storage version (the schema of its data file, its cluster version once migrated) in
//! `GET /version`'s `storage`, `Status.storageVersion` and each `Snapshot` answer's `version`,
//! and 3.5 names none. revkv has no etcd data file; it names the storage version a member of the
//! emulated release would have ([`EtcdVersion::storage_version`]), and by default none, as 3.5.

use std::fmt;

/// A release number `major.minor.patch` of etcd's v3 API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdVersion {
    major: u32,
    minor: u32,
    patch: u32,
}

impl EtcdVersion {
    /// What revkv reports unless told otherwise (the module comment says why).
    pub const DEFAULT: EtcdVersion = EtcdVersion {
        major: 3,
        minor: 5,
        patch: 13,
    };

    /// Parses `3.MINOR.PATCH`; anything else (another major version, a suffix, a missing part)
    /// is refused with a message that says what is wanted.
    pub fn parse(text: &str) -> Result<EtcdVersion, String> {
        let refusal = || {
            format!("{text:?} is not an etcd v3 release number: want 3.MINOR.PATCH, like 3.5.13")
        };
        let parts: Vec<&str> = text.split('.').collect();
        let [major, minor, patch] = parts.as_slice() else {
            return Err(refusal());
        };
        let number = |part: &str| -> Result<u32, String> {
            if part.is_empty() || !part.bytes().all(|byte| byte.is_ascii_digit()) {
                return Err(refusal());
            }
            part.parse().map_err(|_| refusal())
        };
        let version = EtcdVersion {
            major: number(major)?,
            minor: number(minor)?,
            patch: number(patch)?,
        };
        if version.major != 3 {
            return Err(refusal());
        }
        Ok(version)
    }

    /// The cluster version, as etcd reports it beside the server's: the minor release, patch 0.
    pub fn cluster_version(&self) -> EtcdVersion {
        EtcdVersion { patch: 0, ..*self }
    }

    /// The storage version a member of this release reports (its cluster version), or None
    /// before 3.6, which reported none (the module comment says why revkv reports it at all).
    pub fn storage_version(&self) -> Option<EtcdVersion> {
        (self.minor >= 6).then(|| self.cluster_version())
    }
}

impl Default for EtcdVersion {
    fn default() -> Self {
        EtcdVersion::DEFAULT
    }
}

impl fmt::Display for EtcdVersion {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::EtcdVersion;

    #[test]
    fn release_numbers_of_the_v3_api_are_taken() {
        assert_eq!(EtcdVersion::parse("3.5.13").unwrap(), EtcdVersion::DEFAULT);
        assert_eq!(EtcdVersion::parse("3.6.16").unwrap().to_string(), "3.6.16");
        assert_eq!(
            EtcdVersion::parse("3.4.31")
                .unwrap()
                .cluster_version()
                .to_string(),
            "3.4.0"
        );
    }

    #[test]
    fn a_storage_version_is_reported_from_3_6_on() {
        assert_eq!(EtcdVersion::DEFAULT.storage_version(), None);
        assert_eq!(
            EtcdVersion::parse("3.4.23").unwrap().storage_version(),
            None
        );
        let reported = |text: &str| EtcdVersion::parse(text).unwrap().storage_version();
        assert_eq!(reported("3.6.16").unwrap().to_string(), "3.6.0");
        assert_eq!(reported("3.7.3").unwrap().to_string(), "3.7.0");
    }

    #[test]
    fn anything_else_is_refused_with_what_is_wanted() {
        for text in [
            "",
            "3",
            "3.5",
            "3.5.",
            "3.5.13.1",
            "v3.5.13",
            "2.3.8",
            "4.0.0",
            "3.5.x",
            "3.+5.1",
            "3.5.13-rc.0",
        ] {
            let error = EtcdVersion::parse(text).unwrap_err();
            assert!(error.contains("want 3.MINOR.PATCH"), "{text:?}: {error}");
        }
    }
}
