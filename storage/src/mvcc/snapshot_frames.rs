//! Reading a snapshot stream: the one place that checks a stream's shape (header, records in
//! order, leases in id order, a trailer whose count and xxh3 checksum match, nothing after it).
//!
//! Import writes what it reads into the store's tables; `inspect_snapshot` only checks and
//! summarises (for `revkv snapshot status` and for verifying a saved backup), so both go through
//! `read_stream` with a different `FrameSink`.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::Xxh3;

use crate::auth::AuthState;
use crate::codec::{self, LeaseRecord, SnapshotFrame, StreamHeader, VersionRecord};
use crate::codec::{SNAPSHOT_MAGIC, STREAM_VERSION};
use crate::error::{SnapshotError, StorageFailure};
use crate::types::{Alarm, AppliedState, LearnerPromotion, LearnerPromotionChange};

use super::live_key_count::LiveKeyCounter;

/// What a snapshot holds, as reported after export, import or inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotSummary {
    /// 1 for streams that open with the older header, `codec::STREAM_VERSION` since.
    pub stream_version: u32,
    pub current_revision: u64,
    pub compact_revision: u64,
    pub applied: AppliedState,
    /// History records plus leases.
    pub records: u64,
    /// Keys live at `current_revision` (None when a version-1 stream was only inspected).
    pub live_keys: Option<u64>,
    pub member_id: Option<u64>,
    pub cluster_id: Option<u64>,
    /// The trailer's xxh3 checksum of every byte before it.
    pub checksum: u64,
}

/// Where the records and leases of a stream go as they are read and checked.
pub(crate) trait FrameSink {
    fn record(
        &mut self,
        revision: u64,
        position: u32,
        record: VersionRecord,
    ) -> Result<(), SnapshotError>;
    fn lease(&mut self, id: i64, record: LeaseRecord) -> Result<(), SnapshotError>;
    fn alarms(&mut self, alarms: Vec<Alarm>) -> Result<(), SnapshotError>;
    fn auth(&mut self, auth: AuthState) -> Result<(), SnapshotError>;
    fn learner_promotions(
        &mut self,
        promotions: Vec<LearnerPromotion>,
    ) -> Result<(), SnapshotError>;
}

/// A sink that keeps nothing: the stream is only checked.
struct Discard;

impl FrameSink for Discard {
    fn record(&mut self, _: u64, _: u32, _: VersionRecord) -> Result<(), SnapshotError> {
        Ok(())
    }

    fn lease(&mut self, _: i64, _: LeaseRecord) -> Result<(), SnapshotError> {
        Ok(())
    }

    fn alarms(&mut self, _: Vec<Alarm>) -> Result<(), SnapshotError> {
        Ok(())
    }

    fn auth(&mut self, _: AuthState) -> Result<(), SnapshotError> {
        Ok(())
    }

    fn learner_promotions(&mut self, _: Vec<LearnerPromotion>) -> Result<(), SnapshotError> {
        Ok(())
    }
}

/// A sink that keeps only which keys are live, for a foreign history's summary.
impl FrameSink for LiveKeyCounter {
    fn record(&mut self, _: u64, _: u32, record: VersionRecord) -> Result<(), SnapshotError> {
        self.observe(&record);
        Ok(())
    }

    fn lease(&mut self, _: i64, _: LeaseRecord) -> Result<(), SnapshotError> {
        Ok(())
    }

    fn alarms(&mut self, _: Vec<Alarm>) -> Result<(), SnapshotError> {
        Ok(())
    }

    fn auth(&mut self, _: AuthState) -> Result<(), SnapshotError> {
        Ok(())
    }

    fn learner_promotions(&mut self, _: Vec<LearnerPromotion>) -> Result<(), SnapshotError> {
        Ok(())
    }
}

/// What a restore has read so far: records and their key and value bytes, counted as frames
/// pass the checks, for a progress display on another thread (relaxed atomics: a display needs
/// no ordering).
#[derive(Debug, Default)]
pub struct ImportProgress {
    records: AtomicU64,
    bytes: AtomicU64,
}

impl ImportProgress {
    /// Counts `record` and its key and value bytes.
    pub fn count_record(&self, record: &VersionRecord) {
        let bytes = (record.key.len() + record.value.len()) as u64;
        self.records.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Starts counting again (the next pass over the same backup).
    pub fn reset(&self) {
        self.records.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
    }
}

/// Counts each record into `progress` on its way to `sink`.
pub(crate) struct Counting<'s, 'p, S> {
    pub sink: &'s mut S,
    pub progress: &'p ImportProgress,
}

impl<S: FrameSink> FrameSink for Counting<'_, '_, S> {
    fn record(
        &mut self,
        revision: u64,
        position: u32,
        record: VersionRecord,
    ) -> Result<(), SnapshotError> {
        self.progress.count_record(&record);
        self.sink.record(revision, position, record)
    }

    fn lease(&mut self, id: i64, record: LeaseRecord) -> Result<(), SnapshotError> {
        self.sink.lease(id, record)
    }

    fn alarms(&mut self, alarms: Vec<Alarm>) -> Result<(), SnapshotError> {
        self.sink.alarms(alarms)
    }

    fn auth(&mut self, auth: AuthState) -> Result<(), SnapshotError> {
        self.sink.auth(auth)
    }

    fn learner_promotions(
        &mut self,
        promotions: Vec<LearnerPromotion>,
    ) -> Result<(), SnapshotError> {
        self.sink.learner_promotions(promotions)
    }
}

/// `inspect_snapshot`, counting each record into `progress` as it is checked.
pub fn inspect_snapshot_counted<R: Read>(
    reader: &mut R,
    progress: &ImportProgress,
) -> Result<SnapshotSummary, SnapshotError> {
    let sink = &mut Discard;
    read_stream(reader, &mut Counting { sink, progress })
}

/// Reads and checks a whole snapshot stream without a store: the header, every frame's order and
/// encoding, the trailer's count and checksum, and that nothing follows it. Reads the stream once,
/// in bounded frames, so a backup of any size is checked in constant memory.
pub fn inspect_snapshot<R: Read>(reader: &mut R) -> Result<SnapshotSummary, SnapshotError> {
    read_stream(reader, &mut Discard)
}

/// A backup file opened for reading: a revkv stream as `revkv ctl snapshot save` writes it, or
/// as `etcdctl snapshot save` writes it from a revkv member (inside etcd's envelope, whose
/// checksum is checked here, `codec::etcd_envelope`).
pub fn open_backup_file(path: &std::path::Path) -> std::io::Result<impl Read> {
    let mut file = std::fs::File::open(path)?;
    let length = codec::etcd_envelope::stream_length(&mut file)?;
    Ok(std::io::BufReader::new(file.take(length)))
}

pub(crate) fn bad(detail: impl Into<String>) -> SnapshotError {
    SnapshotError::BadSnapshot(detail.into())
}

fn read_frame<R: Read>(reader: &mut R) -> Result<Option<SnapshotFrame>, SnapshotError> {
    codec::read_frame(reader).map_err(|error| match error {
        codec::CodecError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            bad("the stream ends in the middle of a frame (truncated)")
        }
        other => bad(other.to_string()),
    })
}

/// The header of either stream version, as one shape.
fn read_header<R: Read>(reader: &mut R) -> Result<StreamHeader, SnapshotError> {
    let header = match read_frame(reader)? {
        Some(SnapshotFrame::StreamHeader(header)) => header,
        Some(SnapshotFrame::Header(old)) => StreamHeader {
            magic: old.magic,
            stream_version: 1,
            current_revision: old.current_revision,
            compact_revision: old.compact_revision,
            applied: old.applied,
            live_keys: 0,
            member_id: None,
            cluster_id: None,
        },
        Some(_) => {
            return Err(bad(
                "the stream does not start with a revkv snapshot header",
            ))
        }
        None => return Err(bad("empty stream")),
    };
    if header.magic != SNAPSHOT_MAGIC {
        return Err(bad(
            "the stream does not start with a revkv snapshot header",
        ));
    }
    if header.stream_version == 0 || header.stream_version > STREAM_VERSION {
        return Err(bad(format!(
            "stream version {} is not supported (this build reads up to {STREAM_VERSION})",
            header.stream_version
        )));
    }
    if header.compact_revision > header.current_revision {
        return Err(bad("the header's compact revision is above its revision"));
    }
    Ok(header)
}

/// Reads and checks a whole revkv snapshot stream as `inspect_snapshot` does, handing each
/// record, lease, alarms and auth frame to `emit` as it passes the checks: for converting a
/// backup into another format (etcd's, `revkv-etcd-snapshot`). A failure of `emit` ends the
/// read and is returned as it was.
pub fn read_snapshot_frames<R: Read, E: From<SnapshotError> + From<StorageFailure>>(
    reader: &mut R,
    emit: &mut dyn FnMut(SnapshotFrame) -> std::result::Result<(), E>,
) -> std::result::Result<SnapshotSummary, E> {
    let mut forward = Forward {
        emit,
        failure: None,
    };
    let read = read_stream(reader, &mut forward);
    match (read, forward.failure) {
        (_, Some(failure)) => Err(failure),
        (Err(error), None) => Err(error.into()),
        (Ok(summary), None) => Ok(summary),
    }
}

/// The sink of `read_snapshot_frames`: rebuilds each frame and passes it on, keeping the
/// converter's own error.
struct Forward<'e, E> {
    emit: &'e mut dyn FnMut(SnapshotFrame) -> std::result::Result<(), E>,
    failure: Option<E>,
}

impl<E> Forward<'_, E> {
    fn pass(&mut self, frame: SnapshotFrame) -> Result<(), SnapshotError> {
        (self.emit)(frame).map_err(|failure| {
            self.failure = Some(failure);
            bad("the converter stopped")
        })
    }
}

impl<E> FrameSink for Forward<'_, E> {
    fn record(
        &mut self,
        revision: u64,
        position: u32,
        record: VersionRecord,
    ) -> Result<(), SnapshotError> {
        self.pass(SnapshotFrame::Record {
            revision,
            position,
            record,
        })
    }

    fn lease(&mut self, id: i64, record: LeaseRecord) -> Result<(), SnapshotError> {
        self.pass(SnapshotFrame::LeaseState {
            id,
            ttl_seconds: record.ttl_seconds,
            checkpointed_remaining_ms: record.checkpointed_remaining_ms,
            renewed_at_index: record.renewed_at_index,
        })
    }

    fn alarms(&mut self, alarms: Vec<Alarm>) -> Result<(), SnapshotError> {
        self.pass(SnapshotFrame::Alarms(alarms))
    }

    fn auth(&mut self, auth: AuthState) -> Result<(), SnapshotError> {
        self.pass(SnapshotFrame::Auth(auth))
    }

    fn learner_promotions(
        &mut self,
        promotions: Vec<LearnerPromotion>,
    ) -> Result<(), SnapshotError> {
        self.pass(SnapshotFrame::LearnerPromotions(promotions))
    }
}

/// The revisions a history from outside revkv (an etcd snapshot, `revkv-etcd-snapshot`)
/// announces before its frames: what a stream's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForeignHistory {
    pub current_revision: u64,
    pub compact_revision: u64,
}

/// Where a converter hands its frames, one at a time, to be checked and kept.
pub type FrameFeed<'f> = dyn FnMut(SnapshotFrame) -> Result<(), SnapshotError> + 'f;

/// Checks a foreign history without a store, as `inspect_snapshot` checks a stream: `feed` hands
/// over every record, lease and auth frame, and each must pass the same order and shape checks
/// as a stream's. Answers what the history holds, with the keys live at its end counted (in
/// memory proportional to them: see `LiveKeyCounter`).
pub fn inspect_foreign<E: From<SnapshotError> + From<StorageFailure>>(
    history: ForeignHistory,
    feed: impl FnOnce(&mut FrameFeed<'_>) -> std::result::Result<(), E>,
) -> std::result::Result<SnapshotSummary, E> {
    let mut counter = LiveKeyCounter::default();
    let mut summary = read_foreign(history, feed, &mut counter)?;
    summary.live_keys = Some(counter.live_keys());
    Ok(summary)
}

/// Passes every frame `feed` hands over through the stream checks into `sink`. Headers and
/// trailers belong to streams and are refused here.
pub(crate) fn read_foreign<E: From<SnapshotError> + From<StorageFailure>>(
    history: ForeignHistory,
    feed: impl FnOnce(&mut FrameFeed<'_>) -> std::result::Result<(), E>,
    sink: &mut impl FrameSink,
) -> std::result::Result<SnapshotSummary, E> {
    if history.compact_revision > history.current_revision {
        return Err(bad("the compact revision is above the current revision").into());
    }
    let mut order = FrameOrder::default();
    feed(&mut |frame| match frame {
        SnapshotFrame::Header(_)
        | SnapshotFrame::StreamHeader(_)
        | SnapshotFrame::Trailer { .. } => Err(bad("a header or trailer inside a foreign history")),
        frame => pass_frame_on(frame, history.current_revision, &mut order, sink).map(|_| ()),
    })?;
    Ok(SnapshotSummary {
        stream_version: FOREIGN_STREAM_VERSION,
        current_revision: history.current_revision,
        compact_revision: history.compact_revision,
        applied: AppliedState::default(),
        records: order.frames,
        live_keys: None,
        member_id: None,
        cluster_id: None,
        checksum: 0,
    })
}

/// The `stream_version` of a summary of a foreign history: no revkv stream has version 0.
pub const FOREIGN_STREAM_VERSION: u32 = 0;

/// Reads the header, every record, every lease and the trailer into `sink`, checking order,
/// count and checksum.
pub(crate) fn read_stream<R: Read>(
    reader: &mut R,
    sink: &mut impl FrameSink,
) -> Result<SnapshotSummary, SnapshotError> {
    let mut reader = HashingReader {
        inner: reader,
        hasher: Xxh3::new(),
    };
    let header = read_header(&mut reader)?;
    let mut order = FrameOrder::default();
    let checksum = loop {
        let checksum_so_far = reader.hasher.digest();
        let Some(frame) = read_frame(&mut reader)? else {
            return Err(bad("the stream ended before its trailer"));
        };
        if let Some(trailer) = pass_frame_on(frame, header.current_revision, &mut order, sink)? {
            if trailer != (order.frames, checksum_so_far) {
                return Err(bad("the trailer's count or checksum does not match"));
            }
            break checksum_so_far;
        }
    };
    if read_frame(&mut reader)?.is_some() {
        return Err(bad("data after the trailer"));
    }
    Ok(SnapshotSummary {
        stream_version: header.stream_version,
        current_revision: header.current_revision,
        compact_revision: header.compact_revision,
        applied: header.applied,
        records: order.frames,
        live_keys: (header.stream_version >= 2).then_some(header.live_keys),
        member_id: header.member_id,
        cluster_id: header.cluster_id,
        checksum,
    })
}

/// Checks one frame after the header against the order so far and hands it to `sink`. Returns
/// the trailer's record count and checksum when the frame is the trailer, for the caller to
/// compare with what it counted and hashed.
fn pass_frame_on(
    frame: SnapshotFrame,
    current_revision: u64,
    order: &mut FrameOrder,
    sink: &mut impl FrameSink,
) -> Result<Option<(u64, u64)>, SnapshotError> {
    match frame {
        SnapshotFrame::Header(_) | SnapshotFrame::StreamHeader(_) => {
            return Err(bad("a second header"))
        }
        SnapshotFrame::Record {
            revision,
            position,
            record,
        } => {
            order.record(revision, position, current_revision)?;
            if record.key.is_empty() {
                return Err(bad("a record with an empty key"));
            }
            sink.record(revision, position, record)?;
        }
        SnapshotFrame::Lease { id, ttl_seconds } => {
            // A stream written before checkpoints: the lease has none.
            let record = imported_lease(ttl_seconds, None, 0);
            order.lease(id, &record)?;
            sink.lease(id, record)?;
        }
        SnapshotFrame::LeaseState {
            id,
            ttl_seconds,
            checkpointed_remaining_ms,
            renewed_at_index,
        } => {
            let record = imported_lease(ttl_seconds, checkpointed_remaining_ms, renewed_at_index);
            order.lease(id, &record)?;
            sink.lease(id, record)?;
        }
        SnapshotFrame::Alarms(alarms) => {
            order.alarms(&alarms)?;
            sink.alarms(alarms)?;
        }
        SnapshotFrame::Auth(auth) => {
            order.auth(&auth)?;
            sink.auth(auth)?;
        }
        SnapshotFrame::LearnerPromotions(promotions) => {
            order.learner_promotions(&promotions)?;
            sink.learner_promotions(promotions)?;
        }
        SnapshotFrame::Trailer {
            record_count,
            checksum,
        } => return Ok(Some((record_count, checksum))),
    }
    Ok(None)
}

/// What the frames read so far allow next: records in (revision, position) order, then leases
/// in id order.
#[derive(Default)]
struct FrameOrder {
    frames: u64,
    last_position: Option<(u64, u32)>,
    last_lease: Option<i64>,
    alarms_seen: bool,
    auth_seen: bool,
    promotions_seen: bool,
}

impl FrameOrder {
    fn record(
        &mut self,
        revision: u64,
        position: u32,
        current_revision: u64,
    ) -> Result<(), SnapshotError> {
        let at = (revision, position);
        if self.last_lease.is_some()
            || self.alarms_seen
            || self.auth_seen
            || self.promotions_seen
            || self.last_position.is_some_and(|last| at <= last)
            || revision > current_revision
        {
            return Err(bad(format!("record {revision}/{position} is out of order")));
        }
        self.last_position = Some(at);
        self.frames += 1;
        Ok(())
    }

    /// The alarms come once, last, non-empty, within the limit, sorted and without duplicates (as
    /// the store keeps them).
    fn alarms(&mut self, alarms: &[Alarm]) -> Result<(), SnapshotError> {
        let sorted = alarms.windows(2).all(|pair| pair[0] < pair[1]);
        let too_many = alarms.len() > crate::mvcc::alarms::MAX_ALARMS;
        if self.alarms_seen
            || self.auth_seen
            || self.promotions_seen
            || alarms.is_empty()
            || too_many
            || !sorted
        {
            return Err(bad("the alarms frame is repeated, empty or out of order"));
        }
        self.alarms_seen = true;
        self.frames += 1;
        Ok(())
    }

    /// The auth records come once, last, non-empty and sound (a stream cannot enable auth
    /// without a root user, nor exceed the records' limits).
    fn auth(&mut self, auth: &AuthState) -> Result<(), SnapshotError> {
        if self.auth_seen
            || self.promotions_seen
            || *auth == AuthState::default()
            || !auth.holds_invariants()
        {
            return Err(bad("the auth frame is repeated, empty or unsound"));
        }
        self.auth_seen = true;
        self.frames += 1;
        Ok(())
    }

    /// The learners waiting to be promoted come once, last, non-empty, within the limit, in
    /// member id order, each a valid intent (as the store keeps them).
    fn learner_promotions(&mut self, promotions: &[LearnerPromotion]) -> Result<(), SnapshotError> {
        let sorted = promotions
            .windows(2)
            .all(|pair| pair[0].member_id < pair[1].member_id);
        let too_many = promotions.len() > crate::mvcc::learner_promotions::MAX_PENDING_PROMOTIONS;
        let valid = promotions.iter().all(|promotion| {
            let change = LearnerPromotionChange::Intend(promotion.clone());
            crate::mvcc::learner_promotions::validate_change(&change).is_ok()
        });
        if self.promotions_seen || promotions.is_empty() || too_many || !sorted || !valid {
            return Err(bad(
                "the learner promotions frame is repeated, empty, out of order or malformed",
            ));
        }
        self.promotions_seen = true;
        self.frames += 1;
        Ok(())
    }

    fn lease(&mut self, id: i64, record: &LeaseRecord) -> Result<(), SnapshotError> {
        if id <= 0
            || record.ttl_seconds < 1
            || self.alarms_seen
            || self.auth_seen
            || self.promotions_seen
            || self.last_lease.is_some_and(|last| id <= last)
        {
            return Err(bad(format!("lease {id} is out of order or malformed")));
        }
        self.last_lease = Some(id);
        self.frames += 1;
        Ok(())
    }
}

/// A lease as a snapshot carries it; its keys are counted when `lease_keys` is rebuilt.
fn imported_lease(
    ttl_seconds: i64,
    checkpointed_remaining_ms: Option<u64>,
    renewed_at_index: u64,
) -> LeaseRecord {
    LeaseRecord {
        ttl_seconds,
        attached_keys: 0,
        checkpointed_remaining_ms,
        renewed_at_index,
    }
}

/// A reader that hashes every byte it hands out.
struct HashingReader<'r, R: Read> {
    inner: &'r mut R,
    hasher: Xxh3,
}

impl<R: Read> Read for HashingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.hasher.update(&buf[..read]);
        Ok(read)
    }
}
