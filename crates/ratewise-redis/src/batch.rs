//! Opportunistic batching: while a script call for a *group* is in flight,
//! further requests for the same group (and quota) wait in process and then
//! go to Redis together, as one batch script call that decides them in
//! arrival order. On a single Redis server a group is every key of one
//! limiter under one quota, so concurrent requests for distinct keys share
//! round trips too; on a Cluster, where one script call must stay within a
//! slot, a group is one key.
//!
//! An idle group costs nothing extra: the first request finds no call in
//! flight and goes alone. A busy one costs one round trip per batch instead
//! of one per request.
//!
//! # Protocol
//!
//! A group has an entry in the table exactly while some request *leads* it:
//! holds a call in flight, or is about to send the next batch. A group has
//! at most `leaders` of them (2 by default: while one batch's answer
//! travels back and its waiters wake, the next is already on the wire;
//! both go on the limiter's connection in order, so Redis decides them in
//! the order they were formed). A request that finds fewer leaders leads
//! with itself alone. A request that finds the group's leaders all busy
//! queues a [`Waiter`] and awaits its one-shot channel,
//! which brings either its answer ([`Msg::Done`]) or the lead of the next
//! batch ([`Msg::Lead`]: its own request first, then the waiters queued
//! after it, up to the batch cap). When a leader has its answers, it sends
//! them to its batch's waiters, then hands the lead to the oldest queued
//! waiter still listening, or, when none is queued, the group has one
//! leader less (and no entry once it has none).
//!
//! The lead travels as a [`Lead`] guard. A guard dropped before its batch
//! was answered — its leader's future was cancelled mid-call, or the
//! waiter it was sent to was dropped before reading it — puts the batch's
//! waiters back at the head of the queue and hands the lead on, so a group
//! never stays locked and no waiter is forgotten. (A cancelled call may
//! still have reached Redis; its requests are then sent again, which errs
//! on the side of the limit, as a timed-out call does.) Waiters whose
//! caller gave up are skipped when a batch is formed: they are not sent.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// One request of a batch: its key (as the caller gave it; shared, so a
/// request queued again costs no copy), its weight, whether it only peeks,
/// and its `now` argument (µs, or -1 for Redis's clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) key: std::sync::Arc<[u8]>,
    pub(crate) n: u64,
    pub(crate) peek: bool,
    pub(crate) now: i64,
}

/// What a batch is for: one group of keys (empty: all of them; on a
/// Cluster, the one key) under one quota (requests with another quota, e.g.
/// `check_with_quota`, batch separately).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BatchKey {
    pub(crate) group: Vec<u8>,
    pub(crate) emission_us: u64,
    pub(crate) burst: u64,
}

/// A queued request and where its answer goes.
pub(crate) struct Waiter<A> {
    pub(crate) req: Request,
    tx: oneshot::Sender<Msg<A>>,
}

/// What a waiter receives.
pub(crate) enum Msg<A> {
    /// Its answer.
    Done(A),
    /// The lead of the next batch, which starts with its own request.
    Lead(Lead<A>),
}

/// A group with calls in flight: how many leaders it has, and who waits.
struct Entry<A> {
    leaders: usize,
    queue: VecDeque<Waiter<A>>,
}

type Table<A> = HashMap<BatchKey, Entry<A>>;

/// The table of groups with a call in flight, in shards.
pub(crate) struct Batcher<A> {
    shards: Box<[Mutex<Table<A>>]>,
    hasher: std::collections::hash_map::RandomState,
    /// The most requests in one batch (at least 1).
    max: usize,
    /// The most calls in flight for one group (at least 1).
    leaders: usize,
}

impl<A> std::fmt::Debug for Batcher<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("max", &self.max)
            .field("leaders", &self.leaders)
            .finish()
    }
}

/// What joining a group's queue gave.
pub(crate) enum Joined<A> {
    /// No call was in flight: lead, with this request alone.
    Lead(Lead<A>),
    /// A call is in flight: wait for the answer or the lead.
    Wait(oneshot::Receiver<Msg<A>>),
}

impl<A> Batcher<A> {
    const SHARDS: usize = 16;

    pub(crate) fn new(max: usize, leaders: usize) -> Arc<Batcher<A>> {
        Arc::new(Batcher {
            shards: (0..Self::SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            max: max.max(1),
            leaders: leaders.max(1),
        })
    }

    fn shard(&self, key: &BatchKey) -> std::sync::MutexGuard<'_, Table<A>> {
        let i = (self.hasher.hash_one(key) as usize) % self.shards.len();
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins the queue of the group `key` with `req`.
    pub(crate) fn join(self: &Arc<Self>, key: &BatchKey, req: Request) -> Joined<A> {
        let mut table = self.shard(key);
        match table.get_mut(key) {
            Some(entry) if entry.leaders >= self.leaders => {
                let (tx, rx) = oneshot::channel();
                entry.queue.push_back(Waiter { req, tx });
                return Joined::Wait(rx);
            }
            Some(entry) => entry.leaders += 1,
            None => {
                table.insert(
                    key.clone(),
                    Entry {
                        leaders: 1,
                        queue: VecDeque::new(),
                    },
                );
            }
        }
        drop(table);
        Joined::Lead(Lead {
            batcher: self.clone(),
            key: key.clone(),
            own: req,
            others: Vec::new(),
            done: false,
        })
    }

    /// Hands a finished leader's lead to the oldest listening waiter with
    /// the next batch; when nobody waits, the group has one leader less, and
    /// no entry once it has none. Called with the shard locked.
    fn hand_off(self: &Arc<Self>, table: &mut Table<A>, key: &BatchKey) {
        loop {
            let Some(entry) = table.get_mut(key) else {
                return;
            };
            let queue = &mut entry.queue;
            let first = loop {
                match queue.pop_front() {
                    Some(w) if w.tx.is_closed() => continue,
                    other => break other,
                }
            };
            let Some(first) = first else {
                entry.leaders -= 1;
                if entry.leaders == 0 {
                    table.remove(key);
                }
                return;
            };
            let mut others = Vec::new();
            while others.len() + 1 < self.max {
                match queue.pop_front() {
                    Some(w) if w.tx.is_closed() => {}
                    Some(w) => others.push(w),
                    None => break,
                }
            }
            let lead = Lead {
                batcher: self.clone(),
                key: key.clone(),
                own: first.req,
                others,
                done: false,
            };
            match first.tx.send(Msg::Lead(lead)) {
                Ok(()) => return,
                // Gave up just now: its batch goes back to the queue, and
                // the next waiter is asked.
                Err(Msg::Lead(mut lead)) => {
                    let others = lead.disarm();
                    for w in others.into_iter().rev() {
                        queue.push_front(w);
                    }
                }
                Err(Msg::Done(_)) => {}
            }
        }
    }
}

/// The lead of one batch: the leader's own request first, then `others`.
pub(crate) struct Lead<A> {
    batcher: Arc<Batcher<A>>,
    key: BatchKey,
    own: Request,
    others: Vec<Waiter<A>>,
    done: bool,
}

impl<A> Lead<A> {
    /// The leader's own request: the batch's first.
    pub(crate) fn own(&self) -> &Request {
        &self.own
    }

    /// The batch's other requests, in arrival order, leaving out (and
    /// forgetting) those whose caller has given up since the batch formed.
    pub(crate) fn others(&mut self) -> Vec<Request> {
        self.others.retain(|w| !w.tx.is_closed());
        self.others.iter().map(|w| w.req.clone()).collect()
    }

    fn disarm(&mut self) -> Vec<Waiter<A>> {
        self.done = true;
        std::mem::take(&mut self.others)
    }

    /// Delivers the answers of the batch's other requests (`others`, in
    /// order), hands the lead on, and ends this batch; returns `own`, the
    /// leader's answer.
    pub(crate) fn finish(mut self, own: A, others: impl IntoIterator<Item = A>) -> A {
        let waiters = self.disarm();
        // The next batch first, so it is on its way while these answers
        // are delivered.
        let batcher = self.batcher.clone();
        let mut table = batcher.shard(&self.key);
        batcher.hand_off(&mut table, &self.key);
        drop(table);
        for (w, a) in waiters.into_iter().zip(others) {
            // A waiter that gave up has no one to tell.
            let _ = w.tx.send(Msg::Done(a));
        }
        own
    }
}

impl<A> Drop for Lead<A> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Cancelled before its answers: requeue the batch's waiters at the
        // head and pass the lead on.
        let others = self.disarm();
        let batcher = self.batcher.clone();
        let mut table = batcher.shard(&self.key);
        if let Some(entry) = table.get_mut(&self.key) {
            for w in others.into_iter().rev() {
                entry.queue.push_front(w);
            }
        }
        batcher.hand_off(&mut table, &self.key);
    }
}
