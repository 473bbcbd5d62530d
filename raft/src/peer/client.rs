//! The peer client: a pooled keep-alive HTTP client shared by every connection to every peer, and
//! openraft's network factory on top of it. With peer TLS on, it speaks only HTTPS, presents this
//! member's certificate and accepts only peers whose certificate the peer CA signed.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::clock::Instant;
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

// `CallError` lives in `call_error.rs`; this path to it stays, since the simulator names it.
pub use crate::peer::call_error::CallError;

use crate::peer::append_stream::{AppendStream, StreamCallError};
use crate::peer::append_timeout::AppendTimeouts;
use crate::peer::call_error::{classify_answer_error, classify_unanswered};
use crate::peer::failure_log::PeerFailureLog;
use crate::peer::faults::PeerFaults;
use crate::peer::simulated::{PeerNetwork, SimulatedNetwork};
use crate::peer::{paths, PeerError};
use crate::types::alias::{Snapshot, SnapshotData, Vote};
use crate::types::{MemberNode, TypeConfig};
use crate::write_path_trace::{self, Stage};

/// A pooled HTTP client for peer calls. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PeerClient {
    pub(super) http: reqwest::Client,
    /// Calls a test wants lost (`faults.rs`); disarmed outside tests.
    pub(crate) faults: PeerFaults,
    /// Sockets, or a simulated network that carries every call instead of `http`.
    pub(super) network: PeerNetwork,
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
            network: PeerNetwork::default(),
        }
    }

    /// The same client, calling through `network` (`simulated.rs`).
    pub fn with_network(mut self, network: PeerNetwork) -> Self {
        self.network = network;
        self
    }

    /// Whether calls go through a simulated network rather than sockets.
    pub(crate) fn is_simulated(&self) -> bool {
        self.network.simulated_network().is_some()
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
        if let Some(network) = self.network.simulated_network() {
            return post_simulated(network, url, body, timeout).await;
        }
        let sent = self.http.post(&url).body(body).timeout(timeout).send();
        decode_reply(sent.await, &url, timeout).await
    }
}

/// A call through a simulated network: the same body and the same decoding of the answer as
/// over HTTP, within the same `timeout` (a call the network lost ends there).
pub(super) async fn post_simulated<Reply: DeserializeOwned>(
    network: &Arc<dyn SimulatedNetwork>,
    url: String,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Reply, CallError> {
    let posted = network.post(url.clone(), body.into(), timeout);
    let answer = crate::clock::timeout(timeout, posted)
        .await
        .map_err(|_| CallError::Timeout(timeout))??;
    if answer.status == 404 {
        return Err(CallError::NotServed(format!("{url} answered 404")));
    }
    if !(200..300).contains(&answer.status) {
        return Err(CallError::BadAnswer(format!(
            "{url} answered {}",
            answer.status
        )));
    }
    decode_answer_body(&answer.body)
}

/// openraft's view of a failed call: `Unreachable` when the request never reached the peer or
/// the connection died before any answer, so openraft backs off before it tries again (a network
/// error makes it retry at once, hundreds of times a second against a partitioned peer).
fn rpc_error(error: CallError) -> RPCError<TypeConfig> {
    match error {
        CallError::Unreachable(message) | CallError::ClosedBeforeAnswer(message) => {
            RPCError::Unreachable(Unreachable::from_string(message))
        }
        other => RPCError::Network(NetworkError::from_string(other.to_string())),
    }
}

/// The reply of a peer call: the codec record of `Result<Reply, PeerError>` in a 2xx answer.
pub(super) async fn decode_reply<Reply: DeserializeOwned>(
    sent: reqwest::Result<reqwest::Response>,
    url: &str,
    timeout: Duration,
) -> Result<Reply, CallError> {
    let response = sent.map_err(|error| classify_unanswered(error, timeout))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(CallError::NotServed(format!("{url} answered 404")));
    }
    if !response.status().is_success() {
        return Err(CallError::BadAnswer(format!(
            "{url} answered {}",
            response.status()
        )));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|error| classify_answer_error(error, timeout))?;
    decode_answer_body(&bytes)
}

/// A 2xx answer's body: the codec record of `Result<Reply, PeerError>`.
fn decode_answer_body<Reply: DeserializeOwned>(bytes: &[u8]) -> Result<Reply, CallError> {
    let reply: Result<Reply, PeerError> =
        codec::decode(bytes).map_err(|error| CallError::BadAnswer(error.to_string()))?;
    Ok(reply?)
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
    /// Each peer's append timeout, following its round trips (`append_timeout.rs`).
    pub append_timeouts: Arc<AppendTimeouts>,
    pub addresses: Arc<PeerAddresses>,
    /// Every connection's failures, logged at a bounded rate (`failure_log.rs`).
    pub failures: Arc<PeerFailureLog>,
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
            append_timeouts: self.append_timeouts.clone(),
            failures: self.failures.clone(),
            append_stream: None,
            // A simulated network carries POSTs only (`simulated.rs`).
            append_stream_not_served: self.client.is_simulated(),
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
    append_timeouts: Arc<AppendTimeouts>,
    failures: Arc<PeerFailureLog>,
    /// The open append stream, if any; taken out for each call and put back only after a whole
    /// answer, so a failed, timed-out or cancelled call leaves none behind.
    append_stream: Option<AppendStream>,
    /// The target answered 404 to the stream (an older member): appends go over HTTP POSTs.
    append_stream_not_served: bool,
}

impl PeerConnection {
    /// Reports a call's outcome to the failure log, and hands it on.
    fn noted<T, E: std::fmt::Display>(&self, outcome: Result<T, E>) -> Result<T, E> {
        match &outcome {
            Ok(_) => self.failures.answered(self.target),
            Err(error) => self.failures.failed(self.target, error),
        }
        outcome
    }

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

    /// How long an append may take: as `timeout`, raised to what this peer's recent round trips
    /// (its fsync) call for (`append_timeout.rs`).
    fn append_timeout(&self, option: &RPCOption) -> Duration {
        self.timeout(option)
            .max(self.append_timeouts.timeout_for(self.target))
    }

    /// Tells the peer's append timeout how the append went.
    fn time_append<T>(
        &self,
        answer: &Result<T, RPCError<TypeConfig>>,
        started: Instant,
        timeout: Duration,
    ) {
        let elapsed = started.elapsed();
        match answer {
            Ok(_) => self.append_timeouts.answered(self.target, elapsed),
            // A failure that used up the whole wait is a timeout, whichever step it was in.
            Err(_) if elapsed >= timeout => self.append_timeouts.timed_out(self.target, timeout),
            // A refused connection or a bad answer says nothing about the peer's disk.
            Err(_) => {}
        }
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
            let mut stream = AppendStream::open(&self.client.http, peer_url, timeout).await?;
            let reply = stream.call(request, max_reply_bytes).await;
            Ok::<_, StreamCallError>((stream, reply.map_err(StreamCallError::Call)?))
        };
        match crate::clock::timeout(timeout, exchange).await {
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
        let timeout = self.append_timeout(&option);
        // tokio's clock, not the OS's: the round trip sets later timeouts, and under the
        // simulator's paused clock it must be measured in the time the timeouts run on.
        let started = Instant::now();
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
        self.time_append(&answer, started, timeout);
        self.noted(answer)
    }

    async fn vote(
        &mut self,
        request: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = self.timeout(&option);
        let peer_url = self.peer_url();
        let call = self.client.call(&peer_url, paths::VOTE, &request, timeout);
        self.noted(call.await.map_err(rpc_error))
    }

    /// A peer of an older build, which has no pre-vote path, answers 404: it is counted as
    /// granting, as openraft's own default does for a network without pre-votes, so the real
    /// election that follows asks it properly.
    async fn pre_vote(
        &mut self,
        request: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = self.timeout(&option);
        let peer_url = self.peer_url();
        let hypothetical_vote = request.vote;
        let call = self
            .client
            .call(&peer_url, paths::PRE_VOTE, &request, timeout);
        match call.await {
            Err(CallError::NotServed(_)) => Ok(VoteResponse::new(hypothetical_vote, None, true)),
            answer => self.noted(answer.map_err(rpc_error)),
        }
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

#[cfg(test)]
mod tests {
    use openraft::network::RPCOption;
    use openraft::raft::AppendEntriesRequest;

    use super::*;

    /// A connection to `peer_url` as openraft gets it, with its own failure log.
    async fn connection_to(peer_url: &str) -> (PeerConnection, Arc<PeerFailureLog>) {
        let failures = Arc::new(PeerFailureLog::default());
        let mut factory = PeerNetworkFactory {
            client: PeerClient::new(Duration::from_millis(300), None, None),
            minimum_call_timeout: Duration::from_millis(300),
            append_timeouts: Arc::new(AppendTimeouts::new(
                Duration::from_millis(300),
                Duration::from_secs(1),
                None,
            )),
            addresses: Arc::new(PeerAddresses::default()),
            failures: failures.clone(),
        };
        let node = MemberNode {
            peer_url: peer_url.to_string(),
            client_url: String::new(),
            grpc_url: None,
        };
        (factory.new_client(2, &node).await, failures)
    }

    fn heartbeat() -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries: Vec::new(),
        }
    }

    /// A loopback URL whose port nobody listens on (bound, then released).
    fn url_nobody_listens_on() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        format!("http://{address}")
    }

    /// A listener that accepts every connection and closes it at once without a byte, as the
    /// link proxy of a partition does: the connection is made, and no answer ever comes.
    async fn url_that_closes_every_connection() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                drop(connection);
            }
        });
        url
    }

    fn assert_unreachable<T: std::fmt::Debug>(outcome: Result<T, RPCError<TypeConfig>>) {
        match outcome {
            Err(RPCError::Unreachable(_)) => {}
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_call_to_an_address_nobody_listens_on_is_unreachable() {
        let url = url_nobody_listens_on();
        let client = PeerClient::new(Duration::from_millis(300), None, None);
        let call = client.call::<_, u64>(&url, paths::IDENTITY, &(), Duration::from_secs(5));
        assert!(matches!(call.await, Err(CallError::Unreachable(_))));
        let (mut connection, _) = connection_to(&url).await;
        let option = RPCOption::new(Duration::from_secs(5));
        assert_unreachable(connection.append_entries(heartbeat(), option).await);
        let vote = openraft::raft::VoteRequest::new(Vote::new(1, 1), None);
        let option = RPCOption::new(Duration::from_secs(5));
        assert_unreachable(connection.vote(vote, option).await);
    }

    /// A partition's proxy accepts the connection and drops it: raft's calls must see a peer they
    /// cannot reach (and back off), not a bad answer they retry at once; a forwarded call is told
    /// the connection closed, whose outcome is unknown, not that it never arrived.
    #[tokio::test]
    async fn a_connection_closed_before_any_answer_is_unreachable_to_raft() {
        let url = url_that_closes_every_connection().await;
        let (mut connection, _) = connection_to(&url).await;
        let option = RPCOption::new(Duration::from_secs(5));
        assert_unreachable(connection.append_entries(heartbeat(), option).await);
        let vote = openraft::raft::VoteRequest::new(Vote::new(1, 1), None);
        let option = RPCOption::new(Duration::from_secs(5));
        assert_unreachable(connection.vote(vote, option).await);
        let client = PeerClient::new(Duration::from_millis(300), None, None);
        let call = client.call::<_, u64>(&url, paths::FORWARD_WRITE, &(), Duration::from_secs(5));
        let outcome = call.await;
        assert!(
            matches!(outcome, Err(CallError::ClosedBeforeAnswer(_))),
            "{outcome:?}"
        );
    }

    /// An address that never answers the connect (a documentation address, not routed): the
    /// connect timeout is a failure to reach the peer, not a call that may have taken effect.
    #[tokio::test]
    async fn a_connect_that_times_out_is_unreachable() {
        let client = PeerClient::new(Duration::from_millis(200), None, None);
        let call = client.call::<_, u64>(
            "http://192.0.2.1:7",
            paths::FORWARD_WRITE,
            &(),
            Duration::from_secs(5),
        );
        let outcome = call.await;
        assert!(
            matches!(outcome, Err(CallError::Unreachable(_))),
            "{outcome:?}"
        );
    }

    /// A member of an older build has no pre-vote path and answers 404: its pre-vote counts as
    /// granted, as openraft's default for a network without pre-votes, so a cluster of mixed
    /// builds still elects (the real vote that follows is asked of it properly). Any other
    /// failed pre-vote is not a grant.
    #[tokio::test]
    async fn a_peer_without_pre_votes_is_counted_as_granting_and_a_missing_one_is_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, axum::Router::new()).await });
        let (mut connection, _) = connection_to(&url).await;
        let hypothetical = Vote::new(7, 1);
        let request = openraft::raft::VoteRequest::new(hypothetical, None);
        let option = RPCOption::new(Duration::from_secs(5));
        let answer = connection.pre_vote(request, option).await.expect("granted");
        assert!(answer.is_granted_to(&hypothetical), "{answer:?}");

        let (mut connection, _) = connection_to(&url_nobody_listens_on()).await;
        let request = openraft::raft::VoteRequest::new(hypothetical, None);
        let option = RPCOption::new(Duration::from_secs(5));
        assert_unreachable(connection.pre_vote(request, option).await);
    }

    /// A peer that is down for many of openraft's attempts costs one warning, not one per attempt.
    #[tokio::test]
    async fn many_failed_calls_to_a_peer_that_is_down_log_one_warning() {
        let (mut connection, failures) = connection_to(&url_nobody_listens_on()).await;
        for _ in 0..50 {
            let option = RPCOption::new(Duration::from_secs(5));
            assert_unreachable(connection.append_entries(heartbeat(), option).await);
        }
        assert_eq!(failures.failures_in_a_row(2), 50);
        assert_eq!(failures.warnings_logged(), 1);
    }
}
