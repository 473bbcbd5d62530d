//! The tools' client of etcd's gRPC API (`revkv follow-etcd`, `revkv bench --target etcd-grpc`,
//! the etcd test harness): the clients generated from etcd's protos (revkv-etcd-proto) over one
//! tonic channel, with what the `etcd-client` crate gave them before it.
//!
//! That crate's build script needs a system protoc, which the shipped binary must not: the protos
//! are compiled once, in revkv-etcd-proto, with a protoc from crates.io. What the tools used of
//! etcd-client is kept as it was, so that they behave as before:
//! - the endpoints: `http://host:port`, or `host:port` (taken as `http://`); an `https://` URL is
//!   refused, as the tools never spoke TLS to etcd's gRPC port; every endpoint of one client is
//!   behind one balanced channel, as etcd-client's was;
//! - the per-call timeout and the connect timeout of [`ConnectOptions`], tonic's own (the same
//!   `Endpoint` settings etcd-client made);
//! - with a user, one `Authenticate` when connecting, and its token sent as the `token` metadata
//!   of every call after it (not refreshed: etcd-client did not by default either);
//! - a Watch or LeaseKeepAlive stream fed through a bounded channel of 100 requests, and a
//!   keep-alive that refuses a lease whose first answer has no TTL left;
//! - the texts of its errors ([`EtcdError`]).

mod error;

use std::time::Duration;

use revkv_etcd_proto::etcdserverpb::{
    self, auth_client::AuthClient, cluster_client, kv_client, lease_client, watch_client,
    AuthenticateRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse, WatchCreateRequest,
    WatchRequest, WatchResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::channel::Change;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Streaming;

pub use error::EtcdError;
pub use revkv_etcd_proto::{etcdserverpb as pb, mvccpb};

/// The channel every client of one [`EtcdClient`] shares: its endpoints, balanced, with the auth
/// token added to each call.
pub type EtcdChannel = InterceptedService<Channel, AuthToken>;
/// etcd's KV service.
pub type KvClient = kv_client::KvClient<EtcdChannel>;
/// etcd's Watch service; [`WatchStream`] opens its streams.
pub type WatchClient = watch_client::WatchClient<EtcdChannel>;
/// etcd's Lease service; [`LeaseKeepAlive`] opens its keep-alive streams.
pub type LeaseClient = lease_client::LeaseClient<EtcdChannel>;
/// etcd's Cluster service (membership).
pub type ClusterClient = cluster_client::ClusterClient<EtcdChannel>;

/// How many requests a Watch or LeaseKeepAlive stream holds before the sender waits (etcd-client's
/// bound, kept).
const STREAM_REQUEST_BUFFER: usize = 100;
/// How many endpoint changes the balanced channel buffers (etcd-client's, kept).
const ENDPOINT_CHANGE_BUFFER: usize = 64;
/// The metadata key etcd reads the auth token from.
const TOKEN_KEY: &str = "token";

/// How to connect: timeouts and the user, all optional.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    user: Option<(String, String)>,
}

impl ConnectOptions {
    /// No timeouts and no user.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every call fails after `timeout` without an answer (tonic's request timeout, which it
    /// reports as `CANCELLED` "Timeout expired").
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// A connection attempt fails after `timeout`.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Authenticate as `name` when connecting, and send the token with every call.
    pub fn with_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }
}

/// Adds the auth token, when there is one, to every call made through an [`EtcdChannel`].
#[derive(Debug, Clone, Default)]
pub struct AuthToken(Option<AsciiMetadataValue>);

impl tonic::service::Interceptor for AuthToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().append(TOKEN_KEY, token.clone());
        }
        Ok(request)
    }
}

/// A connection to etcd's gRPC API (or revkv's `--listen-grpc`, which speaks it): cheap to
/// clone, every clone and every client it makes sharing the one channel.
#[derive(Clone)]
pub struct EtcdClient {
    channel: EtcdChannel,
    /// The channel's list of endpoints, kept open for as long as the channel is used (its
    /// balancer reads endpoint changes from it).
    _endpoints: mpsc::Sender<Change<Uri, Endpoint>>,
}

impl EtcdClient {
    /// A client of `endpoints`, balanced over all of them. Connecting is lazy (an unreachable
    /// member shows in the first calls' errors), except that with a user the `Authenticate`
    /// call is made here.
    pub async fn connect(
        endpoints: &[impl AsRef<str>],
        options: ConnectOptions,
    ) -> Result<Self, EtcdError> {
        let endpoints = endpoints
            .iter()
            .map(|url| endpoint(url.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(EtcdError::InvalidArgs("empty endpoints".into()));
        }
        let (balanced, changes) = Channel::balance_channel(ENDPOINT_CHANGE_BUFFER);
        for endpoint in endpoints {
            changes
                .send(Change::Insert(endpoint.uri().clone(), endpoint))
                .await
                .map_err(|_| {
                    EtcdError::Internal(
                        "failed to insert endpoint into the balanced channel".into(),
                    )
                })?;
        }
        let mut token = AuthToken::default();
        if let Some((name, password)) = options.user {
            // Over the channel without a token: Authenticate is how the token is obtained.
            let mut auth = AuthClient::new(InterceptedService::new(balanced.clone(), token));
            let answer = auth
                .authenticate(AuthenticateRequest { name, password })
                .await?
                .into_inner();
            token = AuthToken(Some(answer.token.parse()?));
        }
        Ok(EtcdClient {
            channel: InterceptedService::new(balanced, token),
            _endpoints: changes,
        })
    }

    /// `count` clients numbered from `first`, client j connected to endpoint j mod n only, so
    /// that each is its own connection and the connections spread evenly over the members.
    pub async fn connect_numbered(
        endpoints: &[String],
        first: usize,
        count: usize,
    ) -> Result<Vec<EtcdClient>, String> {
        if endpoints.is_empty() {
            return Err("no endpoints to connect to".into());
        }
        let mut clients = Vec::with_capacity(count);
        for index in first..first + count {
            let endpoint = &endpoints[index % endpoints.len()];
            let client = EtcdClient::connect(&[endpoint], ConnectOptions::new())
                .await
                .map_err(|error| format!("cannot make a gRPC client of {endpoint}: {error}"))?;
            clients.push(client);
        }
        Ok(clients)
    }

    /// A client of etcd's KV service on this connection.
    pub fn kv(&self) -> KvClient {
        KvClient::new(self.channel.clone())
    }

    /// A client of etcd's Watch service on this connection.
    pub fn watch(&self) -> WatchClient {
        WatchClient::new(self.channel.clone())
    }

    /// A client of etcd's Lease service on this connection.
    pub fn lease(&self) -> LeaseClient {
        LeaseClient::new(self.channel.clone())
    }

    /// A client of etcd's Cluster service on this connection.
    pub fn cluster(&self) -> ClusterClient {
        ClusterClient::new(self.channel.clone())
    }
}

/// The tonic endpoint of one URL, with the options' timeouts.
fn endpoint(url: &str, options: &ConnectOptions) -> Result<Endpoint, EtcdError> {
    let url = if url.starts_with("http://") {
        url.to_string()
    } else if url.starts_with("https://") {
        return Err(EtcdError::InvalidArgs(
            "HTTPS URLs are not supported: revkv's etcd clients speak gRPC without TLS".into(),
        ));
    } else {
        format!("http://{url}")
    };
    let uri: Uri = url
        .parse()
        .map_err(|error| EtcdError::InvalidUri(format!("{error}")))?;
    let mut endpoint = Channel::builder(uri);
    if let Some(timeout) = options.timeout {
        endpoint = endpoint.timeout(timeout);
    }
    if let Some(timeout) = options.connect_timeout {
        endpoint = endpoint.connect_timeout(timeout);
    }
    Ok(endpoint)
}

/// The end of the range of every key that starts with `prefix` (etcd's `WithPrefix`): `prefix`
/// with its last byte below 0xff raised by one and what follows it dropped, or `[0]` (to the end
/// of the keyspace) when there is no such byte. An empty prefix means every key, which etcd
/// spells as the key `[0]` with the range end `[0]`.
pub fn prefix_range(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    if prefix.is_empty() {
        return (vec![0], vec![0]);
    }
    let end = match prefix.iter().rposition(|byte| *byte < 0xff) {
        Some(last) => {
            let mut end = prefix[..=last].to_vec();
            end[last] += 1;
            end
        }
        None => vec![0],
    };
    (prefix.to_vec(), end)
}

/// One Watch stream: the watches it was opened with and those added to it share it, as
/// clientv3 multiplexes a process's watches.
pub struct WatchStream {
    requests: mpsc::Sender<WatchRequest>,
    responses: Streaming<WatchResponse>,
}

impl WatchStream {
    /// Opens a stream on `client` whose first request creates the watch `create`.
    pub async fn open(
        client: &mut WatchClient,
        create: WatchCreateRequest,
    ) -> Result<Self, EtcdError> {
        let (requests, receiver) = mpsc::channel(STREAM_REQUEST_BUFFER);
        requests
            .send(create_request(create))
            .await
            .map_err(|error| EtcdError::Watch(error.to_string()))?;
        let responses = client
            .watch(ReceiverStream::new(receiver))
            .await?
            .into_inner();
        Ok(WatchStream {
            requests,
            responses,
        })
    }

    /// Creates one more watch on this stream; its `created` answer comes through
    /// [`WatchStream::message`].
    pub async fn watch(&mut self, create: WatchCreateRequest) -> Result<(), EtcdError> {
        self.requests
            .send(create_request(create))
            .await
            .map_err(|error| EtcdError::Watch(error.to_string()))
    }

    /// The next answer of the stream, or `None` once the server ended it.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, EtcdError> {
        Ok(self.responses.message().await?)
    }
}

fn create_request(create: WatchCreateRequest) -> WatchRequest {
    WatchRequest {
        request_union: Some(etcdserverpb::watch_request::RequestUnion::CreateRequest(
            create,
        )),
    }
}

/// One lease's LeaseKeepAlive stream.
pub struct LeaseKeepAlive {
    id: i64,
    requests: mpsc::Sender<LeaseKeepAliveRequest>,
    responses: Streaming<LeaseKeepAliveResponse>,
}

impl LeaseKeepAlive {
    /// Opens a keep-alive stream for lease `id` and keeps it alive once; a lease the server
    /// answers with no TTL left (it does not have it) is an error.
    pub async fn open(client: &mut LeaseClient, id: i64) -> Result<Self, EtcdError> {
        let (requests, receiver) = mpsc::channel(STREAM_REQUEST_BUFFER);
        requests
            .send(LeaseKeepAliveRequest { id })
            .await
            .map_err(|error| EtcdError::LeaseKeepAlive(error.to_string()))?;
        let mut responses = client
            .lease_keep_alive(ReceiverStream::new(receiver))
            .await?
            .into_inner();
        let id = match responses.message().await? {
            Some(first) if first.ttl <= 0 => {
                return Err(EtcdError::LeaseKeepAlive("lease not found".into()))
            }
            Some(first) => first.id,
            // etcd-client's words for a stream that ended before its first answer.
            None => return Err(EtcdError::Watch("failed to create lease keeper".into())),
        };
        Ok(LeaseKeepAlive {
            id,
            requests,
            responses,
        })
    }

    /// Asks for one more keep-alive; its answer comes through [`LeaseKeepAlive::message`].
    pub async fn keep_alive(&mut self) -> Result<(), EtcdError> {
        self.requests
            .send(LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|error| EtcdError::LeaseKeepAlive(error.to_string()))
    }

    /// The next answer of the stream, or `None` once the server ended it.
    pub async fn message(&mut self) -> Result<Option<LeaseKeepAliveResponse>, EtcdError> {
        Ok(self.responses.message().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_after_its_last_byte_below_0xff() {
        assert_eq!(prefix_range(b"ab"), (b"ab".to_vec(), b"ac".to_vec()));
        assert_eq!(
            prefix_range(&[b'a', 0xff, 0xff]),
            (vec![b'a', 0xff, 0xff], b"b".to_vec())
        );
        assert_eq!(prefix_range(&[0xff]), (vec![0xff], vec![0]));
        assert_eq!(prefix_range(b""), (vec![0], vec![0]));
    }

    #[test]
    fn endpoints_are_plain_http_with_or_without_the_scheme() {
        let options = ConnectOptions::new().with_timeout(Duration::from_secs(1));
        let bare = endpoint("127.0.0.1:2379", &options).expect("host:port");
        assert_eq!(bare.uri().to_string(), "http://127.0.0.1:2379/");
        let http = endpoint("http://127.0.0.1:2379", &options).expect("http URL");
        assert_eq!(http.uri().to_string(), "http://127.0.0.1:2379/");
        let https = endpoint("https://127.0.0.1:2379", &options).unwrap_err();
        assert!(https
            .to_string()
            .starts_with("invalid arguments: HTTPS URLs"));
        let garbage = endpoint("not a host", &options).unwrap_err();
        assert!(
            garbage.to_string().starts_with("invalid uri: "),
            "{garbage}"
        );
    }

    #[tokio::test]
    async fn no_endpoints_is_refused_in_etcd_clients_words() {
        let refused = EtcdClient::connect(&[] as &[&str], ConnectOptions::new())
            .await
            .err()
            .expect("no endpoints refused");
        assert_eq!(refused.to_string(), "invalid arguments: empty endpoints");
    }

    #[test]
    fn the_token_goes_with_every_call_once_there_is_one() {
        use tonic::service::Interceptor;
        let mut without = AuthToken::default();
        let request = without.call(tonic::Request::new(())).unwrap();
        assert!(request.metadata().get(TOKEN_KEY).is_none());
        let mut with = AuthToken(Some("abc.1".parse().unwrap()));
        let request = with.call(tonic::Request::new(())).unwrap();
        assert_eq!(request.metadata().get(TOKEN_KEY).unwrap(), "abc.1");
    }
}
