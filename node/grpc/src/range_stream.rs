//! etcd 3.7's `KV.RangeStream`: one range answered as a stream of chunks, so that neither the
//! member nor the client holds a large answer whole (Kubernetes 1.37 lists with it by default).
//!
//! It follows etcd 3.7.3's `EtcdServer.rangeStream`: the first chunk is read with the request's
//! consistency and pins the revision (the request's, or the one that first read saw), every later
//! chunk reads at that revision from the key after the last one sent, and the client's limit
//! counts across chunks. Chunks start at 10 keys and double or halve to stay near the target size
//! (the port's largest request, as etcd uses its `--max-request-bytes`). Only the final chunk
//! carries the header (the store's revision when the stream began, as a unary Range's header
//! would), `more` and `count`, which counts the whole range as a unary Range does. A count-only
//! range is one chunk. Sort orders and revision filters are refused as `Unimplemented`, with
//! etcd's words, so that a client falls back to Range.

use futures_util::stream::{self, Stream};
use prost::Message;
use revkv_node::{KvBackend, ReadConsistency};
use revkv_storage::{KeyRange, RangeRequest};
use tonic::Status;

use crate::convert::{self, to_i64};
use crate::error::status;
use crate::proto::etcdserverpb as pb;

/// The first chunk's keys, as etcd's `initialStreamChunkLimit`.
const FIRST_CHUNK_KEYS: u64 = 10;

/// Refuses what etcd's RangeStream refuses, with its codes and words.
pub fn check(request: &pb::RangeRequest) -> Result<(), Status> {
    // etcd's `IsDefaultOrdering`: no order (whatever the target), or ascending by key.
    let default_ordering = request.sort_order == pb::range_request::SortOrder::None as i32
        || (request.sort_order == pb::range_request::SortOrder::Ascend as i32
            && request.sort_target == pb::range_request::SortTarget::Key as i32);
    if !default_ordering {
        return Err(Status::unimplemented(
            "RangeStream does not support custom sort orders",
        ));
    }
    let filters = [
        request.min_mod_revision,
        request.max_mod_revision,
        request.min_create_revision,
        request.max_create_revision,
    ];
    if filters.iter().any(|bound| *bound != 0) {
        return Err(Status::unimplemented(
            "RangeStream does not support revision filters",
        ));
    }
    Ok(())
}

/// Where a stream is between two chunks.
struct Progress<B> {
    backend: B,
    cluster_id: u64,
    target_chunk_bytes: usize,
    /// The range still to send: its start moves past each chunk's last key.
    remaining: KeyRange,
    /// The client's limit over the whole stream (`u64::MAX` for none), and how many were sent.
    total_limit: u64,
    sent: u64,
    chunk_limit: u64,
    keys_only: bool,
    consistency: ReadConsistency,
    /// Set by the first chunk: the revision every chunk reads at, and the header's revision.
    pinned_revision: Option<u64>,
    header_revision: u64,
    finished: bool,
}

/// The chunks of `request` (already `check`ed) read through `backend`.
pub fn chunks<B: KvBackend + 'static>(
    backend: B,
    cluster_id: u64,
    target_chunk_bytes: usize,
    request: pb::RangeRequest,
) -> Result<impl Stream<Item = Result<pb::RangeStreamResponse, Status>> + Send, Status> {
    let consistency = if request.serializable {
        ReadConsistency::Serializable { min_revision: None }
    } else {
        ReadConsistency::Linearizable
    };
    let count_only = request.count_only;
    let total_limit = u64::try_from(request.limit)
        .ok()
        .filter(|limit| *limit > 0)
        .unwrap_or(u64::MAX);
    let (read, _view) = convert::range(request)?;
    let remaining = read
        .range
        .clone()
        .expect("convert::range always sets a range");
    let progress = Progress {
        backend,
        cluster_id,
        target_chunk_bytes: target_chunk_bytes.max(1),
        remaining,
        total_limit,
        sent: 0,
        chunk_limit: FIRST_CHUNK_KEYS.min(total_limit),
        keys_only: read.keys_only,
        consistency,
        pinned_revision: read.revision,
        header_revision: 0,
        finished: false,
    };
    Ok(stream::try_unfold(progress, move |progress| async move {
        if progress.finished {
            return Ok(None);
        }
        if count_only {
            return count_only_answer(progress).await.map(Some);
        }
        next_chunk(progress).await.map(Some)
    }))
}

/// The one chunk of a count-only range.
async fn count_only_answer<B: KvBackend>(
    mut progress: Progress<B>,
) -> Result<(pb::RangeStreamResponse, Progress<B>), Status> {
    let read = RangeRequest {
        range: Some(progress.remaining.clone()),
        revision: progress.pinned_revision,
        count_only: true,
        ..RangeRequest::default()
    };
    let answer = progress
        .backend
        .read(read, progress.consistency)
        .await
        .map_err(status)?;
    let header_revision = current_revision(&progress.backend, answer.header.revision)?;
    let mut header = answer.header;
    header.revision = header_revision;
    progress.finished = true;
    let response = pb::RangeResponse {
        header: convert::header(header, progress.cluster_id),
        count: to_i64(answer.response.count),
        ..pb::RangeResponse::default()
    };
    Ok((
        pb::RangeStreamResponse {
            range_response: Some(response),
        },
        progress,
    ))
}

/// Reads and renders the next chunk, and moves `progress` past it.
async fn next_chunk<B: KvBackend>(
    mut progress: Progress<B>,
) -> Result<(pb::RangeStreamResponse, Progress<B>), Status> {
    let first = progress.header_revision == 0;
    let read = RangeRequest {
        range: Some(progress.remaining.clone()),
        revision: progress.pinned_revision,
        limit: Some(progress.chunk_limit),
        keys_only: progress.keys_only,
        ..RangeRequest::default()
    };
    // Later chunks read at the pinned revision on this member, which the first read saw applied.
    let consistency = if first {
        progress.consistency
    } else {
        ReadConsistency::Serializable { min_revision: None }
    };
    let answer = progress
        .backend
        .read(read, consistency)
        .await
        .map_err(status)?;
    if first {
        progress.pinned_revision = Some(answer.header.revision);
        progress.header_revision = current_revision(&progress.backend, answer.header.revision)?;
    }
    let chunk = answer.response;
    // Where the next chunk starts: just after this one's last key.
    let next_start = chunk
        .kvs
        .last()
        .map(|last| revkv_storage::key_successor(&last.key));
    let (more, count) = (chunk.more, chunk.count);
    let kvs: Vec<_> = chunk.kvs.into_iter().map(convert::key_value).collect();
    let sent_before = progress.sent;
    progress.sent += kvs.len() as u64;
    let finished = !more || progress.sent >= progress.total_limit;
    let mut response = pb::RangeResponse {
        kvs,
        ..pb::RangeResponse::default()
    };
    if finished {
        let mut header = answer.header;
        header.revision = progress.header_revision;
        response.header = convert::header(header, progress.cluster_id);
        response.more = more;
        // The chunk's count is the keys from its start to the range's end: with those sent
        // before it, the whole range's.
        response.count = to_i64(sent_before + count);
        progress.finished = true;
    } else {
        progress.remaining.start = next_start.expect("a chunk with more after it holds a key");
        let chunk_bytes = response.encoded_len();
        progress.chunk_limit = next_chunk_limit(
            progress.chunk_limit,
            chunk_bytes,
            progress.target_chunk_bytes,
        )
        .min(progress.total_limit - progress.sent);
    }
    Ok((
        pb::RangeStreamResponse {
            range_response: Some(response),
        },
        progress,
    ))
}

/// The store's revision now, or `read_revision` if that is later (a unary Range's header rule).
fn current_revision<B: KvBackend>(backend: &B, read_revision: u64) -> Result<u64, Status> {
    Ok(backend
        .header()
        .map_err(status)?
        .revision
        .max(read_revision))
}

/// etcd's `adjustChunkLimit`: double below half the target size, halve above twice it, never 0.
fn next_chunk_limit(last_limit: u64, last_bytes: usize, target_bytes: usize) -> u64 {
    let limit = if last_bytes < target_bytes / 2 {
        last_limit.saturating_mul(2)
    } else if last_bytes > target_bytes.saturating_mul(2) {
        last_limit / 2
    } else {
        last_limit
    };
    limit.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_grow_and_shrink_around_the_target_size() {
        assert_eq!(next_chunk_limit(10, 100, 1000), 20);
        assert_eq!(next_chunk_limit(10, 700, 1000), 10);
        assert_eq!(next_chunk_limit(10, 2001, 1000), 5);
        assert_eq!(next_chunk_limit(1, 5000, 1000), 1);
        assert_eq!(next_chunk_limit(u64::MAX, 0, 1000), u64::MAX);
    }

    #[test]
    fn sorts_and_revision_filters_are_refused_as_etcd_refuses_them() {
        let plain = pb::RangeRequest {
            key: b"a".to_vec(),
            ..pb::RangeRequest::default()
        };
        assert!(check(&plain).is_ok());
        let ascending_by_key = pb::RangeRequest {
            sort_order: pb::range_request::SortOrder::Ascend as i32,
            ..plain.clone()
        };
        assert!(check(&ascending_by_key).is_ok());
        let descending = pb::RangeRequest {
            sort_order: pb::range_request::SortOrder::Descend as i32,
            ..plain.clone()
        };
        let by_version = pb::RangeRequest {
            sort_order: pb::range_request::SortOrder::Ascend as i32,
            sort_target: pb::range_request::SortTarget::Version as i32,
            ..plain.clone()
        };
        for refused in [descending, by_version] {
            let error = check(&refused).unwrap_err();
            assert_eq!(error.code(), tonic::Code::Unimplemented);
            assert_eq!(
                error.message(),
                "RangeStream does not support custom sort orders"
            );
        }
        let filtered = pb::RangeRequest {
            min_mod_revision: 3,
            ..plain
        };
        let error = check(&filtered).unwrap_err();
        assert_eq!(error.code(), tonic::Code::Unimplemented);
        assert_eq!(
            error.message(),
            "RangeStream does not support revision filters"
        );
    }
}
