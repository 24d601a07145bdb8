//! Atomics, swapped for `loom`'s under `--cfg ratewise_loom` so the lock-free
//! GCRA can be model-checked. The cfg has a name of our own: the common
//! `--cfg loom` would also switch tokio, and with it the HTTP crates among
//! the dev-dependencies, into their loom builds, which do not compile.

#[cfg(ratewise_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(ratewise_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};

/// One step of a short busy-wait. Under loom it yields, so the model checker
/// can schedule the thread being waited for.
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(ratewise_loom)]
    loom::thread::yield_now();
    #[cfg(not(ratewise_loom))]
    std::hint::spin_loop();
}

/// The lock of one [`KeyedLimiter`](crate::KeyedLimiter) shard: a spin lock
/// (`spin`'s `SpinMutex`) that falls back to yielding the thread.
///
/// Why not `std::sync::Mutex`: a keyed check holds its shard for a few
/// nanoseconds, and taking and releasing a std mutex costs two atomic
/// read-modify-writes (the release must swap, to learn whether to wake a
/// sleeper) plus two poison checks. Here taking the lock is one
/// compare-exchange and releasing it is a plain release store, so an
/// uncontended check does exactly one atomic read-modify-write.
///
/// Invariant: the lock is held only for bounded work (a lookup, a state
/// update, or an insert with at most `SWEEP_PER_INSERT + SCAN_WHEN_FULL`
/// examined entries), never across a call that can block. A waiter spins
/// briefly and then yields its time slice on each further attempt, so a
/// holder that was preempted gets the CPU back instead of being spun
/// against for a whole slice.
pub(crate) struct ShardLock<T>(spin::mutex::SpinMutex<T>);

/// Access to a locked shard; the lock is released when it is dropped.
pub(crate) type ShardGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;

impl<T> ShardLock<T> {
    /// Attempts that only spin before the waiter starts yielding.
    const SPINS: u32 = 64;

    pub(crate) fn new(value: T) -> Self {
        ShardLock(spin::mutex::SpinMutex::new(value))
    }

    #[inline]
    pub(crate) fn lock(&self) -> ShardGuard<'_, T> {
        match self.0.try_lock() {
            Some(guard) => guard,
            None => self.lock_contended(),
        }
    }

    #[cold]
    fn lock_contended(&self) -> ShardGuard<'_, T> {
        let mut attempts = 0u32;
        loop {
            // Wait until the lock looks free before trying again, so that
            // waiters read the line instead of bouncing it with writes.
            while self.0.is_locked() {
                if attempts < Self::SPINS {
                    attempts += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if let Some(guard) = self.0.try_lock() {
                return guard;
            }
        }
    }
}

#[cfg(all(test, not(ratewise_loom)))]
mod tests {
    use super::ShardLock;

    /// Mutual exclusion under contention: increments made through the
    /// guard (plain, non-atomic) are never lost, with more threads than
    /// this machine may have cores, so the yielding path runs too.
    #[test]
    fn shard_lock_excludes_under_contention() {
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 50_000;
        let lock = ShardLock::new((0u64, 0u64));
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        let mut g = lock.lock();
                        // Two fields updated apart: a second holder would
                        // see them differ.
                        g.0 += 1;
                        std::hint::black_box(&mut *g);
                        assert_eq!(g.0, g.1 + 1, "two holders at once");
                        g.1 += 1;
                    }
                });
            }
        });
        let g = lock.lock();
        assert_eq!(*g, (THREADS * ROUNDS, THREADS * ROUNDS));
    }
}
