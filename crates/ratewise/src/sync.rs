//! Atomics, swapped for `loom`'s under `--cfg loom` so the lock-free GCRA can
//! be model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};

/// One step of a short busy-wait. Under loom it yields, so the model checker
/// can schedule the thread being waited for.
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
