//! The first storage failure a member met, so that it can say why it stopped.
//!
//! openraft stops a member on its first storage error, but the reason it records is whichever
//! error its core task meets first. When the state machine's worker fails an apply, the worker
//! quits, and the core's next command to it can fail with "channel closed" before the core has
//! read the worker's error; the member would then blame a channel instead of its disk. The log
//! writer and the state machine keep their first failure here (later ones are consequences), and
//! `RaftMember::stopped_by_fault` names it.

use std::fmt::Display;
use std::sync::{Arc, OnceLock};

/// Shared by the log writer and the state machine of one member. Clones share the record.
#[derive(Clone, Default)]
pub(crate) struct FirstStorageFault {
    first: Arc<OnceLock<String>>,
}

impl FirstStorageFault {
    /// Keeps `error` (with what was being done) unless a failure was kept before.
    pub(crate) fn keep(&self, what: &str, error: &impl Display) {
        let _ = self.first.set(format!("{what}: {error}"));
    }

    /// Passes `result` on, keeping its error (with what was being done) if it is the first.
    pub(crate) fn kept<T, E: Display>(&self, what: &str, result: Result<T, E>) -> Result<T, E> {
        if let Err(error) = &result {
            self.keep(what, error);
        }
        result
    }

    /// The first failure kept, if any.
    pub(crate) fn get(&self) -> Option<&str> {
        self.first.get().map(String::as_str)
    }

    /// Why raft stopped, told by its own `reason` and, when that does not already say it, by the
    /// first storage failure.
    pub(crate) fn explain(&self, reason: String) -> String {
        match self.get() {
            Some(first) if !reason.contains(first) => {
                format!("{first} (raft then stopped: {reason})")
            }
            _ => reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_kept_and_named_when_raft_blames_something_else() {
        let faults = FirstStorageFault::default();
        assert_eq!(faults.explain("channel closed".into()), "channel closed");
        faults.keep("apply", &"state.redb: injected disk fault");
        faults.keep("apply", &"a later consequence");
        assert_eq!(faults.get(), Some("apply: state.redb: injected disk fault"));
        assert_eq!(
            faults.explain("when Write Apply: channel closed".into()),
            "apply: state.redb: injected disk fault (raft then stopped: when Write Apply: channel \
             closed)"
        );
        assert_eq!(faults.kept("read", Ok::<u8, &str>(7)), Ok(7));
        assert_eq!(
            faults.kept("read", Err::<u8, &str>("even later")),
            Err("even later")
        );
        assert_eq!(faults.get(), Some("apply: state.redb: injected disk fault"));
        let already_said = "storage error: apply: state.redb: injected disk fault".to_string();
        assert_eq!(faults.explain(already_said.clone()), already_said);
    }
}
