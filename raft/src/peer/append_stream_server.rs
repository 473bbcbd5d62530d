//! The receiving end of the append stream (`append_stream.rs` describes the protocol): the
//! upgrade of `POST /raft/append-stream` and the task that answers its calls in order. Its own
//! file because it serves with the member (`member_inner.rs`), which counts the streams it serves
//! with `append_stream::OpenStreams`, while the caller's end is used by the peer client, which
//! the member holds: in one file the three would import each other.

use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use openraft::raft::AppendEntriesRequest;
use revkv_storage::codec;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::member_inner::MemberInner;
use crate::peer::append_stream::{read_frame, send_frame, MAX_OPEN_STREAMS, PROTOCOL};
use crate::peer::PeerError;
use crate::types::TypeConfig;
use crate::write_path_trace::{self, Stage};

/// A receiver closes a stream that sent no call for this long (its caller is gone without a word,
/// or idle: openraft's heartbeats keep a live one busy).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// `POST /raft/append-stream`: answers `101` and serves the upgraded connection on a task of its
/// own. The task holds the member weakly, so an open stream does not keep a stopped member alive.
pub(super) async fn accept(
    State(member): State<Arc<MemberInner>>,
    mut request: Request,
) -> Response {
    let asks_for_stream = request
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|protocol| protocol == PROTOCOL);
    if !asks_for_stream {
        return (
            StatusCode::BAD_REQUEST,
            format!("Upgrade: {PROTOCOL} is required"),
        )
            .into_response();
    }
    let Some(upgrade) = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
    else {
        return (
            StatusCode::BAD_REQUEST,
            "this connection cannot be upgraded",
        )
            .into_response();
    };
    let Some(guard) = member.append_streams.admit() else {
        let refusal = format!("{MAX_OPEN_STREAMS} append streams are open already");
        return (StatusCode::SERVICE_UNAVAILABLE, refusal).into_response();
    };
    let max_frame_bytes = member.config.peer_limits.max_body_bytes;
    let member = Arc::downgrade(&member);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => serve(member, TokioIo::new(upgraded), max_frame_bytes).await,
            Err(error) => tracing::debug!(%error, "append stream upgrade failed"),
        }
        drop(guard);
    });
    (
        StatusCode::SWITCHING_PROTOCOLS,
        [
            (header::CONNECTION, HeaderValue::from_static("upgrade")),
            (header::UPGRADE, HeaderValue::from_static(PROTOCOL)),
        ],
    )
        .into_response()
}

/// Answers calls in order until the caller closes the stream, stays idle for `IDLE_TIMEOUT`,
/// sends a bad frame, or the member stops.
async fn serve(
    member: Weak<MemberInner>,
    mut io: impl AsyncRead + AsyncWrite + Unpin,
    max_frame_bytes: usize,
) {
    loop {
        let frame =
            match crate::clock::timeout(IDLE_TIMEOUT, read_frame(&mut io, max_frame_bytes)).await {
                Ok(Ok(frame)) => frame,
                Ok(Err(_)) | Err(_) => return,
            };
        let Some(member) = member.upgrade() else {
            return;
        };
        let Ok(request) = codec::decode::<AppendEntriesRequest<TypeConfig>>(&frame) else {
            tracing::debug!("undecodable append on a peer stream; closing it");
            return;
        };
        let last_index = request.entries.last().map(|entry| entry.log_id.index);
        if let Some(index) = last_index {
            write_path_trace::mark(Stage::Received, index);
        }
        let reply = member.raft.append_entries(request).await;
        if let Ok(answer) = &reply {
            member.leader_contact.answered(answer);
        }
        let reply = reply.map_err(|error| PeerError::Fatal(error.to_string()));
        if let Some(index) = last_index {
            write_path_trace::mark(Stage::Answered, index);
        }
        drop(member);
        let Ok(frame) = codec::encode_frame(&reply) else {
            return;
        };
        if send_frame(&mut io, &frame).await.is_err() {
            return;
        }
    }
}
