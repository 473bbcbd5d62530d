//! The gRPC port's settings (`--listen-grpc`): the member's own limits where the HTTP API has the
//! same one (connections and their HTTP/2 streams, keep-alive streams, backups, the idle
//! keep-alive timeout, auth), the watches one `Watch` stream may hold, and the JSON
//! gateway's (`--max-gateway-streams`, `--grpc-cors`), and the etcd version it reports
//! (`--emulated-etcd-version`).

use revkv_grpc::cors::CorsOrigins;
use revkv_grpc::etcd_version::EtcdVersion;
use revkv_grpc::gateway::GatewayLimits;
use revkv_grpc::GrpcLimits;

use super::ServeArgs;

/// The most gateway streams a member may be told to hold.
const MOST_GATEWAY_STREAMS: usize = 100_000;

impl ServeArgs {
    /// The gRPC port's limits; an error names the flag that is out of range.
    pub fn grpc_limits(&self) -> Result<GrpcLimits, String> {
        let http = self.http_limits()?;
        let defaults = GatewayLimits::default();
        let max_gateway_streams = self.max_gateway_streams.unwrap_or(defaults.max_streams);
        if !(1..=MOST_GATEWAY_STREAMS).contains(&max_gateway_streams) {
            return Err(format!(
                "--max-gateway-streams must be between 1 and {MOST_GATEWAY_STREAMS}"
            ));
        }
        let cors = match &self.grpc_cors {
            Some(text) => {
                CorsOrigins::parse(text).map_err(|error| format!("--grpc-cors: {error}"))?
            }
            None => CorsOrigins::default(),
        };
        let etcd_version = match &self.emulated_etcd_version {
            Some(text) => EtcdVersion::parse(text)
                .map_err(|error| format!("--emulated-etcd-version: {error}"))?,
            None => EtcdVersion::DEFAULT,
        };
        let watch_limits = self.watch_limits()?;
        let max_watches = watch_limits.max_watchers;
        let max_watches_per_stream = self.max_watches_per_stream.unwrap_or(max_watches);
        if !(1..=max_watches).contains(&max_watches_per_stream) {
            return Err(format!(
                "--max-watches-per-stream must be between 1 and --max-watches ({max_watches})"
            ));
        }
        Ok(GrpcLimits {
            connections: self.client_connection_limits()?,
            max_watches_per_stream,
            watch_stream_buffer_bytes: watch_limits.stream_buffer_bytes,
            max_keepalive_streams: http.lease_stream.max_streams,
            max_snapshot_streams: http.max_snapshot_streams,
            auth: http.auth,
            gateway: GatewayLimits {
                max_streams: max_gateway_streams,
                keepalive_idle_timeout: http.lease_stream.idle_timeout,
            },
            cors,
            etcd_version,
            ..GrpcLimits::default()
        })
    }
}
