//! The recording watch's segments turned into the changes of each revision, from which
//! [`History::from_changes`](super::states::History::from_changes) builds the history the other
//! checkers compare against.
//!
//! The recording is itself a watch, resumed across faults like any other, so it is not trusted
//! blindly: its segments must resume where the previous one stopped, a revision seen twice must
//! carry the same changes both times, and the history built from it checks the data model. The
//! harness also compares it with range reads of the store at the end of the run, and the key-value
//! checker with every acknowledged write, so a recording that went wrong shows up as violations.

use std::collections::BTreeMap;

use super::states::Change;
use super::watch::{Message, Segment};

/// What a recording holds: each revision's changes (sorted by key) and the revision through which
/// it is complete.
#[derive(Debug, Default)]
pub struct Recording {
    pub changes: BTreeMap<u64, Vec<Change>>,
    pub complete_through: u64,
}

/// The changes the segments carry; `Err` if the segments leave a gap or disagree.
pub fn recording_of(segments: &[Segment]) -> Result<Recording, String> {
    let mut recording = Recording::default();
    let Some(first) = segments.first() else {
        return Ok(recording);
    };
    recording.complete_through = first.start - 1;
    for (index, segment) in segments.iter().enumerate() {
        if segment.start > recording.complete_through + 1 {
            return Err(format!(
                "recording: segment {index} starts at {} after a gap (complete through {})",
                segment.start, recording.complete_through
            ));
        }
        for message in &segment.messages {
            let Message::Events { revision, changes } = message else {
                continue;
            };
            let mut changes = changes.clone();
            changes.sort_by(|a, b| a.key.cmp(&b.key));
            match recording.changes.get(revision) {
                Some(earlier) if *earlier != changes => {
                    return Err(format!(
                        "recording: revision {revision} arrived twice with different changes: \
                         {earlier:?} and {changes:?}"
                    ));
                }
                Some(_) => {}
                None => {
                    recording.changes.insert(*revision, changes);
                }
            }
        }
        recording.complete_through = recording.complete_through.max(segment.covered_through());
    }
    Ok(recording)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::check::states::{Kind, Kv};

    fn events(revision: u64, value: &str) -> Message {
        Message::Events {
            revision,
            changes: vec![Change {
                kind: Kind::Put,
                key: "k".into(),
                kv: Kv {
                    value: value.into(),
                    create_revision: 2,
                    mod_revision: revision,
                    version: revision - 1,
                },
                prev_kv: None,
            }],
        }
    }

    #[test]
    fn overlapping_segments_that_agree_make_one_recording() {
        let segments = [
            Segment {
                start: 2,
                messages: vec![Message::Created, events(2, "a"), events(3, "b")],
            },
            Segment {
                start: 3,
                messages: vec![
                    Message::Created,
                    events(3, "b"),
                    Message::Bookmark { revision: 5 },
                ],
            },
        ];
        let recording = recording_of(&segments).unwrap();
        assert_eq!(recording.complete_through, 5);
        assert_eq!(recording.changes.len(), 2);
    }

    #[test]
    fn a_gap_or_a_disagreement_between_segments_is_refused() {
        let gap = [
            Segment {
                start: 2,
                messages: vec![events(2, "a")],
            },
            Segment {
                start: 4,
                messages: vec![events(4, "c")],
            },
        ];
        assert!(recording_of(&gap).unwrap_err().contains("gap"));
        let disagreeing = [
            Segment {
                start: 2,
                messages: vec![events(2, "a")],
            },
            Segment {
                start: 2,
                messages: vec![events(2, "z")],
            },
        ];
        assert!(recording_of(&disagreeing)
            .unwrap_err()
            .contains("different"));
    }
}
