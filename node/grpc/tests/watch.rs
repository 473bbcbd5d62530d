//! etcd's Watch service through the `etcd-client` crate against one real revkv member: several
//! watches on one stream with ids the stream picks, prefixes, `prev_kv`, filters, a start
//! revision in the past, cancel, progress requests, and a compacted start revision.

use crate::support;

use etcd_client::{
    CompactionOptions, EventType, WatchFilterType, WatchOptions, WatchResponse, WatchStream,
};
use support::{next_watch_response as next, GrpcMember, WATCH_DEADLINE as DEADLINE};

/// (type, key, value, previous value) of each event of a response.
fn events(response: &WatchResponse) -> Vec<(EventType, String, String, Option<String>)> {
    response
        .events()
        .iter()
        .map(|event| {
            let kv = event.kv().unwrap();
            (
                event.event_type(),
                kv.key_str().unwrap().to_owned(),
                kv.value_str().unwrap().to_owned(),
                event.prev_kv().map(|kv| kv.value_str().unwrap().to_owned()),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_watches_on_one_stream_see_their_own_events_in_order() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let mut stream = client
        .watch(
            "app/",
            Some(WatchOptions::new().with_prefix().with_prev_key()),
        )
        .await
        .unwrap();
    let created = next(&mut stream).await;
    assert!(created.created());
    assert_eq!(
        created.watch_id(),
        0,
        "the stream picks ids from 0, as etcd"
    );
    stream
        .watch(
            "app/b",
            Some(WatchOptions::new().with_filters([WatchFilterType::NoPut])),
        )
        .await
        .unwrap();
    let second = next(&mut stream).await;
    assert!(second.created());
    assert_eq!(second.watch_id(), 1);

    client.put("app/a", "1", None).await.unwrap();
    client.put("app/a", "2", None).await.unwrap();
    client.put("app/b", "x", None).await.unwrap();
    client.delete("app/b", None).await.unwrap();
    client.put("other", "y", None).await.unwrap();

    let mut seen_by_prefix = Vec::new();
    let mut seen_by_key = Vec::new();
    while seen_by_prefix.len() < 4 || seen_by_key.is_empty() {
        let response = next(&mut stream).await;
        match response.watch_id() {
            0 => seen_by_prefix.extend(events(&response)),
            1 => seen_by_key.extend(events(&response)),
            other => panic!("a response for watch {other}"),
        }
    }
    let s = |text: &str| text.to_owned();
    assert_eq!(
        seen_by_prefix,
        [
            (EventType::Put, s("app/a"), s("1"), None),
            (EventType::Put, s("app/a"), s("2"), Some(s("1"))),
            (EventType::Put, s("app/b"), s("x"), None),
            (EventType::Delete, s("app/b"), s(""), Some(s("x"))),
        ]
    );
    // NOPUT leaves only the delete; no prev_kv was asked for.
    assert_eq!(seen_by_key, [(EventType::Delete, s("app/b"), s(""), None)]);

    stream.cancel(1).await.unwrap();
    let canceled = next(&mut stream).await;
    assert!(canceled.canceled());
    assert_eq!(canceled.watch_id(), 1);
    member.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_revision_in_the_past_replays_history_and_progress_is_reported() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let first = client.put("k", "1", None).await.unwrap();
    let start = first.header().unwrap().revision();
    client.put("k", "2", None).await.unwrap();
    let mut stream = client
        .watch("k", Some(WatchOptions::new().with_start_revision(start)))
        .await
        .unwrap();
    assert!(next(&mut stream).await.created());
    let mut values = Vec::new();
    while values.len() < 2 {
        let response = next(&mut stream).await;
        values.extend(events(&response).into_iter().map(|event| event.2));
    }
    assert_eq!(values, ["1", "2"]);

    let latest = client.put("unwatched", "z", None).await.unwrap();
    let latest_revision = latest.header().unwrap().revision();
    stream.request_progress().await.unwrap();
    let progress = next(&mut stream).await;
    assert!(progress.events().is_empty() && !progress.created() && !progress.canceled());
    assert!(
        progress.header().unwrap().revision() >= latest_revision,
        "a progress response covers every revision up to the member's current one"
    );
    member.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_start_revision_is_created_then_canceled_with_the_compact_revision() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let first = client.put("k", "1", None).await.unwrap();
    let early = first.header().unwrap().revision();
    let last = client.put("k", "2", None).await.unwrap();
    let compact_at = last.header().unwrap().revision();
    client
        .compact(compact_at, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    let mut stream = client
        .watch("k", Some(WatchOptions::new().with_start_revision(early)))
        .await
        .unwrap();
    assert!(next(&mut stream).await.created());
    let canceled = next(&mut stream).await;
    assert!(canceled.canceled());
    assert_eq!(canceled.compact_revision(), compact_at);
    member.stop().await;
}

/// The events of responses read from `stream` until `wanted` events have arrived, response by
/// response, with whether each response said it was a fragment. (etcd-client has no accessor for
/// the flag; its Debug form is the generated message's, which names every field.)
async fn responses_until(stream: &mut WatchStream, wanted: usize) -> Vec<(usize, bool)> {
    let mut pieces = Vec::new();
    let mut events = 0;
    while events < wanted {
        let response = next(stream).await;
        if response.events().is_empty() {
            continue;
        }
        events += response.events().len();
        pieces.push((
            response.events().len(),
            format!("{response:?}").contains("fragment: true"),
        ));
    }
    assert_eq!(events, wanted, "no events beyond the revision's");
    pieces
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_with_fragment_gets_a_large_revision_in_pieces_and_one_without_gets_it_whole() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    // Five keys of 600 KiB, then one delete of all five: a revision whose events, with their
    // previous values, take about 3 MiB, more than the largest request (2 MiB).
    let value = "v".repeat(600 * 1024);
    for number in 0..5 {
        client
            .put(format!("big/{number}"), value.clone(), None)
            .await
            .unwrap();
    }
    let options = WatchOptions::new().with_prefix().with_prev_key();
    let mut whole = client.watch("big/", Some(options.clone())).await.unwrap();
    let mut in_pieces = client
        .watch("big/", Some(options.with_fragment()))
        .await
        .unwrap();
    assert!(next(&mut whole).await.created());
    assert!(next(&mut in_pieces).await.created());

    let deleted = client
        .delete(
            "big/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert_eq!(deleted.deleted(), 5);

    assert_eq!(
        responses_until(&mut whole, 5).await,
        vec![(5, false)],
        "without the flag the revision comes whole, as from etcd"
    );
    let pieces = responses_until(&mut in_pieces, 5).await;
    assert!(pieces.len() > 1, "{pieces:?}");
    let (last, before) = pieces.split_last().unwrap();
    assert!(!last.1, "the last piece ends the revision: {pieces:?}");
    assert!(
        before.iter().all(|(_, fragment)| *fragment),
        "every other piece says more follows: {pieces:?}"
    );
}

/// As many watches as a client that multiplexes them (client-go's and clientv3's watchers share
/// one stream per context) may open: well past the 1,024 per stream revkv allowed before, and
/// well within the member's `--max-watches`.
const MULTIPLEXED_WATCHES: usize = 5_000;

/// Every one of `MULTIPLEXED_WATCHES` watches on one stream is created (none refused with a
/// per-stream limit of its own, as etcd has none) and sees the put they all watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_watches_share_one_stream() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let mut stream = client.watch("shared", None).await.unwrap();
    assert!(next(&mut stream).await.created());
    for _ in 1..MULTIPLEXED_WATCHES {
        stream.watch("shared", None).await.unwrap();
        let created = next(&mut stream).await;
        assert!(
            created.created() && !created.canceled(),
            "watch {} was refused: {}",
            created.watch_id(),
            created.cancel_reason()
        );
    }
    client.put("shared", "v", None).await.unwrap();
    let mut watches_that_saw_the_put = std::collections::HashSet::new();
    while watches_that_saw_the_put.len() < MULTIPLEXED_WATCHES {
        let response = next(&mut stream).await;
        assert_eq!(events(&response).len(), 1, "{response:?}");
        assert!(watches_that_saw_the_put.insert(response.watch_id()));
    }
    member.stop().await;
}

/// `MULTIPLEXED_WATCHES` `Watch` streams, one watch each, over the client's one connection: the
/// server announces etcd's default of 2^32-1 concurrent streams, so none waits for another to
/// end (with hyper's limit of 1,024 the next stream would wait forever, and `next` would give up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_watch_streams_share_one_connection() {
    let member = GrpcMember::start().await;
    let mut client = member.client().await;
    let mut streams = Vec::with_capacity(MULTIPLEXED_WATCHES);
    for _ in 0..MULTIPLEXED_WATCHES {
        let opened = tokio::time::timeout(DEADLINE, client.watch("fanned-out", None))
            .await
            .expect("the stream opens in time")
            .unwrap();
        streams.push(opened);
    }
    for stream in &mut streams {
        assert!(next(stream).await.created());
    }
    client.put("fanned-out", "v", None).await.unwrap();
    for stream in &mut streams {
        assert_eq!(events(&next(stream).await).len(), 1);
    }
    member.stop().await;
}
