//! The peer client: a pooled keep-alive HTTP client shared by every connection to every peer, and
//! openraft's network factory on top of it. With peer TLS on, it speaks only HTTPS, presents this
//! member's certificate and accepts only peers whose certificate the peer CA signed.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::OptionalSend;
use revkv_storage::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::peer::append_stream::{AppendStream, StreamCallError};
use crate::peer::faults::PeerFaults;
use crate::peer::{paths, PeerError};
use crate::types::alias::{Snapshot, SnapshotData, Vote};
use crate::types::{MemberNode, TypeConfig};
use crate::write_path_trace::{self, Stage};

/// How a peer call failed from the caller's side.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The peer could not be reached (connection refused or reset before an answer).
    #[error("peer unreachable: {0}")]
    Unreachable(String),
    /// No answer in time; the call may or may not have taken effect.
    #[error("peer call timed out after {0:?}")]
    Timeout(Duration),
    /// The answer was not a valid reply (wrong status, undecodable body).
    #[error("bad answer from peer: {0}")]
    BadAnswer(String),
    /// The peer answered with a refusal.
    #[error(transparent)]
    Remote(#[from] PeerError),
}

/// A pooled HTTP client for peer calls. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PeerClient {
    pub(super) http: reqwest::Client,
    /// Calls a test wants lost (`faults.rs`); disarmed outside tests.
    pub(crate) faults: PeerFaults,
}

impl PeerClient {
    /// Builds the client: keep-alive pooling, no Nagle delay, a bounded connect time, and
    /// connections made from `source_address` when one is given. With `tls`, it speaks HTTPS only,
    /// presents this member's certificate and accepts only peers the peer CA signed.
    pub fn new(
        connect_timeout: Duration,
        source_address: Option<IpAddr>,
        tls: Option<&revkv_tls::PeerTls>,
    ) -> Self {
        let mut builder = reqwest::Client::builder()
            .local_address(source_address)
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(32)
            .tcp_nodelay(true);
        if let Some(tls) = tls {
            builder = builder
                .https_only(true)
                .use_preconfigured_tls((*tls.client_config()).clone());
        }
        let http = builder.build().expect(
            "reqwest accepts plain HTTP, or a rustls configuration of its own rustls version",
        );
        PeerClient {
            http,
            faults: PeerFaults::default(),
        }
    }

    /// POSTs one codec-encoded request to `base_url + path` and decodes the reply.
    pub async fn call<Req: Serialize, Reply: DeserializeOwned>(
        &self,
        base_url: &str,
        path: &str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Reply, CallError> {
        let url = format!("{}{}", base_url.trim_end_matches('/'), path);
        if self.faults.lose(path) {
            return Err(CallError::Unreachable(format!(
                "{url}: the call was lost (an injected peer fault)"
            )));
        }
        let body =
            codec::encode(request).map_err(|error| CallError::BadAnswer(error.to_string()))?;
        let sent = self.http.post(&url).body(body).timeout(timeout).send();
        decode_reply(sent.await, &url, timeout).await
    }
}

/// The reply of a peer call: the codec record of `Result<Reply, PeerError>` in a 2xx answer.
pub(super) async fn decode_reply<Reply: DeserializeOwned>(
    sent: reqwest::Result<reqwest::Response>,
    url: &str,
    timeout: Duration,
) -> Result<Reply, CallError> {
    let response = sent.map_err(|error| classify(error, timeout))?;
    if !response.status().is_success() {
        return Err(CallError::BadAnswer(format!(
            "{url} answered {}",
            response.status()
        )));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|error| classify(error, timeout))?;
    let reply: Result<Reply, PeerError> =
        codec::decode(&bytes).map_err(|error| CallError::BadAnswer(error.to_string()))?;
    Ok(reply?)
}

pub(super) fn classify(error: reqwest::Error, timeout: Duration) -> CallError {
    if error.is_timeout() {
        CallError::Timeout(timeout)
    } else if error.is_connect() {
        CallError::Unreachable(error.to_string())
    } else {
        CallError::BadAnswer(error.to_string())
    }
}

fn rpc_error(error: CallError) -> RPCError<TypeConfig> {
    match error {
        CallError::Unreachable(message) => RPCError::Unreachable(Unreachable::from_string(message)),
        other => RPCError::Network(NetworkError::from_string(other.to_string())),
    }
}

/// The peer URL of every member as the newest membership names it, kept up to date by the member
/// (`RaftMember::spawn_follow_peer_addresses`). openraft keeps a replication stream, and the
/// connection object it was made with, across membership changes, so a connection looks its peer's
/// URL up here on every call: after `etcdctl member update` moves a member, the leader's stream to
/// it follows at the next call.
#[derive(Debug, Default)]
pub struct PeerAddresses {
    urls: RwLock<BTreeMap<u64, String>>,
}

impl PeerAddresses {
    /// Replaces the whole book with the URLs of a newer membership.
    pub fn replace_all(&self, urls: BTreeMap<u64, String>) {
        // The map is replaced whole, so a panic elsewhere cannot leave it half-written.
        *self
            .urls
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = urls;
    }

    pub fn url_of(&self, id: u64) -> Option<String> {
        let urls = self
            .urls
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        urls.get(&id).cloned()
    }
}

/// openraft's network factory: one connection object per target, all sharing the pooled client.
#[derive(Clone, Debug)]
pub struct PeerNetworkFactory {
    pub client: PeerClient,
    /// The shortest time an append or a vote request may take (see `PeerConnection::timeout`).
    pub minimum_call_timeout: Duration,
    pub addresses: Arc<PeerAddresses>,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: u64, node: &MemberNode) -> Self::Network {
        PeerConnection {
            client: self.client.clone(),
            target,
            peer_url_when_made: node.peer_url.clone(),
            addresses: self.addresses.clone(),
            minimum_call_timeout: self.minimum_call_timeout,
            append_stream: None,
            append_stream_not_served: false,
        }
    }
}

/// openraft's view of one peer.
pub struct PeerConnection {
    client: PeerClient,
    target: u64,
    /// The URL openraft gave when it made this connection; used while the address book does not
    /// know the target yet (a learner being added).
    peer_url_when_made: String,
    addresses: Arc<PeerAddresses>,
    minimum_call_timeout: Duration,
    /// The open append stream, if any; taken out for each call and put back only after a whole
    /// answer, so a failed, timed-out or cancelled call leaves none behind.
    append_stream: Option<AppendStream>,
    /// The target answered 404 to the stream (an older member): appends go over HTTP POSTs.
    append_stream_not_served: bool,
}

impl PeerConnection {
    /// The target's peer URL as the newest membership names it.
    fn peer_url(&self) -> String {
        self.addresses
            .url_of(self.target)
            .unwrap_or_else(|| self.peer_url_when_made.clone())
    }

    /// How long an append or vote request may take. openraft suggests 3/4 of the heartbeat
    /// interval, which a link slower than that (a round trip over 37.5 ms with the test harness's
    /// 50 ms heartbeat, 75 ms with the defaults) never meets: every append timed out, nothing
    /// committed, and the followers, which still received the heartbeats, never elected anyone
    /// else (the chaos harness's slow-links fault; docs/RELIABILITY.md). So the wait is at least
    /// the minimum election timeout: an answer slower than that is no use to an election anyway.
    fn timeout(&self, option: &RPCOption) -> Duration {
        option.soft_ttl().max(self.minimum_call_timeout)
    }

    /// One append as an HTTP POST, to a member that does not serve append streams.
    async fn append_over_http(
        &self,
        peer_url: &str,
        request: &AppendEntriesRequest<TypeConfig>,
        timeout: Duration,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let call = self.client.call(peer_url, paths::APPEND, request, timeout);
        call.await.map_err(rpc_error)
    }

    /// One append over the stream to `peer_url`, opening it first when there is none (or it was
    /// opened to an address the target no longer has); falls back to a POST when the target does
    /// not serve streams. The whole call, opening included, is bounded by `timeout`.
    async fn append_over_stream(
        &mut self,
        peer_url: &str,
        request: &AppendEntriesRequest<TypeConfig>,
        timeout: Duration,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let open = self
            .append_stream
            .take()
            .filter(|stream| stream.peer_url == peer_url);
        let max_reply_bytes = codec::MAX_RECORD_BYTES;
        let exchange = async {
            if let Some(mut stream) = open {
                match stream.call(request, max_reply_bytes).await {
                    Ok(reply) => return Ok((stream, reply)),
                    // The peer closed the kept stream meanwhile (it restarted, or closed it as
                    // idle): try once more on a new one, as an HTTP client retries a request sent
                    // on a stale pooled connection. Raft appends may be repeated.
                    Err(CallError::Unreachable(_)) => {}
                    Err(other) => return Err(StreamCallError::Call(other)),
                }
            }
            let mut stream = AppendStream::open(&self.client, peer_url, timeout).await?;
            let reply = stream.call(request, max_reply_bytes).await;
            Ok::<_, StreamCallError>((stream, reply.map_err(StreamCallError::Call)?))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok((stream, reply))) => {
                self.append_stream = Some(stream);
                Ok(reply)
            }
            Ok(Err(StreamCallError::NotServed)) => {
                self.append_stream_not_served = true;
                self.append_over_http(peer_url, request, timeout).await
            }
            Ok(Err(StreamCallError::Call(error))) => Err(rpc_error(error)),
            Err(_) => Err(rpc_error(CallError::Timeout(timeout))),
        }
    }
}

impl RaftNetworkV2<TypeConfig> for PeerConnection {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = self.timeout(&option);
        let peer_url = self.peer_url();
        let last_index = request.entries.last().map(|entry| entry.log_id.index);
        if let Some(index) = last_index {
            write_path_trace::mark(Stage::Sent, index);
        }
        let answer = if self.append_stream_not_served {
            self.append_over_http(&peer_url, &request, timeout).await
        } else {
            self.append_over_stream(&peer_url, &request, timeout).await
        };
        if let Some(index) = last_index {
            write_path_trace::mark(Stage::Replied, index);
        }
        answer
    }

    async fn vote(
        &mut self,
        request: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = self.timeout(&option);
        let peer_url = self.peer_url();
        let call = self.client.call(&peer_url, paths::VOTE, &request, timeout);
        call.await.map_err(rpc_error)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let timeout = option.hard_ttl();
        let url = format!(
            "{}{}",
            self.peer_url().trim_end_matches('/'),
            paths::SNAPSHOT
        );
        let call = self.client.send_snapshot(&url, vote, snapshot, timeout);
        tokio::select! {
            result = call => result.map_err(|error| match rpc_error(error) {
                RPCError::Unreachable(unreachable) => StreamingError::Unreachable(unreachable),
                other => StreamingError::Network(NetworkError::from_string(other.to_string())),
            }),
            closed = cancel => Err(StreamingError::Closed(closed)),
        }
    }

    async fn transfer_leader(
        &mut self,
        request: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let peer_url = self.peer_url();
        let call = self.client.call(
            &peer_url,
            paths::TRANSFER_LEADER,
            &request,
            option.soft_ttl(),
        );
        call.await.map_err(rpc_error)
    }
}
