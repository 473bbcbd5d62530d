//! Every byte encoding revkv persists or sends, in one place so the serializer can be swapped.
//!
//! A record is one format-version byte followed by the bincode 2 (serde, standard config) encoding
//! of the value. bincode is pinned at `=2.0.1` because the crate is unmaintained and 3.0.0 is an empty
//! stub; nothing outside this module names bincode. Decoding is bounded by `MAX_RECORD_BYTES` so a
//! corrupt length prefix cannot make us allocate without limit. Frames (for snapshot streams) are a
//! big-endian `u32` length followed by one record.

use std::io::{Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::types::AppliedState;

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
    let mut bytes = vec![FORMAT_VERSION];
    bincode::serde::encode_into_std_write(value, &mut bytes, config())
        .map_err(|error| CodecError::Encode(error.to_string()))?;
    Ok(bytes)
}

/// Decodes one record written by `encode`, checking its version byte and that nothing trails it.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if version != FORMAT_VERSION {
        return Err(CodecError::UnsupportedVersion { found: version });
    }
    let (value, read) = bincode::serde::decode_from_slice(body, config())
        .map_err(|error| CodecError::Decode(error.to_string()))?;
    if read != body.len() {
        return Err(CodecError::TrailingBytes {
            trailing: body.len() - read,
        });
    }
    Ok(value)
}

/// Writes one length-prefixed record to a stream.
pub fn write_frame<W: Write, T: Serialize>(writer: &mut W, value: &T) -> Result<(), CodecError> {
    let record = encode(value)?;
    if record.len() > MAX_RECORD_BYTES {
        return Err(CodecError::FrameTooLarge(record.len()));
    }
    let length =
        u32::try_from(record.len()).map_err(|_| CodecError::FrameTooLarge(record.len()))?;
    writer.write_all(&length.to_be_bytes())?;
    writer.write_all(&record)?;
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

/// The current version of a live key (the key itself is the table key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRecord {
    pub value: Vec<u8>,
    pub create_revision: u64,
    pub mod_revision: u64,
    pub version: u64,
    pub lease: i64,
}

/// One version of one key in the history table, keyed by (revision, position in the revision).
/// A tombstone records a delete and carries only the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: u64,
    pub version: u64,
    pub lease: i64,
    pub tombstone: bool,
}

/// What a continue token carries: the revision of the first page and the key to resume at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageToken {
    pub revision: u64,
    pub resume_key: Vec<u8>,
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
        record_count: u64,
        /// xxh3 over every record frame's bytes, in order.
        checksum: u64,
    },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks_the_version_byte() {
        let record = LiveRecord {
            value: b"v".to_vec(),
            create_revision: 2,
            mod_revision: 3,
            version: 2,
            lease: 0,
        };
        let bytes = encode(&record).unwrap();
        assert_eq!(bytes[0], FORMAT_VERSION);
        assert_eq!(decode::<LiveRecord>(&bytes).unwrap(), record);

        let mut future = bytes.clone();
        future[0] = FORMAT_VERSION + 1;
        assert!(matches!(
            decode::<LiveRecord>(&future),
            Err(CodecError::UnsupportedVersion { .. })
        ));
        let mut trailing = bytes.clone();
        trailing.push(7);
        assert!(matches!(
            decode::<LiveRecord>(&trailing),
            Err(CodecError::TrailingBytes { .. })
        ));
        assert!(matches!(decode::<LiveRecord>(&[]), Err(CodecError::Empty)));
        assert!(decode::<LiveRecord>(&bytes[..bytes.len() - 1]).is_err());
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
        };
        let text = encode_page_token(&token).unwrap();
        assert_eq!(decode_page_token(&text).unwrap(), token);
        assert!(decode_page_token("not a token!").is_err());
        assert!(decode_page_token("").is_err());
        assert!(decode_page_token("AAAA").is_err());
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
