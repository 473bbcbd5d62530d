//! Prints the events of a state file from one revision to another, one line each: a debugging aid
//! for comparing members' histories after a failed chaos run (docs/RELIABILITY.md).
//!
//!   cargo run --release -p revkv-storage --example dump_history -- STATE_FILE FROM_REVISION TO_REVISION

use revkv_storage::{MvccStore, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments: Vec<String> = std::env::args().collect();
    let [_, state_file, from, to] = arguments.as_slice() else {
        return Err("usage: dump_history STATE_FILE FROM_REVISION TO_REVISION".into());
    };
    let store = MvccStore::open(state_file, StoreOptions::default())?;
    let (from, to): (u64, u64) = (from.parse()?, to.parse()?);
    println!(
        "applied {:?}, current revision {}",
        store.applied_state()?.last_applied,
        store.current_revision()?
    );
    let mut next = from;
    while next <= to {
        let batch = store.events_since(next, 10_000, false)?;
        for event in batch
            .events
            .iter()
            .filter(|event| event.kv.mod_revision <= to)
        {
            println!(
                "{} {:?} {} v{} {}",
                event.kv.mod_revision,
                event.kind,
                String::from_utf8_lossy(&event.kv.key),
                event.kv.version,
                String::from_utf8_lossy(&event.kv.value)
            );
        }
        if batch.events.is_empty() || batch.next_revision <= next {
            break;
        }
        next = batch.next_revision;
    }
    Ok(())
}
