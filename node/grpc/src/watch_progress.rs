//! etcd's answer to a `WatchProgressRequest`: one response for the whole stream, with watch id
//! -1 (etcd's client hands it to every watch of the stream), whose revision promises that every
//! watch of the stream has sent all its events up to that revision.
//!
//! revkv keeps that promise with the watch hub's bookmarks: a progress request asks each watch of
//! the stream for a bookmark at the member's current revision or later, each watch's forwarder
//! hands its bookmark to the stream instead of sending it (`ProgressOwed`), and once every watch
//! has reported (or left the stream) the stream answers once, at the lowest revision reported.
//! A stream without watches is answered at once, at the member's current revision, as etcd does.
//! Requests that arrive while a round is under way join it and are each answered when it ends.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The revision a watch's pending progress request asks its bookmark to reach (0: none pending).
/// Shared between the stream, which sets it, and the watch's forwarder, which takes it.
#[derive(Clone, Default)]
pub(crate) struct ProgressOwed(Arc<AtomicU64>);

impl ProgressOwed {
    /// A bookmark at `at_least` or later is owed to the stream's round.
    pub(crate) fn owe(&self, at_least: u64) {
        // Revision 0 means "none pending", and no member's current revision is below 1 once a
        // watch exists; ask for at least 1 so the flag always reads as pending.
        self.0.store(at_least.max(1), Ordering::Release);
    }

    /// Whether a bookmark at `revision` answers the pending request; if it does, the request is
    /// no longer pending. A periodic bookmark below the owed revision answers nothing.
    pub(crate) fn take_if_answered_by(&self, revision: u64) -> bool {
        let owed = self.0.load(Ordering::Acquire);
        owed != 0
            && revision >= owed
            && self
                .0
                .compare_exchange(owed, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }
}

/// The stream's progress round under way, if any.
#[derive(Default)]
pub(crate) struct ProgressRounds {
    round: Option<Round>,
}

struct Round {
    /// Stream watch ids whose bookmark has not come yet.
    waiting: HashSet<i64>,
    /// The lowest bookmark reported so far.
    lowest_reported: Option<u64>,
    /// Progress requests this round answers (one response each, as etcd answers each request).
    answers: usize,
}

/// A finished round: the revision to answer at (`None`: no watch reported, so the member's
/// current revision), and how many responses to send.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RoundAnswer {
    pub(crate) revision: Option<u64>,
    pub(crate) answers: usize,
}

impl ProgressRounds {
    /// A progress request on a stream holding `watches`. Answers which watches must now be asked
    /// for a bookmark (empty when the request joined a round under way), and the answer when
    /// there is nothing to wait for.
    pub(crate) fn request(
        &mut self,
        watches: impl Iterator<Item = i64>,
    ) -> (Vec<i64>, Option<RoundAnswer>) {
        if let Some(round) = &mut self.round {
            round.answers += 1;
            return (Vec::new(), None);
        }
        let waiting: HashSet<i64> = watches.collect();
        let to_ask = waiting.iter().copied().collect();
        self.round = Some(Round {
            waiting,
            lowest_reported: None,
            answers: 1,
        });
        (to_ask, self.finish_if_complete())
    }

    /// Whether a round waits for bookmarks.
    pub(crate) fn under_way(&self) -> bool {
        self.round.is_some()
    }

    /// Watch `id` reported its bookmark at `revision`.
    pub(crate) fn report(&mut self, id: i64, revision: u64) -> Option<RoundAnswer> {
        let round = self.round.as_mut()?;
        if round.waiting.remove(&id) {
            round.lowest_reported =
                Some(round.lowest_reported.map_or(revision, |r| r.min(revision)));
        }
        self.finish_if_complete()
    }

    /// Watch `id` left the stream (canceled or ended): the round no longer waits for it.
    pub(crate) fn forget(&mut self, id: i64) -> Option<RoundAnswer> {
        self.round.as_mut()?.waiting.remove(&id);
        self.finish_if_complete()
    }

    fn finish_if_complete(&mut self) -> Option<RoundAnswer> {
        if !self.round.as_ref()?.waiting.is_empty() {
            return None;
        }
        let round = self.round.take()?;
        Some(RoundAnswer {
            revision: round.lowest_reported,
            answers: round.answers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_without_watches_is_answered_at_once_at_the_current_revision() {
        let mut rounds = ProgressRounds::default();
        let (to_ask, answer) = rounds.request(std::iter::empty());
        assert!(to_ask.is_empty());
        assert_eq!(
            answer,
            Some(RoundAnswer {
                revision: None,
                answers: 1
            })
        );
    }

    #[test]
    fn the_round_answers_once_every_watch_reported_at_the_lowest_revision() {
        let mut rounds = ProgressRounds::default();
        let (mut to_ask, answer) = rounds.request([0, 1, 2].into_iter());
        to_ask.sort();
        assert_eq!((to_ask, answer), (vec![0, 1, 2], None));
        assert_eq!(rounds.report(1, 9), None);
        // A request during the round joins it rather than starting another.
        assert_eq!(rounds.request([0, 1, 2].into_iter()), (Vec::new(), None));
        assert_eq!(rounds.report(0, 7), None);
        // A report from a watch the round does not wait for changes nothing.
        assert_eq!(rounds.report(5, 1), None);
        assert_eq!(
            rounds.forget(2),
            Some(RoundAnswer {
                revision: Some(7),
                answers: 2
            })
        );
        // The round is over: a late report answers nothing.
        assert_eq!(rounds.report(2, 3), None);
    }

    #[test]
    fn only_a_bookmark_at_the_owed_revision_or_later_answers_the_request() {
        let owed = ProgressOwed::default();
        assert!(!owed.take_if_answered_by(10), "nothing is owed yet");
        owed.owe(8);
        assert!(!owed.take_if_answered_by(7), "a periodic bookmark below it");
        assert!(owed.take_if_answered_by(8));
        assert!(!owed.take_if_answered_by(9), "answered only once");
    }
}
