//! Builds a bbolt file from buckets, each with its entries in key order, as one bulk load: leaf
//! pages are written as they fill, then the branch levels above them; `finish` writes the root
//! bucket (its entries sorted by name) and both meta pages. Memory holds one leaf page and the
//! first key of each page written (about 1/100 of the keys' bytes), so a store of any size
//! streams through.
//!
//! The file is what bbolt itself could have written: format version 2, pages packed full (bbolt
//! splits and merges on its own later), small buckets inline as bbolt keeps them (one leaf of at
//! most a quarter page), no freelist page (`meta.freelist` is `NO_FREELIST`, as etcd writes on
//! Linux) and no unused page, so `tx.Check()` finds every page reachable.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::page::{
    self, Meta, BRANCH_PAGE, BUCKET_ELEMENT, BUCKET_HEADER_BYTES, ELEMENT_BYTES, LEAF_PAGE,
    META_PAGE, NO_FREELIST, PAGE_HEADER_BYTES,
};
use crate::error::{BoltError, BoltResult};

/// The largest key bbolt accepts.
pub const MAX_KEY_BYTES: usize = 32_768;
/// The largest value bbolt accepts.
pub const MAX_VALUE_BYTES: usize = (1 << 31) - 2;
/// The most buckets one file gets (etcd writes ten).
pub const MAX_BUCKETS: usize = 64;

/// A bbolt file being written: `begin_bucket`, `put` its entries in key order, `end_bucket`,
/// then the next bucket, then `finish`.
pub struct BoltWriter {
    pages: PageFile,
    /// The finished buckets' names and header values.
    buckets: Vec<(Vec<u8>, Vec<u8>)>,
    /// The bucket being written, if any.
    open: Option<(Vec<u8>, TreeBuilder)>,
}

impl BoltWriter {
    /// Starts a file in `file` (empty, opened for writing) with pages of `page_size` bytes.
    pub fn new(file: File, page_size: u32) -> BoltResult<BoltWriter> {
        if !page::PAGE_SIZES.contains(&page_size) || !page_size.is_power_of_two() {
            return Err(BoltError::PageSize(page_size));
        }
        Ok(BoltWriter {
            pages: PageFile {
                file,
                page_size,
                next_page: 2,
            },
            buckets: Vec::new(),
            open: None,
        })
    }

    /// Starts a bucket; the one before must be ended, and no two may share a name.
    pub fn begin_bucket(&mut self, name: &[u8]) -> BoltResult<()> {
        let taken = self.buckets.iter().any(|(bucket, _)| bucket == name);
        if self.open.is_some() || taken || name.is_empty() || self.buckets.len() >= MAX_BUCKETS {
            return Err(BoltError::Malformed(
                "a bucket while another is open, or a name empty or used twice",
            ));
        }
        self.open = Some((name.to_vec(), TreeBuilder::new(0)));
        Ok(())
    }

    /// Adds an entry to the open bucket; keys must ascend.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> BoltResult<()> {
        let (_, tree) = self
            .open
            .as_mut()
            .ok_or(BoltError::Malformed("an entry outside a bucket"))?;
        tree.put(&mut self.pages, key, value)
    }

    /// Writes what is left of the open bucket and records its header for the root.
    pub fn end_bucket(&mut self) -> BoltResult<()> {
        let (name, tree) = self
            .open
            .take()
            .ok_or(BoltError::Malformed("no bucket is open"))?;
        let mut header = vec![0u8; BUCKET_HEADER_BYTES];
        match tree.finish(&mut self.pages, true)? {
            Built::Tree(page) => header[..8].copy_from_slice(&page.to_le_bytes()),
            Built::Inline(image) => header.extend_from_slice(&image),
        }
        self.buckets.push((name, header));
        Ok(())
    }

    /// Writes a whole bucket at once.
    pub fn bucket<'e>(
        &mut self,
        name: &[u8],
        entries: impl IntoIterator<Item = (&'e [u8], &'e [u8])>,
    ) -> BoltResult<()> {
        self.begin_bucket(name)?;
        for (key, value) in entries {
            self.put(key, value)?;
        }
        self.end_bucket()
    }

    /// Writes the root bucket and both meta pages, syncs, and answers the file's length (a whole
    /// number of pages).
    pub fn finish(mut self) -> BoltResult<(File, u64)> {
        if self.open.is_some() {
            return Err(BoltError::Malformed("a bucket is still open"));
        }
        self.buckets.sort();
        let mut root = TreeBuilder::new(BUCKET_ELEMENT);
        for (name, header) in &self.buckets {
            root.put(&mut self.pages, name, header)?;
        }
        let Built::Tree(root_page) = root.finish(&mut self.pages, false)? else {
            return Err(BoltError::Malformed("the root bucket cannot be inline"));
        };
        self.pages.write_metas(root_page)?;
        let length = self.pages.next_page * u64::from(self.pages.page_size);
        Ok((self.pages.file, length))
    }
}

/// The file's pages: where the next one goes.
struct PageFile {
    file: File,
    page_size: u32,
    /// The next page to allocate; pages 0 and 1 are the metas.
    next_page: u64,
}

impl PageFile {
    /// Writes `page` (padded to whole pages, its header set here) at the next free page.
    fn write_page(&mut self, mut page: Vec<u8>, flags: u16, count: usize) -> BoltResult<u64> {
        let page_size = self.page_size as usize;
        let pages = page.len().div_ceil(page_size).max(1);
        page.resize(pages * page_size, 0);
        let id = self.next_page;
        let count = u16::try_from(count).map_err(|_| BoltError::Malformed("too many elements"))?;
        write_page_header(&mut page, id, flags, count, (pages - 1) as u32);
        self.file
            .write_all_at(&page, id * u64::from(self.page_size))?;
        self.next_page += pages as u64;
        Ok(id)
    }

    /// Both meta pages, naming `root_page` and every page written, then a sync.
    fn write_metas(&mut self, root_page: u64) -> BoltResult<()> {
        for (meta_page, txid) in [(0u64, 0u64), (1, 1)] {
            let meta = Meta {
                page_size: self.page_size,
                root: root_page,
                freelist: NO_FREELIST,
                pgid: self.next_page,
                txid,
            };
            let mut bytes = vec![0u8; self.page_size as usize];
            write_page_header(&mut bytes, meta_page, META_PAGE, 0, 0);
            bytes[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + page::META_BYTES]
                .copy_from_slice(&page::encode_meta(&meta));
            self.file
                .write_all_at(&bytes, meta_page * u64::from(self.page_size))?;
        }
        self.file.sync_all()?;
        Ok(())
    }
}

/// What a finished tree is: a page of its own, or a page image to put inline.
enum Built {
    Tree(u64),
    Inline(Vec<u8>),
}

/// Packs sorted entries into leaf pages, then branch levels, for one bucket or the root.
struct TreeBuilder {
    /// The element flags of every entry (`BUCKET_ELEMENT` in the root bucket).
    element_flags: u32,
    leaf: Vec<(Vec<u8>, Vec<u8>)>,
    leaf_bytes: usize,
    /// The first key and page of each leaf written so far.
    written: Vec<(Vec<u8>, u64)>,
    last_key: Option<Vec<u8>>,
}

impl TreeBuilder {
    fn new(element_flags: u32) -> TreeBuilder {
        TreeBuilder {
            element_flags,
            leaf: Vec::new(),
            leaf_bytes: PAGE_HEADER_BYTES,
            written: Vec::new(),
            last_key: None,
        }
    }

    fn put(&mut self, pages: &mut PageFile, key: &[u8], value: &[u8]) -> BoltResult<()> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES || value.len() > MAX_VALUE_BYTES {
            return Err(BoltError::Malformed("a key or value bbolt cannot hold"));
        }
        if self.last_key.as_deref().is_some_and(|last| last >= key) {
            return Err(BoltError::Malformed("keys must come in ascending order"));
        }
        self.last_key = Some(key.to_vec());
        let entry_bytes = ELEMENT_BYTES + key.len() + value.len();
        let page_size = pages.page_size as usize;
        if !self.leaf.is_empty() && self.leaf_bytes + entry_bytes > page_size {
            self.flush_leaf(pages)?;
        }
        self.leaf.push((key.to_vec(), value.to_vec()));
        self.leaf_bytes += entry_bytes;
        Ok(())
    }

    fn flush_leaf(&mut self, pages: &mut PageFile) -> BoltResult<()> {
        let image = leaf_image(&self.leaf, self.element_flags, self.leaf_bytes);
        let first_key = self.leaf[0].0.clone();
        let page = pages.write_page(image, LEAF_PAGE, self.leaf.len())?;
        self.written.push((first_key, page));
        self.leaf.clear();
        self.leaf_bytes = PAGE_HEADER_BYTES;
        Ok(())
    }

    /// Writes the last leaf and the branch levels; with `may_inline`, a bucket that is one small
    /// leaf stays inline, as bbolt keeps it (at most a quarter page).
    fn finish(mut self, pages: &mut PageFile, may_inline: bool) -> BoltResult<Built> {
        let fits_inline = self.leaf_bytes <= pages.page_size as usize / 4;
        if may_inline && self.written.is_empty() && fits_inline {
            let mut image = leaf_image(&self.leaf, self.element_flags, self.leaf_bytes);
            write_page_header(&mut image, 0, LEAF_PAGE, self.leaf.len() as u16, 0);
            return Ok(Built::Inline(image));
        }
        if !self.leaf.is_empty() || self.written.is_empty() {
            self.flush_leaf_even_if_empty(pages)?;
        }
        let mut level = std::mem::take(&mut self.written);
        while level.len() > 1 {
            level = write_branch_level(pages, &level)?;
        }
        Ok(Built::Tree(level[0].1))
    }

    fn flush_leaf_even_if_empty(&mut self, pages: &mut PageFile) -> BoltResult<()> {
        if !self.leaf.is_empty() {
            return self.flush_leaf(pages);
        }
        let image = leaf_image(&[], self.element_flags, PAGE_HEADER_BYTES);
        let page = pages.write_page(image, LEAF_PAGE, 0)?;
        self.written.push((Vec::new(), page));
        Ok(())
    }
}

/// Writes branch pages over `children` and answers the level above them.
fn write_branch_level(
    pages: &mut PageFile,
    children: &[(Vec<u8>, u64)],
) -> BoltResult<Vec<(Vec<u8>, u64)>> {
    let page_size = pages.page_size as usize;
    let mut above = Vec::new();
    let mut start = 0;
    while start < children.len() {
        let mut bytes = PAGE_HEADER_BYTES;
        let mut end = start;
        while end < children.len() {
            let entry = ELEMENT_BYTES + children[end].0.len();
            if end > start && bytes + entry > page_size {
                break;
            }
            bytes += entry;
            end += 1;
        }
        let image = branch_image(&children[start..end], bytes);
        let page = pages.write_page(image, BRANCH_PAGE, end - start)?;
        above.push((children[start].0.clone(), page));
        start = end;
    }
    Ok(above)
}

/// A leaf page's bytes (header left for `write_page`): the elements, then each key and value.
fn leaf_image(entries: &[(Vec<u8>, Vec<u8>)], flags: u32, bytes: usize) -> Vec<u8> {
    let mut image = vec![0u8; bytes];
    let mut data = PAGE_HEADER_BYTES + entries.len() * ELEMENT_BYTES;
    for (index, (key, value)) in entries.iter().enumerate() {
        let element = PAGE_HEADER_BYTES + index * ELEMENT_BYTES;
        let position = (data - element) as u32;
        image[element..element + 4].copy_from_slice(&flags.to_le_bytes());
        image[element + 4..element + 8].copy_from_slice(&position.to_le_bytes());
        image[element + 8..element + 12].copy_from_slice(&(key.len() as u32).to_le_bytes());
        image[element + 12..element + 16].copy_from_slice(&(value.len() as u32).to_le_bytes());
        image[data..data + key.len()].copy_from_slice(key);
        data += key.len();
        image[data..data + value.len()].copy_from_slice(value);
        data += value.len();
    }
    image
}

/// A branch page's bytes (header left for `write_page`): the elements, then each first key.
fn branch_image(children: &[(Vec<u8>, u64)], bytes: usize) -> Vec<u8> {
    let mut image = vec![0u8; bytes];
    let mut data = PAGE_HEADER_BYTES + children.len() * ELEMENT_BYTES;
    for (index, (key, child)) in children.iter().enumerate() {
        let element = PAGE_HEADER_BYTES + index * ELEMENT_BYTES;
        let position = (data - element) as u32;
        image[element..element + 4].copy_from_slice(&position.to_le_bytes());
        image[element + 4..element + 8].copy_from_slice(&(key.len() as u32).to_le_bytes());
        image[element + 8..element + 16].copy_from_slice(&child.to_le_bytes());
        image[data..data + key.len()].copy_from_slice(key);
        data += key.len();
    }
    image
}

fn write_page_header(page: &mut [u8], id: u64, flags: u16, count: u16, overflow: u32) {
    page[0..8].copy_from_slice(&id.to_le_bytes());
    page[8..10].copy_from_slice(&flags.to_le_bytes());
    page[10..12].copy_from_slice(&count.to_le_bytes());
    page[12..16].copy_from_slice(&overflow.to_le_bytes());
}
