//! The allocator `kvcc` (and `kvcc-bench`, to measure what ships) runs on: mimalloc, each
//! allocation on mimalloc's plain path when its alignment allows.
//!
//! The checker allocates and frees model states at millions per second; glibc's malloc
//! spent a quarter of the time there (perf), mimalloc a fraction of it. But the `mimalloc`
//! crate hands every allocation to `mi_malloc_aligned`, and mimalloc 3 serves an aligned
//! request from its size class only when that class's block size is a power of two:
//! any other (an aggregator copied on write: 384 bytes, seen in gdb) over-allocates
//! through the generic path, a million times in a 400,000-state run (callgrind). Known
//! upstream (mimalloc_rust PR #170). A block of mimalloc's plain `mi_malloc` is aligned
//! to 16 bytes when its size is (its size classes are multiples of 8, of 16 above 16, and
//! a page's first block is 16-aligned), so a layout whose size is a multiple of an
//! alignment of at most 16 needs nothing more; the rest keep the aligned calls.

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;
use libmimalloc_sys as mi;

/// mimalloc's `MI_MAX_ALIGN_SIZE`: the alignment its plain blocks of a multiple of it have.
const PLAIN_ALIGN: usize = 16;

/// mimalloc, through its plain calls where they give the alignment asked for.
pub struct Allocator;

/// Does a block of `layout.size()` bytes from `mi_malloc` meet `layout.align()`?
fn plain(layout: &Layout) -> bool {
    layout.align() <= PLAIN_ALIGN && layout.size() % layout.align() == 0
}

// SAFETY: every call forwards to mimalloc, which returns null or a block of at least the
// size asked for, aligned as `plain` requires or as the aligned call is told; mimalloc
// frees blocks of either kind with `mi_free`.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_malloc(layout.size()) as *mut u8
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_zalloc(layout.size()) as *mut u8
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr as *mut c_void)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The new size must keep the alignment on the plain path too.
        if plain(&layout) && new_size % layout.align() == 0 {
            mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
        } else {
            mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Layouts around mimalloc's size classes, with every alignment from 1 to a page.
    fn layouts() -> impl Iterator<Item = Layout> {
        (0..=12).flat_map(|shift| {
            let align = 1usize << shift;
            [1, 7, 8, 16, 24, 40, 48, 100, 384, 1000, 4096, 5000]
                .into_iter()
                .map(move |size| Layout::from_size_align(size, align).expect("a valid layout"))
        })
    }

    /// Allocates, zero-allocates and grows blocks of every layout through `allocator`;
    /// the first misaligned or unzeroed block, if any.
    fn misplaced(allocator: &impl GlobalAlloc) -> Option<String> {
        for layout in layouts() {
            // Several blocks per layout: one may be aligned by chance.
            let mut blocks = Vec::new();
            for _ in 0..8 {
                // SAFETY: the layouts have non-zero sizes; each block is freed below
                // with the layout it was allocated with.
                unsafe {
                    let block = allocator.alloc(layout);
                    let zeroed = allocator.alloc_zeroed(layout);
                    assert!(!block.is_null() && !zeroed.is_null(), "out of memory");
                    if (0..layout.size()).any(|i| *zeroed.add(i) != 0) {
                        return Some(format!("{layout:?} not zeroed"));
                    }
                    let grown = allocator.realloc(block, layout, layout.size() * 2);
                    blocks.push((zeroed, layout));
                    let grown_layout = Layout::from_size_align(layout.size() * 2, layout.align())
                        .expect("a valid layout");
                    blocks.push((grown, grown_layout));
                }
            }
            let bad = blocks
                .iter()
                .find(|(block, layout)| *block as usize % layout.align() != 0)
                .map(|(_, layout)| format!("{layout:?} misaligned"));
            for (block, layout) in blocks {
                // SAFETY: allocated above with this layout.
                unsafe { allocator.dealloc(block, layout) }
            }
            if bad.is_some() {
                return bad;
            }
        }
        None
    }

    #[test]
    fn every_block_is_aligned_as_asked() {
        assert_eq!(misplaced(&Allocator), None);
    }

    /// The twin takes the plain path for every layout: large alignments come back
    /// misaligned, and the check above sees it.
    #[test]
    fn a_plain_path_for_every_alignment_is_caught() {
        struct Careless;
        // SAFETY: only for this test, which expects the misalignment it causes.
        unsafe impl GlobalAlloc for Careless {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                mi::mi_malloc(layout.size()) as *mut u8
            }
            unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
                mi::mi_zalloc(layout.size()) as *mut u8
            }
            unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
                mi::mi_free(ptr as *mut c_void)
            }
            unsafe fn realloc(&self, ptr: *mut u8, _: Layout, new_size: usize) -> *mut u8 {
                mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
            }
        }
        let found = misplaced(&Careless).expect("a misaligned block");
        assert!(found.contains("misaligned"), "{found}");
    }
}
