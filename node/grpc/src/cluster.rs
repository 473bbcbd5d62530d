//! etcd's Cluster service over `KvBackend`'s membership operations, as `/v1/members` uses them.
//!
//! revkv adds a member differently from etcd: the new member runs first (`revkv serve --join`
//! with its own id), then is added as a learner, which waits until it has caught up. So
//! `MemberAdd` (`etcdctl member add NAME --peer-urls URL`) asks the member already running at the
//! one peer URL for its id and adds it (`KvBackend::add_member_at`): as a learner with
//! `--learner`, otherwise as a learner that is promoted to a voter once it has caught up. With
//! the metadata `revkv-auto-promote: true` (and optionally `revkv-auto-promote-max-lag: N`), a
//! learner's add answers once it is in the membership and the leader promotes it when it has
//! caught up, as `auto_promote` does on `POST /v1/members`. A URL
//! where no joining member answers is refused with the way to start one. `MemberUpdate` points the
//! cluster at a member's new peer URL, as etcd's does; the member is then started listening there.

use std::sync::Arc;

use revkv_node::{AddedMemberRole, KvBackend, LearnerJoin, MemberInfo, NodeError};
use tonic::metadata::MetadataMap;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use crate::convert;
use crate::error::status;
use crate::proto::etcdserverpb as pb;

pub struct ClusterService<B> {
    pub backend: Arc<B>,
}

type Answer<T> = Result<GrpcResponse<T>, Status>;

/// etcd's member message. revkv members have no names; the name is `member-<id>`. The client URLs
/// are the member's gRPC URL: etcd clients dial them (`etcdctl --cluster`, endpoint sync), and a
/// member without a gRPC listener has none they could use.
pub fn member(info: MemberInfo) -> pb::Member {
    pb::Member {
        id: info.id,
        name: format!("member-{}", info.id),
        peer_ur_ls: vec![info.peer_url],
        client_ur_ls: info.grpc_url.into_iter().collect(),
        is_learner: info.is_learner,
    }
}

impl<B: KvBackend> ClusterService<B> {
    /// etcd's Cluster answers name the cluster, member and term but no store revision
    /// (`cs.header()` in etcd 3.4 and 3.5), so neither do these.
    fn header(&self) -> Result<Option<pb::ResponseHeader>, Status> {
        let mut header = convert::header(
            self.backend.header().map_err(status)?,
            self.backend.cluster_id(),
        );
        if let Some(header) = header.as_mut() {
            header.revision = 0;
        }
        Ok(header)
    }
}

/// revkv members have exactly one peer URL; etcd's requests carry a list.
fn one_peer_url(peer_urls: Vec<String>) -> Result<String, Status> {
    let [peer_url] = <[String; 1]>::try_from(peer_urls).map_err(|urls| {
        Status::invalid_argument(format!(
            "revkv: a member has exactly one peer URL, {} were given",
            urls.len()
        ))
    })?;
    Ok(peer_url)
}

/// The request metadata that makes `MemberAdd` of a learner an auto-promoted one (`true`), as
/// `auto_promote` does on `POST /v1/members`: etcd's `MemberAddRequest` has no such field, and
/// revkv keeps etcd's protos unchanged, so the extension travels beside the message.
pub const AUTO_PROMOTE_HEADER: &str = "revkv-auto-promote";
/// The metadata giving the learner's lag bound in entries (`auto_promote_max_lag`).
pub const AUTO_PROMOTE_MAX_LAG_HEADER: &str = "revkv-auto-promote-max-lag";

/// How a learner added by `MemberAdd` joins, as the request's metadata says.
fn learner_join(metadata: &MetadataMap) -> Result<LearnerJoin, Status> {
    let text_of = |name: &str| -> Result<Option<String>, Status> {
        let Some(value) = metadata.get(name) else {
            return Ok(None);
        };
        let text = value
            .to_str()
            .map_err(|_| status(NodeError::Invalid(format!("{name} is not printable ASCII"))))?;
        Ok(Some(text.trim().to_string()))
    };
    let auto_promote = match text_of(AUTO_PROMOTE_HEADER)?.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(status(NodeError::Invalid(format!(
                "{AUTO_PROMOTE_HEADER} is true or false, not {other:?}"
            ))))
        }
    };
    let max_lag_entries = match text_of(AUTO_PROMOTE_MAX_LAG_HEADER)? {
        None => None,
        Some(text) => Some(text.parse::<u64>().map_err(|_| {
            status(NodeError::Invalid(format!(
                "{AUTO_PROMOTE_MAX_LAG_HEADER} is a count of entries, not {text:?}"
            )))
        })?),
    };
    let names = (AUTO_PROMOTE_HEADER, AUTO_PROMOTE_MAX_LAG_HEADER);
    LearnerJoin::asked(auto_promote, max_lag_entries, names).map_err(status)
}

fn members(infos: Vec<MemberInfo>) -> Vec<pb::Member> {
    infos.into_iter().map(member).collect()
}

#[tonic::async_trait]
impl<B: KvBackend> pb::cluster_server::Cluster for ClusterService<B> {
    async fn member_add(
        &self,
        request: GrpcRequest<pb::MemberAddRequest>,
    ) -> Answer<pb::MemberAddResponse> {
        let join = learner_join(request.metadata())?;
        let request = request.into_inner();
        let role = match (request.is_learner, join) {
            (true, join) => AddedMemberRole::Learner(join),
            (false, LearnerJoin::StayLearner) => AddedMemberRole::Voter,
            (false, LearnerJoin::PromoteWhenCaughtUp { .. }) => {
                return Err(status(NodeError::Invalid(format!(
                    "{AUTO_PROMOTE_HEADER} applies to a learner: set isLearner"
                ))))
            }
        };
        let peer_url = one_peer_url(request.peer_ur_ls)?;
        let (added, infos) = self
            .backend
            .add_member_at(peer_url, role)
            .await
            .map_err(status)?;
        Ok(GrpcResponse::new(pb::MemberAddResponse {
            header: self.header()?,
            member: Some(member(added)),
            members: members(infos),
        }))
    }

    async fn member_remove(
        &self,
        request: GrpcRequest<pb::MemberRemoveRequest>,
    ) -> Answer<pb::MemberRemoveResponse> {
        let id = request.into_inner().id;
        let infos = self.backend.remove_member(id).await.map_err(status)?;
        Ok(GrpcResponse::new(pb::MemberRemoveResponse {
            header: self.header()?,
            members: members(infos),
        }))
    }

    async fn member_update(
        &self,
        request: GrpcRequest<pb::MemberUpdateRequest>,
    ) -> Answer<pb::MemberUpdateResponse> {
        let request = request.into_inner();
        let peer_url = one_peer_url(request.peer_ur_ls)?;
        let infos = self
            .backend
            .update_member_peer_url(request.id, peer_url)
            .await
            .map_err(status)?;
        Ok(GrpcResponse::new(pb::MemberUpdateResponse {
            header: self.header()?,
            members: members(infos),
        }))
    }

    async fn member_list(
        &self,
        _request: GrpcRequest<pb::MemberListRequest>,
    ) -> Answer<pb::MemberListResponse> {
        let infos = self.backend.members().await.map_err(status)?;
        Ok(GrpcResponse::new(pb::MemberListResponse {
            header: self.header()?,
            members: members(infos),
        }))
    }

    async fn member_promote(
        &self,
        request: GrpcRequest<pb::MemberPromoteRequest>,
    ) -> Answer<pb::MemberPromoteResponse> {
        let id = request.into_inner().id;
        let infos = self.backend.promote(id).await.map_err(status)?;
        Ok(GrpcResponse::new(pb::MemberPromoteResponse {
            header: self.header()?,
            members: members(infos),
        }))
    }
}
