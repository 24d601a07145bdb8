//! Striped counters: statistics that many threads bump without sharing a
//! cache line.
//!
//! A single `AtomicU64` that every core increments is correct but slow under
//! contention: the cache line holding it moves from core to core on every
//! increment. A [`StripedCounter`] spreads the count over several cells, each
//! padded to its own cache line ([`CachePadded`]), and each thread adds to
//! "its" cell. Reading the total sums the cells, so reads cost more than
//! writes — the right trade for allowed/denied statistics that are written
//! on every request and read by a metrics scrape.
//!
//! Invariants:
//! * [`StripedCounter::sum`] never loses an increment that happened before
//!   it started; increments racing with it may or may not be included (the
//!   total is not a snapshot of one instant, only monotone).
//! * Counts wrap at `u64::MAX` (about 584 years at a billion per second).
//!
//! Threads are assigned cells round-robin on first use
//! ([`thread_slot`]), which spreads any number of threads evenly without
//! asking the operating system which CPU they run on.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// A small number that is stable for the current thread and different for
/// threads started one after another: the index of this thread in the order
/// threads first asked. Used to pick a stripe or a shard without contention.
pub fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
        s.set(v);
        v
    })
}

/// A counter split into cache-line-padded cells. See the
/// [module docs](self).
///
/// ```
/// use ratewise::striped::StripedCounter;
///
/// let allowed = StripedCounter::new();
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 allowed.add(1);
///             }
///         });
///     }
/// });
/// assert_eq!(allowed.sum(), 4000);
/// ```
pub struct StripedCounter {
    cells: Box<[CachePadded<AtomicU64>]>,
    mask: usize,
}

impl StripedCounter {
    /// A counter with one cell per available CPU (4 if unknown), as
    /// [`StripedCounter::with_stripes`] rounds and clamps it.
    pub fn new() -> Self {
        let cpus = std::thread::available_parallelism().map_or(4, usize::from);
        StripedCounter::with_stripes(cpus)
    }

    /// A counter with `stripes` cells, rounded up to a power of two and
    /// clamped to `1..=1024`.
    pub fn with_stripes(stripes: usize) -> Self {
        let n = stripes.clamp(1, 1024).next_power_of_two();
        let cells = (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        StripedCounter { cells, mask: n - 1 }
    }

    /// Adds `n` to the calling thread's cell.
    #[inline]
    pub fn add(&self, n: u64) {
        if let Some(cell) = self.cells.get(thread_slot() & self.mask) {
            cell.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The total over all cells (see the module docs for what "total" means
    /// while other threads are adding).
    pub fn sum(&self) -> u64 {
        self.cells
            .iter()
            .fold(0u64, |acc, c| acc.wrapping_add(c.load(Ordering::Relaxed)))
    }

    /// Returns the total and sets every cell to zero. Increments that race
    /// with `take` land either in this total or in the next one, never in
    /// neither and never in both.
    pub fn take(&self) -> u64 {
        self.cells.iter().fold(0u64, |acc, c| {
            acc.wrapping_add(c.swap(0, Ordering::Relaxed))
        })
    }

    /// The number of cells.
    pub fn stripes(&self) -> usize {
        self.cells.len()
    }
}

impl Default for StripedCounter {
    fn default() -> Self {
        StripedCounter::new()
    }
}

impl std::fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripedCounter")
            .field("sum", &self.sum())
            .field("stripes", &self.stripes())
            .finish()
    }
}

/// Allowed/denied statistics as two striped counters.
#[derive(Debug, Default)]
pub struct AdmissionStats {
    /// Requests admitted.
    pub allowed: StripedCounter,
    /// Requests denied.
    pub denied: StripedCounter,
}

impl AdmissionStats {
    /// Fresh, all-zero statistics.
    pub fn new() -> Self {
        AdmissionStats::default()
    }

    /// Records one decision.
    #[inline]
    pub fn record(&self, allowed: bool) {
        if allowed {
            self.allowed.add(1);
        } else {
            self.denied.add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_on_separate_cache_lines() {
        let c = StripedCounter::with_stripes(4);
        assert_eq!(c.stripes(), 4);
        let a = &*c.cells[0] as *const AtomicU64 as usize;
        let b = &*c.cells[1] as *const AtomicU64 as usize;
        assert!(b - a >= 64, "cells {a:#x} and {b:#x} share a line");
    }

    #[test]
    fn concurrent_adds_are_all_counted_and_take_resets() {
        let c = StripedCounter::with_stripes(3);
        assert_eq!(c.stripes(), 4);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..10_000 {
                        c.add(t + 1);
                    }
                });
            }
        });
        assert_eq!(c.sum(), 10_000 * (1..=8).sum::<u64>());
        assert_eq!(c.take(), 360_000);
        assert_eq!(c.sum(), 0);
    }

    #[test]
    fn thread_slots_differ_between_threads() {
        let mine = thread_slot();
        assert_eq!(mine, thread_slot());
        let other = std::thread::spawn(thread_slot).join().unwrap();
        assert_ne!(mine, other);
    }

    #[test]
    fn stats_record() {
        let s = AdmissionStats::new();
        s.record(true);
        s.record(false);
        s.record(false);
        assert_eq!((s.allowed.sum(), s.denied.sum()), (1, 2));
    }
}
