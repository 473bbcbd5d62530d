//! Prints every record of raft log segment files, one line per entry (index, leader id, payload),
//! including records a purge has hidden but not yet removed from the file: a debugging aid for
//! comparing members' logs after a failed chaos run (docs/RELIABILITY.md). It reads the files
//! only; it never repairs or changes them. It also prints the metadata file's two slots.
//!
//!   cargo run --release -p revkv-raft --example dump_raft_log -- RAFT_LOG_DIRECTORY [FROM [TO]]

use std::fs;
use std::path::Path;

use openraft::EntryPayload;
use revkv_raft::types::alias::Entry;
use revkv_storage::codec::{self, LOG_RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use revkv_storage::Request;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments: Vec<String> = std::env::args().collect();
    let Some(directory) = arguments.get(1) else {
        return Err("usage: dump_raft_log RAFT_LOG_DIRECTORY [FROM [TO]]".into());
    };
    let from: u64 = arguments.get(2).map_or(Ok(0), |text| text.parse())?;
    let to: u64 = arguments.get(3).map_or(Ok(u64::MAX), |text| text.parse())?;
    print_meta(&Path::new(directory).join("meta"))?;
    let mut segment_names: Vec<_> = fs::read_dir(directory)?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .collect();
    segment_names.sort();
    for path in segment_names {
        print_segment(&path, from, to)?;
    }
    Ok(())
}

/// The metadata file's slot size (storage/src/log_store/meta.rs); the second slot may be short.
const META_SLOT_BYTES: usize = 4096;

/// The metadata file holds two fixed-size slots; each decodes on its own (or fails its checksum).
fn print_meta(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = fs::read(path)?;
    for (number, slot) in bytes.chunks(META_SLOT_BYTES).enumerate() {
        match codec::decode_log_meta_slot(slot) {
            Ok((sequence, meta)) => println!(
                "meta slot {number}: sequence {sequence}, committed {:?}, last purged {:?}, vote {:?}",
                meta.committed,
                meta.last_purged,
                meta.vote
                    .as_deref()
                    .map(codec::decode::<revkv_raft::types::alias::Vote>)
            ),
            Err(error) => println!("meta slot {number}: {error}"),
        }
    }
    Ok(())
}

fn print_segment(path: &Path, from: u64, to: u64) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = fs::read(path)?;
    let first_index = codec::decode_segment_header(&bytes)?;
    println!("segment {} starts at {first_index}", path.display());
    let mut offset = SEGMENT_HEADER_BYTES;
    while offset + LOG_RECORD_HEADER_BYTES <= bytes.len() {
        let header =
            codec::decode_log_record_header(&bytes[offset..offset + LOG_RECORD_HEADER_BYTES])?;
        let payload_start = offset + LOG_RECORD_HEADER_BYTES;
        let payload_end = payload_start + header.payload_bytes;
        let Some(payload) = bytes.get(payload_start..payload_end) else {
            println!("entry {} cut short at byte {offset}", header.index);
            break;
        };
        if codec::log_record_checksum(header.index, payload) != header.checksum {
            println!("entry {} fails its checksum at byte {offset}", header.index);
            break;
        }
        if (from..=to).contains(&header.index) {
            let entry: Entry = codec::decode(payload)?;
            println!("{}", describe(&entry));
        }
        offset = payload_end;
    }
    Ok(())
}

fn describe(entry: &Entry) -> String {
    let id = entry.log_id;
    let payload = match &entry.payload {
        EntryPayload::Blank => "blank".to_string(),
        EntryPayload::Membership(membership) => format!("membership {membership:?}"),
        EntryPayload::Normal(request) => describe_request(&request.0),
    };
    format!(
        "{} term {} leader {} {payload}",
        id.index, id.leader_id.term, id.leader_id.node_id
    )
}

/// The request in Debug form, with byte strings (`[99, 104, ...]`) shown as text where printable,
/// enough to match it against a history dump.
fn describe_request(request: &Request) -> String {
    let text = format!("{request:?}");
    let mut shown = String::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        shown.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let list_end = after
            .find(|character: char| {
                !(character.is_ascii_digit() || character == ',' || character == ' ')
            })
            .unwrap_or(after.len());
        let printable = after[list_end..]
            .starts_with(']')
            .then(|| printable_bytes(&after[..list_end]))
            .flatten();
        match printable {
            Some(decoded) => {
                shown.push_str(&format!("{decoded:?}"));
                rest = &after[list_end + 1..];
            }
            None => {
                shown.push('[');
                rest = after;
            }
        }
    }
    shown.push_str(rest);
    shown
}

/// `"99, 104"` as text, when every number is a printable ASCII byte.
fn printable_bytes(list: &str) -> Option<String> {
    if list.trim().is_empty() {
        return Some(String::new());
    }
    list.split(", ")
        .map(|number| {
            number
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|byte| (32..127).contains(byte))
        })
        .map(|byte| byte.map(char::from))
        .collect()
}
