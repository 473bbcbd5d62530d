//! bbolt's on-disk layout (format version 2, as bbolt 1.3.6 in etcd 3.4 and 3.5 writes it on
//! little-endian machines): the page header, the meta page, and the elements of leaf and branch
//! pages. Every read is bounds-checked, so a damaged file gives an error, never a panic.
//!
//! A page starts with a 16-byte header: `id u64 | flags u16 | count u16 | overflow u32`, and spans
//! `1 + overflow` pages. Leaf elements are `flags u32 | pos u32 | ksize u32 | vsize u32`, branch
//! elements `pos u32 | ksize u32 | pgid u64`; `pos` counts from the element itself.

use crate::error::{BoltError, BoltResult};

/// The bytes of a page header.
pub const PAGE_HEADER_BYTES: usize = 16;
/// The bytes of one leaf or branch element.
pub const ELEMENT_BYTES: usize = 16;
/// bbolt's magic number, in both meta pages.
pub const MAGIC: u32 = 0xED0C_DAED;
/// The only file format version bbolt has written since 2014.
pub const FORMAT_VERSION: u32 = 2;
/// `meta.freelist` when the freelist is not on disk (etcd on Linux: `NoFreelistSync`).
pub const NO_FREELIST: u64 = u64::MAX;
/// The bytes of the meta structure that its checksum covers.
pub const META_CHECKSUMMED_BYTES: usize = 56;
/// The bytes of the meta structure, checksum included.
pub const META_BYTES: usize = META_CHECKSUMMED_BYTES + 8;

/// Page flags.
pub const BRANCH_PAGE: u16 = 0x01;
pub const LEAF_PAGE: u16 = 0x02;
pub const META_PAGE: u16 = 0x04;
pub const FREELIST_PAGE: u16 = 0x10;
/// A leaf element's flag for a nested bucket.
pub const BUCKET_ELEMENT: u32 = 0x01;
/// A bucket header: `root pgid u64 | sequence u64`; an inline bucket's page follows it.
pub const BUCKET_HEADER_BYTES: usize = 16;

/// The page sizes accepted: bbolt uses the OS page size (4 KiB on x86_64, up to 64 KiB on some
/// arm64 machines).
pub const PAGE_SIZES: std::ops::RangeInclusive<u32> = 512..=65_536;

/// A page header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    pub id: u64,
    pub flags: u16,
    pub count: u16,
    pub overflow: u32,
}

/// A meta page's structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub page_size: u32,
    /// The root bucket's page (its bucket header's `root`).
    pub root: u64,
    pub freelist: u64,
    /// The high-water mark: pages `0..pgid` are in use or free.
    pub pgid: u64,
    pub txid: u64,
}

/// Reads a little-endian u16, u32 or u64 at `at`, or says the page is too short.
fn bytes_at<const N: usize>(page: &[u8], at: usize) -> BoltResult<[u8; N]> {
    page.get(at..at + N)
        .and_then(|slice| slice.try_into().ok())
        .ok_or(BoltError::Malformed("a page ends inside a field"))
}

pub fn u16_at(page: &[u8], at: usize) -> BoltResult<u16> {
    bytes_at(page, at).map(u16::from_le_bytes)
}

pub fn u32_at(page: &[u8], at: usize) -> BoltResult<u32> {
    bytes_at(page, at).map(u32::from_le_bytes)
}

pub fn u64_at(page: &[u8], at: usize) -> BoltResult<u64> {
    bytes_at(page, at).map(u64::from_le_bytes)
}

pub fn parse_header(page: &[u8]) -> BoltResult<PageHeader> {
    Ok(PageHeader {
        id: u64_at(page, 0)?,
        flags: u16_at(page, 8)?,
        count: u16_at(page, 10)?,
        overflow: u32_at(page, 12)?,
    })
}

/// The meta structure of a meta page, if its magic, version and checksum hold (as bbolt's
/// `meta.validate`); `None` for a meta page that bbolt would not use either.
pub fn parse_meta(page: &[u8]) -> Option<Meta> {
    let meta = page.get(PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + META_BYTES)?;
    let magic = u32_at(meta, 0).ok()?;
    let version = u32_at(meta, 4).ok()?;
    let checksum = u64_at(meta, META_CHECKSUMMED_BYTES).ok()?;
    if magic != MAGIC || version != FORMAT_VERSION {
        return None;
    }
    if checksum != fnv1a_64(&meta[..META_CHECKSUMMED_BYTES]) {
        return None;
    }
    Some(Meta {
        page_size: u32_at(meta, 8).ok()?,
        // 12: flags (unused); 16: root.root; 24: root.sequence.
        root: u64_at(meta, 16).ok()?,
        freelist: u64_at(meta, 32).ok()?,
        pgid: u64_at(meta, 40).ok()?,
        txid: u64_at(meta, 48).ok()?,
    })
}

/// The meta structure's bytes for `meta`, checksum included.
pub fn encode_meta(meta: &Meta) -> [u8; META_BYTES] {
    let mut bytes = [0u8; META_BYTES];
    bytes[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    bytes[4..8].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes[8..12].copy_from_slice(&meta.page_size.to_le_bytes());
    bytes[16..24].copy_from_slice(&meta.root.to_le_bytes());
    bytes[32..40].copy_from_slice(&meta.freelist.to_le_bytes());
    bytes[40..48].copy_from_slice(&meta.pgid.to_le_bytes());
    bytes[48..56].copy_from_slice(&meta.txid.to_le_bytes());
    let checksum = fnv1a_64(&bytes[..META_CHECKSUMMED_BYTES]);
    bytes[56..64].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

/// bbolt's meta checksum: FNV-1a, 64 bits.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

/// One element of a leaf page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafElement<'p> {
    pub flags: u32,
    pub key: &'p [u8],
    pub value: &'p [u8],
}

/// The `index`th element of the leaf page `page` (header included).
pub fn leaf_element(page: &[u8], index: usize) -> BoltResult<LeafElement<'_>> {
    let at = PAGE_HEADER_BYTES + index * ELEMENT_BYTES;
    let flags = u32_at(page, at)?;
    let position = u32_at(page, at + 4)? as usize;
    let key_size = u32_at(page, at + 8)? as usize;
    let value_size = u32_at(page, at + 12)? as usize;
    let key_start = at + position;
    let key = slice(page, key_start, key_size)?;
    let value = slice(page, key_start + key_size, value_size)?;
    Ok(LeafElement { flags, key, value })
}

/// The `index`th element of the branch page `page`: its first key and its child page.
pub fn branch_element(page: &[u8], index: usize) -> BoltResult<(&[u8], u64)> {
    let at = PAGE_HEADER_BYTES + index * ELEMENT_BYTES;
    let position = u32_at(page, at)? as usize;
    let key_size = u32_at(page, at + 4)? as usize;
    let child = u64_at(page, at + 8)?;
    Ok((slice(page, at + position, key_size)?, child))
}

fn slice(page: &[u8], start: usize, length: usize) -> BoltResult<&[u8]> {
    start
        .checked_add(length)
        .and_then(|end| page.get(start..end))
        .ok_or(BoltError::Malformed("an element points outside its page"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meta_survives_its_encoding_and_a_flipped_bit_is_caught() {
        let meta = Meta {
            page_size: 4096,
            root: 3,
            freelist: NO_FREELIST,
            pgid: 9,
            txid: 17,
        };
        let mut page = vec![0u8; 4096];
        page[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + META_BYTES]
            .copy_from_slice(&encode_meta(&meta));
        assert_eq!(parse_meta(&page), Some(meta));
        page[PAGE_HEADER_BYTES + 41] ^= 0x01;
        assert_eq!(parse_meta(&page), None, "the checksum covers pgid");
    }

    #[test]
    fn an_element_pointing_past_its_page_is_an_error() {
        let mut page = vec![0u8; 64];
        page[PAGE_HEADER_BYTES + 4..PAGE_HEADER_BYTES + 8].copy_from_slice(&40u32.to_le_bytes());
        page[PAGE_HEADER_BYTES + 8..PAGE_HEADER_BYTES + 12].copy_from_slice(&100u32.to_le_bytes());
        assert!(leaf_element(&page, 0).is_err());
        assert!(leaf_element(&page, 3).is_err(), "an element past the page");
    }
}
