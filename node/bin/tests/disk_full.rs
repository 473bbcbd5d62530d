//! A full disk stops the member on it cleanly, and it recovers once there is room again.
//!
//! Member 3 of a real three-member cluster keeps its data on a small ext4 filesystem of its own
//! (a loop-mounted image, so the disk really fills: the kernel answers ENOSPC). A ballast file
//! leaves it little room, and writes fill the rest. The member must exit with the disk-fault
//! status and say why in its log, never panic; the other two go on taking writes. Once the ballast
//! is deleted, the member starts again on the same files, catches up, and holds every acknowledged
//! write with the same replica hash as the others: nothing was corrupted or lost.

use crate::process_cluster;

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use process_cluster::{cluster_options, wait_until, MemberClient, ProcessCluster};

/// The member whose data directory is on the small filesystem.
const SMALL_DISK_MEMBER: u64 = 3;

/// The small filesystem, and the room the ballast leaves on it.
const FILESYSTEM_BYTES: u64 = 48 * 1024 * 1024;
const ROOM_LEFT_BYTES: u64 = 2 * 1024 * 1024;

/// Each write's value: large, so the room fills in tens of writes, not thousands.
const VALUE_BYTES: usize = 32 * 1024;

/// Most writes before the member must have stopped (the room holds far fewer).
const MAX_WRITES_TO_FILL: usize = 2_000;

/// The exit status of a member stopped by a disk fault (`revkv serve`; sysexits' EX_IOERR).
const EXIT_DISK_FAULT: i32 = 74;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_member_and_it_recovers_once_there_is_room() {
    let disk = SmallFilesystem::mount(FILESYSTEM_BYTES);
    let data_dir = disk.mount_point().join("member-3");
    let options = cluster_options().with_data_dir(SMALL_DISK_MEMBER, &data_dir);
    let mut cluster = ProcessCluster::start(3, options).await;
    let ballast = disk.fill_leaving(ROOM_LEFT_BYTES);

    let mut acknowledged = Vec::new();
    let status = fill_until_member_exits(&mut cluster, &mut acknowledged).await;
    assert_eq!(
        status.code(),
        Some(EXIT_DISK_FAULT),
        "the member exits with the disk-fault status: {status}"
    );
    let log = cluster.log_text(SMALL_DISK_MEMBER);
    assert!(
        log.contains("No space left on device"),
        "the log says the disk is full: {}",
        tail(&log)
    );
    assert!(
        log.contains("stopped because a write or fsync of its data failed"),
        "the log says what happened and what to do: {}",
        tail(&log)
    );
    assert!(!log.contains("panicked"), "no panic: {}", tail(&log));

    // The other two go on without it.
    let leader = cluster.wait_for_leader(&[1, 2]).await;
    let client = cluster.client(leader);
    for index in 0..20 {
        let key = format!("after-full/{index}");
        client.put_retrying(&key, "small", TIMEOUT).await;
        acknowledged.push(key);
    }

    std::fs::remove_file(&ballast).expect("delete the ballast");
    cluster.restart(SMALL_DISK_MEMBER).await;
    let revision = client.put_retrying("after-room", "1", TIMEOUT).await;
    acknowledged.push("after-room".to_string());
    let revision = cluster.wait_for_same_revision(&[1, 2, 3], revision).await;
    cluster.assert_same_hash(&[1, 2, 3], revision).await;
    let recovered = cluster.client(SMALL_DISK_MEMBER);
    for key in &acknowledged {
        assert!(
            recovered.local_value(key).await.is_some(),
            "the recovered member holds acknowledged write {key}"
        );
    }
}

/// Writes large values through member 1 (which forwards them to the leader, wherever it is) until
/// member 3 exits; returns its exit status.
async fn fill_until_member_exits(
    cluster: &mut ProcessCluster,
    acknowledged: &mut Vec<String>,
) -> std::process::ExitStatus {
    let value = "v".repeat(VALUE_BYTES);
    for index in 0..MAX_WRITES_TO_FILL {
        if let Some(status) = cluster.exited(SMALL_DISK_MEMBER) {
            return status;
        }
        let key = format!("fill/{index:05}");
        if put(&cluster.client(1), &key, &value).await {
            acknowledged.push(key);
        }
    }
    wait_until("member 3 exits", TIMEOUT, async || {
        cluster.exited(SMALL_DISK_MEMBER)
    })
    .await
}

/// One put; true when it was acknowledged.
async fn put(client: &MemberClient, key: &str, value: &str) -> bool {
    let body = serde_json::to_vec(&json!({ "value": value })).expect("JSON encodes");
    let answer = client
        .try_send(Method::PUT, &format!("/v1/kv/{key}"), Some(body), &[])
        .await;
    answer.is_ok_and(|answer| answer.status == StatusCode::OK)
}

fn tail(log: &str) -> String {
    let lines: Vec<_> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// An ext4 filesystem in an image file, loop-mounted in a temporary directory; unmounted on drop.
struct SmallFilesystem {
    directory: tempfile::TempDir,
}

impl SmallFilesystem {
    fn mount(bytes: u64) -> SmallFilesystem {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let image = directory.path().join("disk.img");
        File::create(&image)
            .and_then(|file| file.set_len(bytes))
            .expect("create the image file");
        // No blocks reserved for root, so the room the test leaves is the room the member has.
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&image));
        let mount_point = directory.path().join("mnt");
        std::fs::create_dir(&mount_point).expect("create the mount point");
        run(privileged("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount_point));
        SmallFilesystem { directory }
    }

    fn mount_point(&self) -> PathBuf {
        self.directory.path().join("mnt")
    }

    /// Writes a ballast file until the filesystem is full, then gives back `room` bytes of it.
    fn fill_leaving(&self, room: u64) -> PathBuf {
        let path = self.mount_point().join("ballast");
        let mut ballast = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .expect("create the ballast file");
        let block = vec![0u8; 1024 * 1024];
        let mut written = 0u64;
        loop {
            match ballast.write(&block) {
                Ok(0) => break,
                Ok(count) => written += count as u64,
                Err(error) if error.kind() == ErrorKind::StorageFull => break,
                Err(error) => panic!("fill the small filesystem: {error}"),
            }
        }
        assert!(
            written > room,
            "the ballast ({written} B) can leave {room} B"
        );
        ballast.set_len(written - room).expect("give back the room");
        ballast.sync_all().expect("sync the ballast");
        path
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        // Lazily: a member process killed just before may still hold a file open for a moment.
        let _ = privileged("umount")
            .arg("-l")
            .arg(self.mount_point())
            .status();
    }
}

/// `program` as root: directly when the test runs as root, else through `sudo -n`.
fn privileged(program: &str) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut command = Command::new("sudo");
        command.args(["-n", program]);
        command
    }
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|metadata| std::os::unix::fs::MetadataExt::uid(&metadata) == 0)
        .unwrap_or(false)
}

fn run(command: &mut Command) {
    let described = format!("{command:?}");
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("run {described}: {error}"));
    assert!(
        output.status.success(),
        "{described} failed ({}): {}; this test needs mkfs.ext4 (e2fsprogs) and the right to \
         loop-mount a filesystem (root, or sudo without a password)",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}
