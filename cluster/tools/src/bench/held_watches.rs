//! `revkv bench hold-watches`: a background watch load, to measure writes beside many watchers of
//! which some read slowly or not at all (issue 65, item 3; `scripts/bench-slow-watchers.sh`). It
//! measures nothing itself: etcd's own `benchmark put` measures the writes while it holds the
//! watches, the same client for every system.
//!
//! Over etcd's gRPC API (`--target etcd-grpc`), `--watchers` watches ride Watch streams of
//! `--watches-per-stream` watches each. The watches of `--stalled-percent` of them ride streams
//! that are never read after their watches are created, each stream on a connection of its own, as
//! a slow client is a process of its own (a stream that is not read holds its connection's HTTP/2
//! window, which would stall the reading streams beside it in the client, not in the member). The
//! other streams share `--conns` connections and read everything. Connection j goes to endpoint j
//! mod n.
//!
//! The keys watched are the ones etcd's `benchmark put --key-size 8 --sequential-keys` writes:
//! their first byte is a varint's, `0x80 + 2k` for the 64 values of k once the key number is 64
//! or more, so watch w watches the keys starting with byte `0x80 + 2 (w mod 64)`, and each write
//! reaches about one watch in 64.
//!
//! The watches are held until SIGINT, SIGTERM or `--duration`; then the stalled streams are read
//! to their end (what the member kept for them, and each watch's end with its reason), and a JSON
//! report goes to stdout.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::etcd_api::pb::{WatchCreateRequest, WatchResponse};
use crate::etcd_api::{EtcdClient, WatchStream};

/// How many distinct first bytes the watches spread over (see the module comment).
const WATCHED_FIRST_BYTES: usize = 64;

/// A stalled stream being read at the end is done once nothing arrives for this long.
const DRAIN_QUIET_PERIOD: Duration = Duration::from_secs(2);

/// What one hold-watches run does.
#[derive(Debug, Clone)]
pub struct HeldWatchesPlan {
    pub endpoints: Vec<String>,
    pub watchers: usize,
    pub watches_per_stream: usize,
    /// Connections the reading streams share.
    pub reading_connections: usize,
    /// The share of the watches whose streams are never read, in percent.
    pub stalled_percent: u8,
    /// The longest the watches are held (SIGINT or SIGTERM ends the hold earlier).
    pub duration: Duration,
}

impl HeldWatchesPlan {
    /// Watches on streams that are never read.
    pub fn stalled_watches(&self) -> usize {
        self.watchers * usize::from(self.stalled_percent) / 100
    }
}

/// What a hold-watches run saw.
#[derive(Serialize, Debug, Default)]
pub struct HeldWatchesReport {
    pub watchers: usize,
    pub stalled_watches: usize,
    pub reading_streams: usize,
    pub stalled_streams: usize,
    pub setup_seconds: f64,
    pub held_seconds: f64,
    /// Events the reading streams read while the watches were held.
    pub events_read: u64,
    /// Events the stalled streams held for their client, read at the end.
    pub stalled_events_read_at_the_end: u64,
    /// The watches the member ended, by stream kind and reason.
    pub reading_watches_ended: BTreeMap<String, u64>,
    pub stalled_watches_ended: BTreeMap<String, u64>,
}

/// What one stream saw.
#[derive(Default)]
struct StreamTally {
    events: u64,
    ended: BTreeMap<String, u64>,
}

/// Holds the plan's watches until SIGINT, SIGTERM or the plan's duration, then reports.
pub async fn run(plan: &HeldWatchesPlan) -> Result<HeldWatchesReport, String> {
    let setup_started = Instant::now();
    let stalled_watches = plan.stalled_watches();
    let stalled_streams = stalled_watches.div_ceil(plan.watches_per_stream);
    let reading_watches = plan.watchers - stalled_watches;
    let reading_streams = reading_watches.div_ceil(plan.watches_per_stream);
    let reading_count = plan.reading_connections.min(reading_streams);
    let reading_clients = EtcdClient::connect_numbered(&plan.endpoints, 0, reading_count).await?;
    let stalled_clients =
        EtcdClient::connect_numbered(&plan.endpoints, reading_count, stalled_streams).await?;
    let (stop_sender, stop) = watch::channel(false);
    let (created_sender, mut created) =
        tokio::sync::mpsc::channel(reading_streams + stalled_streams + 1);
    let mut streams = JoinSet::new();
    let mut first_watch = 0;
    for (index, watches) in split(stalled_watches, plan.watches_per_stream).enumerate() {
        let client = stalled_clients[index].clone();
        let open = open_stream(client, first_watch, watches, created_sender.clone());
        streams.spawn(stalled_stream(open, stop.clone()));
        first_watch += watches;
    }
    for (index, watches) in split(reading_watches, plan.watches_per_stream).enumerate() {
        let client = reading_clients[index % reading_clients.len()].clone();
        let open = open_stream(client, first_watch, watches, created_sender.clone());
        streams.spawn(reading_stream(open, stop.clone()));
        first_watch += watches;
    }
    drop(created_sender);
    let mut open_streams = 0;
    while open_streams < reading_streams + stalled_streams {
        match created.recv().await {
            Some(Ok(())) => open_streams += 1,
            Some(Err(message)) => return Err(message),
            None => return Err("a stream ended before its watches were created".into()),
        }
    }
    let setup_seconds = setup_started.elapsed().as_secs_f64();
    eprintln!(
        "revkv bench hold-watches: {} watches open ({stalled_watches} on {stalled_streams} streams \
         left unread) after {setup_seconds:.1}s; holding",
        plan.watchers
    );
    let held_since = Instant::now();
    tokio::select! {
        () = crate::interrupt::interrupted() => {}
        () = tokio::time::sleep(plan.duration) => {}
    }
    let held_seconds = held_since.elapsed().as_secs_f64();
    stop_sender.send_replace(true);
    let mut report = HeldWatchesReport {
        watchers: plan.watchers,
        stalled_watches,
        reading_streams,
        stalled_streams,
        setup_seconds,
        held_seconds,
        ..HeldWatchesReport::default()
    };
    while let Some(joined) = streams.join_next().await {
        let (stalled, tally) = joined.map_err(|error| error.to_string())??;
        let ended = if stalled {
            report.stalled_events_read_at_the_end += tally.events;
            &mut report.stalled_watches_ended
        } else {
            report.events_read += tally.events;
            &mut report.reading_watches_ended
        };
        for (reason, count) in tally.ended {
            *ended.entry(reason).or_default() += count;
        }
    }
    Ok(report)
}

/// The sizes of the streams that carry `watches` watches, `per_stream` at most to one.
fn split(watches: usize, per_stream: usize) -> impl Iterator<Item = usize> {
    let streams = watches.div_ceil(per_stream);
    (0..streams).map(move |index| per_stream.min(watches - index * per_stream))
}

/// The watch of number `watch`: the keys whose first byte is `0x80 + 2 (watch mod 64)`.
fn watch_request(watch: usize) -> WatchCreateRequest {
    let first_byte = 0x80 + 2 * (watch % WATCHED_FIRST_BYTES) as u8;
    WatchCreateRequest {
        key: vec![first_byte],
        range_end: vec![first_byte + 1],
        ..WatchCreateRequest::default()
    }
}

/// A stream whose watches are all created, or why not.
type OpenStream = (WatchStream, usize);

/// Opens a stream with watches `first..first + watches`, reads their `created` answers and tells
/// `created` (once) whether they all were.
async fn open_stream(
    client: EtcdClient,
    first: usize,
    watches: usize,
    created: tokio::sync::mpsc::Sender<Result<(), String>>,
) -> Result<OpenStream, String> {
    let opened = create_watches(client, first, watches).await;
    let told = opened.as_ref().map(|_| ()).map_err(Clone::clone);
    let _ = created.send(told).await;
    opened.map(|stream| (stream, watches))
}

async fn create_watches(
    client: EtcdClient,
    first: usize,
    watches: usize,
) -> Result<WatchStream, String> {
    let mut stream = WatchStream::open(&mut client.watch(), watch_request(first))
        .await
        .map_err(|error| error.to_string())?;
    for watch in first + 1..first + watches {
        stream
            .watch(watch_request(watch))
            .await
            .map_err(|error| error.to_string())?;
    }
    let mut created = 0;
    while created < watches {
        let response = stream
            .message()
            .await
            .map_err(|error| error.to_string())?
            .ok_or("the stream ended while its watches were created")?;
        if response.canceled {
            return Err(format!("a watch was refused: {}", response.cancel_reason));
        }
        created += usize::from(response.created);
    }
    Ok(stream)
}

/// Reads everything until the hold ends; answers `(false, what it read)`.
async fn reading_stream(
    open: impl std::future::Future<Output = Result<OpenStream, String>>,
    mut stop: watch::Receiver<bool>,
) -> Result<(bool, StreamTally), String> {
    let (mut stream, _) = open.await?;
    let mut tally = StreamTally::default();
    loop {
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return Ok((false, tally)),
            message = stream.message() => match message.map_err(|error| error.to_string())? {
                Some(response) => tally.add(&response),
                None => return Ok((false, tally)),
            },
        }
    }
}

/// Reads nothing until the hold ends, then what the member kept for it; answers `(true, that)`.
async fn stalled_stream(
    open: impl std::future::Future<Output = Result<OpenStream, String>>,
    mut stop: watch::Receiver<bool>,
) -> Result<(bool, StreamTally), String> {
    let (mut stream, watches) = open.await?;
    let _ = stop.wait_for(|stopped| *stopped).await;
    let mut tally = StreamTally::default();
    let mut ended = 0;
    while ended < watches {
        let message = tokio::time::timeout(DRAIN_QUIET_PERIOD, stream.message()).await;
        let Ok(message) = message else { break };
        let Some(response) = message.map_err(|error| error.to_string())? else {
            break;
        };
        ended += usize::from(response.canceled);
        tally.add(&response);
    }
    Ok((true, tally))
}

impl StreamTally {
    fn add(&mut self, response: &WatchResponse) {
        self.events += response.events.len() as u64;
        if response.canceled {
            let reason = match response.cancel_reason.as_str() {
                "" => "(no reason given)".to_string(),
                reason => reason.to_string(),
            };
            *self.ended.entry(reason).or_default() += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_carry_at_most_their_share_and_every_watch() {
        assert_eq!(split(250, 100).collect::<Vec<_>>(), [100, 100, 50]);
        assert_eq!(split(200, 100).collect::<Vec<_>>(), [100, 100]);
        assert_eq!(split(0, 100).count(), 0);
    }

    #[test]
    fn watches_cover_the_first_bytes_of_the_benchmarks_sequential_keys() {
        // etcd's benchmark writes key number i as a zig-zag varint: from 64 on, its first byte is
        // (2i mod 128) | 0x80.
        for key_number in [64_u64, 65, 100, 1_000, 9_999] {
            let first_byte = ((2 * key_number) % 128) as u8 | 0x80;
            let watched = (0..WATCHED_FIRST_BYTES)
                .map(watch_request)
                .filter(|request| request.key[0] <= first_byte && first_byte < request.range_end[0])
                .count();
            assert_eq!(watched, 1, "key {key_number} (first byte {first_byte:#x})");
        }
    }
}
