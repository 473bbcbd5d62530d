//! A client that stops reading its Watch stream (issue 65, item 3): the member ends that stream's
//! watch with `slow_consumer` once the watch's buffer is full and counts the end at once, while
//! writes go on and a stream that reads, on a connection of its own, gets every event; the ended
//! watch then resumes from the revision after its last event with nothing skipped or repeated.
//! With a byte bound below what the buffer's messages would hold, the bound ends the watch first.

use crate::support;

use etcd_client::{WatchOptions, WatchStream};
use support::{next_watch_response as next, GrpcMember};

/// Bytes of each value written: large, so that the windows and buffers between the member and a
/// client that stopped reading (HTTP/2 flow control on both sides, the stream's queue, the
/// watch's buffer of 128 messages) fill after a few hundred writes.
const VALUE_BYTES: usize = 16 * 1024;

/// The most writes before the test gives up waiting for the member to end the stalled watch:
/// 64 MiB, far beyond what those windows and buffers hold together.
const MOST_WRITES: usize = 4_096;

/// The key written last; a stream that has read it has read everything.
const LAST_KEY: &str = "slow/zz-end";

/// The revisions of the events `stream` sends until the event on `LAST_KEY`, or until the watch
/// is canceled; answers them and the cancel reason, if it was canceled.
async fn revisions_until_the_end(stream: &mut WatchStream) -> (Vec<i64>, Option<String>) {
    let mut revisions = Vec::new();
    loop {
        let response = next(stream).await;
        if response.canceled() {
            return (revisions, Some(response.cancel_reason().to_owned()));
        }
        for event in response.events() {
            let kv = event.kv().expect("an event has its key-value");
            revisions.push(kv.mod_revision());
            if kv.key() == LAST_KEY.as_bytes() {
                return (revisions, None);
            }
        }
    }
}

/// Slow-consumer cancels at the message bound and at the byte bound.
const CANCELS_AT_MESSAGES: &str = "revkv_watch_slow_consumer_cancels_total{limit=\"messages\"}";
const CANCELS_AT_BYTES: &str = "revkv_watch_slow_consumer_cancels_total{limit=\"bytes\"}";

/// The value of one series (a name with its labels as exposed) in the member's exposition.
fn metric(member: &GrpcMember, name: &str) -> f64 {
    let text = member.metrics_text();
    let line = text
        .lines()
        .find(|line| line.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{name} is not in the exposition"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// True once the member has ended the stalled watch: one watch left, one slow-consumer end.
fn stalled_watch_ended(member: &GrpcMember) -> bool {
    metric(member, "revkv_watch_watchers") == 1.0 && metric(member, CANCELS_AT_MESSAGES) == 1.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_left_unread_is_ended_as_a_slow_consumer_and_resumes_without_loss() {
    let member = GrpcMember::start().await;
    let on_prefix = || Some(WatchOptions::new().with_prefix());
    let mut reading_client = member.client().await;
    let mut reading = reading_client.watch("slow/", on_prefix()).await.unwrap();
    assert!(next(&mut reading).await.created());
    // Its own connection, as a slow client is a process of its own: a stream that is not read
    // holds its connection's HTTP/2 window too.
    let mut stalled_client = member.client().await;
    let mut stalled = stalled_client.watch("slow/", on_prefix()).await.unwrap();
    assert!(next(&mut stalled).await.created());
    assert_eq!(metric(&member, "revkv_watch_watchers"), 2.0);
    let reader = tokio::spawn(async move {
        let read = revisions_until_the_end(&mut reading).await;
        (read, reading)
    });

    let mut writer = member.client().await;
    let value = "v".repeat(VALUE_BYTES);
    let mut written = Vec::new();
    let mut writes_after_the_end = None;
    for index in 0..MOST_WRITES {
        let put = writer.put(format!("slow/{index:05}"), value.clone(), None);
        written.push(put.await.unwrap().header().unwrap().revision());
        if writes_after_the_end.is_none() && stalled_watch_ended(&member) {
            writes_after_the_end = Some(0);
        }
        // A few more writes after the end, which the resumed watch must get.
        if let Some(count) = writes_after_the_end.as_mut() {
            *count += 1;
            if *count == 5 {
                break;
            }
        }
    }
    assert_eq!(
        writes_after_the_end,
        Some(5),
        "the member did not end the stalled watch within {MOST_WRITES} writes of {VALUE_BYTES} bytes"
    );
    let last = writer.put(LAST_KEY, "", None).await.unwrap();
    written.push(last.header().unwrap().revision());
    assert!(written.windows(2).all(|pair| pair[1] == pair[0] + 1));

    let ((read, reading_cancel), _reading) = reader.await.unwrap();
    assert_eq!(reading_cancel, None, "the reading stream's watch was ended");
    assert_eq!(
        read, written,
        "the reading stream missed or repeated events"
    );

    // The stalled stream holds a prefix of the events, in order, then the cancel with its reason.
    let (delivered, stalled_cancel) = revisions_until_the_end(&mut stalled).await;
    assert_eq!(stalled_cancel.as_deref(), Some("slow_consumer"));
    assert!(!delivered.is_empty() && delivered.len() < written.len());
    assert_eq!(delivered, written[..delivered.len()]);
    let resume_at = delivered.last().unwrap() + 1;
    let mut resumed = stalled_client
        .watch(
            "slow/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(resume_at),
            ),
        )
        .await
        .unwrap();
    assert!(next(&mut resumed).await.created());
    let (rest, resumed_cancel) = revisions_until_the_end(&mut resumed).await;
    assert_eq!(resumed_cancel, None);
    assert_eq!(
        rest,
        written[delivered.len()..],
        "the resumed watch skipped or repeated events"
    );
    assert_eq!(
        metric(&member, CANCELS_AT_MESSAGES),
        1.0,
        "the end is counted once, when the member decided it, not again when it was read"
    );
    assert_eq!(
        metric(&member, CANCELS_AT_BYTES),
        0.0,
        "128 messages of 16 KiB are within the default byte bound: the message bound ended it"
    );
    member.stop().await;
}

/// The byte bound of a watch's buffer in the hub, far below what its 128 messages of
/// `VALUE_BYTES` would hold (2 MiB), so the bound and not the message count ends the watch.
const BUFFER_BYTES: usize = 128 * 1024;

/// A client that stops reading holds at most `--watch-buffer-bytes` in the member's buffers for
/// its watch (`revkv_watch_buffered_bytes`, read after every write, never passes it; with the
/// message bound alone it would reach 2 MiB); the member then ends the watch `slow_consumer`, and
/// what it had delivered is a prefix of the writes, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_left_unread_holds_no_more_than_the_byte_bound() {
    let limits = revkv_node::watch::WatchLimits {
        stream_buffer_bytes: BUFFER_BYTES,
        ..Default::default()
    };
    let member = GrpcMember::start_with_watch_limits(limits).await;
    let mut stalled_client = member.client().await;
    let on_prefix = Some(WatchOptions::new().with_prefix());
    let mut stalled = stalled_client.watch("slow/", on_prefix).await.unwrap();
    assert!(next(&mut stalled).await.created());

    let mut writer = member.client().await;
    let value = "v".repeat(VALUE_BYTES);
    let mut written = Vec::new();
    let mut most_buffered: f64 = 0.0;
    while metric(&member, CANCELS_AT_BYTES) == 0.0 {
        assert!(
            written.len() < MOST_WRITES,
            "the member did not end the stalled watch within {MOST_WRITES} writes"
        );
        let key = format!("slow/{:05}", written.len());
        let put = writer.put(key, value.clone(), None).await.unwrap();
        written.push(put.header().unwrap().revision());
        most_buffered = most_buffered.max(metric(&member, "revkv_watch_buffered_bytes"));
    }
    assert!(
        most_buffered > 0.0,
        "the stalled watch's buffer never held anything: the gauge does not follow it"
    );
    assert!(
        most_buffered <= BUFFER_BYTES as f64,
        "the stalled watch's buffer held {most_buffered} bytes, past its bound of {BUFFER_BYTES}"
    );
    let last = writer.put(LAST_KEY, "", None).await.unwrap();
    written.push(last.header().unwrap().revision());

    assert_eq!(
        metric(&member, CANCELS_AT_MESSAGES),
        0.0,
        "the byte bound, not the message bound, ended the stalled watch"
    );
    let (delivered, cancel) = revisions_until_the_end(&mut stalled).await;
    assert_eq!(cancel.as_deref(), Some("slow_consumer"));
    assert_eq!(delivered, written[..delivered.len()]);
    assert_eq!(
        metric(&member, "revkv_watch_buffered_bytes"),
        0.0,
        "once the stream has read its buffer, nothing is counted as held"
    );
    member.stop().await;
}
