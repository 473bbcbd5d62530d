//! Every byte encoding revkv persists or sends, in one place so the serializer can be swapped.
//!
//! A record is one format-version byte followed by the bincode 2 (serde, standard config) encoding
//! of the value. bincode is pinned at `=2.0.1` because the crate is unmaintained and 3.0.0 is an empty
//! stub; nothing outside this module names bincode. Decoding is bounded by `MAX_RECORD_BYTES` so a
//! corrupt length prefix cannot make us allocate without limit. Frames (for snapshot streams and the peer append stream) are a
//! big-endian `u32` length followed by one record.

use std::io::{Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::types::AppliedState;

pub(crate) mod txn_records;

/// The format version written as the first byte of every record.
pub const FORMAT_VERSION: u8 = 1;

/// The largest record this build encodes or decodes: a maximal value plus generous headroom.
pub const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_RECORD_BYTES>,
>;

fn config() -> Config {
    bincode::config::standard().with_limit::<MAX_RECORD_BYTES>()
}

/// Why a record could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("empty record")]
    Empty,
    #[error("record format version {found} is not supported (this build reads {FORMAT_VERSION})")]
    UnsupportedVersion { found: u8 },
    #[error("undecodable record: {0}")]
    Decode(String),
    #[error("{trailing} unexpected bytes after the record")]
    TrailingBytes { trailing: usize },
    #[error("unencodable record: {0}")]
    Encode(String),
    #[error("frame of {0} bytes is over the limit")]
    FrameTooLarge(usize),
    #[error("frame i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Encodes a value as one record: the version byte, then the value.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    encode_as_version(FORMAT_VERSION, value)
}

fn encode_as_version<T: Serialize>(version: u8, value: &T) -> Result<Vec<u8>, CodecError> {
    let mut bytes = buffer_for(value, 1)?;
    bytes.push(version);
    append_encoding(value, &mut bytes)?;
    Ok(bytes)
}

/// An empty buffer with room for `prefix_bytes` and the encoding of `value`, exactly. Measuring
/// first costs one pass that writes nothing; growing from empty cost a reallocation and a copy at
/// every doubling (seven for a 256-byte value), which the write path's profile showed on every
/// history record and raft entry.
fn buffer_for<T: Serialize>(value: &T, prefix_bytes: usize) -> Result<Vec<u8>, CodecError> {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, config())
        .map_err(|error| CodecError::Encode(error.to_string()))?;
    Ok(Vec::with_capacity(prefix_bytes + size.bytes_written))
}

/// Appends the encoding of `value` (no version byte) to `bytes`.
fn append_encoding<T: Serialize>(value: &T, bytes: &mut Vec<u8>) -> Result<(), CodecError> {
    bincode::serde::encode_into_std_write(value, bytes, config())
        .map(|_| ())
        .map_err(|error| CodecError::Encode(error.to_string()))
}

/// Decodes one record written by `encode`, checking its version byte and that nothing trails it.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if version != FORMAT_VERSION {
        return Err(CodecError::UnsupportedVersion { found: version });
    }
    decode_body(body)
}

/// Decodes a record's value (after its version byte), checking that nothing trails it.
fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    let (value, read) = bincode::serde::decode_from_slice(body, config())
        .map_err(|error| CodecError::Decode(error.to_string()))?;
    if read != body.len() {
        return Err(CodecError::TrailingBytes {
            trailing: body.len() - read,
        });
    }
    Ok(value)
}

/// Encodes a value as one frame in one buffer: the record's length (big-endian `u32`), then the
/// record. Encoding behind a placeholder for the length means the record is never copied, and a
/// stream writes the frame whole. Snapshot streams (`write_frame`) and the peer append stream
/// send these.
pub fn encode_frame<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    const LENGTH_BYTES: usize = 4;
    let mut frame = buffer_for(value, LENGTH_BYTES + 1)?;
    frame.extend_from_slice(&[0; LENGTH_BYTES]);
    frame.push(FORMAT_VERSION);
    append_encoding(value, &mut frame)?;
    let record_bytes = frame.len() - LENGTH_BYTES;
    if record_bytes > MAX_RECORD_BYTES {
        return Err(CodecError::FrameTooLarge(record_bytes));
    }
    let length =
        u32::try_from(record_bytes).map_err(|_| CodecError::FrameTooLarge(record_bytes))?;
    frame[..LENGTH_BYTES].copy_from_slice(&length.to_be_bytes());
    Ok(frame)
}

/// Writes one length-prefixed record to a stream.
pub fn write_frame<W: Write, T: Serialize>(writer: &mut W, value: &T) -> Result<(), CodecError> {
    writer.write_all(&encode_frame(value)?)?;
    Ok(())
}

/// Reads one length-prefixed record; `Ok(None)` at a clean end of stream before a frame starts.
pub fn read_frame<R: Read, T: DeserializeOwned>(reader: &mut R) -> Result<Option<T>, CodecError> {
    let mut length_bytes = [0u8; 4];
    let mut filled = 0;
    while filled < length_bytes.len() {
        let read = reader.read(&mut length_bytes[filled..])?;
        if read == 0 {
            if filled == 0 {
                return Ok(None);
            }
            return Err(CodecError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        filled += read;
    }
    let length = u32::from_be_bytes(length_bytes) as usize;
    if length > MAX_RECORD_BYTES {
        return Err(CodecError::FrameTooLarge(length));
    }
    let mut record = vec![0u8; length];
    reader.read_exact(&mut record)?;
    decode(&record).map(Some)
}

/// Marks a redb file as one of revkv's, and which kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMarker {
    pub kind: String,
}

/// One version of one key in the history table, keyed by (revision, position in the revision).
/// A tombstone records a delete and carries only the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub create_revision: u64,
    pub version: u64,
    pub lease: i64,
    pub tombstone: bool,
}

/// One lease in the `leases` table. The granted TTL and the last checkpoint are replicated;
/// deadlines live in the leader's memory. `attached_keys` counts the lease's rows in `lease_keys`,
/// so the keys-per-lease limit is checked without walking them.
///
/// Stored with its own format version (`LEASE_RECORD_VERSION`, see `encode_lease_record`): version
/// 1 (layout 3 before checkpoints) held only the TTL and the key count and still decodes, as a
/// lease with no checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub ttl_seconds: i64,
    pub attached_keys: u64,
    /// The remaining TTL of the last checkpoint applied, unless a keep-alive cleared it since.
    pub checkpointed_remaining_ms: Option<u64>,
    /// The log index of the grant or of the last checkpoint clear: a checkpoint computed at a
    /// lower applied index may predate that renewal and is refused.
    pub renewed_at_index: u64,
}

/// The lease record's version byte since checkpoints (version 1: `LeaseRecordV1`).
pub const LEASE_RECORD_VERSION: u8 = 2;

/// A lease record as layout 3 wrote it before checkpoints (record version 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecordV1 {
    pub ttl_seconds: i64,
    pub attached_keys: u64,
}

/// Encodes a lease record in the current version.
pub fn encode_lease_record(record: &LeaseRecord) -> Result<Vec<u8>, CodecError> {
    encode_as_version(LEASE_RECORD_VERSION, record)
}

/// Decodes a lease record of either version; a version-1 record has no checkpoint and counts as
/// renewed at index 0 (it predates every checkpoint).
pub fn decode_lease_record(bytes: &[u8]) -> Result<LeaseRecord, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    match version {
        LEASE_RECORD_VERSION => decode_body(body),
        FORMAT_VERSION => {
            let old: LeaseRecordV1 = decode_body(body)?;
            Ok(LeaseRecord {
                ttl_seconds: old.ttl_seconds,
                attached_keys: old.attached_keys,
                checkpointed_remaining_ms: None,
                renewed_at_index: 0,
            })
        }
        found => Err(CodecError::UnsupportedVersion { found }),
    }
}

/// What a continue token carries: the revision of the first page, the key to resume at, and how
/// many keys of the range lie at or after it (so the next page need not count them again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageToken {
    pub revision: u64,
    #[serde(with = "serde_bytes")]
    pub resume_key: Vec<u8>,
    pub remaining_count: u64,
}

/// Encodes a continue token as URL-safe base64 of a versioned record.
pub fn encode_page_token(token: &PageToken) -> Result<String, CodecError> {
    use base64::Engine;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(encode(token)?))
}

/// Decodes a continue token; any malformation is a `CodecError`.
pub fn decode_page_token(text: &str) -> Result<PageToken, CodecError> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|error| CodecError::Decode(error.to_string()))?;
    decode(&bytes)
}

/// The frames of a snapshot stream: one header, the history records in order, one trailer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotFrame {
    Header(SnapshotHeader),
    Record {
        revision: u64,
        position: u32,
        record: VersionRecord,
    },
    Trailer {
        /// How many `Record` and `Lease` frames came before the trailer.
        record_count: u64,
        /// xxh3 over every byte before the trailer, in order.
        checksum: u64,
    },
    /// One granted lease (after every `Record`, in id order). Appended after the older variants
    /// so streams written before leases existed still decode. The keys attached to it are not
    /// sent: import finds them from the live keys' `lease` fields.
    Lease {
        id: i64,
        ttl_seconds: i64,
    },
    /// One granted lease with its checkpoint state (written since checkpoints, in place of
    /// `Lease`, which older streams hold and which still imports as a lease with no checkpoint).
    LeaseState {
        id: i64,
        ttl_seconds: i64,
        checkpointed_remaining_ms: Option<u64>,
        renewed_at_index: u64,
    },
    /// The header of streams written since backups (`STREAM_VERSION` 2), in place of `Header`,
    /// which older streams open with and which still imports. Appended last so the older variants
    /// keep their encodings.
    StreamHeader(StreamHeader),
    /// The alarms raised (after every lease, before the trailer; written only when there are
    /// some, so a stream without alarms reads as before). A raft snapshot carries them to a
    /// follower; a restore into a new cluster drops them (they name the old cluster's members).
    Alarms(Vec<crate::types::Alarm>),
    /// The auth records (after the alarms, before the trailer; written only when there are some,
    /// so a stream from a store without auth reads as before). Raft snapshots and backups both
    /// carry them, as etcd's backups carry its auth bucket.
    Auth(crate::auth::AuthState),
    /// The learners waiting to be promoted once they catch up (after the auth records, before
    /// the trailer; written only when there are some, so a stream without them reads as before,
    /// and an older build refuses a stream with them by its unknown frame). A raft snapshot
    /// carries them to a follower; a restore into a new cluster drops them, as it drops the
    /// alarms (they name the old cluster's members).
    LearnerPromotions(Vec<crate::types::LearnerPromotion>),
}

/// The version of the snapshot stream layout a `StreamHeader` announces. Version 1 is the stream
/// that opens with `SnapshotFrame::Header`; version 2 adds who wrote the stream and the cluster.
pub const STREAM_VERSION: u32 = 2;

/// The header of a snapshot stream (a raft snapshot or a backup): what the stream restores besides
/// its records, and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamHeader {
    /// Always `SNAPSHOT_MAGIC`.
    pub magic: String,
    /// `STREAM_VERSION` when written; a reader refuses a version it does not know.
    pub stream_version: u32,
    pub current_revision: u64,
    pub compact_revision: u64,
    pub applied: AppliedState,
    /// Keys live at `current_revision` (what `revkv snapshot status` reports without a scan).
    pub live_keys: u64,
    /// The member whose store was read (None when the writer is not a member, as in tests).
    pub member_id: Option<u64>,
    /// The cluster the store belongs to (None for a store that predates cluster ids).
    pub cluster_id: Option<u64>,
}

/// The state a snapshot restores besides the history records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub magic: String,
    pub current_revision: u64,
    pub compact_revision: u64,
    pub applied: AppliedState,
}

/// The magic string that opens every snapshot stream.
pub const SNAPSHOT_MAGIC: &str = "revkv-snapshot";

/// The raft log's metadata, rewritten whole on every change (see `log_store/meta.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMeta {
    /// The vote, as the raft layer encoded it.
    #[serde(with = "serde_bytes")]
    pub vote: Option<Vec<u8>>,
    pub committed: Option<crate::types::LogId>,
    pub last_purged: Option<crate::types::LogId>,
}

/// The bytes that open every raft log segment file: a magic string and the format version.
pub const SEGMENT_MAGIC: &[u8; 8] = b"revkvseg";

/// Length of a segment file's header: magic, format version, index of its first entry.
pub const SEGMENT_HEADER_BYTES: usize = 8 + 1 + 8;

/// Length of the header in front of every entry in a segment: payload length, index, checksum.
pub const LOG_RECORD_HEADER_BYTES: usize = 4 + 8 + 8;

/// A segment file's header for a segment whose first entry is `first_index`.
pub fn encode_segment_header(first_index: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    header[..8].copy_from_slice(SEGMENT_MAGIC);
    header[8] = FORMAT_VERSION;
    header[9..].copy_from_slice(&first_index.to_le_bytes());
    header
}

/// The first index a segment header names, after checking its magic and version.
pub fn decode_segment_header(header: &[u8]) -> Result<u64, CodecError> {
    if header.len() < SEGMENT_HEADER_BYTES || &header[..8] != SEGMENT_MAGIC {
        return Err(CodecError::Decode("not a revkv log segment".into()));
    }
    if header[8] != FORMAT_VERSION {
        return Err(CodecError::UnsupportedVersion { found: header[8] });
    }
    Ok(u64::from_le_bytes(
        header[9..17].try_into().expect("8 bytes"),
    ))
}

/// Appends one log record (header, then `payload`) to `out`. The checksum covers the index and the
/// payload, so a record torn by a crash, or one moved to the wrong place, fails it.
pub fn encode_log_record(out: &mut Vec<u8>, index: u64, payload: &[u8]) -> Result<(), CodecError> {
    let length = u32::try_from(payload.len())
        .ok()
        .filter(|length| (*length as usize) <= MAX_RECORD_BYTES)
        .ok_or(CodecError::FrameTooLarge(payload.len()))?;
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&log_record_checksum(index, payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// A log record's header: how long its payload is, which index it claims, and its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRecordHeader {
    pub payload_bytes: usize,
    pub index: u64,
    pub checksum: u64,
}

/// Reads a record header; a length over the record limit is an error, not an allocation.
pub fn decode_log_record_header(header: &[u8]) -> Result<LogRecordHeader, CodecError> {
    if header.len() < LOG_RECORD_HEADER_BYTES {
        return Err(CodecError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    let payload_bytes = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    if payload_bytes > MAX_RECORD_BYTES {
        return Err(CodecError::FrameTooLarge(payload_bytes));
    }
    Ok(LogRecordHeader {
        payload_bytes,
        index: u64::from_le_bytes(header[4..12].try_into().expect("8 bytes")),
        checksum: u64::from_le_bytes(header[12..20].try_into().expect("8 bytes")),
    })
}

/// The checksum a log record carries.
pub fn log_record_checksum(index: u64, payload: &[u8]) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&index.to_le_bytes());
    hasher.update(payload);
    hasher.digest()
}

/// The bytes that open each slot of the raft log's metadata file.
pub const LOG_META_MAGIC: &[u8; 8] = b"revkvlmt";

/// Encodes a metadata slot: magic, format version, sequence number, record length, the `LogMeta`
/// record, and an xxh3 checksum of everything before it.
pub fn encode_log_meta_slot(sequence: u64, meta: &LogMeta) -> Result<Vec<u8>, CodecError> {
    let record = encode(meta)?;
    let mut slot = Vec::with_capacity(8 + 1 + 8 + 4 + record.len() + 8);
    slot.extend_from_slice(LOG_META_MAGIC);
    slot.push(FORMAT_VERSION);
    slot.extend_from_slice(&sequence.to_le_bytes());
    let length =
        u32::try_from(record.len()).map_err(|_| CodecError::FrameTooLarge(record.len()))?;
    slot.extend_from_slice(&length.to_le_bytes());
    slot.extend_from_slice(&record);
    let checksum = xxhash_rust::xxh3::xxh3_64(&slot);
    slot.extend_from_slice(&checksum.to_le_bytes());
    Ok(slot)
}

/// Decodes a metadata slot into its sequence number and record; any damage is an error.
pub fn decode_log_meta_slot(slot: &[u8]) -> Result<(u64, LogMeta), CodecError> {
    const FIXED: usize = 8 + 1 + 8 + 4;
    if slot.len() < FIXED + 8 || &slot[..8] != LOG_META_MAGIC {
        return Err(CodecError::Decode("not a revkv log metadata slot".into()));
    }
    if slot[8] != FORMAT_VERSION {
        return Err(CodecError::UnsupportedVersion { found: slot[8] });
    }
    let sequence = u64::from_le_bytes(slot[9..17].try_into().expect("8 bytes"));
    let length = u32::from_le_bytes(slot[17..21].try_into().expect("4 bytes")) as usize;
    let end = FIXED
        .checked_add(length)
        .filter(|end| end + 8 <= slot.len())
        .ok_or_else(|| CodecError::Decode("metadata slot length out of bounds".into()))?;
    let stored = u64::from_le_bytes(slot[end..end + 8].try_into().expect("8 bytes"));
    if xxhash_rust::xxh3::xxh3_64(&slot[..end]) != stored {
        return Err(CodecError::Decode("metadata slot checksum mismatch".into()));
    }
    Ok((sequence, decode(&slot[FIXED..end])?))
}

/// etcd's snapshot envelope: a snapshot etcd streams (`Maintenance.Snapshot`) is its bolt file,
/// whose size is a multiple of 512, followed by the SHA-256 of those bytes; `etcdctl snapshot
/// save` refuses a stream whose size is not 32 more than a multiple of 512. A revkv member wraps
/// its backup stream the same way on the gRPC port: the stream, padding to a multiple of 512
/// whose last 8 bytes are the stream's length (big-endian, the rest zeros), then the SHA-256 of
/// all of it. `revkv snapshot status|restore` take either form, and the stream inside is checked
/// as strictly as a plain one.
pub mod etcd_envelope {
    use std::io::{self, Read, Seek, SeekFrom};

    use sha2::{Digest, Sha256};

    /// The alignment of the bytes before the checksum.
    pub const ALIGNMENT: u64 = 512;
    /// The SHA-256 at the end.
    pub const CHECKSUM_BYTES: usize = 32;
    /// The stream's length at the end of the padding.
    const LENGTH_BYTES: u64 = 8;

    /// Wraps a stream sent in pieces: `feed` each piece as it goes, then send `finish`'s tail.
    #[derive(Default)]
    pub struct Enveloper {
        hasher: Sha256,
        length: u64,
    }

    impl Enveloper {
        pub fn feed(&mut self, piece: &[u8]) {
            self.hasher.update(piece);
            self.length += piece.len() as u64;
        }

        /// The padding to a multiple of `ALIGNMENT` (zeros, then the stream's length), then the
        /// SHA-256 of all before it.
        pub fn finish(mut self) -> Vec<u8> {
            let used = self.length + LENGTH_BYTES;
            let zeros = (ALIGNMENT - used % ALIGNMENT) % ALIGNMENT;
            let mut tail = vec![0u8; zeros as usize];
            tail.extend_from_slice(&self.length.to_be_bytes());
            self.hasher.update(&tail);
            tail.extend_from_slice(&self.hasher.finalize());
            tail
        }
    }

    /// How many bytes of `file` to read as the stream: all of it, or, when the file ends with a
    /// valid envelope checksum, the length its padding records. Reads the file once to check the
    /// checksum; leaves it at the start.
    pub fn stream_length<F: Read + Seek>(file: &mut F) -> io::Result<u64> {
        let length = file.seek(SeekFrom::End(0))?;
        file.seek(SeekFrom::Start(0))?;
        let enveloped_shape = length % ALIGNMENT == CHECKSUM_BYTES as u64 && length >= ALIGNMENT;
        if !enveloped_shape {
            return Ok(length);
        }
        let covered = length - CHECKSUM_BYTES as u64;
        let mut hasher = Sha256::new();
        let mut padding_end = [0u8; LENGTH_BYTES as usize];
        let mut covered_bytes = file.by_ref().take(covered);
        io::copy(
            &mut covered_bytes.by_ref().take(covered - LENGTH_BYTES),
            &mut HashWriter(&mut hasher),
        )?;
        covered_bytes.read_exact(&mut padding_end)?;
        hasher.update(padding_end);
        let mut stored = [0u8; CHECKSUM_BYTES];
        file.read_exact(&mut stored)?;
        file.seek(SeekFrom::Start(0))?;
        if hasher.finalize()[..] != stored {
            // A plain stream whose size merely has the envelope's shape.
            return Ok(length);
        }
        let stream_length = u64::from_be_bytes(padding_end);
        let fits = covered
            .checked_sub(stream_length)
            .is_some_and(|padding| (LENGTH_BYTES..LENGTH_BYTES + ALIGNMENT).contains(&padding));
        if !fits {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the snapshot envelope's recorded length does not fit its padding",
            ));
        }
        Ok(stream_length)
    }

    struct HashWriter<'h>(&'h mut Sha256);

    impl io::Write for HashWriter<'_> {
        fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
            self.0.update(buffer);
            Ok(buffer.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks_the_version_byte() {
        let record = VersionRecord {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            create_revision: 2,
            version: 2,
            lease: 0,
            tombstone: false,
        };
        let bytes = encode(&record).unwrap();
        assert_eq!(bytes[0], FORMAT_VERSION);
        assert_eq!(decode::<VersionRecord>(&bytes).unwrap(), record);

        let mut future = bytes.clone();
        future[0] = FORMAT_VERSION + 1;
        assert!(matches!(
            decode::<VersionRecord>(&future),
            Err(CodecError::UnsupportedVersion { .. })
        ));
        let mut trailing = bytes.clone();
        trailing.push(7);
        assert!(matches!(
            decode::<VersionRecord>(&trailing),
            Err(CodecError::TrailingBytes { .. })
        ));
        assert!(matches!(
            decode::<VersionRecord>(&[]),
            Err(CodecError::Empty)
        ));
        assert!(decode::<VersionRecord>(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn records_and_frames_are_encoded_into_buffers_of_their_exact_size() {
        // The size is measured before encoding, so no buffer grows (or wastes room) on the way.
        for value_bytes in [0, 1, 255, 256, 4096, 100_000] {
            let record = VersionRecord {
                key: b"bench/put/run1/0003/0000000099".to_vec(),
                value: vec![7; value_bytes],
                create_revision: u64::MAX,
                version: 300,
                lease: -1,
                tombstone: false,
            };
            let bytes = encode(&record).unwrap();
            assert_eq!(
                bytes.capacity(),
                bytes.len(),
                "record of a {value_bytes}-byte value"
            );
            assert_eq!(decode::<VersionRecord>(&bytes).unwrap(), record);
            let frame = encode_frame(&record).unwrap();
            assert_eq!(
                frame.capacity(),
                frame.len(),
                "frame of a {value_bytes}-byte value"
            );
            assert_eq!(&frame[4..], bytes.as_slice());
        }
    }

    #[test]
    fn byte_strings_encode_as_they_did_before_serde_bytes() {
        // Files written before the byte-string fields were marked `serde_bytes` must stay
        // readable: a `Vec<u8>` encoded as a sequence and as bytes must be the same record.
        #[derive(Serialize)]
        struct AsSequence {
            key: Vec<u8>,
            value: Vec<u8>,
            create_revision: u64,
            version: u64,
            lease: i64,
            tombstone: bool,
        }
        let value: Vec<u8> = (0..=255).chain(0..=255).collect();
        let old = AsSequence {
            key: value[..300].to_vec(),
            value: value.clone(),
            create_revision: 300,
            version: 2,
            lease: -1,
            tombstone: false,
        };
        let new = VersionRecord {
            key: value[..300].to_vec(),
            value,
            create_revision: 300,
            version: 2,
            lease: -1,
            tombstone: false,
        };
        assert_eq!(encode(&old).unwrap(), encode(&new).unwrap());
        assert_eq!(
            decode::<VersionRecord>(&encode(&old).unwrap()).unwrap(),
            new
        );
    }

    #[test]
    fn lease_records_of_layout_3_before_checkpoints_still_decode() {
        // The bytes a layout-3 file held before checkpoints: `encode` of the two-field record.
        let old = encode(&LeaseRecordV1 {
            ttl_seconds: 30,
            attached_keys: 4,
        })
        .unwrap();
        assert_eq!(old[0], FORMAT_VERSION);
        let expected = LeaseRecord {
            ttl_seconds: 30,
            attached_keys: 4,
            checkpointed_remaining_ms: None,
            renewed_at_index: 0,
        };
        assert_eq!(decode_lease_record(&old).unwrap(), expected);

        let current = LeaseRecord {
            checkpointed_remaining_ms: Some(12_500),
            renewed_at_index: 77,
            ..expected
        };
        let bytes = encode_lease_record(&current).unwrap();
        assert_eq!(bytes[0], LEASE_RECORD_VERSION);
        assert_eq!(decode_lease_record(&bytes).unwrap(), current);
        // The new layout is not read as the old one, or the other way round.
        assert!(decode::<LeaseRecordV1>(&bytes).is_err());
        let mut unknown = bytes.clone();
        unknown[0] = LEASE_RECORD_VERSION + 1;
        assert!(matches!(
            decode_lease_record(&unknown),
            Err(CodecError::UnsupportedVersion { .. })
        ));
        let mut trailing = old;
        trailing.push(0);
        assert!(decode_lease_record(&trailing).is_err());
    }

    #[test]
    fn alarm_records_written_before_the_corrupt_kind_still_decode() {
        use crate::types::{Alarm, AlarmKind};
        // The alarm record a file held before CORRUPT existed: version 1, one alarm, member 2,
        // kind 0 (NOSPACE). bincode writes an enum as its variant index, so CORRUPT is appended
        // as index 1 and the old bytes keep their meaning.
        let written_before = [FORMAT_VERSION, 1, 2, 0];
        let no_space = Alarm {
            member_id: 2,
            kind: AlarmKind::NoSpace,
        };
        assert_eq!(
            decode::<Vec<Alarm>>(&written_before).unwrap(),
            vec![no_space]
        );
        assert_eq!(encode(&vec![no_space]).unwrap(), written_before);
        let corrupt = Alarm {
            member_id: 3,
            kind: AlarmKind::Corrupt,
        };
        let both = vec![no_space, corrupt];
        let bytes = encode(&both).unwrap();
        assert_eq!(bytes, [FORMAT_VERSION, 2, 2, 0, 3, 1]);
        assert_eq!(decode::<Vec<Alarm>>(&bytes).unwrap(), both);
        // A kind this build does not know is an error, not a panic.
        assert!(decode::<Vec<Alarm>>(&[FORMAT_VERSION, 1, 2, 9]).is_err());
    }

    #[test]
    fn a_huge_claimed_length_is_an_error_not_an_allocation() {
        // A version byte, then a varint claiming a vector of about 2^62 bytes.
        let bytes = [FORMAT_VERSION, 0xff, 0, 0, 0, 0, 0, 0, 0, 0x40];
        assert!(decode::<Vec<u8>>(&bytes).is_err());
    }

    #[test]
    fn page_tokens_reject_garbage() {
        let token = PageToken {
            revision: 9,
            resume_key: b"a\0".to_vec(),
            remaining_count: 12,
        };
        let text = encode_page_token(&token).unwrap();
        assert_eq!(decode_page_token(&text).unwrap(), token);
        assert!(decode_page_token("not a token!").is_err());
        assert!(decode_page_token("").is_err());
        assert!(decode_page_token("AAAA").is_err());
    }

    #[test]
    fn log_records_and_metadata_slots_round_trip_and_catch_damage() {
        let mut out = Vec::new();
        encode_log_record(&mut out, 42, b"payload").unwrap();
        let header = decode_log_record_header(&out).unwrap();
        assert_eq!((header.payload_bytes, header.index), (7, 42));
        let payload = &out[LOG_RECORD_HEADER_BYTES..];
        assert_eq!(header.checksum, log_record_checksum(42, payload));
        assert_ne!(header.checksum, log_record_checksum(43, payload));
        assert_eq!(decode_segment_header(&encode_segment_header(9)).unwrap(), 9);
        assert!(decode_segment_header(b"revkvsex\x01\0\0\0\0\0\0\0\0").is_err());

        let meta = LogMeta {
            vote: Some(vec![1, 2, 3]),
            committed: None,
            last_purged: Some(crate::types::LogId {
                term: 2,
                node_id: 1,
                index: 10,
            }),
        };
        let mut slot = encode_log_meta_slot(7, &meta).unwrap();
        assert_eq!(decode_log_meta_slot(&slot).unwrap(), (7, meta));
        slot.resize(4096, 0);
        assert!(
            decode_log_meta_slot(&slot).is_ok(),
            "padding after the slot is ignored"
        );
        slot[25] ^= 1;
        assert!(
            decode_log_meta_slot(&slot).is_err(),
            "a flipped bit fails the checksum"
        );
        assert!(decode_log_meta_slot(&[0u8; 4096]).is_err());
    }

    #[test]
    fn frames_round_trip_and_detect_truncation() {
        let mut stream = Vec::new();
        write_frame(&mut stream, &7u64).unwrap();
        write_frame(&mut stream, &8u64).unwrap();
        let mut reader = stream.as_slice();
        assert_eq!(read_frame::<_, u64>(&mut reader).unwrap(), Some(7));
        assert_eq!(read_frame::<_, u64>(&mut reader).unwrap(), Some(8));
        assert_eq!(read_frame::<_, u64>(&mut reader).unwrap(), None);
        let mut truncated = &stream[..stream.len() - 1];
        read_frame::<_, u64>(&mut truncated).unwrap();
        assert!(read_frame::<_, u64>(&mut truncated).is_err());
    }
}
