//! A watch resumes from a revision the client chooses (`start_revision`, or `Last-Event-ID` + 1),
//! which reaches `MvccStore::events_since` as any u64 the HTTP layer accepts. Whatever the
//! revision and batch size, the history reader must answer an error (compacted, future, zero) or
//! a batch of whole revisions from that revision on, never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use revkv_fuzz::sample_store;
use revkv_storage::MvccStore;

fn store() -> &'static MvccStore {
    static STORE: OnceLock<MvccStore> = OnceLock::new();
    STORE.get_or_init(|| {
        let directory = tempfile::tempdir().expect("a temporary directory").keep();
        sample_store(&directory.join("state.redb"))
    })
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 11 {
        return;
    }
    let from_revision = u64::from_le_bytes(input[..8].try_into().expect("eight bytes"));
    let max_events = usize::from(u16::from_le_bytes([input[8], input[9]]));
    let with_prev_kv = input[10] & 1 == 1;
    let Ok(batch) = store().events_since(from_revision, max_events, with_prev_kv) else {
        return;
    };
    for event in &batch.events {
        let revision = event.kv.mod_revision;
        assert!(
            revision >= from_revision,
            "an event before the resume revision"
        );
        assert!(
            revision < batch.next_revision,
            "an event at or after next_revision"
        );
        assert!(
            revision <= batch.current_revision,
            "an event from the future"
        );
    }
    for pair in batch.events.windows(2) {
        assert!(
            pair[0].kv.mod_revision <= pair[1].kv.mod_revision,
            "events out of order"
        );
    }
});
