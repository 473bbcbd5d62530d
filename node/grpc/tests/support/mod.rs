//! One real single-member revkv (`revkv_node::Node`, real redb files in a temporary directory)
//! with the gRPC front-end beside it, and an `etcd-client` connected to it.

use std::time::Duration;

use revkv_grpc::{GrpcLimits, GrpcServer};
use revkv_node::{Node, NodeConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub struct GrpcMember {
    pub node: Node,
    pub endpoint: String,
    stop: Option<oneshot::Sender<()>>,
    _directory: tempfile::TempDir,
}

impl GrpcMember {
    pub async fn start() -> GrpcMember {
        GrpcMember::start_with_watch_limits(revkv_node::watch::WatchLimits::default()).await
    }

    /// A member whose watches (the hub's buffers and each gRPC stream's queue) keep `watch`.
    pub async fn start_with_watch_limits(watch: revkv_node::watch::WatchLimits) -> GrpcMember {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let bind = || async { TcpListener::bind("127.0.0.1:0").await.expect("bind") };
        let (client, peer, grpc) = (bind().await, bind().await, bind().await);
        let endpoint = format!("http://{}", grpc.local_addr().unwrap());
        let config = NodeConfig::single_member(
            directory.path().join("data"),
            client.local_addr().unwrap(),
            peer.local_addr().unwrap(),
        )
        .advertising_grpc_url(endpoint.clone());
        let config = NodeConfig {
            watch: watch.clone(),
            ..config
        };
        let node = Node::start_with_listeners(config, client, peer)
            .await
            .expect("the member starts");
        let server = GrpcServer {
            backend: node.backend().clone(),
            metrics: Some(node.backend().metrics().clone()),
            limits: GrpcLimits {
                watch_stream_buffer_bytes: watch.stream_buffer_bytes,
                ..GrpcLimits::default()
            },
        };
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(server.serve(grpc, None, async move {
            let _ = stopped.await;
        }));
        let member = GrpcMember {
            node,
            endpoint,
            stop: Some(stop),
            _directory: directory,
        };
        member.wait_until_writable().await;
        member
    }

    pub async fn client(&self) -> etcd_client::Client {
        let options = etcd_client::ConnectOptions::new()
            .with_timeout(Duration::from_secs(10))
            .with_connect_timeout(Duration::from_secs(5));
        etcd_client::Client::connect([self.endpoint.as_str()], Some(options))
            .await
            .expect("connect to the gRPC port")
    }

    /// Polls a put through gRPC until the member has elected itself and answers (deadline 30 s).
    async fn wait_until_writable(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut client = self.client().await;
        loop {
            match client.put("probe", "", None).await {
                Ok(_) => return,
                Err(error) if tokio::time::Instant::now() >= deadline => {
                    panic!("the member did not answer gRPC in time: {error}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.node.shutdown().await.expect("a clean shutdown");
    }

    #[allow(dead_code)] // Used by some of the test files that share this module.
    pub fn metrics_text(&self) -> String {
        self.node
            .backend()
            .metrics()
            .render()
            .expect("metrics render")
    }
}

/// The longest a watch test waits for the next response.
pub const WATCH_DEADLINE: Duration = Duration::from_secs(20);

/// The next response of a watch stream, within `WATCH_DEADLINE`.
pub async fn next_watch_response(
    stream: &mut etcd_client::WatchStream,
) -> etcd_client::WatchResponse {
    tokio::time::timeout(WATCH_DEADLINE, stream.message())
        .await
        .expect("a watch response in time")
        .expect("the stream is healthy")
        .expect("the stream is open")
}

/// The gRPC status of a failed call.
// Not every test file checks error statuses.
#[allow(dead_code)]
pub fn grpc_status(error: etcd_client::Error) -> (tonic::Code, String) {
    match error {
        etcd_client::Error::GRpcStatus(status) => (status.code(), status.message().to_string()),
        other => panic!("expected a gRPC status, got {other}"),
    }
}
