//! An application embedding a revkv member as a library: start a single-member cluster in a
//! temporary directory, write and read through the same operations the HTTP API offers (including
//! a compare-and-swap txn), watch the history from the first write on, see that the HTTP API is
//! served too, and shut down cleanly.
//!
//! Run it with `cargo run -p revkv-node --example embedded`.

use std::error::Error;

use revkv_node::watch::{EventFilter, WatchMessage, WatchRequest};
use revkv_node::{KvBackend, MemberBackend, Node, NodeConfig, ReadConsistency};
use revkv_storage::{
    Compare, CompareOp, CompareTarget, KeyRange, KeyValue, PutRequest, RangeRequest, Request,
    Response, TxnOp, TxnRequest,
};

fn main() -> Result<(), Box<dyn Error>> {
    // The runtime the `revkv` binary uses: without tokio's LIFO slot, so that answers to
    // concurrent gRPC requests share writes (`revkv_node::runtime`).
    revkv_node::runtime::runtime_builder()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn Error>> {
    let data = tempfile::tempdir()?;
    // Bind both listeners first (port 0 picks free ports), so the member can advertise them.
    let client_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let peer_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let config = NodeConfig::single_member(
        data.path().join("member-1"),
        client_listener.local_addr()?,
        peer_listener.local_addr()?,
    );
    let node = Node::start_with_listeners(config, client_listener, peer_listener).await?;
    println!("member serving HTTP on http://{}", node.client_address());

    let backend = node.backend();
    let (first_revision, current) = write_and_read(backend).await?;
    let swapped_revision = compare_and_swap(backend, current.mod_revision).await?;
    list_prefix(backend, swapped_revision).await?;
    replay_history(backend, first_revision, swapped_revision).await?;

    node.shutdown().await?;
    println!("member stopped");
    Ok(())
}

/// Writes a key and reads it back: answers the write's revision and the key as read.
async fn write_and_read(backend: &MemberBackend) -> Result<(u64, KeyValue), Box<dyn Error>> {
    let written = backend.put("app/config", "v1").await?;
    println!("put app/config at revision {}", written.header.revision);
    let current = backend
        .get("app/config")
        .await?
        .expect("the key was just written");
    println!(
        "get app/config = {:?}",
        String::from_utf8_lossy(&current.value)
    );
    Ok((written.header.revision, current))
}

/// Optimistic concurrency: replaces the value only if nobody changed it since it was read at
/// `read_mod_revision`. Answers the txn's revision.
async fn compare_and_swap(
    backend: &MemberBackend,
    read_mod_revision: u64,
) -> Result<u64, Box<dyn Error>> {
    let compare_and_swap = Request::Txn(TxnRequest {
        compare: vec![Compare {
            key: b"app/config".to_vec(),
            range_end: revkv_storage::RangeEnd::Single,
            target: CompareTarget::ModRevision(read_mod_revision),
            op: CompareOp::Equal,
        }],
        success: vec![TxnOp::Put(PutRequest {
            key: b"app/config".to_vec(),
            value: b"v2".to_vec(),
            lease: 0,
            prev_kv: false,
        })],
        failure: vec![],
    });
    let swapped = backend.write(compare_and_swap).await?;
    if let Response::Txn(txn) = &swapped.response {
        println!("compare-and-swap succeeded: {}", txn.succeeded);
    }
    Ok(swapped.header.revision)
}

/// Lists every key under `app/` from this member, once it has applied `min_revision`.
async fn list_prefix(backend: &MemberBackend, min_revision: u64) -> Result<(), Box<dyn Error>> {
    let everything = RangeRequest::of(KeyRange::prefix("app/"));
    let serializable = ReadConsistency::Serializable {
        min_revision: Some(min_revision),
    };
    let listed = backend.read(everything, serializable).await?;
    for kv in &listed.response.kvs {
        println!(
            "{} = {} (version {}, mod_revision {})",
            String::from_utf8_lossy(&kv.key),
            String::from_utf8_lossy(&kv.value),
            kv.version,
            kv.mod_revision
        );
    }
    Ok(())
}

/// A watch from the first write's revision replays the history (it would then follow live
/// changes); it stops at `last_revision`.
async fn replay_history(
    backend: &MemberBackend,
    first_revision: u64,
    last_revision: u64,
) -> Result<(), Box<dyn Error>> {
    let mut watch = backend.watch_hub().open(WatchRequest {
        filter: EventFilter::of(KeyRange::prefix("app/")),
        start_revision: Some(first_revision),
        prev_kv: true,
        progress_interval: None,
    })?;
    while let Some(message) = watch.next().await {
        match message {
            WatchMessage::Events(events) => {
                for event in events.events() {
                    println!(
                        "watch: revision {} {:?} {} (previous value {:?})",
                        events.revision,
                        event.kind,
                        String::from_utf8_lossy(&event.kv.key),
                        event
                            .prev_kv
                            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
                    );
                }
                if events.revision == last_revision {
                    break;
                }
            }
            other => println!("watch: {other:?}"),
        }
    }
    Ok(())
}
