//! The bbolt writer and reader against each other: whatever buckets and entries are written are
//! read back in order, in every shape bbolt has (inline buckets, empty buckets, branch levels,
//! values that overflow a page), and damage to the file is refused with an error, never a panic.
//! (The reader against files etcd itself wrote is tested in node/bin/tests/etcd_snapshot.rs.)

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;
use revkv_etcd_snapshot::bolt::writer::BoltWriter;
use revkv_etcd_snapshot::bolt::{BoltFile, BucketRoot, DEFAULT_MAX_PAGE_BYTES};
use revkv_etcd_snapshot::BoltError;

type Buckets = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>;

fn write(path: &std::path::Path, buckets: &Buckets, page_size: u32) -> u64 {
    let mut writer = BoltWriter::new(File::create(path).unwrap(), page_size).unwrap();
    // In reverse name order: the writer sorts the root itself.
    for (name, entries) in buckets.iter().rev() {
        writer.begin_bucket(name).unwrap();
        for (key, value) in entries {
            writer.put(key, value).unwrap();
        }
        writer.end_bucket().unwrap();
    }
    writer.finish().unwrap().1
}

fn read(path: &std::path::Path) -> Result<(Buckets, Vec<bool>), BoltError> {
    let file = File::open(path)?;
    let length = file.metadata()?.len();
    let bolt = BoltFile::open(file, length, DEFAULT_MAX_PAGE_BYTES)?;
    let mut buckets = Buckets::new();
    let mut inline = Vec::new();
    for (name, root) in bolt.buckets()? {
        inline.push(matches!(root, BucketRoot::Inline(_)));
        let mut entries = BTreeMap::new();
        bolt.for_each(&root, &mut |key: &[u8], value: &[u8]| {
            entries.insert(key.to_vec(), value.to_vec());
            Ok::<(), BoltError>(())
        })?;
        buckets.insert(name, entries);
    }
    Ok((buckets, inline))
}

fn sample() -> Buckets {
    let mut buckets = Buckets::new();
    let many: BTreeMap<Vec<u8>, Vec<u8>> = (0u64..5_000)
        .map(|index| {
            (
                index.to_be_bytes().to_vec(),
                vec![index as u8; (index % 300) as usize],
            )
        })
        .collect();
    buckets.insert(b"key".to_vec(), many);
    buckets.insert(b"empty".to_vec(), BTreeMap::new());
    let small = BTreeMap::from([(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), Vec::new())]);
    buckets.insert(b"meta".to_vec(), small);
    let huge = BTreeMap::from([
        (b"big".to_vec(), vec![7u8; 100_000]),
        (b"small".to_vec(), b"x".to_vec()),
    ]);
    buckets.insert(b"overflow".to_vec(), huge);
    buckets
}

#[test]
fn every_shape_of_bucket_reads_back_as_written() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("db");
    let length = write(&path, &sample(), 4096);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), length);
    let (buckets, inline) = read(&path).unwrap();
    assert_eq!(buckets, sample());
    // In name order: empty and meta are inline (small), key and overflow have pages.
    assert_eq!(inline, vec![true, false, true, false]);
}

#[test]
fn a_damaged_or_truncated_file_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("db");
    let length = write(&path, &sample(), 4096);
    let pristine = std::fs::read(&path).unwrap();

    // Cut short: the meta page names pages beyond the end.
    std::fs::write(&path, &pristine[..(length / 2) as usize]).unwrap();
    assert!(matches!(read(&path), Err(BoltError::Truncated { .. })));

    // Both meta pages damaged: not a bbolt file any more.
    let mut damaged = pristine.clone();
    damaged[16 + 40] ^= 0xff;
    damaged[4096 + 16 + 40] ^= 0xff;
    std::fs::write(&path, &damaged).unwrap();
    assert!(matches!(read(&path), Err(BoltError::NoValidMeta)));

    // A data page's header damaged, page by page: every one is caught or reads differently,
    // and none panics.
    let mut caught = 0;
    for page in 2..length / 4096 {
        std::fs::write(&path, &pristine).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xee, 0xee], page * 4096 + 8).unwrap();
        match read(&path) {
            Err(_) => caught += 1,
            Ok((buckets, _)) => assert_ne!(buckets, sample(), "page {page} damaged unnoticed"),
        }
    }
    assert!(caught > 0);
}

fn arbitrary_buckets() -> impl Strategy<Value = Buckets> {
    let entries = prop::collection::btree_map(
        prop::collection::vec(any::<u8>(), 1..40),
        prop::collection::vec(any::<u8>(), 0..2_000),
        0..200,
    );
    prop::collection::btree_map(prop::collection::vec(any::<u8>(), 1..12), entries, 0..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_buckets_read_back_as_written(buckets in arbitrary_buckets(), large_pages in any::<bool>()) {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("db");
        let page_size = if large_pages { 16_384 } else { 1_024 };
        write(&path, &buckets, page_size);
        prop_assert_eq!(read(&path).unwrap().0, buckets);
    }
}
