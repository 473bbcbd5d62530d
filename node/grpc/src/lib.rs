//! etcd's v3 gRPC API as a front-end of a revkv member: the KV, Watch, Lease, Cluster,
//! Maintenance and Auth services over revkv-node's `KvBackend`, and etcd's Lock and Election
//! services over those (`lock`, `election`), so etcdctl, the etcd client libraries and tools
//! built on them talk to revkv unchanged.
//!
//! This is its own crate because it is the only one that serves gRPC, as only `node/src/http`
//! serves HTTP, so that revkv-node stays free of tonic. The generated types come from etcd's protos,
//! vendored and compiled in `proto/` (revkv-etcd-proto, which revkv-tools shares for its etcd
//! clients). It is a thin adapter: it parses etcd's messages into revkv's requests
//! (`convert`), calls the backend or revkv-node's shared seams (`writes`, `range_view`), renders
//! the answer, and maps every error to etcd's status code and message in one place (`error`).
//! No rule of what a request means lives only here.
//!
//! The same port answers etcd's plain-HTTP paths (`client_port_http`) and its v3 JSON gateway
//! (`gateway`, `gateway_stream`), which calls these services in-process.

pub mod auth;
pub mod auth_service;
pub mod client_port_http;
pub mod cluster;
pub mod convert;
pub mod cors;
pub mod election;
pub mod error;
pub mod etcd_version;
pub mod gateway;
mod gateway_stream;
mod gateway_wire;
pub mod kv;
pub mod lease;
pub mod lock;
mod lock_queue;
pub mod maintenance;
mod probes;
mod range_stream;
pub mod watch;
mod watch_fragment;
mod watch_progress;
mod watch_queue;

use std::future::Future;
use std::sync::Arc;

use revkv_metrics::Metrics;
use revkv_node::auth::AuthOptions;
use revkv_node::KvBackend;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The generated protobuf and gRPC types of etcd's API (revkv-etcd-proto, which revkv-tools
/// shares for its etcd clients), under the name this crate's modules use.
pub use revkv_etcd_proto as proto;

use proto::etcdserverpb::{
    auth_server::AuthServer, cluster_server::ClusterServer, kv_server::KvServer,
    lease_server::LeaseServer, maintenance_server::MaintenanceServer, watch_server::WatchServer,
};
use proto::v3electionpb::election_server::ElectionServer;
use proto::v3lockpb::lock_server::LockServer;

/// Bounds of the gRPC listener.
#[derive(Clone, Debug)]
pub struct GrpcLimits {
    /// Largest request message, in bytes (etcd's `--max-request-bytes` plus gRPC overhead; etcd's
    /// default is 1.5 MiB). A larger message is refused by tonic before it is decoded.
    pub max_request_bytes: usize,
    /// Open `LeaseKeepAlive` streams per member, as `--max-lease-keepalive-streams` bounds HTTP's.
    pub max_keepalive_streams: usize,
    /// Watches one `Watch` stream may hold at once (`--max-watches-per-stream`; by default the
    /// member's `--max-watches`, which bounds them all, so no stream has a lower limit of its own,
    /// as on etcd).
    pub max_watches_per_stream: usize,
    /// Bytes of responses one `Watch` stream queues for a client that reads slowly
    /// (`--watch-buffer-bytes`, the bound the hub keeps on each watch's own buffer).
    pub watch_stream_buffer_bytes: usize,
    /// The port's connection limits, the client listener's (`--max-concurrent-streams` bounds
    /// the HTTP/2 streams of one connection: etcd's default, 2^32-1).
    pub connections: revkv_tls::ConnectionLimits,
    /// Backups (`Snapshot`) streaming at once through the gRPC port; one more is
    /// `ResourceExhausted`.
    pub max_snapshot_streams: usize,
    /// Token lifetime and concurrent password checks of the `Auth` service (the member's, as
    /// the HTTP API's).
    pub auth: AuthOptions,
    /// The JSON gateway's streams.
    pub gateway: gateway::GatewayLimits,
    /// Which origins a browser may call the port's plain-HTTP paths from (`--grpc-cors`).
    pub cors: cors::CorsOrigins,
    /// The etcd version `Status` and `/version` report (`--emulated-etcd-version`).
    pub etcd_version: etcd_version::EtcdVersion,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        GrpcLimits {
            // The default value limit (1 MiB) plus a key and room for the message framing.
            max_request_bytes: 2 * 1024 * 1024,
            max_keepalive_streams: 10_000,
            max_watches_per_stream: revkv_node::watch::WatchLimits::default().max_watchers,
            watch_stream_buffer_bytes: revkv_node::watch::WatchLimits::default()
                .stream_buffer_bytes,
            connections: revkv_tls::ConnectionLimits::default(),
            max_snapshot_streams: 2,
            auth: AuthOptions::default(),
            gateway: gateway::GatewayLimits::default(),
            cors: cors::CorsOrigins::default(),
            etcd_version: etcd_version::EtcdVersion::DEFAULT,
        }
    }
}

/// What the gRPC front-end serves and with which settings.
pub struct GrpcServer<B> {
    pub backend: Arc<B>,
    /// Conflict metrics are recorded here when given (the member's `GET /metrics` registry).
    pub metrics: Option<Arc<Metrics>>,
    pub limits: GrpcLimits,
}

impl<B: KvBackend> GrpcServer<B> {
    /// Serves etcd's API on `listener` until `shutdown` completes, over TLS when `tls` is given
    /// (the client listener's settings), plain HTTP/2 otherwise.
    pub async fn serve(
        self,
        listener: TcpListener,
        tls: Option<&revkv_tls::ServerTls>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let GrpcServer {
            backend,
            metrics,
            limits,
        } = self;
        let routes = etcd_services(backend.clone(), metrics.clone(), &limits);
        let plain_http = client_port_http::routes(backend.clone(), metrics, limits.etcd_version);
        // Served by revkv-tls's listener like the client HTTP API, so the gRPC port gets the same
        // TLS (and certificate reloading) when `tls` is given; hyper tells HTTP/2 (gRPC) by its
        // connection preface.
        // Every call passes the auth gate first (`auth.rs`).
        let (gate_backend, gate_options) = (backend, limits.auth.clone());
        let grpc =
            routes
                .into_axum_router()
                .layer(axum::middleware::from_fn(move |request, next| {
                    auth::gate(gate_backend.clone(), gate_options.clone(), request, next)
                }));
        // The JSON gateway calls the gated router, so its calls pass the same gate.
        let gateway = gateway::routes(grpc.clone(), limits.max_request_bytes, &limits.gateway);
        // etcd's plain-HTTP paths need no token, so they join after the gate; CORS is theirs
        // alone, as on etcd (gRPC is never called from a browser).
        let cors = Arc::new(limits.cors.clone());
        let plain =
            plain_http
                .merge(gateway)
                .layer(axum::middleware::from_fn(move |request, next| {
                    cors::answer(cors.clone(), request, next)
                }));
        let router = grpc.merge(plain);
        // revkv-tls's connection loop sets TCP_NODELAY on every connection (a gRPC answer is
        // several small writes, and Nagle's algorithm would hold the last one for the client's
        // delayed ACK, about 40 ms a call) and bounds connections with the client listener's
        // limits.
        revkv_tls::serve_with_limits(listener, tls, limits.connections, router, shutdown).await
    }
}

/// etcd's six services on `backend`, each refusing a request larger than the limit.
fn etcd_services<B: KvBackend>(
    backend: Arc<B>,
    metrics: Option<Arc<Metrics>>,
    limits: &GrpcLimits,
) -> tonic::service::Routes {
    let max = limits.max_request_bytes;
    let kv = KvServer::new(kv::KvService {
        backend: backend.clone(),
        metrics,
        target_chunk_bytes: max,
    })
    .max_decoding_message_size(max);
    let lease = LeaseServer::new(lease::LeaseService {
        backend: backend.clone(),
        keepalive_streams: Arc::new(Semaphore::new(limits.max_keepalive_streams)),
    })
    .max_decoding_message_size(max);
    let cluster = ClusterServer::new(cluster::ClusterService {
        backend: backend.clone(),
    })
    .max_decoding_message_size(max);
    let watch = WatchServer::new(watch::WatchService {
        backend: backend.clone(),
        max_watches_per_stream: limits.max_watches_per_stream,
        stream_buffer_bytes: limits.watch_stream_buffer_bytes,
        fragment_bytes: limits.max_request_bytes,
    })
    .max_decoding_message_size(max);
    let auth = AuthServer::new(auth_service::AuthService {
        backend: backend.clone(),
        options: limits.auth.clone(),
        password_checks: Arc::new(Semaphore::new(
            limits.auth.max_concurrent_password_checks.max(1),
        )),
    })
    .max_decoding_message_size(max);
    let lock =
        LockServer::new(lock::LockService::new(backend.clone())).max_decoding_message_size(max);
    let election = ElectionServer::new(election::ElectionService::new(backend.clone()))
        .max_decoding_message_size(max);
    let maintenance = MaintenanceServer::new(maintenance::MaintenanceService {
        backend,
        snapshot_streams: Arc::new(Semaphore::new(limits.max_snapshot_streams)),
        etcd_version: limits.etcd_version,
    })
    .max_decoding_message_size(max);
    tonic::service::Routes::builder()
        .add_service(kv)
        .add_service(lease)
        .add_service(cluster)
        .add_service(maintenance)
        .add_service(watch)
        .add_service(auth)
        .add_service(lock)
        .add_service(election)
        .clone()
        .routes()
}
