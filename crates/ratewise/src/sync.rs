//! Atomics, swapped for `loom`'s under `--cfg loom` so the lock-free GCRA can
//! be model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};
