//! Every member's report of itself (role, term, leader, log positions, revision, file sizes), for
//! a cluster-wide status that one member can serve: the web console's Cluster page and
//! `GET /v1/cluster/status`. A member reports for itself on the peer route `/raft/member-report`,
//! and `collect_member_reports` asks every member of the membership at once, each bounded in time,
//! so a member that is down or cut off shows up as such instead of holding the answer back.
//!
//! Going through the peer port, not each member's client URL, means the cluster's status is seen
//! from wherever one member is reachable (a port-forward to one pod, say), over the peers' own
//! (mutual TLS) connections.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use serde::{Deserialize, Serialize};

use crate::member_inner::MemberInner;
use crate::peer::client::CallError;
use crate::peer::paths;
use revkv_storage::Error as StorageError;

/// What one member says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReport {
    pub member_id: u64,
    /// The leader this member knows of, if any.
    pub leader_id: Option<u64>,
    pub raft_term: u64,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown` (`MemberRole::as_str`).
    pub role: String,
    pub commit_index: u64,
    pub applied_index: u64,
    pub revision: u64,
    pub compact_revision: u64,
    /// The state file's size, and the bytes of records it holds.
    pub state_db_bytes: u64,
    pub state_db_bytes_in_use: u64,
    pub log_db_bytes: u64,
    /// The revkv version the member runs.
    pub version: String,
    /// True once the membership holds this member's client URLs as it advertises them.
    pub client_urls_published: bool,
}

/// One member's report, or why there was none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberReportAnswer {
    pub member_id: u64,
    /// `Err` holds why the member gave no report (unreachable, timed out, refused).
    pub report: Result<MemberReport, String>,
}

impl MemberInner {
    /// This member's report of itself, read now.
    pub(crate) fn member_report(&self) -> Result<MemberReport, StorageError> {
        let raft = self.status();
        let stats = self.store.stats()?;
        Ok(MemberReport {
            member_id: self.id,
            leader_id: raft.leader,
            raft_term: raft.term,
            role: raft.role.as_str().to_string(),
            commit_index: raft.commit_index,
            applied_index: raft.applied_index,
            revision: stats.current_revision,
            compact_revision: stats.compact_revision,
            state_db_bytes: stats.file_bytes,
            state_db_bytes_in_use: stats.bytes_in_use,
            log_db_bytes: self.log.size_bytes(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            client_urls_published: self.client_urls_published(),
        })
    }

    /// True when the membership holds this member's client URLs as it advertises them.
    pub(crate) fn client_urls_published(&self) -> bool {
        let metrics = self.raft.metrics();
        let recorded = metrics.borrow_watched();
        recorded.membership_config.get_node(&self.id) == Some(&self.config.advertise)
    }

    /// Every member's report (this member's own included), asked at once, in member id order; a
    /// member that does not answer within `timeout` is listed with why.
    pub(crate) async fn collect_member_reports(
        &self,
        timeout: Duration,
    ) -> Vec<MemberReportAnswer> {
        let members = self.members_with_peer_urls();
        let asks = members.into_iter().map(|(member_id, peer_url)| async move {
            let report = if member_id == self.id {
                self.member_report().map_err(|error| error.to_string())
            } else {
                let call = self
                    .peers
                    .call(&peer_url, paths::MEMBER_REPORT, &(), timeout);
                call.await.map_err(|error: CallError| error.to_string())
            };
            MemberReportAnswer { member_id, report }
        });
        let mut answers = futures::future::join_all(asks).await;
        answers.sort_by_key(|answer| answer.member_id);
        answers
    }
}
