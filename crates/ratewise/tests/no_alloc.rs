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

/// A keyed limiter's check of tracked keys and a hierarchy's check, denials
/// included (a denial names the refusing level), allocate nothing.
#[test]
fn keyed_and_hierarchy_checks_do_not_allocate_once_warm() {
    use ratewise::hierarchy::Hierarchy;
    use ratewise::keyed::{KeyedLimiter, NoClock};
    use ratewise::Gcra;

    let per_user = Quota::per_second(10).unwrap().with_burst(5).unwrap();
    let limits = Hierarchy::<u64>::new()
        .keyed(
            "user",
            KeyedLimiter::<u64>::builder(per_user)
                .max_keys(64)
                .preallocate(true)
                .build(),
            |user: &u64| user,
        )
        .global(
            "global",
            Gcra::with_clock(Quota::per_second(1000).unwrap(), NoClock),
        );
    let mut now = 0u64;
    let mut run = |rounds: u64| {
        let (mut allowed, mut denied) = (0u64, 0u64);
        for i in 0..rounds {
            now += 1_000_000; // 1 ms: users ask faster than they may
            let d = limits
                .check_at(&(i % 8), 1, Timestamp::from_nanos(now))
                .unwrap();
            if d.allowed {
                allowed += 1;
            } else {
                assert_eq!(d.refused_by.as_deref(), Some("user"));
                denied += 1;
            }
        }
        (allowed, denied)
    };
    run(1_000);
    let before = allocations();
    let (allowed, denied) = run(10_000);
    assert_eq!(allocations() - before, 0, "a check allocated");
    assert!(allowed > 0 && denied > 0, "{allowed} {denied}");
}

/// The header writer (every form, admitted and refused) formats on the
/// stack: no allocation at all.
#[test]
fn header_writer_does_not_allocate() {
    use ratewise::response_headers::{HeaderBuf, HeaderStyle, PolicyInfo};
    use ratewise::{Gcra, ManualClock, RateLimiter};
    let q = Quota::per_second(5).unwrap();
    let l = Gcra::with_clock(q, ManualClock::new());
    let policy = PolicyInfo::from_quota("burst", &q);
    let mut bytes = 0usize;
    let before = allocations();
    for i in 0..1_000u64 {
        let d = l
            .check_at(1, Timestamp::from_nanos(i * 50_000_000))
            .unwrap();
        d.write_headers(&policy, HeaderStyle::ALL, |name, value| {
            bytes += name.len() + value.len();
        })
        .unwrap();
        let mut field = HeaderBuf::<128>::new();
        field.push_decision("burst", &d).unwrap();
        field
            .push_limit("day", i, std::time::Duration::from_secs(i))
            .unwrap();
        bytes += field.as_bytes().len();
    }
    assert_eq!(allocations() - before, 0, "the header writer allocated");
    assert!(bytes > 1_000 * 60, "headers were written ({bytes} bytes)");
}
