//! The vendored base2histogram's patch (raft/vendor/base2histogram/PATCHED.md): the first
//! histogram of the default width, as openraft makes for its runtime statistics, builds only that
//! width's lookup tables. Upstream 0.2.3 built all sixteen widths' tables at once, about 27 MB in
//! every member. This is its own test binary because it counts every allocation of the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes it hands out.
struct CountingAllocator;

static ALLOCATED_BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED_BYTES.fetch_add(layout.size(), Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static GLOBAL_ALLOCATOR: CountingAllocator = CountingAllocator;

/// Far above what one width's tables take, far below all sixteen widths'.
const MOST_BYTES_FOR_ONE_WIDTH: usize = 1 << 20;

#[test]
fn the_first_histogram_builds_only_its_own_width() {
    let before = ALLOCATED_BYTES.load(Ordering::SeqCst);
    let mut histogram: base2histogram::Histogram = base2histogram::Histogram::new();
    histogram.record(1_234);
    let allocated = ALLOCATED_BYTES.load(Ordering::SeqCst) - before;
    assert!(
        allocated < MOST_BYTES_FOR_ONE_WIDTH,
        "the first histogram allocated {allocated} bytes"
    );
    // Every other width is still there when asked for.
    for width in
        base2histogram::LogScaleConfig::MIN_WIDTH..=base2histogram::LogScaleConfig::MAX_WIDTH
    {
        assert_eq!(
            base2histogram::LogScale::get(width),
            &base2histogram::LogScale::new(width)
        );
    }
}
