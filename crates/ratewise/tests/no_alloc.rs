//! The check path allocates nothing once warm: a counting allocator proves it.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{build, ALGORITHMS};
use ratewise::{Quota, Timestamp};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn check_paths_do_not_allocate_once_warm() {
    for name in ALGORITHMS {
        let q = Quota::per_second(100).unwrap().with_burst(50).unwrap();
        let l = build(name, q);
        let mut now = 0u64;
        // Warm-up: let any lazily grown buffer reach its steady size.
        for _ in 0..10_000 {
            now += 3_000_000;
            let _ = l.check_at(1, Timestamp::from_nanos(now));
        }
        let before = allocations();
        for i in 0..10_000u64 {
            now += 3_000_000;
            let t = Timestamp::from_nanos(now);
            let _ = l.check_at(1 + i % 3, t);
            let _ = l.peek_at(1, t);
        }
        assert_eq!(
            allocations() - before,
            0,
            "{name} allocated on the check path"
        );
    }
}
