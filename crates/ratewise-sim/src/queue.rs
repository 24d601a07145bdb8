//! The simulators' event queue: a four-ary heap on `(time, sequence
//! number)`, laid out by cache line.
//!
//! An event is a `u32` (the engines pack what they need in it) kept in one
//! 16-byte entry with its time and sequence number, so a comparison reads
//! one word and a node's four children are one 64-byte line: a pop reads
//! one line per level. A hundred thousand waiting events take 1.6 MB, with
//! no slack beyond the last line (a radix heap with a vector per bucket
//! held 4–6 times that, its buckets' spare capacity and the bucket being
//! redistributed, and read two words per event besides).
//!
//! Entries are unique per push, so among events at one time the one pushed
//! first comes first: runs replay the same events on any machine. The
//! 32-bit sequence number is renumbered, in order, once every 2³² pushes.
//!
//! ```
//! use ratewise_sim::queue::EventQueue;
//!
//! let mut q = EventQueue::new();
//! q.push(20, 4);
//! q.push(10, 1);
//! q.push(10, 2);
//! assert_eq!(q.pop(), Some((10, 1)));
//! q.push(15, 3);
//! assert_eq!(q.pop(), Some((10, 2)));
//! assert_eq!(q.pop(), Some((15, 3)));
//! assert_eq!(q.pop(), Some((20, 4)));
//! assert_eq!(q.pop(), None);
//! ```

/// A monotone min-queue of events (`u32`s) keyed by time (nanoseconds);
/// events at the same time come out in the order they were pushed.
#[derive(Clone, Debug)]
pub struct EventQueue {
    /// The last time popped.
    now: u64,
    /// The sequence number of the latest push; renumbered from 1 when it
    /// reaches `seq_limit`.
    seq: u32,
    seq_limit: u32,
    /// Events waiting.
    len: usize,
    /// The heap's entries, `time_ns << 64 | seq << 32 | event`: node `i` at
    /// slot `i + 3`, so that node `i`'s four children (nodes
    /// `4i + 1 ..= 4i + 4`) fill line `i + 1`. Slots past the last node
    /// hold `u128::MAX`.
    lines: Vec<Line>,
}

/// Four entries in one 64-byte cache line.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Line([u128; 4]);

const EMPTY: Line = Line([u128::MAX; 4]);

impl Default for EventQueue {
    fn default() -> Self {
        Self::new()
    }
}

fn entry(at_ns: u64, seq: u32, event: u32) -> u128 {
    u128::from(at_ns) << 64 | u128::from(seq) << 32 | u128::from(event)
}

impl EventQueue {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty queue at time 0 with room for `n` events.
    pub fn with_capacity(n: usize) -> Self {
        EventQueue {
            now: 0,
            seq: 0,
            seq_limit: u32::MAX,
            len: 0,
            lines: Vec::with_capacity(n.div_ceil(4) + 1),
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

    /// Node `node`'s line and place in it.
    fn slot(node: usize) -> (usize, usize) {
        let slot = node + 3;
        (slot / 4, slot % 4)
    }

    fn get(&self, node: usize) -> u128 {
        let (line, at) = Self::slot(node);
        self.lines[line].0[at]
    }

    fn set(&mut self, node: usize, e: u128) {
        let (line, at) = Self::slot(node);
        self.lines[line].0[at] = e;
    }

    /// Schedules `event` at `at_ns`. A time before the last event popped is
    /// moved up to it (the queue is monotone; the engines never do this).
    pub fn push(&mut self, at_ns: u64, event: u32) {
        if self.seq >= self.seq_limit {
            self.renumber();
        }
        self.seq += 1;
        self.insert(at_ns, self.seq, event);
    }

    /// Schedules `event` at `at_ns` ahead of every other event at that
    /// time, whenever they were pushed (a sampler that reads the state
    /// *before* anything happens at its instant). At most one event per time
    /// may be pushed this way.
    pub fn push_first(&mut self, at_ns: u64, event: u32) {
        self.insert(at_ns, 0, event);
    }

    /// Gives the waiting events sequence numbers from 1 in their order
    /// (those pushed first keep 0), once per `seq_limit` pushes: sorted,
    /// they are a heap as they stand.
    fn renumber(&mut self) {
        let mut all: Vec<u128> = (0..self.len).map(|i| self.get(i)).collect();
        all.sort_unstable();
        let mut seq = 0;
        for (i, e) in all.into_iter().enumerate() {
            let (at_ns, old, event) = ((e >> 64) as u64, (e >> 32) as u32, e as u32);
            if old != 0 {
                seq += 1;
            }
            self.set(i, entry(at_ns, if old == 0 { 0 } else { seq }, event));
        }
        self.seq = seq;
    }

    fn insert(&mut self, at_ns: u64, seq: u32, event: u32) {
        debug_assert!(at_ns >= self.now, "an event in the past");
        let e = entry(at_ns.max(self.now), seq, event);
        let mut i = self.len;
        if Self::slot(i).0 >= self.lines.len() {
            self.lines.push(EMPTY);
        }
        self.len += 1;
        // Sift up, moving the hole rather than swapping.
        while i > 0 {
            let parent = (i - 1) / 4;
            let p = self.get(parent);
            if p <= e {
                break;
            }
            self.set(i, p);
            i = parent;
        }
        self.set(i, e);
    }

    /// The event [`pop`](Self::pop) would return, left in place.
    pub fn peek(&self) -> Option<(u64, u32)> {
        (self.len > 0).then(|| {
            let top = self.get(0);
            ((top >> 64) as u64, top as u32)
        })
    }

    /// The earliest event and its time; among events at one time, the one
    /// pushed first.
    pub fn pop(&mut self) -> Option<(u64, u32)> {
        let n = self.len.checked_sub(1)?;
        self.len = n;
        let top = self.get(0);
        let e = self.get(n);
        self.set(n, u128::MAX);
        if n > 0 {
            // The last entry sinks from the root; the children of node `i`
            // are line `i + 1`, compared whole (empty slots are `MAX`).
            let mut i = 0;
            while let Some(line) = self.lines.get(i + 1) {
                // The four lines of grandchildren, one of which the next
                // level reads, load while this one compares.
                if let Some(next) = self.lines.get(4 * i + 2..(4 * i + 6).min(self.lines.len())) {
                    for l in next {
                        crate::prefetch::prefetch(l);
                    }
                }
                let c = &line.0;
                let (a, ai) = if c[1] < c[0] { (c[1], 1) } else { (c[0], 0) };
                let (b, bi) = if c[3] < c[2] { (c[3], 3) } else { (c[2], 2) };
                let (m, mi) = if b < a { (b, bi) } else { (a, ai) };
                if m >= e {
                    break;
                }
                self.set(i, m);
                i = 4 * i + 1 + mi;
            }
            self.set(i, e);
        }
        if self.lines.len() > Self::slot(n).0 + 1 {
            self.lines.pop();
        }
        self.now = (top >> 64) as u64;
        Some((self.now, top as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    impl EventQueue {
        /// A queue that renumbers every `limit` pushes.
        fn renumbering_every(limit: u32) -> Self {
            EventQueue {
                seq_limit: limit,
                ..EventQueue::new()
            }
        }
    }

    proptest! {
        /// Against a binary heap on (time, push order), over interleaved
        /// pushes (each at or after the last pop) and pops, with the
        /// sequence numbers renumbered every few pushes or never.
        #[test]
        fn pops_in_the_order_of_a_binary_heap(
            ops in proptest::collection::vec((any::<bool>(), 0u64..1_000, 0u8..3, any::<u32>()), 1..400),
            limit in prop_oneof![Just(3u32), Just(17), Just(u32::MAX)],
        ) {
            let mut q = EventQueue::renumbering_every(limit);
            let mut reference = BinaryHeap::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for (pop, delay, scale, event) in ops {
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
                    q.push(at, event);
                    reference.push(Reverse((at, seq, event)));
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
    fn an_event_pushed_first_precedes_those_of_its_time() {
        for limit in [2, u32::MAX] {
            let mut q = EventQueue::renumbering_every(limit);
            q.push(5, 1);
            q.push(10, 2);
            q.push_first(10, 99);
            q.push(10, 3);
            q.push(10, 4);
            let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
            assert_eq!(order, [1, 99, 2, 3, 4], "renumbering every {limit}");
        }
    }

    #[test]
    fn times_at_the_ends_of_the_range_keep_their_order() {
        let mut q = EventQueue::new();
        q.push(u64::MAX, 3);
        q.push(0, 1);
        q.push(u64::MAX, u32::MAX);
        q.push(1, 2);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|(_, c)| c)).collect();
        assert_eq!(order, [1, 2, 3, u32::MAX]);
    }

    #[test]
    fn an_entry_is_sixteen_bytes_and_a_line_four() {
        assert_eq!(std::mem::size_of::<Line>(), 64);
        let mut q = EventQueue::with_capacity(100_000);
        for i in 0..100_000 {
            q.push(u64::from(i) * 7 % 1_000, i);
        }
        assert!(q.lines.capacity() * 64 <= 100_000 * 16 + 128);
    }
}
