//! A checker of watch streams against the store's history: the six properties etcd documents
//! (ordered, unique, atomic, reliable, resumable, bookmarkable) plus prev_kv and filter
//! correctness. The history comes from outside the watch path under test (historical range reads,
//! or a recording cross-checked against the writes), so the checker does not trust what it checks.
//!
//! Its own tests plant one fault of each kind in a correct stream and require the checker to
//! report it.

use std::time::Duration;

use serde_json::Value;

use super::states::{Change, History, Kind, Kv};
use revkv_client::watch::WatchRequest;

/// What one watcher asked for.
#[derive(Clone, Debug)]
pub struct WatchSpec {
    pub key: String,
    pub prefix: bool,
    pub range_end: Option<String>,
    pub prev_kv: bool,
    pub no_put: bool,
    pub no_delete: bool,
}

impl WatchSpec {
    pub fn prefix(key: &str) -> WatchSpec {
        WatchSpec {
            key: key.into(),
            prefix: true,
            range_end: None,
            prev_kv: false,
            no_put: false,
            no_delete: false,
        }
    }

    pub fn single(key: &str) -> WatchSpec {
        WatchSpec {
            prefix: false,
            ..WatchSpec::prefix(key)
        }
    }

    /// The path and query of `GET /v1/watch` for this spec from `start_revision`, with a bookmark
    /// every `progress_notify_ms`.
    pub fn path_and_query(&self, start_revision: u64, progress_notify_ms: u64) -> String {
        let request = WatchRequest {
            key: self.key.clone(),
            prefix: self.prefix,
            range_end: self.range_end.clone(),
            start_revision: None,
            prev_kv: self.prev_kv,
            no_put: self.no_put,
            no_delete: self.no_delete,
            progress_notify: Some(Duration::from_millis(progress_notify_ms)),
        };
        request.path_and_query(Some(start_revision))
    }

    fn wants(&self, change: &Change) -> bool {
        let key = change.key.as_str();
        let in_range = match (&self.range_end, self.prefix) {
            (Some(end), _) => key >= self.key.as_str() && key < end.as_str(),
            (None, true) => key.starts_with(&self.key),
            (None, false) => key == self.key,
        };
        let kind_wanted = match change.kind {
            Kind::Put => !self.no_put,
            Kind::Delete => !self.no_delete,
        };
        in_range && kind_wanted
    }

    /// The changes of `revision` this watch must receive, by key.
    pub fn expected(&self, history: &History, revision: u64) -> Vec<Change> {
        history
            .changes_at(revision)
            .iter()
            .filter(|change| self.wants(change))
            .cloned()
            .map(|mut change| {
                if !self.prev_kv {
                    change.prev_kv = None;
                }
                change
            })
            .collect()
    }
}

/// One message of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Created,
    Events {
        revision: u64,
        changes: Vec<Change>,
    },
    Bookmark {
        revision: u64,
    },
    Canceled {
        reason: String,
        last_revision: Option<u64>,
    },
}

impl Message {
    /// Parses one NDJSON message; a message that is not in the contract's shape is an error (the
    /// checkers report it as a violation).
    pub fn from_json(message: &Value) -> Result<Message, String> {
        let revision = || {
            message["revision"]
                .as_u64()
                .ok_or_else(|| format!("a message without a revision: {message}"))
        };
        Ok(match message["type"].as_str().unwrap_or_default() {
            "CREATED" => Message::Created,
            "EVENTS" => Message::Events {
                revision: revision()?,
                changes: message["events"]
                    .as_array()
                    .ok_or_else(|| format!("an EVENTS message without events: {message}"))?
                    .iter()
                    .map(change_from_json)
                    .collect::<Result<_, _>>()?,
            },
            "BOOKMARK" => Message::Bookmark {
                revision: revision()?,
            },
            "CANCELED" => Message::Canceled {
                reason: message["reason"].as_str().unwrap_or_default().to_string(),
                last_revision: message["last_revision"].as_u64(),
            },
            other => return Err(format!("unknown message type {other:?} in {message}")),
        })
    }
}

fn change_from_json(event: &Value) -> Result<Change, String> {
    let kind = match event["type"].as_str() {
        Some("PUT") => Kind::Put,
        Some("DELETE") => Kind::Delete,
        other => return Err(format!("unknown event type {other:?} in {event}")),
    };
    let mut kv = Kv::from_json(&event["kv"]);
    if kind == Kind::Delete {
        kv = Change::deleted_kv(kv.mod_revision);
    }
    let key = event["kv"]["key"]
        .as_str()
        .ok_or_else(|| format!("an event without a key: {event}"))?;
    Ok(Change {
        kind,
        key: key.to_string(),
        kv,
        prev_kv: event.get("prev_kv").map(Kv::from_json),
    })
}

/// The messages of one connection, opened at `start`.
#[derive(Clone, Debug)]
pub struct Segment {
    pub start: u64,
    pub messages: Vec<Message>,
}

impl Segment {
    /// The revision through which this segment claims completeness: its last event, bookmark or
    /// cancellation `last_revision`. A client resumes at this + 1.
    pub fn covered_through(&self) -> u64 {
        self.messages
            .iter()
            .map(|message| match message {
                Message::Events { revision, .. } | Message::Bookmark { revision } => *revision,
                Message::Canceled { last_revision, .. } => last_revision.unwrap_or(0),
                Message::Created => 0,
            })
            .fold(self.start - 1, u64::max)
    }
}

/// Checks a watcher's segments against the history, through revision `through`.
pub fn check_watch(
    history: &History,
    spec: &WatchSpec,
    segments: &[Segment],
    through: u64,
) -> Result<(), String> {
    let first = segments.first().ok_or("no segments")?;
    let mut covered = first.start - 1;
    for (index, segment) in segments.iter().enumerate() {
        if segment.start != covered + 1 {
            return Err(format!(
                "resumable: segment {index} starts at {} but the stream covered through {covered}",
                segment.start
            ));
        }
        check_segment(history, spec, segment)
            .map_err(|error| format!("segment {index}: {error}"))?;
        covered = segment.covered_through();
    }
    if covered < through {
        return Err(format!(
            "the stream covered only through {covered}, not {through}"
        ));
    }
    Ok(())
}

fn check_segment(history: &History, spec: &WatchSpec, segment: &Segment) -> Result<(), String> {
    // Every revision at or below `complete` is accounted for: sent, or with nothing to send.
    let mut complete = segment.start - 1;
    let mut last_event = 0;
    let mut bookmark = 0;
    let missing_between = |from: u64, to: u64| -> Result<(), String> {
        for revision in from..=to.min(history.last()) {
            if !spec.expected(history, revision).is_empty() {
                return Err(format!(
                    "reliable: revision {revision} has events but was skipped"
                ));
            }
        }
        Ok(())
    };
    for message in &segment.messages {
        match message {
            Message::Created => {}
            Message::Events { revision, changes } => {
                let revision = *revision;
                if revision <= last_event {
                    return Err(format!(
                        "ordered/unique: revision {revision} after revision {last_event}"
                    ));
                }
                if revision <= bookmark {
                    return Err(format!(
                        "bookmarkable: event at {revision} after bookmark {bookmark}"
                    ));
                }
                if revision < segment.start {
                    return Err(format!(
                        "event at {revision} before the start {}",
                        segment.start
                    ));
                }
                missing_between(complete + 1, revision - 1)?;
                let mut received = changes.clone();
                received.sort_by(|a, b| a.key.cmp(&b.key));
                let expected = spec.expected(history, revision);
                if received != expected {
                    return Err(format!(
                        "atomic/prev_kv/filter: revision {revision} carried {received:?}, \
                         the history says {expected:?}"
                    ));
                }
                last_event = revision;
                complete = revision;
            }
            Message::Bookmark { revision } => {
                missing_between(complete + 1, *revision)?;
                bookmark = bookmark.max(*revision);
                complete = complete.max(*revision);
            }
            Message::Canceled { last_revision, .. } => {
                if let Some(last) = last_revision {
                    missing_between(complete + 1, *last)?;
                    complete = complete.max(*last);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod planted_faults {
    use super::*;
    use crate::chaos::check::states::tests::kv;
    use crate::chaos::check::states::State;

    /// Revision 1 empty; 2 puts a/1; 3 puts a/2 and b/1 (a txn); 4 deletes a/1; 5 puts b/1;
    /// 6 puts a/1 again.
    fn history() -> History {
        let mut states = vec![State::new()];
        let mut next = |change: &dyn Fn(&mut State)| {
            let mut state = states.last().unwrap().clone();
            change(&mut state);
            states.push(state);
        };
        next(&|s| {
            s.insert("a/1".into(), kv("x", 2, 2, 1));
        });
        next(&|s| {
            s.insert("a/2".into(), kv("y", 3, 3, 1));
            s.insert("b/1".into(), kv("z", 3, 3, 1));
        });
        next(&|s| {
            s.remove("a/1");
        });
        next(&|s| {
            s.insert("b/1".into(), kv("w", 3, 5, 2));
        });
        next(&|s| {
            s.insert("a/1".into(), kv("v", 6, 6, 1));
        });
        History::from_states(1, states)
    }

    /// The correct stream for `spec` from revision 2, with a bookmark at the end.
    fn correct(spec: &WatchSpec) -> Vec<Message> {
        let history = history();
        let mut messages = vec![Message::Created];
        for revision in 2..=6 {
            let changes = spec.expected(&history, revision);
            if !changes.is_empty() {
                messages.push(Message::Events { revision, changes });
            }
        }
        messages.push(Message::Bookmark { revision: 6 });
        messages
    }

    fn check(spec: &WatchSpec, messages: Vec<Message>) -> Result<(), String> {
        check_watch(&history(), spec, &[Segment { start: 2, messages }], 6)
    }

    fn everything() -> WatchSpec {
        WatchSpec {
            prev_kv: true,
            ..WatchSpec::prefix("")
        }
    }

    #[test]
    fn a_correct_stream_passes() {
        check(&everything(), correct(&everything())).unwrap();
        let a = WatchSpec::prefix("a/");
        check(&a, correct(&a)).unwrap();
    }

    #[test]
    fn a_gap_is_caught() {
        let mut messages = correct(&everything());
        messages.remove(2);
        let error = check(&everything(), messages).unwrap_err();
        assert!(error.contains("reliable"), "{error}");
    }

    #[test]
    fn a_duplicate_and_a_reordering_are_caught() {
        let mut duplicated = correct(&everything());
        duplicated.insert(2, duplicated[1].clone());
        assert!(check(&everything(), duplicated)
            .unwrap_err()
            .contains("ordered"));
        let mut swapped = correct(&everything());
        swapped.swap(1, 2);
        let error = check(&everything(), swapped).unwrap_err();
        assert!(
            error.contains("ordered") || error.contains("reliable"),
            "{error}"
        );
    }

    #[test]
    fn a_revision_split_in_two_messages_is_caught() {
        let mut messages = correct(&everything());
        let Message::Events { revision, changes } = messages[2].clone() else {
            panic!("revision 3 is an events message")
        };
        assert_eq!(changes.len(), 2);
        messages[2] = Message::Events {
            revision,
            changes: vec![changes[0].clone()],
        };
        let error = check(&everything(), messages).unwrap_err();
        assert!(error.contains("atomic"), "{error}");
    }

    #[test]
    fn a_bookmark_overtaking_an_event_is_caught() {
        let mut messages = correct(&everything());
        messages.insert(3, Message::Bookmark { revision: 5 });
        let error = check(&everything(), messages).unwrap_err();
        assert!(
            error.contains("reliable") || error.contains("bookmarkable"),
            "{error}"
        );
    }

    #[test]
    fn a_wrong_or_missing_prev_kv_is_caught() {
        let mut messages = correct(&everything());
        if let Message::Events { changes, .. } = &mut messages[4] {
            changes[0].prev_kv = None;
        }
        assert!(check(&everything(), messages)
            .unwrap_err()
            .contains("prev_kv"));
        let plain = WatchSpec::prefix("");
        let mut unasked = correct(&plain);
        if let Message::Events { changes, .. } = &mut unasked[1] {
            changes[0].prev_kv = Some(kv("nope", 1, 1, 1));
        }
        assert!(check(&plain, unasked).is_err(), "prev_kv sent unasked");
    }

    #[test]
    fn an_event_outside_the_filter_is_caught() {
        let no_put = WatchSpec {
            no_put: true,
            ..WatchSpec::prefix("")
        };
        let mut messages = correct(&no_put);
        messages.insert(1, correct(&everything())[1].clone());
        assert!(check(&no_put, messages).is_err());
        let only_b = WatchSpec::prefix("b/");
        assert!(check(&only_b, correct(&WatchSpec::prefix(""))).is_err());
    }

    #[test]
    fn a_resume_that_skips_or_repeats_is_caught() {
        let spec = WatchSpec::prefix("");
        let all = correct(&spec);
        let first = Segment {
            start: 2,
            messages: all[..3].to_vec(),
        };
        let covered = first.covered_through();
        let rest = |start: u64| Segment {
            start,
            messages: all[3..].to_vec(),
        };
        check_watch(&history(), &spec, &[first.clone(), rest(covered + 1)], 6).unwrap();
        assert!(
            check_watch(&history(), &spec, &[first.clone(), rest(covered + 2)], 6)
                .unwrap_err()
                .contains("resumable")
        );
        assert!(check_watch(&history(), &spec, &[first, rest(covered)], 6)
            .unwrap_err()
            .contains("resumable"));
    }

    /// The history ends at 6. An event at 7 cannot be compared with anything, and the checker
    /// does not take it on trust: the harness makes the history reach every revision a watch
    /// received (it stops the recording watch last), and the cluster test reads it to the end.
    #[test]
    fn an_event_past_the_history_is_caught() {
        let spec = everything();
        let mut messages = correct(&spec);
        messages.push(Message::Events {
            revision: 7,
            changes: vec![Change {
                kind: Kind::Delete,
                key: "b/1".into(),
                kv: Change::deleted_kv(7),
                prev_kv: Some(kv("w", 3, 5, 2)),
            }],
        });
        let error = check(&spec, messages).unwrap_err();
        assert!(error.contains("revision 7"), "{error}");
    }

    #[test]
    fn a_stream_that_stops_early_is_caught() {
        let spec = WatchSpec::prefix("");
        let mut messages = correct(&spec);
        messages.truncate(3);
        assert!(check(&spec, messages).unwrap_err().contains("covered only"));
    }
}
