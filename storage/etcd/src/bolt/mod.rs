//! A read-only bbolt reader and a bulk writer, for etcd's snapshot and member db files. Written
//! here because the one Rust port (`bbolt-rs` 1.3.10) cannot open a file without a freelist page,
//! which is every file etcd writes on Linux (`NoFreelistSync`), and pulls in a command-line
//! parser and a fake-data generator as dependencies.
//!
//! The reader never maps or loads the whole file: it reads one page (with its overflow) at a time
//! with positioned reads, and walks a bucket's B+tree depth first, so memory is bounded by the
//! tree's depth times the largest page. Every page it reads is checked (its id, its flags, its
//! span inside the file) and keys must ascend, so a damaged file is refused with an error.
//!
//! `page.rs` is the layout; `writer.rs` builds a file from sorted buckets.

pub mod page;
pub mod writer;

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::error::{BoltError, BoltResult};
use page::{Meta, BRANCH_PAGE, BUCKET_ELEMENT, BUCKET_HEADER_BYTES, LEAF_PAGE, PAGE_HEADER_BYTES};

/// The deepest bucket tree read. bbolt's trees are shallow (a billion keys fit in five levels of
/// 4 KiB pages); a deeper one means a cycle or a damaged page.
pub const MAX_TREE_DEPTH: usize = 32;
/// The largest page (with its overflow) read by default: etcd refuses requests over 1.5 MiB by
/// default and allows at most 10 MiB with `--max-request-bytes`, so one value is below this.
pub const DEFAULT_MAX_PAGE_BYTES: u64 = 64 << 20;

/// Where a bucket's entries are: a page tree of its own, or inline in its header's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketRoot {
    Tree(u64),
    /// The page image that follows the bucket header.
    Inline(Vec<u8>),
}

/// An open bbolt file.
pub struct BoltFile {
    file: File,
    meta: Meta,
    max_page_bytes: u64,
}

impl BoltFile {
    /// Opens the first `data_length` bytes of `file` as a bbolt database (a snapshot's trailer
    /// lies beyond them): picks the valid meta page with the higher transaction id, as bbolt
    /// does, and checks that the pages it names lie inside those bytes.
    pub fn open(file: File, data_length: u64, max_page_bytes: u64) -> BoltResult<BoltFile> {
        let meta = choose_meta(&file, data_length)?;
        if !page::PAGE_SIZES.contains(&meta.page_size) || !meta.page_size.is_power_of_two() {
            return Err(BoltError::PageSize(meta.page_size));
        }
        let needed = meta
            .pgid
            .checked_mul(u64::from(meta.page_size))
            .ok_or(BoltError::Malformed("the page count overflows"))?;
        if needed > data_length {
            return Err(BoltError::Truncated {
                held: data_length,
                needed,
            });
        }
        if meta.root < 2 || meta.root >= meta.pgid {
            return Err(BoltError::Malformed(
                "the root bucket's page is outside the file",
            ));
        }
        Ok(BoltFile {
            file,
            meta,
            max_page_bytes,
        })
    }

    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// The top-level buckets, in name order.
    pub fn buckets(&self) -> BoltResult<Vec<(Vec<u8>, BucketRoot)>> {
        let mut buckets = Vec::new();
        let root = BucketRoot::Tree(self.meta.root);
        self.walk(&root, &mut |element: page::LeafElement<'_>| {
            if element.flags & BUCKET_ELEMENT == 0 {
                return Err(BoltError::Malformed(
                    "a top-level entry is not a bucket (etcd keeps only buckets there)",
                ));
            }
            buckets.push((element.key.to_vec(), bucket_root(element.value)?));
            Ok(())
        })?;
        Ok(buckets)
    }

    /// Calls `visit` with every key and value of `bucket`, in key order. A nested bucket is an
    /// error: etcd's buckets are flat.
    pub fn for_each<E: From<BoltError>>(
        &self,
        bucket: &BucketRoot,
        visit: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut failure: Option<E> = None;
        let walked = self.walk(bucket, &mut |element: page::LeafElement<'_>| {
            if element.flags & BUCKET_ELEMENT != 0 {
                return Err(BoltError::Malformed(
                    "a nested bucket where etcd keeps none",
                ));
            }
            visit(element.key, element.value).map_err(|error| {
                failure = Some(error);
                BoltError::Malformed("stopped by the visitor")
            })
        });
        match (walked, failure) {
            (_, Some(error)) => Err(error),
            (Err(error), None) => Err(error.into()),
            (Ok(()), None) => Ok(()),
        }
    }

    /// Walks every leaf element of the tree at `root` in order, checking that keys ascend.
    fn walk(
        &self,
        root: &BucketRoot,
        visit: &mut dyn FnMut(page::LeafElement<'_>) -> BoltResult<()>,
    ) -> BoltResult<()> {
        let mut last_key: Option<Vec<u8>> = None;
        let mut in_order = |element: page::LeafElement<'_>| {
            if last_key.as_deref().is_some_and(|last| last >= element.key) {
                return Err(BoltError::Malformed("keys do not ascend"));
            }
            last_key = Some(element.key.to_vec());
            visit(element)
        };
        match root {
            BucketRoot::Inline(page_image) => visit_leaf(page_image, &mut in_order),
            BucketRoot::Tree(page_id) => self.walk_page(*page_id, 0, &mut in_order),
        }
    }

    fn walk_page(
        &self,
        page_id: u64,
        depth: usize,
        visit: &mut dyn FnMut(page::LeafElement<'_>) -> BoltResult<()>,
    ) -> BoltResult<()> {
        if depth >= MAX_TREE_DEPTH {
            return Err(BoltError::TooDeep(MAX_TREE_DEPTH));
        }
        let page = self.read_page(page_id)?;
        let header = page::parse_header(&page)?;
        match header.flags {
            LEAF_PAGE => visit_leaf(&page, visit),
            BRANCH_PAGE => {
                for index in 0..usize::from(header.count) {
                    let (_, child) = page::branch_element(&page, index)?;
                    self.walk_page(child, depth + 1, visit)?;
                }
                Ok(())
            }
            flags => Err(bad_page(
                page_id,
                format!("flags {flags:#x} where a branch or leaf page belongs"),
            )),
        }
    }

    /// Page `page_id` with its overflow pages, checked to lie inside the database.
    fn read_page(&self, page_id: u64) -> BoltResult<Vec<u8>> {
        let page_size = u64::from(self.meta.page_size);
        if page_id < 2 || page_id >= self.meta.pgid {
            return Err(bad_page(page_id, "outside the database".into()));
        }
        let mut header_bytes = [0u8; PAGE_HEADER_BYTES];
        self.file
            .read_exact_at(&mut header_bytes, page_id * page_size)?;
        let header = page::parse_header(&header_bytes)?;
        if header.id != page_id {
            return Err(bad_page(
                page_id,
                format!("its header names page {}", header.id),
            ));
        }
        let pages = 1 + u64::from(header.overflow);
        if page_id + pages > self.meta.pgid {
            return Err(bad_page(
                page_id,
                "its overflow runs past the database".into(),
            ));
        }
        let bytes = pages * page_size;
        if bytes > self.max_page_bytes {
            return Err(BoltError::PageTooLarge {
                bytes,
                limit: self.max_page_bytes,
            });
        }
        let mut page = vec![0u8; bytes as usize];
        self.file.read_exact_at(&mut page, page_id * page_size)?;
        Ok(page)
    }
}

/// Reads both meta pages and picks the valid one with the higher transaction id. The page size
/// comes from meta page 0 when it is valid, else bbolt's default of 4 KiB is tried for page 1.
fn choose_meta(file: &File, data_length: u64) -> BoltResult<Meta> {
    let first = read_meta_page(file, 0, data_length);
    let page_size = first.map_or(4096, |meta| u64::from(meta.page_size));
    let second = read_meta_page(file, page_size, data_length);
    match (first, second) {
        (Some(first), Some(second)) if second.txid > first.txid => Ok(second),
        (Some(first), _) => Ok(first),
        (None, Some(second)) => Ok(second),
        (None, None) => Err(BoltError::NoValidMeta),
    }
}

fn read_meta_page(file: &File, offset: u64, data_length: u64) -> Option<page::Meta> {
    let length = PAGE_HEADER_BYTES + page::META_BYTES;
    if offset + length as u64 > data_length {
        return None;
    }
    let mut bytes = vec![0u8; length];
    file.read_exact_at(&mut bytes, offset).ok()?;
    let header = page::parse_header(&bytes).ok()?;
    if header.flags != page::META_PAGE {
        return None;
    }
    page::parse_meta(&bytes)
}

/// A bucket header's root: a page of its own, or the inline page image after the header.
fn bucket_root(value: &[u8]) -> BoltResult<BucketRoot> {
    let root = page::u64_at(value, 0)?;
    if root != 0 {
        return Ok(BucketRoot::Tree(root));
    }
    let image = value
        .get(BUCKET_HEADER_BYTES..)
        .filter(|image| image.len() >= PAGE_HEADER_BYTES)
        .ok_or(BoltError::Malformed("an inline bucket without its page"))?;
    Ok(BucketRoot::Inline(image.to_vec()))
}

fn visit_leaf(
    page: &[u8],
    visit: &mut dyn FnMut(page::LeafElement<'_>) -> BoltResult<()>,
) -> BoltResult<()> {
    let header = page::parse_header(page)?;
    if header.flags != LEAF_PAGE {
        return Err(BoltError::Malformed(
            "an inline bucket whose page is not a leaf",
        ));
    }
    for index in 0..usize::from(header.count) {
        visit(page::leaf_element(page, index)?)?;
    }
    Ok(())
}

fn bad_page(page: u64, what: String) -> BoltError {
    BoltError::BadPage { page, what }
}
