//! etcd's Election service (`v3electionpb`), as etcd's v3election server runs
//! `concurrency.Election` for the caller (`lock_queue.rs` has the queue it shares with Lock):
//!
//! - `Campaign { name, lease, value }` puts `name/<lease hex>` = value with the lease (a
//!   contender already there keeps its place and has its value proclaimed), waits until every
//!   older contender is gone, and answers the leader key `{name, key, rev, lease}`. A client that
//!   goes away during the wait withdraws its key.
//! - `Proclaim { leader, value }` sets the leader's value if its key is still the one created at
//!   `leader.rev` (else `election: not leader`); `Resign { leader }` deletes it on the same
//!   condition.
//! - `Leader { name }` answers the oldest contender's key-value (`election: no leader` when there
//!   is none); `Observe { name }` streams it, then each new value, then the next leader's.
//!
//! Errors of the recipe itself are plain errors on etcd, which gRPC answers `Unknown` with the
//! text; errors of the KV calls keep their own codes.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use revkv_node::auth::Caller;
use revkv_node::watch::{Watch, WatchMessage};
use revkv_node::KvBackend;
use revkv_storage::{EventKind, KeyRange};
use tokio::sync::mpsc;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use crate::convert;
use crate::lock_queue::{
    contender_key, contenders_prefix, create_revision_is, get_op, put_op, range_answer,
    withdraw_txn, Contenders, WithdrawnUnlessKept,
};
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;
use crate::proto::v3electionpb as electionpb;

pub const NOT_LEADER: &str = "election: not leader";
pub const NO_LEADER: &str = "election: no leader";
pub const MISSING_LEADER_KEY: &str = "\"leader\" field must be provided";

pub struct ElectionService<B> {
    contenders: Contenders<B>,
}

impl<B: KvBackend> ElectionService<B> {
    pub fn new(backend: Arc<B>) -> Self {
        ElectionService {
            contenders: Contenders::new(backend),
        }
    }
}

type Answer<T> = Result<GrpcResponse<T>, Status>;
type LeaderStream = Pin<Box<dyn Stream<Item = Result<electionpb::LeaderResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<B: KvBackend> electionpb::election_server::Election for ElectionService<B> {
    async fn campaign(
        &self,
        request: GrpcRequest<electionpb::CampaignRequest>,
    ) -> Answer<electionpb::CampaignResponse> {
        let caller = request.extensions().get::<Caller>().cloned();
        let caller = caller.as_ref();
        let request = request.into_inner();
        let lease = self.contenders.session_lease(request.lease).await?;
        let prefix = contenders_prefix(&request.name);
        let key = contender_key(&prefix, lease);
        let (leader_revision, header) = self.enter(caller, &key, request.value, lease).await?;
        // Every older contender must go first. A client that leaves during the wait withdraws
        // the key (the guard, as etcd resigns on a canceled context); a wait that fails
        // otherwise leaves it, as etcd's does.
        let withdrawn = WithdrawnUnlessKept::new(&self.contenders, caller, &key, leader_revision);
        let waited = self
            .contenders
            .wait_deletes(caller, &prefix, leader_revision - 1)
            .await;
        withdrawn.keep();
        waited?;
        Ok(GrpcResponse::new(electionpb::CampaignResponse {
            header,
            leader: Some(electionpb::LeaderKey {
                name: request.name,
                key,
                rev: leader_revision,
                lease,
            }),
        }))
    }

    async fn proclaim(
        &self,
        request: GrpcRequest<electionpb::ProclaimRequest>,
    ) -> Answer<electionpb::ProclaimResponse> {
        let caller = request.extensions().get::<Caller>().cloned();
        let request = request.into_inner();
        let leader = request
            .leader
            .ok_or_else(|| Status::unknown(MISSING_LEADER_KEY))?;
        let lease = self.contenders.session_lease(leader.lease).await?;
        let header = self
            .proclaim_as(
                caller.as_ref(),
                &leader.key,
                leader.rev,
                request.value,
                lease,
            )
            .await?;
        Ok(GrpcResponse::new(electionpb::ProclaimResponse { header }))
    }

    async fn leader(
        &self,
        request: GrpcRequest<electionpb::LeaderRequest>,
    ) -> Answer<electionpb::LeaderResponse> {
        let caller = request.extensions().get::<Caller>().cloned();
        let prefix = contenders_prefix(&request.into_inner().name);
        let answer = self
            .contenders
            .first_created(caller.as_ref(), &prefix)
            .await?;
        let Some(kv) = answer.kvs.into_iter().next() else {
            return Err(Status::unknown(NO_LEADER));
        };
        Ok(GrpcResponse::new(electionpb::LeaderResponse {
            header: answer.header,
            kv: Some(kv),
        }))
    }

    type ObserveStream = LeaderStream;

    async fn observe(
        &self,
        request: GrpcRequest<electionpb::LeaderRequest>,
    ) -> Answer<LeaderStream> {
        let caller = request.extensions().get::<Caller>().cloned();
        let prefix = contenders_prefix(&request.into_inner().name);
        // Like etcd's unbuffered channel: the observer runs at most one answer ahead.
        let (sender, receiver) = mpsc::channel(1);
        let observer = Observer {
            contenders: self.contenders.clone(),
            caller,
            prefix,
            sender,
        };
        tokio::spawn(observer.run());
        let answers = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let answer = receiver.recv().await?;
            Some((Ok(answer), receiver))
        });
        Ok(GrpcResponse::new(Box::pin(answers)))
    }

    async fn resign(
        &self,
        request: GrpcRequest<electionpb::ResignRequest>,
    ) -> Answer<electionpb::ResignResponse> {
        let caller = request.extensions().get::<Caller>().cloned();
        let leader = request
            .into_inner()
            .leader
            .ok_or_else(|| Status::unknown(MISSING_LEADER_KEY))?;
        // etcd opens a session for the leader's lease (granting one for 0) before it resigns.
        self.contenders.session_lease(leader.lease).await?;
        let withdraw = withdraw_txn(&leader.key, leader.rev);
        let answer = self.contenders.txn(caller.as_ref(), withdraw).await?;
        Ok(GrpcResponse::new(electionpb::ResignResponse {
            header: answer.header,
        }))
    }
}

impl<B: KvBackend> ElectionService<B> {
    /// Puts the contender's key unless it exists; an existing one keeps its create revision and
    /// has `value` proclaimed if it holds another (withdrawn if that fails). Answers the key's
    /// create revision and the txn's header.
    async fn enter(
        &self,
        caller: Option<&Caller>,
        key: &[u8],
        value: Vec<u8>,
        lease: i64,
    ) -> Result<(i64, Option<pb::ResponseHeader>), Status> {
        let txn = pb::TxnRequest {
            compare: vec![create_revision_is(key, 0)],
            success: vec![put_op(key, value.clone(), lease)],
            failure: vec![get_op(key)],
        };
        let answer = self.contenders.txn(caller, txn).await?;
        let revision = answer.header.as_ref().map_or(0, |header| header.revision);
        if answer.succeeded {
            return Ok((revision, answer.header));
        }
        let Some(existing) = range_answer(&answer, 0).first().cloned() else {
            return Ok((revision, answer.header));
        };
        if existing.value != value {
            let proclaimed = self
                .proclaim_as(caller, key, existing.create_revision, value, lease)
                .await;
            if let Err(refused) = proclaimed {
                let withdraw = withdraw_txn(key, existing.create_revision);
                let _ = self.contenders.txn(caller, withdraw).await;
                return Err(refused);
            }
        }
        Ok((existing.create_revision, answer.header))
    }

    /// Sets the leader key's value if it is still the one created at `revision`.
    async fn proclaim_as(
        &self,
        caller: Option<&Caller>,
        key: &[u8],
        revision: i64,
        value: Vec<u8>,
        lease: i64,
    ) -> Result<Option<pb::ResponseHeader>, Status> {
        let txn = pb::TxnRequest {
            compare: vec![create_revision_is(key, revision)],
            success: vec![put_op(key, value, lease)],
            failure: Vec::new(),
        };
        let answer = self.contenders.txn(caller, txn).await?;
        if !answer.succeeded {
            return Err(Status::unknown(NOT_LEADER));
        }
        Ok(answer.header)
    }
}

/// One `Observe` stream: the leader, each value it proclaims, then the next leader.
struct Observer<B> {
    contenders: Contenders<B>,
    caller: Option<Caller>,
    prefix: Vec<u8>,
    sender: mpsc::Sender<electionpb::LeaderResponse>,
}

/// The observer stops: its client went away, or a read or watch failed (etcd then ends the
/// stream without an error, as its observer closes its channel).
struct Stopped;

impl<B: KvBackend> Observer<B> {
    async fn run(self) {
        let sender = self.sender.clone();
        tokio::select! {
            _ = self.observe() => {}
            () = sender.closed() => {}
        }
    }

    async fn observe(&self) -> Result<(), Stopped> {
        loop {
            let (header, leader) = self.current_leader().await?;
            let revision = header.as_ref().map_or(0, |header| header.revision);
            self.send(header, leader.clone()).await?;
            self.follow_values(leader.key, revision + 1).await?;
        }
    }

    /// The oldest contender, or, when there is none, the first key put under the prefix.
    async fn current_leader(
        &self,
    ) -> Result<(Option<pb::ResponseHeader>, mvccpb::KeyValue), Stopped> {
        let caller = self.caller.as_ref();
        let answer = self
            .contenders
            .first_created(caller, &self.prefix)
            .await
            .map_err(|_| Stopped)?;
        if let Some(kv) = answer.kvs.into_iter().next() {
            return Ok((answer.header, kv));
        }
        let from = answer.header.map_or(0, |header| header.revision);
        let range = KeyRange::prefix(self.prefix.clone());
        let mut watch = self
            .contenders
            .watch(caller, range, from)
            .map_err(|_| Stopped)?;
        loop {
            let events = next_events(&mut watch).await?;
            let put = events.into_iter().find(|(kind, _)| *kind == EventKind::Put);
            if let Some((_, kv)) = put {
                let header = self.header_at(kv.mod_revision)?;
                return Ok((header, kv));
            }
        }
    }

    /// Sends each new value of `key` from `from_revision` on, until the key is deleted.
    async fn follow_values(&self, key: Vec<u8>, from_revision: i64) -> Result<(), Stopped> {
        let caller = self.caller.as_ref();
        let range = KeyRange::single(key);
        let mut watch = self
            .contenders
            .watch(caller, range, from_revision)
            .map_err(|_| Stopped)?;
        loop {
            for (kind, kv) in next_events(&mut watch).await? {
                if kind == EventKind::Delete {
                    return Ok(());
                }
                let header = self.header_at(kv.mod_revision)?;
                self.send(header, kv).await?;
            }
        }
    }

    fn header_at(&self, revision: i64) -> Result<Option<pb::ResponseHeader>, Stopped> {
        let backend = &self.contenders.backend;
        let revision = u64::try_from(revision).unwrap_or(0);
        let header = backend.header_for_revision(revision).map_err(|_| Stopped)?;
        Ok(convert::header(header, backend.cluster_id()))
    }

    async fn send(
        &self,
        header: Option<pb::ResponseHeader>,
        kv: mvccpb::KeyValue,
    ) -> Result<(), Stopped> {
        let answer = electionpb::LeaderResponse {
            header,
            kv: Some(kv),
        };
        self.sender.send(answer).await.map_err(|_| Stopped)
    }
}

/// The events of the watch's next message that has any, as etcd's key-values.
async fn next_events(watch: &mut Watch) -> Result<Vec<(EventKind, mvccpb::KeyValue)>, Stopped> {
    loop {
        match watch.next().await {
            Some(WatchMessage::Events(events)) => {
                let events = events
                    .events()
                    .map(|event| (event.kind, convert::key_value(event.kv.clone())))
                    .collect();
                return Ok(events);
            }
            Some(WatchMessage::Created { .. } | WatchMessage::Bookmark { .. }) => {}
            Some(WatchMessage::Canceled(_)) | None => return Err(Stopped),
        }
    }
}
