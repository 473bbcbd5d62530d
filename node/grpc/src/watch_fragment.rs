//! Splitting a large watch response into fragments, as etcd does for a watch created with
//! `fragment: true`: a response whose encoding reaches the limit (the server's largest request,
//! etcd's `--max-request-bytes`) and that holds more than one event is sent as several responses,
//! each under the limit unless it holds a single event larger than it, all with `fragment` set but
//! the last. The client joins them back into one response (clientv3 does). A watch created without
//! the flag gets every response whole, as from etcd.

use prost::Message;

use crate::proto::etcdserverpb as pb;

/// The encoded size one event adds to a response: its field tag, its length prefix and itself.
fn event_bytes(event: &crate::proto::mvccpb::Event) -> usize {
    let length = event.encoded_len();
    1 + prost::length_delimiter_len(length) + length
}

/// `response` as the responses to send: itself when it is under `limit` bytes or holds fewer than
/// two events, else its fragments (etcd's `sendFragments`).
pub fn fragments(response: pb::WatchResponse, limit: usize) -> Vec<pb::WatchResponse> {
    if response.encoded_len() < limit || response.events.len() < 2 {
        return vec![response];
    }
    let mut template = response;
    let events = std::mem::take(&mut template.events);
    let template_bytes = template.encoded_len();
    let mut pieces: Vec<pb::WatchResponse> = Vec::new();
    let mut current = Vec::new();
    let mut current_bytes = template_bytes;
    for event in events {
        let bytes = event_bytes(&event);
        if !current.is_empty() && current_bytes + bytes >= limit {
            pieces.push(pb::WatchResponse {
                events: std::mem::take(&mut current),
                fragment: true,
                ..template.clone()
            });
            current_bytes = template_bytes;
        }
        current_bytes += bytes;
        current.push(event);
    }
    pieces.push(pb::WatchResponse {
        events: current,
        fragment: false,
        ..template
    });
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mvccpb;

    fn event(key: &str, value_bytes: usize) -> mvccpb::Event {
        mvccpb::Event {
            r#type: mvccpb::event::EventType::Put.into(),
            kv: Some(mvccpb::KeyValue {
                key: key.as_bytes().to_vec(),
                value: vec![b'v'; value_bytes],
                mod_revision: 7,
                ..Default::default()
            }),
            prev_kv: None,
        }
    }

    fn response(events: Vec<mvccpb::Event>) -> pb::WatchResponse {
        pb::WatchResponse {
            watch_id: 3,
            events,
            ..Default::default()
        }
    }

    #[test]
    fn a_small_response_or_a_single_event_is_sent_whole() {
        let small = response(vec![event("a", 10), event("b", 10)]);
        assert_eq!(fragments(small.clone(), 1024), vec![small]);
        let one_large = response(vec![event("a", 4096)]);
        assert_eq!(fragments(one_large.clone(), 1024), vec![one_large]);
    }

    #[test]
    fn a_large_response_is_split_under_the_limit_and_only_the_last_piece_is_final() {
        let events: Vec<mvccpb::Event> = (0..40).map(|n| event(&format!("k{n:02}"), 100)).collect();
        let whole = response(events.clone());
        assert!(whole.encoded_len() > 1024);
        let pieces = fragments(whole, 1024);
        assert!(pieces.len() > 1);
        for piece in &pieces[..pieces.len() - 1] {
            assert!(piece.fragment, "every piece but the last says more follows");
            assert!(piece.encoded_len() < 1024, "{} bytes", piece.encoded_len());
            assert_eq!(piece.watch_id, 3);
        }
        let last = pieces.last().unwrap();
        assert!(!last.fragment);
        assert!(last.encoded_len() < 1024);
        let joined: Vec<mvccpb::Event> =
            pieces.into_iter().flat_map(|piece| piece.events).collect();
        assert_eq!(joined, events, "the pieces hold every event once, in order");
    }

    #[test]
    fn an_event_larger_than_the_limit_travels_alone() {
        let events = vec![event("a", 10), event("big", 4096), event("c", 10)];
        let pieces = fragments(response(events.clone()), 1024);
        let sizes: Vec<usize> = pieces.iter().map(|piece| piece.events.len()).collect();
        assert_eq!(sizes, vec![1, 1, 1]);
        let flags: Vec<bool> = pieces.iter().map(|piece| piece.fragment).collect();
        assert_eq!(flags, vec![true, true, false]);
    }
}
