//! The simulators' event queue: a radix heap on `(time, sequence number)`.
//!
//! A discrete-event simulation only ever schedules events at or after the
//! one it is handling, so its queue is *monotone*: every key pushed is at
//! least the last key popped. A radix heap uses that to replace a binary
//! heap's `log n` scattered moves per operation with appends to one of 129
//! buckets (by the highest bit in which a key differs from the last key
//! popped) and an occasional sequential redistribution of one bucket. With
//! a hundred thousand clients the binary heap's sift-downs missed the cache
//! at nearly every level; the buckets are read front to back.
//!
//! Keys are `(time_ns, seq)` packed into a `u128`, unique per push, so the
//! pop order is exactly a binary heap's on the same pairs: runs replay the
//! same events whichever queue ran them.
//!
//! ```
//! use ratewise_sim::queue::EventQueue;
//!
//! let mut q = EventQueue::new();
//! q.push(20, "late");
//! q.push(10, "early");
//! q.push(10, "early, pushed second");
//! assert_eq!(q.pop(), Some((10, "early")));
//! q.push(15, "scheduled while handling 10");
//! assert_eq!(q.pop(), Some((10, "early, pushed second")));
//! assert_eq!(q.pop(), Some((15, "scheduled while handling 10")));
//! assert_eq!(q.pop(), Some((20, "late")));
//! assert_eq!(q.pop(), None);
//! ```

/// A monotone min-queue of events keyed by time (nanoseconds); events at
/// the same time come out in the order they were pushed.
#[derive(Clone, Debug)]
pub struct EventQueue<T> {
    /// The last key popped; every key in bucket `b > 0` differs from it
    /// first in bit `b - 1`.
    last: u128,
    seq: u64,
    /// `(time_ns, seq, event)`; the key is `time_ns << 64 | seq`.
    buckets: Vec<Vec<(u64, u64, T)>>,
    len: usize,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

const BUCKETS: usize = 129;

/// The largest allocation (in events) an emptied bucket keeps.
const KEPT_CAPACITY: usize = 1024;

fn key(at_ns: u64, seq: u64) -> u128 {
    u128::from(at_ns) << 64 | u128::from(seq)
}

impl<T> EventQueue<T> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        EventQueue {
            last: 0,
            seq: 0,
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            len: 0,
        }
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn bucket(last: u128, key: u128) -> usize {
        (128 - (key ^ last).leading_zeros()) as usize
    }

    /// Schedules `event` at `at_ns`. A time before the last event popped is
    /// moved up to it (the queue is monotone; the engines never do this).
    pub fn push(&mut self, at_ns: u64, event: T) {
        self.seq += 1;
        debug_assert!(at_ns >= (self.last >> 64) as u64, "an event in the past");
        let at_ns = at_ns.max((self.last >> 64) as u64);
        // Later than `last`: the sequence number grows with every push.
        let b = Self::bucket(self.last, key(at_ns, self.seq));
        self.buckets[b].push((at_ns, self.seq, event));
        self.len += 1;
    }

    /// The earliest event and its time; among events at one time, the one
    /// pushed first.
    pub fn pop(&mut self) -> Option<(u64, T)> {
        if self.buckets[0].is_empty() {
            let i = self.buckets.iter().position(|b| !b.is_empty())?;
            let min = self.buckets[i].iter().map(|e| key(e.0, e.1)).min()?;
            self.last = min;
            let mut moving = std::mem::take(&mut self.buckets[i]);
            for e in moving.drain(..) {
                self.buckets[Self::bucket(min, key(e.0, e.1))].push(e);
            }
            // Keep the emptied bucket's allocation for the next fill only
            // while it is small: every bucket keeping the largest fill it
            // ever had held several times the events waiting (a fleet's
            // first wave passes through a dozen buckets).
            if moving.capacity() <= KEPT_CAPACITY {
                self.buckets[i] = moving;
            }
        }
        let (at_ns, _, e) = self.buckets[0].pop()?;
        self.len -= 1;
        Some((at_ns, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    proptest! {
        /// Against a binary heap on (time, push order), over interleaved
        /// pushes (each at or after the last pop) and pops.
        #[test]
        fn pops_in_the_order_of_a_binary_heap(ops in proptest::collection::vec((any::<bool>(), 0u64..1_000, 0u8..3), 1..400)) {
            let mut q = EventQueue::new();
            let mut reference = BinaryHeap::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for (pop, delay, scale) in ops {
                if pop {
                    let got = q.pop();
                    let want = reference.pop().map(|Reverse((t, _, v))| (t, v));
                    prop_assert_eq!(got, want);
                    if let Some((t, _)) = got {
                        now = t;
                    }
                } else {
                    // Delays from 0 (same time) to ~2^50 ns.
                    let at = now + delay.pow(u32::from(scale) * 2 + 1);
                    seq += 1;
                    q.push(at, seq);
                    reference.push(Reverse((at, seq, seq)));
                }
                prop_assert_eq!(q.len(), reference.len());
            }
            while let Some(Reverse((t, _, v))) = reference.pop() {
                prop_assert_eq!(q.pop(), Some((t, v)));
            }
            prop_assert!(q.is_empty());
        }
    }

    #[test]
    fn times_at_the_ends_of_the_range_keep_their_order() {
        let mut q = EventQueue::new();
        q.push(u64::MAX, 'c');
        q.push(0, 'a');
        q.push(u64::MAX, 'd');
        q.push(1, 'b');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, c)| c)).collect();
        assert_eq!(order, ['a', 'b', 'c', 'd']);
    }
}
