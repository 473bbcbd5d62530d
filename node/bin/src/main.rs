//! The `revkv` binary: `revkv serve` runs a member (the `revkv-node` library); `revkv ctl` talks
//! to a running cluster; `revkv bench` drives load at a cluster; `revkv chaos` runs a cluster under
//! injected faults (those three are `revkv-tools`); `revkv snapshot` inspects and restores backups.
//! This file only wires them together.

mod allocator;
mod serve_config;
mod snapshot_command;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use revkv_node::Node;
use serve_config::{LogFormat, ServeArgs};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "revkv",
    version,
    about = "A replicated, revisioned key-value store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up, so the size gap between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a member (with no flags: a single-member cluster in ./revkv-data on 127.0.0.1:7001).
    // A flag given twice takes its last value, as etcd's flags do, so a script (or the test
    // harness) can override a default it put earlier on the command line.
    #[command(args_override_self = true)]
    Serve(ServeArgs),
    /// Read, write, watch and administer a running cluster (`revkv ctl --help`).
    Ctl(revkv_tools::ctl::CtlArgs),
    /// Measure a running revkv or etcd cluster with a workload (put, get, cas).
    Bench(revkv_tools::bench::BenchArgs),
    /// Inspect a backup file, or restore a new cluster's member from one (`revkv snapshot --help`).
    Snapshot(snapshot_command::SnapshotArgs),
    /// Run a three-member cluster under injected faults and check what it did (`scripts/chaos.sh`).
    Chaos(revkv_tools::chaos::ChaosArgs),
    /// Replay etcd's changes into a revkv restored from an etcd snapshot, revision for revision,
    /// until the switch (docs/guide/etcd.md: "Moving from etcd without stopping it").
    FollowEtcd(revkv_tools::follow_etcd::FollowEtcdArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(args) => serve_on_its_runtime(args),
        Command::Ctl(args) => on_the_default_runtime(revkv_tools::ctl::run(args)),
        Command::Bench(args) => on_the_default_runtime(revkv_tools::bench::run(args)),
        Command::Chaos(args) => on_the_default_runtime(revkv_tools::chaos::run(args)),
        Command::Snapshot(args) => snapshot_command::run(args),
        Command::FollowEtcd(args) => on_the_default_runtime(revkv_tools::follow_etcd::run(args)),
    }
}

/// Runs a subcommand on the runtime every subcommand but `serve` gets: without tokio's LIFO slot,
/// so that gRPC requests and answers share writes (`revkv_node::runtime` says why).
fn on_the_default_runtime(command: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    run_on(revkv_node::runtime::runtime_builder(), command)
}

/// Builds the runtime `builder` describes and runs `command` on it to its end.
fn run_on(
    mut builder: tokio::runtime::Builder,
    command: impl std::future::Future<Output = ExitCode>,
) -> ExitCode {
    match builder.build() {
        Ok(runtime) => runtime.block_on(command),
        Err(error) => fail(&format!("cannot start the async runtime: {error}")),
    }
}

/// `revkv serve`: the settings first, because the runtime's worker threads are one of them.
fn serve_on_its_runtime(args: ServeArgs) -> ExitCode {
    let args = match args.with_config_file() {
        Ok(args) => args,
        Err(error) => return fail(&error),
    };
    match revkv_node::runtime::runtime_builder_with_workers(args.worker_threads) {
        Ok(builder) => run_on(builder, serve(args)),
        Err(error) => fail(&format!("--worker-threads: {error}")),
    }
}

async fn serve(args: ServeArgs) -> ExitCode {
    init_logging(args.log_format.unwrap_or_default());
    let listen_grpc = args.listen_grpc;
    let grpc_limits = match args.grpc_limits() {
        Ok(limits) => limits,
        Err(error) => return fail(&error),
    };
    let config = match args.into_node_config() {
        Ok(config) => config,
        Err(error) => return fail(&error),
    };
    let client_tls = config.client_tls.clone();
    // The gRPC port is bound before the member starts, so that once the HTTP port answers ready
    // the gRPC port accepts connections too (they wait in the backlog until its server runs): a
    // client that waits for readiness and then dials gRPC is never refused.
    let grpc_listener = match listen_grpc {
        Some(address) => match bind_grpc(address).await {
            Ok(listener) => Some(listener),
            Err(error) => return fail(&error),
        },
        None => None,
    };
    let node = match Node::start(config).await {
        Ok(node) => node,
        Err(error) => return fail(&error.to_string()),
    };
    if let Err(error) = allocator::report_to(node.backend().metrics()) {
        tracing::warn!(%error, "the allocator's figures will be missing from the metrics");
    }
    let grpc = match grpc_listener {
        Some(listener) => match start_grpc(&node, listener, client_tls, grpc_limits) {
            Ok(stop) => Some(stop),
            Err(error) => {
                let _ = node.shutdown().await;
                return fail(&error);
            }
        },
        None => None,
    };
    tokio::select! {
        () = wait_for_stop_signal() => {}
        reason = node.stopped_by_fault() => fail_stop(&reason),
    }
    tracing::info!("stopping");
    if let Some(stop) = grpc {
        let _ = stop.send(());
    }
    match node.shutdown().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error.to_string()),
    }
}

/// The exit status of a member that stopped because its disk failed (sysexits' EX_IOERR).
const EXIT_DISK_FAULT: i32 = 74;

/// Ends the process at once after a failed write or fsync of the member's data: no graceful
/// shutdown, which would write more to files nobody can trust now, and no further answer to anyone.
fn fail_stop(reason: &str) -> ! {
    tracing::error!(
        %reason,
        "the member stopped because a write or fsync of its data failed; it acknowledged nothing \
         after the failure and exits now. Fix the cause (free disk space, replace the disk) and \
         start it again: it recovers from its raft log and the other members. If its files do \
         not open, restore it from a snapshot, or remove it from the cluster and add it again"
    );
    eprintln!("revkv: the member stopped because its disk failed: {reason}");
    std::process::exit(EXIT_DISK_FAULT);
}

/// Binds the gRPC port (`--listen-grpc`); "cannot listen" in the error is what the test harness
/// looks for to retry a lost port race.
async fn bind_grpc(address: std::net::SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| format!("cannot listen for gRPC on {address}: {error}"))
}

/// Starts etcd's gRPC API beside the member on `listener`, with the client listener's TLS; the
/// returned sender stops it.
fn start_grpc(
    node: &Node,
    listener: tokio::net::TcpListener,
    tls: Option<revkv_tls::ServerTls>,
    limits: revkv_grpc::GrpcLimits,
) -> Result<tokio::sync::oneshot::Sender<()>, String> {
    let address = listener
        .local_addr()
        .map_err(|error| format!("the gRPC listener has no address: {error}"))?;
    let server = revkv_grpc::GrpcServer {
        backend: node.backend().clone(),
        metrics: Some(node.backend().metrics().clone()),
        limits,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(error) = server.serve(listener, tls.as_ref(), shutdown).await {
            tracing::error!(%error, "gRPC listener failed");
        }
    });
    tracing::info!(%address, "serving etcd's gRPC API");
    Ok(stop)
}

fn fail(message: &str) -> ExitCode {
    eprintln!("revkv: {message}");
    ExitCode::FAILURE
}

/// Logs go to stderr; `RUST_LOG` filters them (default: `revkv_raft::DEFAULT_LOG_FILTER`, info
/// with openraft's chatter at warn and its per-attempt peer failures left to revkv's own lines).
fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(revkv_raft::DEFAULT_LOG_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Returns on Ctrl-C or SIGTERM.
async fn wait_for_stop_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
