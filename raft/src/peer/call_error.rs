//! How a peer call fails from the caller's side, and how reqwest's errors are sorted into those
//! failures. Its own file so that the client (`client.rs`), the append stream's caller
//! (`append_stream.rs`) and the simulated network (`simulated.rs`) all name it without importing
//! each other.

use std::time::Duration;

use crate::peer::PeerError;

/// How a peer call failed from the caller's side.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The request never reached the peer: the connection could not be made (refused, no route,
    /// an address that does not resolve, the connect timeout), so the call took no effect.
    #[error("peer unreachable: {0}")]
    Unreachable(String),
    /// A connection was made, but it was closed or reset before any answer came back (a peer that
    /// died, a link proxy of a partition that drops what it accepts). The peer may have received
    /// the request: raft's own calls may be repeated and treat this as unreachable, a forwarded
    /// write may not (its outcome is unknown).
    #[error("peer closed the connection before answering: {0}")]
    ClosedBeforeAnswer(String),
    /// No answer in time; the call may or may not have taken effect.
    #[error("peer call timed out after {0:?}")]
    Timeout(Duration),
    /// The peer does not serve the path (404): a member of an older build.
    #[error("peer does not serve it: {0}")]
    NotServed(String),
    /// The answer was not a valid reply (wrong status, undecodable body).
    #[error("bad answer from peer: {0}")]
    BadAnswer(String),
    /// The peer answered with a refusal.
    #[error(transparent)]
    Remote(#[from] PeerError),
}

/// Why a request got no answer at all (the error of `send`). The connect phase comes first: a
/// connect timeout is a timeout *and* a connect error, and it is the second that matters, since
/// nothing was sent.
pub(super) fn classify_unanswered(error: reqwest::Error, timeout: Duration) -> CallError {
    if error.is_connect() || error.is_builder() {
        CallError::Unreachable(error_chain(&error))
    } else if error.is_timeout() {
        CallError::Timeout(timeout)
    } else if closed_by_peer(&error) {
        CallError::ClosedBeforeAnswer(error_chain(&error))
    } else {
        CallError::BadAnswer(error_chain(&error))
    }
}

/// Why an answer that had begun (its status line arrived) could not be read whole.
pub(super) fn classify_answer_error(error: reqwest::Error, timeout: Duration) -> CallError {
    if error.is_timeout() {
        CallError::Timeout(timeout)
    } else {
        CallError::BadAnswer(error_chain(&error))
    }
}

/// True when the connection was closed or reset under the request: hyper's "connection closed
/// before message completed" or "canceled", or a reset, abort, broken pipe or early end of the
/// socket, anywhere in the error's chain of sources.
fn closed_by_peer(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(hyper_error) = error.downcast_ref::<hyper::Error>() {
            if hyper_error.is_incomplete_message() || hyper_error.is_canceled() {
                return true;
            }
        }
        if let Some(io_error) = error.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind;
            if matches!(
                io_error.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
                    | ErrorKind::NotConnected
            ) {
                return true;
            }
        }
        next = error.source();
    }
    false
}

/// The error and its sources in one line ("error sending request: ...: Connection refused"):
/// reqwest's own message names only the outermost layer.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    // A bounded walk: an error chain is a handful of layers deep.
    for _ in 0..8 {
        let Some(source) = next else { break };
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}
