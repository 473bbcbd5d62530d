//! A damaged state file is refused, or its damaged part is, with an error that names the file and
//! the next step: never a panic, and never a wrong answer read from a damaged page.

use crate::support;

use revkv_storage::{KeyRange, MvccStore, RangeRequest, StoreOptions};
use support::TestStore;

const KEYS: usize = 3_000;

#[test]
fn flipped_bytes_in_the_state_file_are_refused_at_open_naming_the_file() {
    let mut test = TestStore::new();
    for index in 0..KEYS {
        test.put(
            &format!("key-{index:05}"),
            &format!("value {index} {}", "x".repeat(100)),
        );
    }
    test.store.flush().unwrap();
    let path = test.store.path().to_path_buf();
    let TestStore { dir, store, .. } = test;
    drop(store);
    let mut bytes = std::fs::read(&path).unwrap();
    let length = bytes.len();
    for fraction in [3, 5, 7] {
        let at = length * fraction / 10;
        bytes[at] ^= 0xff;
    }
    std::fs::write(&path, &bytes).unwrap();

    // Refused by the open itself: without the check at open, redb panicked on the first read of a
    // damaged page (`btree.rs`, "entered unreachable code").
    match MvccStore::open(&path, StoreOptions::default()) {
        Ok(store) => {
            let read = store.range(&RangeRequest::of(KeyRange::prefix(b"key-".to_vec())));
            panic!(
                "a damaged file opened; a read of it gave {:?}",
                read.map(|read| read.response.kvs.len())
            );
        }
        Err(error) => {
            let message = error.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("is damaged"), "{message}");
            assert!(message.contains("remove the member"), "{message}");
        }
    }
    drop(dir);
}
