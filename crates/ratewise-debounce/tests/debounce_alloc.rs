//! The hot path allocates nothing once warmed: a counting global allocator
//! watches `call`/`push` while a value is already pending.
#![cfg(feature = "tokio")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::ready;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ratewise::Timestamp;
use ratewise_debounce::{
    CoalesceConfig, CoalesceCore, Coalescer, DebounceConfig, Debouncer, EventThrottle,
    EventThrottleConfig, StopMode,
};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn counted(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    f();
    COUNTING.store(false, Ordering::Relaxed);
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// One test only, so no other test thread allocates while counting.
#[test]
fn warmed_hot_paths_do_not_allocate() {
    // The coalescer core's timer fire closes due batches by moving them out:
    // once warmed, it allocates nothing (the output has room for them).
    let mut core =
        CoalesceCore::new(CoalesceConfig::new(Duration::from_millis(100), 1 << 20).expect("valid"));
    let mut out = Vec::with_capacity(64);
    for round in 0..2u64 {
        let opened = Timestamp::from_nanos(round * 1_000_000_000);
        for key in 0..64u8 {
            core.push(opened, key, u64::from(key), &mut out);
        }
        let n = counted(|| core.on_timer(opened + Duration::from_millis(100), &mut out));
        assert_eq!(out.len(), 64, "every batch closes when due");
        assert!(!core.is_pending());
        out.clear();
        if round > 0 {
            assert_eq!(
                n, 0,
                "CoalesceCore::on_timer allocated {n} times closing 64 batches"
            );
        }
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let d = Debouncer::new(DebounceConfig::new(Duration::from_millis(100)), |_: u64| {
            ready(())
        })
        .expect("inside a runtime");
        let t = EventThrottle::new(
            EventThrottleConfig::new(Duration::from_millis(100)),
            |_: u64| ready(()),
        )
        .expect("inside a runtime");
        let c = Coalescer::new(
            CoalesceConfig::new(Duration::from_millis(100), 1 << 20).expect("valid"),
            |_: u8, _: Vec<u64>| ready(()),
        )
        .expect("inside a runtime");
        // Warm up: spawn the workers, let them arm their timers, size the
        // coalescer's batch.
        d.call(0).expect("not stopped");
        t.call(0).expect("not stopped");
        t.call(1).expect("not stopped");
        for i in 0..10_000 {
            c.push(1, i).expect("not stopped");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;

        let n = counted(|| {
            for i in 0..10_000 {
                d.call(i).expect("not stopped");
            }
        });
        assert_eq!(n, 0, "Debouncer::call allocated {n} times in 10 000 calls");
        let n = counted(|| {
            for i in 0..10_000 {
                t.call(i).expect("not stopped");
            }
        });
        assert_eq!(
            n, 0,
            "EventThrottle::call allocated {n} times in 10 000 calls"
        );

        // Retire the other two so their own fires are not counted below.
        let stop = Duration::from_secs(1);
        t.stop(StopMode::Abort, stop)
            .await
            .expect("stopped in time");
        c.stop(StopMode::Abort, stop)
            .await
            .expect("stopped in time");

        // With virtual time moving between calls the worker wakes, re-checks
        // and re-arms its timer: still no allocation.
        let n = {
            ALLOCATIONS.store(0, Ordering::Relaxed);
            COUNTING.store(true, Ordering::Relaxed);
            for i in 0..1_000 {
                d.call(i).expect("not stopped");
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
            COUNTING.store(false, Ordering::Relaxed);
            ALLOCATIONS.load(Ordering::Relaxed)
        };
        assert_eq!(n, 0, "a moving debounce allocated {n} times in 1 000 calls");
    });
}
