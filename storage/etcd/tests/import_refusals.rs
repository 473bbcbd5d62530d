//! Files the etcd reader must refuse before anything is written, each with the reason named: a
//! newer etcd's schema, a bucket etcd 3.4 and 3.5 do not write, auth records revkv could not
//! enforce alike, and records that break etcd's data model. Each file is built with the crate's own bbolt
//! writer, so exactly one thing is wrong in it.

use std::fs::File;

use prost::Message;
use revkv_etcd_snapshot::bolt::writer::BoltWriter;
use revkv_etcd_snapshot::layout::RevisionKey;
use revkv_etcd_snapshot::messages::KeyValue;
use revkv_etcd_snapshot::{EtcdSnapshot, EtcdSnapshotError};

type Bucket<'a> = (&'a str, Vec<(Vec<u8>, Vec<u8>)>);

fn write(path: &std::path::Path, buckets: &[Bucket<'_>]) {
    let mut writer = BoltWriter::new(File::create(path).unwrap(), 4096).unwrap();
    for (name, entries) in buckets {
        writer
            .bucket(
                name.as_bytes(),
                entries
                    .iter()
                    .map(|(key, value)| (key.as_slice(), value.as_slice())),
            )
            .unwrap();
    }
    writer.finish().unwrap();
}

fn put_at(revision: u64, key: &str, create_revision: i64, version: i64) -> (Vec<u8>, Vec<u8>) {
    let revision_key = RevisionKey {
        main: revision,
        sub: 0,
        tombstone: false,
    };
    let value = KeyValue {
        key: key.into(),
        create_revision,
        mod_revision: revision as i64,
        version,
        value: b"v".to_vec(),
        lease: 0,
    };
    (revision_key.encode(), value.encode_to_vec())
}

fn sound_key_bucket() -> Bucket<'static> {
    ("key", vec![put_at(2, "a", 2, 1), put_at(3, "a", 2, 2)])
}

/// Opens the file and feeds it whole, as a restore's check does.
fn read_whole(path: &std::path::Path) -> Result<u64, EtcdSnapshotError> {
    let snapshot = EtcdSnapshot::open(path)?;
    snapshot.history()?;
    let mut frames = 0;
    snapshot.feed(&mut |_| {
        frames += 1;
        Ok(())
    })?;
    Ok(frames)
}

fn refusal(buckets: &[Bucket<'_>]) -> String {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("etcd.db");
    write(&path, buckets);
    match read_whole(&path) {
        Ok(frames) => panic!("read {frames} frames from a file that must be refused"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_sound_file_reads_and_each_planted_fault_is_refused_with_its_reason() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("sound.db");
    write(&path, &[sound_key_bucket(), ("meta", Vec::new())]);
    assert_eq!(read_whole(&path).unwrap(), 2);

    // etcd 3.6's and 3.7's schema versions read; a later one is refused, not misread.
    for readable in [&b"3.6.0"[..], b"3.7.0", b"3.6"] {
        let meta = (
            "meta",
            vec![(b"storageVersion".to_vec(), readable.to_vec())],
        );
        write(&path, &[sound_key_bucket(), meta]);
        assert_eq!(read_whole(&path).unwrap(), 2, "{readable:?}");
    }
    for unreadable in [&b"3.8.0"[..], b"4.0.0", b"3.6.0.1", b"", b"\xff"] {
        let meta = (
            "meta",
            vec![(b"storageVersion".to_vec(), unreadable.to_vec())],
        );
        let refused = refusal(&[sound_key_bucket(), meta]);
        assert!(
            refused.contains("etcd 3.4 to 3.7"),
            "{unreadable:?}: {refused}"
        );
    }

    let unknown = ("schema", Vec::new());
    assert!(refusal(&[sound_key_bucket(), unknown]).contains("\"schema\""));

    let users = (
        "authUsers",
        vec![(b"alice".to_vec(), b"\x0a\x05alice".to_vec())],
    );
    assert!(refusal(&[sound_key_bucket(), users]).contains("not a bcrypt hash"));

    let enabled = ("auth", vec![(b"authEnabled".to_vec(), vec![1])]);
    assert!(refusal(&[sound_key_bucket(), enabled]).contains("no root user"));

    // A put whose version cannot be (0), and one created after it was modified.
    let zero_version = ("key", vec![put_at(2, "a", 2, 0)]);
    assert!(refusal(&[zero_version]).contains("do not fit revision 2"));
    let created_later = ("key", vec![put_at(2, "a", 3, 1)]);
    assert!(refusal(&[created_later]).contains("do not fit revision 2"));

    // A value that is not a KeyValue, and a key that is not a revision.
    let garbage = (
        "key",
        vec![(put_at(2, "a", 2, 1).0, vec![0xff, 0xff, 0xff])],
    );
    assert!(refusal(&[garbage]).contains("bucket \"key\""));
    let not_a_revision = (
        "key",
        vec![(b"not-a-revision".to_vec(), put_at(2, "a", 2, 1).1)],
    );
    assert!(refusal(&[not_a_revision]).contains("not a revision key"));
}
