//! The sans-IO state machines behind the `Debouncer`, `EventThrottle` and
//! `Coalescer` drivers (feature `tokio`) and the stream adapters.
//!
//! Each machine is told the time. Its inputs are "a call with this value at
//! `now`" and "your timer fired at `now`"; its outputs are "fire this value
//! now" (a returned `Option`/batch) and "arm the timer for `t`"
//! ([`deadline`](DebounceCore::deadline) after every input). Nothing here
//! sleeps, spawns or reads a clock, so the machines run unchanged under a
//! tokio driver, a stream adapter, a simulator or a table test.
//!
//! A driver that may be late (its timer fired after a call at the same or a
//! later instant was already processed) calls `settle(now)` before `call`:
//! it completes whatever the timer owed, so the outcome never depends on
//! which of two simultaneous events a scheduler happened to run first.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use ratewise::time::Timestamp;

// ---------------------------------------------------------------------------
// Debounce
// ---------------------------------------------------------------------------

/// How a debouncer behaves. Built with [`DebounceConfig::new`] (trailing edge
/// only) and adjusted with the chained setters.
///
/// `leading` is *silence-based*, as in lodash: calls during the quiet period
/// are dropped and extend it, and the next leading fire needs `wait` of
/// silence. A minimum-interval gate is an
/// [`EventThrottleConfig`] with the trailing edge disabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebounceConfig {
    wait: Duration,
    leading: bool,
    trailing: bool,
    max_wait: Option<Duration>,
}

impl DebounceConfig {
    /// A trailing-edge debouncer: fire the last value once `wait` has passed
    /// since the last call. A zero `wait` defers to the driver's next tick
    /// (it never fires inside the call).
    pub const fn new(wait: Duration) -> Self {
        DebounceConfig {
            wait,
            leading: false,
            trailing: true,
            max_wait: None,
        }
    }

    /// Fire on the leading edge: the first call of a burst fires at once.
    pub const fn leading(mut self, on: bool) -> Self {
        self.leading = on;
        self
    }

    /// Fire on the trailing edge (on by default). With both edges on, the
    /// trailing fire happens only if there was more than one call in the
    /// burst.
    pub const fn trailing(mut self, on: bool) -> Self {
        self.trailing = on;
        self
    }

    /// Never hold a value back longer than `max_wait` under a continuous
    /// stream of calls. Values below `wait` are raised to `wait`.
    pub const fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The quiet period.
    pub const fn wait(&self) -> Duration {
        self.wait
    }

    /// The effective max-wait (already raised to at least `wait`), if set.
    pub fn effective_max_wait(&self) -> Option<Duration> {
        self.max_wait.map(|m| m.max(self.wait))
    }

    /// Whether the leading edge fires.
    pub const fn is_leading(&self) -> bool {
        self.leading
    }

    /// Whether the trailing edge fires.
    pub const fn is_trailing(&self) -> bool {
        self.trailing
    }
}

/// The debounce state machine (lodash's model, told the time).
///
/// Invariants:
/// * the held value is taken out *before* it is returned for firing, so a
///   panicking action cannot leave a value to be delivered twice;
/// * [`deadline`](Self::deadline) is `Some` exactly while lodash's single
///   timer would be armed, and it is the exact time of the next
///   decision: `min(last_call + wait, last_fire + max_wait)`;
/// * a `now` earlier than the last call (a clock going backwards) is an
///   edge, never a panic; durations saturate at zero.
///
/// ```
/// use std::time::Duration;
/// use ratewise_debounce::{DebounceConfig, DebounceCore};
/// use ratewise::Timestamp;
///
/// let ms = |n: u64| Timestamp::from_nanos(n * 1_000_000);
/// let mut d = DebounceCore::new(DebounceConfig::new(Duration::from_millis(100)));
/// assert_eq!(d.call(ms(0), "a"), None);
/// assert_eq!(d.call(ms(50), "b"), None);
/// assert_eq!(d.deadline(), Some(ms(150))); // arm the timer for 150 ms
/// assert_eq!(d.on_timer(ms(150)), Some("b")); // the last value wins
/// assert_eq!(d.deadline(), None);
/// ```
#[derive(Clone, Debug)]
pub struct DebounceCore<T> {
    wait: Duration,
    max_wait: Option<Duration>,
    leading: bool,
    trailing: bool,
    last_call: Option<Timestamp>,
    last_invoke: Timestamp,
    value: Option<T>,
    armed: bool,
}

impl<T> DebounceCore<T> {
    /// An idle machine.
    pub fn new(config: DebounceConfig) -> Self {
        DebounceCore {
            wait: config.wait,
            max_wait: config.effective_max_wait(),
            leading: config.leading,
            trailing: config.trailing,
            last_call: None,
            last_invoke: Timestamp::ZERO,
            value: None,
            armed: false,
        }
    }

    fn should_invoke(&self, now: Timestamp) -> bool {
        let Some(last_call) = self.last_call else {
            return true;
        };
        now < last_call
            || now - last_call >= self.wait
            || self.max_wait.is_some_and(|m| now - self.last_invoke >= m)
    }

    fn invoke(&mut self, now: Timestamp) -> Option<T> {
        self.last_invoke = now;
        self.value.take()
    }

    fn trailing_edge(&mut self, now: Timestamp) -> Option<T> {
        self.armed = false;
        if self.trailing && self.value.is_some() {
            return self.invoke(now);
        }
        self.value = None;
        None
    }

    /// A call with `value` at `now`. Returns the value to fire at once
    /// (a leading edge, or a max-wait fire reached by a late driver).
    pub fn call(&mut self, now: Timestamp, value: T) -> Option<T> {
        let invoking = self.should_invoke(now);
        self.value = Some(value);
        self.last_call = Some(now);
        if invoking {
            if !self.armed {
                // Leading edge: start the max-wait window even when the
                // leading edge does not fire.
                self.last_invoke = now;
                self.armed = true;
                return if self.leading { self.invoke(now) } else { None };
            }
            if self.max_wait.is_some() && (self.leading || self.trailing) {
                // The timer is late and max-wait is due: fire now and keep
                // the timer armed (lodash's "tight loop" branch).
                return self.invoke(now);
            }
        }
        self.armed = true;
        None
    }

    /// Completes what a timer due at or before `now` owed, for a driver that
    /// is about to process a call at `now`. With `wait == 0` a timer due
    /// exactly at `now` is left alone, so calls in the same tick coalesce.
    pub fn settle(&mut self, now: Timestamp) -> Option<T> {
        match self.deadline() {
            Some(d) if d < now || (d == now && !self.wait.is_zero()) => self.on_timer(d),
            _ => None,
        }
    }

    /// The timer fired at `now`. Returns the value to fire, if the trailing
    /// edge is due; otherwise [`deadline`](Self::deadline) says when to
    /// look again (an early wake-up is harmless).
    pub fn on_timer(&mut self, now: Timestamp) -> Option<T> {
        if self.armed && self.should_invoke(now) {
            self.trailing_edge(now)
        } else {
            None
        }
    }

    /// When the driver's timer must fire next, or `None` for no timer.
    pub fn deadline(&self) -> Option<Timestamp> {
        if !self.armed {
            return None;
        }
        let last_call = self.last_call?;
        let quiet = last_call + self.wait;
        Some(match self.max_wait {
            Some(m) => quiet.min(self.last_invoke + m),
            None => quiet,
        })
    }

    /// Runs the trailing edge now if one is scheduled, returning its value;
    /// afterwards no trailing fire follows. A no-op (returning `None`) when
    /// nothing is pending, including in leading-only mode.
    pub fn flush(&mut self, now: Timestamp) -> Option<T> {
        if self.is_pending() {
            self.trailing_edge(now)
        } else {
            None
        }
    }

    /// Drops the pending value and forgets all history: the next call
    /// behaves like the very first one.
    pub fn cancel(&mut self) {
        self.armed = false;
        self.last_call = None;
        self.last_invoke = Timestamp::ZERO;
        self.value = None;
    }

    /// True iff a trailing fire is scheduled: a value is held, the trailing
    /// edge is enabled and the timer is armed. (Unlike lodash's `pending()`,
    /// this is false in leading-only mode, where a flush would do nothing.)
    pub fn is_pending(&self) -> bool {
        self.armed && self.trailing && self.value.is_some()
    }
}

// ---------------------------------------------------------------------------
// Event throttle
// ---------------------------------------------------------------------------

/// How an event throttle behaves: [`EventThrottleConfig::new`] fires on both
/// edges; the setters turn either off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventThrottleConfig {
    wait: Duration,
    leading: bool,
    trailing: bool,
}

impl EventThrottleConfig {
    /// At most one action per `wait`, with leading and trailing edges. A zero
    /// `wait` lets every call through.
    pub const fn new(wait: Duration) -> Self {
        EventThrottleConfig {
            wait,
            leading: true,
            trailing: true,
        }
    }

    /// Fire the first call of a window at once (on by default).
    pub const fn leading(mut self, on: bool) -> Self {
        self.leading = on;
        self
    }

    /// Fire the latest value held back during a window when the window ends
    /// (on by default). Off, this is a minimum-interval gate.
    pub const fn trailing(mut self, on: bool) -> Self {
        self.trailing = on;
        self
    }

    /// The minimum spacing between two fires.
    pub const fn wait(&self) -> Duration {
        self.wait
    }
}

/// The event-throttle state machine, with RxJS 7 semantics: every fire,
/// leading or trailing, opens a window of `wait` during which nothing else
/// fires, so **two fires are never closer than `wait`** (lodash's throttle
/// can fire twice in a row; this one cannot).
///
/// Invariants: a window is open iff `window_end > now`; a value is held only
/// if the trailing edge is on; a held value implies an open window, and the
/// deadline is that window's end.
///
/// ```
/// use std::time::Duration;
/// use ratewise_debounce::{EventThrottleConfig, EventThrottleCore};
/// use ratewise::Timestamp;
///
/// let ms = |n: u64| Timestamp::from_nanos(n * 1_000_000);
/// let mut t = EventThrottleCore::new(EventThrottleConfig::new(Duration::from_millis(100)));
/// assert_eq!(t.call(ms(0), 1), Some(1)); // leading edge
/// assert_eq!(t.call(ms(10), 2), None);
/// assert_eq!(t.call(ms(20), 3), None);
/// assert_eq!(t.deadline(), Some(ms(100)));
/// assert_eq!(t.on_timer(ms(100)), Some(3)); // trailing, and a new window
/// assert_eq!(t.call(ms(150), 4), None); // held until 200, not fired at once
/// assert_eq!(t.deadline(), Some(ms(200)));
/// ```
#[derive(Clone, Debug)]
pub struct EventThrottleCore<T> {
    wait: Duration,
    leading: bool,
    trailing: bool,
    window_end: Option<Timestamp>,
    value: Option<T>,
}

impl<T> EventThrottleCore<T> {
    /// An idle throttle.
    pub fn new(config: EventThrottleConfig) -> Self {
        EventThrottleCore {
            wait: config.wait,
            leading: config.leading,
            trailing: config.trailing,
            window_end: None,
            value: None,
        }
    }

    /// Closes a window that ended at or before `now`, firing the held value
    /// (which opens the next window at `now`).
    fn expire(&mut self, now: Timestamp) -> Option<T> {
        match self.window_end {
            Some(end) if end <= now => {
                self.window_end = None;
                let v = self.value.take()?;
                self.window_end = Some(now + self.wait);
                Some(v)
            }
            _ => None,
        }
    }

    /// A call with `value` at `now`; returns the value to fire at once.
    pub fn call(&mut self, now: Timestamp, value: T) -> Option<T> {
        let late = self.expire(now);
        if self.window_end.is_some() {
            if self.trailing {
                self.value = Some(value);
            }
            return late;
        }
        if !self.leading && !self.trailing {
            return None;
        }
        self.window_end = Some(now + self.wait);
        if self.leading {
            Some(value)
        } else {
            self.value = Some(value);
            None
        }
    }

    /// Completes what a timer due at or before `now` owed.
    pub fn settle(&mut self, now: Timestamp) -> Option<T> {
        self.expire(now)
    }

    /// The timer fired at `now`; returns the trailing value if its window
    /// has ended.
    pub fn on_timer(&mut self, now: Timestamp) -> Option<T> {
        self.expire(now)
    }

    /// When the driver's timer must fire next: the end of the window, while a
    /// trailing value is held. An open window with nothing held needs no
    /// timer (the next call checks it).
    pub fn deadline(&self) -> Option<Timestamp> {
        self.value.as_ref().and(self.window_end)
    }

    /// Fires the held value now, opening a fresh window from `now`. A no-op
    /// when nothing is held.
    pub fn flush(&mut self, now: Timestamp) -> Option<T> {
        let v = self.value.take()?;
        self.window_end = Some(now + self.wait);
        Some(v)
    }

    /// Drops the held value and closes the window: the next call behaves
    /// like the first.
    pub fn cancel(&mut self) {
        self.window_end = None;
        self.value = None;
    }

    /// True iff a trailing fire is scheduled.
    pub fn is_pending(&self) -> bool {
        self.value.is_some()
    }
}

// ---------------------------------------------------------------------------
// Coalesce
// ---------------------------------------------------------------------------

/// When a key's batch becomes due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CoalesceWindow {
    /// Due `max_wait` after the batch's **first** item; later items do not
    /// extend it (Kafka's `linger.ms`, tokio's `chunks_timeout`). The
    /// default.
    FromFirst {
        /// The batch's lifetime.
        max_wait: Duration,
    },
    /// Due after `quiet` without a new item for the key, but never later
    /// than `max_wait` after its first item.
    QuietPeriod {
        /// The silence that closes a batch.
        quiet: Duration,
        /// The cap on a batch's lifetime.
        max_wait: Duration,
    },
}

/// How a coalescer batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoalesceConfig {
    window: CoalesceWindow,
    max_batch: u64,
}

impl CoalesceConfig {
    /// Batches of at most `max_batch` items, due `max_wait` after their first
    /// item. Fails if `max_batch` is zero.
    pub fn new(max_wait: Duration, max_batch: u64) -> Result<Self, super::DebounceError> {
        CoalesceConfig::with_window(CoalesceWindow::FromFirst { max_wait }, max_batch)
    }

    /// Batches of at most `max_batch` weight units with an explicit window.
    /// Fails if `max_batch` is zero.
    pub fn with_window(
        window: CoalesceWindow,
        max_batch: u64,
    ) -> Result<Self, super::DebounceError> {
        if max_batch == 0 {
            return Err(super::DebounceError::ZeroBatch);
        }
        Ok(CoalesceConfig { window, max_batch })
    }

    /// The window.
    pub const fn window(&self) -> CoalesceWindow {
        self.window
    }

    /// The hard cap on a batch (items, or weight units with
    /// [`CoalesceCore::push_weighted`]).
    pub const fn max_batch(&self) -> u64 {
        self.max_batch
    }
}

/// A closed batch: every item pushed for `key` since the previous batch, in
/// arrival order. Never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch<K, V> {
    /// The key the items were pushed under.
    pub key: K,
    /// The items, oldest first.
    pub items: Vec<V>,
    /// Their total weight (the item count unless pushed with weights).
    pub weight: u64,
}

#[derive(Clone, Debug)]
struct Open<V> {
    items: Vec<V>,
    weight: u64,
    opened: Timestamp,
    last: Timestamp,
    seq: u64,
}

/// The per-key batching state machine.
///
/// Invariants: an open batch is never empty and never heavier than
/// `max_batch` (an item that would overflow it closes it first; an item
/// that alone reaches the cap is a batch of its own, closed at once); items
/// keep arrival order; keys never affect one another's windows. Batches
/// closed together are reported oldest first.
///
/// ```
/// use std::time::Duration;
/// use ratewise_debounce::{CoalesceConfig, CoalesceCore};
/// use ratewise::Timestamp;
///
/// let ms = |n: u64| Timestamp::from_nanos(n * 1_000_000);
/// let mut c = CoalesceCore::new(CoalesceConfig::new(Duration::from_millis(100), 3)?);
/// let mut out = Vec::new();
/// c.push(ms(0), "k", 1, &mut out);
/// c.push(ms(10), "k", 2, &mut out);
/// c.push(ms(20), "k", 3, &mut out); // reaches the cap: closed at once
/// assert_eq!(out.pop().map(|b| b.items), Some(vec![1, 2, 3]));
/// c.push(ms(30), "k", 4, &mut out);
/// assert_eq!(c.deadline(), Some(ms(130))); // a fresh window
/// # Ok::<(), ratewise_debounce::DebounceError>(())
/// ```
#[derive(Clone, Debug)]
pub struct CoalesceCore<K, V> {
    config: CoalesceConfig,
    open: HashMap<K, Open<V>>,
    /// A lower bound on the earliest due time (never later than the truth).
    earliest: Option<Timestamp>,
    seq: u64,
    /// Scratch space for [`on_timer`](Self::on_timer): the batches due,
    /// sorted oldest first. Empty between calls; kept only so that its
    /// capacity is reused and a timer fire does not allocate.
    due_scratch: Vec<(Timestamp, u64, K)>,
}

impl<K: Hash + Eq + Clone, V> CoalesceCore<K, V> {
    /// No open batches.
    pub fn new(config: CoalesceConfig) -> Self {
        CoalesceCore {
            config,
            open: HashMap::new(),
            earliest: None,
            seq: 0,
            due_scratch: Vec::new(),
        }
    }

    fn due(&self, b: &Open<V>) -> Timestamp {
        match self.config.window {
            CoalesceWindow::FromFirst { max_wait } => b.opened + max_wait,
            CoalesceWindow::QuietPeriod { quiet, max_wait } => {
                (b.last + quiet).min(b.opened + max_wait)
            }
        }
    }

    /// Removes `key`'s open batch (it reached the cap) and reports it.
    fn close_full(&mut self, key: &K, out: &mut impl Extend<Batch<K, V>>) {
        if let Some((k, b)) = self.open.remove_entry(key) {
            out.extend(Some(Self::close(k, b)));
        }
        if self.open.is_empty() {
            self.earliest = None;
        }
    }

    fn close(key: K, b: Open<V>) -> Batch<K, V> {
        Batch {
            key,
            items: b.items,
            weight: b.weight,
        }
    }

    /// Pushes `value` (weight 1) for `key` at `now`; closed batches are
    /// appended to `out`.
    pub fn push(&mut self, now: Timestamp, key: K, value: V, out: &mut impl Extend<Batch<K, V>>) {
        self.push_weighted(now, key, value, 1, out);
    }

    /// Pushes `value` weighing `weight` (0 counts as 1) for `key` at `now`.
    /// An item that would take the batch over `max_batch` closes the batch
    /// first; an item that alone reaches `max_batch` is closed at once as a
    /// batch of its own.
    pub fn push_weighted(
        &mut self,
        now: Timestamp,
        key: K,
        value: V,
        weight: u64,
        out: &mut impl Extend<Batch<K, V>>,
    ) {
        let weight = weight.max(1);
        let cap = self.config.max_batch;
        if let Some(b) = self.open.get_mut(&key) {
            if b.weight.saturating_add(weight) <= cap {
                b.items.push(value);
                b.weight += weight;
                b.last = now;
                if b.weight >= cap {
                    self.close_full(&key, out);
                }
                return;
            }
            // The item would overflow the batch: close it and open a new one.
            self.close_full(&key, out);
        }
        if weight >= cap {
            out.extend(Some(Batch {
                key,
                items: vec![value],
                weight,
            }));
            return;
        }
        let mut items = Vec::with_capacity(usize::try_from(cap.min(16)).unwrap_or(16));
        items.push(value);
        self.seq += 1;
        let b = Open {
            items,
            weight,
            opened: now,
            last: now,
            seq: self.seq,
        };
        let due = self.due(&b);
        self.earliest = match self.earliest {
            Some(e) if !self.open.is_empty() => Some(e.min(due)),
            _ => Some(due),
        };
        self.open.insert(key, b);
    }

    /// Closes every batch due at or before `now` (a late driver's catch-up
    /// before a push at `now`).
    pub fn settle(&mut self, now: Timestamp, out: &mut impl Extend<Batch<K, V>>) {
        if self.earliest.is_some_and(|e| e <= now) {
            self.on_timer(now, out);
        }
    }

    /// The timer fired at `now`: closes every batch due by then, oldest
    /// first, and recomputes the deadline.
    pub fn on_timer(&mut self, now: Timestamp, out: &mut impl Extend<Batch<K, V>>) {
        let mut due = std::mem::take(&mut self.due_scratch);
        let mut earliest: Option<Timestamp> = None;
        for (k, b) in &self.open {
            let d = self.due(b);
            if d <= now {
                due.push((d, b.seq, k.clone()));
            } else {
                earliest = Some(earliest.map_or(d, |e| e.min(d)));
            }
        }
        self.earliest = earliest;
        // `seq` is unique, so the order is total and an unstable sort is
        // exact (and, unlike the stable one, never allocates).
        due.sort_unstable_by_key(|(d, s, _)| (*d, *s));
        for (_, _, k) in due.drain(..) {
            if let Some((k, b)) = self.open.remove_entry(&k) {
                out.extend(Some(Self::close(k, b)));
            }
        }
        self.due_scratch = due;
    }

    /// When the driver's timer must fire next. It may be early (after a
    /// batch closed on its cap, or a quiet-period extension), never late.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.earliest
    }

    /// Closes every open batch now, oldest first (flush and drain).
    pub fn drain(&mut self, out: &mut impl Extend<Batch<K, V>>) {
        let mut all: Vec<(K, Open<V>)> = self.open.drain().collect();
        all.sort_by_key(|(_, b)| b.seq);
        out.extend(all.into_iter().map(|(k, b)| Self::close(k, b)));
        self.earliest = None;
    }

    /// Drops every open batch.
    pub fn clear(&mut self) {
        self.open.clear();
        self.earliest = None;
    }

    /// The number of keys with an open batch.
    pub fn open_batches(&self) -> usize {
        self.open.len()
    }

    /// True iff some batch is waiting for its window.
    pub fn is_pending(&self) -> bool {
        !self.open.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn duration_to_nanos_saturating(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    /// A closed batch of `(push index, push time, weight)` items.
    type TestBatch = Batch<u8, (usize, u64, u64)>;

    fn ts(n: u64) -> Timestamp {
        Timestamp::from_nanos(n)
    }

    fn ns(n: u64) -> Duration {
        Duration::from_nanos(n)
    }

    /// Plays `calls` (sorted `(time, value)`) through a debounce core with a
    /// punctual timer; returns the fires as `(time, value)`.
    fn play_debounce(config: DebounceConfig, calls: &[(u64, usize)]) -> Vec<(u64, usize)> {
        strip(play_debounce_fed(config, calls))
    }

    fn strip(fires: Vec<(u64, usize, Option<usize>)>) -> Vec<(u64, usize)> {
        fires.into_iter().map(|(t, v, _)| (t, v)).collect()
    }

    /// As [`play_debounce`], also giving with each fire the last call fed to
    /// the machine before it fired.
    fn play_debounce_fed(
        config: DebounceConfig,
        calls: &[(u64, usize)],
    ) -> Vec<(u64, usize, Option<usize>)> {
        let mut core = DebounceCore::new(config);
        let mut fires = Vec::new();
        let mut fed = None;
        let due = |d: Timestamp, t: u64| {
            d.as_nanos() < t || (d.as_nanos() == t && !config.wait().is_zero())
        };
        for &(t, v) in calls {
            let mut guard = 0;
            while let Some(d) = core.deadline().filter(|d| due(*d, t)) {
                fires.extend(core.on_timer(d).map(|x| (d.as_nanos(), x, fed)));
                guard += 1;
                assert!(guard < 10, "timer did not make progress");
            }
            fed = Some(v);
            fires.extend(core.call(ts(t), v).map(|x| (t, x, fed)));
        }
        let mut guard = 0;
        while let Some(d) = core.deadline() {
            fires.extend(core.on_timer(d).map(|x| (d.as_nanos(), x, fed)));
            guard += 1;
            assert!(guard < 10, "timer did not make progress");
        }
        fires
    }

    fn play_throttle(
        config: EventThrottleConfig,
        calls: &[(u64, usize)],
    ) -> Vec<(u64, usize, Option<usize>)> {
        let mut core = EventThrottleCore::new(config);
        let mut fires = Vec::new();
        let mut fed = None;
        for &(t, v) in calls {
            // A timer due at `t` fires before the call at `t`, as the
            // driver's `settle` makes it.
            while let Some(d) = core.deadline().filter(|d| d.as_nanos() <= t) {
                fires.extend(core.on_timer(d).map(|x| (d.as_nanos(), x, fed)));
            }
            fed = Some(v);
            fires.extend(core.call(ts(t), v).map(|x| (t, x, fed)));
        }
        while let Some(d) = core.deadline() {
            fires.extend(core.on_timer(d).map(|x| (d.as_nanos(), x, fed)));
        }
        fires
    }

    /// Sorted call times from gaps; the value of call `i` is `i`.
    fn calls_from(gaps: &[u64]) -> Vec<(u64, usize)> {
        let mut t = 0;
        gaps.iter()
            .enumerate()
            .map(|(i, g)| {
                t += g;
                (t, i)
            })
            .collect()
    }

    #[test]
    fn leading_debounce_is_silence_based() {
        let cfg = DebounceConfig::new(ns(100)).leading(true).trailing(false);
        let fires = play_debounce(cfg, &[(0, 0), (50, 1), (120, 2), (260, 3)]);
        assert_eq!(fires, vec![(0, 0), (260, 3)]);
    }

    #[test]
    fn max_wait_is_clamped_up_to_wait() {
        let cfg = DebounceConfig::new(ns(100)).max_wait(ns(10));
        assert_eq!(cfg.effective_max_wait(), Some(ns(100)));
        assert_eq!(DebounceConfig::new(ns(5)).effective_max_wait(), None);
    }

    #[test]
    fn coalescer_rejects_zero_batch_and_never_oversizes() {
        assert_eq!(
            CoalesceConfig::new(ns(10), 0),
            Err(super::super::DebounceError::ZeroBatch)
        );
        let mut c = CoalesceCore::new(CoalesceConfig::new(ns(100), 5).expect("valid"));
        let mut out = Vec::new();
        c.push_weighted(ts(0), 'a', 1, 3, &mut out);
        c.push_weighted(ts(1), 'a', 2, 3, &mut out); // 6 > 5: closes [1] first
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].items, vec![1]);
        c.push_weighted(ts(2), 'a', 3, 0, &mut out); // zero weight counts as 1
        c.drain(&mut out);
        assert_eq!(out[1].items, vec![2, 3]);
        assert_eq!(out[1].weight, 4);
        assert!(!c.is_pending());
    }

    #[test]
    fn quiet_period_is_capped_by_max_wait() {
        let window = CoalesceWindow::QuietPeriod {
            quiet: ns(10),
            max_wait: ns(25),
        };
        let mut c = CoalesceCore::new(CoalesceConfig::with_window(window, 100).expect("valid"));
        let mut out = Vec::new();
        for t in [0, 8, 16, 24] {
            c.settle(ts(t), &mut out);
            c.push(ts(t), 'k', t, &mut out);
        }
        c.settle(ts(25), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].items, vec![0, 8, 16, 24]);
        assert_eq!(c.open_batches(), 0);
    }

    proptest! {

        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Trailing-only, no max-wait: exactly one fire per burst (calls
        /// closer than `wait`), with the burst's last value, at last + wait.
        #[test]
        fn trailing_debounce_matches_the_burst_model(
            wait in 0u64..60,
            gaps in proptest::collection::vec(0u64..100, 1..60),
        ) {
            let calls = calls_from(&gaps);
            let fires = play_debounce(DebounceConfig::new(ns(wait)), &calls);
            let mut model = Vec::new();
            for (i, &(t, v)) in calls.iter().enumerate() {
                let next = calls.get(i + 1).map(|c| c.0);
                let burst_ends = match next {
                    None => true,
                    Some(n) if wait == 0 => n > t,
                    Some(n) => n - t >= wait,
                };
                if burst_ends {
                    model.push((t + wait, v));
                }
            }
            prop_assert_eq!(fires, model);
        }

        /// Any edges and max-wait: last-value semantics, no duplicates, the
        /// final value delivered when trailing, max-wait honoured, and with
        /// the leading edge off two fires are never closer than `wait`.
        #[test]
        fn debounce_invariants(
            wait in 1u64..60,
            max_wait in proptest::option::of(0u64..150),
            leading in any::<bool>(),
            trailing in any::<bool>(),
            gaps in proptest::collection::vec(0u64..80, 1..80),
        ) {
            let calls = calls_from(&gaps);
            let mut cfg = DebounceConfig::new(ns(wait)).leading(leading).trailing(trailing);
            if let Some(m) = max_wait {
                cfg = cfg.max_wait(ns(m));
            }
            let fed = play_debounce_fed(cfg, &calls);
            // A fire always carries the latest value fed to the machine.
            for &(_, v, last) in &fed {
                prop_assert_eq!(Some(v), last, "a fire did not carry the latest value");
            }
            let fires = strip(fed);
            prop_assert!(fires.len() <= calls.len());
            if !leading && !trailing {
                prop_assert!(fires.is_empty());
            }
            for w in fires.windows(2) {
                prop_assert!(w[0].1 < w[1].1, "a value fired twice or out of order");
                if !leading {
                    prop_assert!(w[1].0 - w[0].0 >= wait, "fires closer than wait");
                }
            }
            if trailing {
                prop_assert_eq!(fires.last().map(|f| f.1), Some(calls.len() - 1));
                if let Some(m) = cfg.effective_max_wait() {
                    let m = duration_to_nanos_saturating(m);
                    for &(t, v) in &calls {
                        prop_assert!(
                            fires.iter().any(|&(ft, fv)| fv >= v && ft <= t + m),
                            "value {} held longer than max_wait", v
                        );
                    }
                }
            }
        }

        /// The event throttle: never two fires closer than `wait`, each fire
        /// the latest value, the final value delivered when trailing.
        #[test]
        fn throttle_spacing_and_last_value(
            wait in 0u64..60,
            leading in any::<bool>(),
            trailing in any::<bool>(),
            gaps in proptest::collection::vec(0u64..80, 1..80),
        ) {
            let calls = calls_from(&gaps);
            let cfg = EventThrottleConfig::new(ns(wait)).leading(leading).trailing(trailing);
            let fed = play_throttle(cfg, &calls);
            for &(_, v, last) in &fed {
                prop_assert_eq!(Some(v), last, "a fire did not carry the latest value");
            }
            let fires = strip(fed);
            if !leading && !trailing {
                prop_assert!(fires.is_empty());
            }
            for w in fires.windows(2) {
                prop_assert!(w[1].0 - w[0].0 >= wait, "fires closer than wait: {:?}", w);
                prop_assert!(w[0].1 < w[1].1);
            }
            if trailing {
                prop_assert_eq!(fires.last().map(|f| f.1), Some(calls.len() - 1));
            }
        }

        /// The coalescer: every item exactly once, in order per key, in
        /// batches that are never empty, never over the cap (unless a single
        /// heavy item), and never older than the window.
        #[test]
        fn coalescer_batches_are_complete_ordered_and_bounded(
            cap in 1u64..8,
            max_wait in 1u64..100,
            quiet in proptest::option::of(1u64..50),
            pushes in proptest::collection::vec((0u64..40, 0u8..3, 1u64..5), 1..100),
        ) {
            let window = match quiet {
                None => CoalesceWindow::FromFirst { max_wait: ns(max_wait) },
                Some(q) => CoalesceWindow::QuietPeriod { quiet: ns(q), max_wait: ns(max_wait) },
            };
            let mut core = CoalesceCore::new(CoalesceConfig::with_window(window, cap).expect("valid"));
            let mut out: Vec<(u64, TestBatch)> = Vec::new();
            let mut t = 0;
            let mut buf = Vec::new();
            for (i, &(gap, key, weight)) in pushes.iter().enumerate() {
                t += gap;
                while let Some(d) = core.deadline().filter(|d| d.as_nanos() < t) {
                    core.on_timer(d, &mut buf);
                    out.extend(buf.drain(..).map(|b| (d.as_nanos(), b)));
                }
                core.push_weighted(ts(t), key, (i, t, weight), weight, &mut buf);
                out.extend(buf.drain(..).map(|b| (t, b)));
            }
            while let Some(d) = core.deadline() {
                core.on_timer(d, &mut buf);
                out.extend(buf.drain(..).map(|b| (d.as_nanos(), b)));
            }
            let mut seen = Vec::new();
            for (closed, b) in &out {
                prop_assert!(!b.items.is_empty());
                let w: u64 = b.items.iter().map(|it| it.2).sum();
                prop_assert_eq!(w, b.weight);
                prop_assert!(w <= cap || b.items.len() == 1, "oversized batch");
                prop_assert!(b.items.iter().all(|it| pushes[it.0].1 == b.key));
                let first = b.items[0].1;
                prop_assert!(*closed <= first + max_wait, "batch outlived its window");
                for w in b.items.windows(2) {
                    prop_assert!(w[0].0 < w[1].0);
                }
                seen.extend(b.items.iter().map(|it| it.0));
            }
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..pushes.len()).collect::<Vec<_>>());
            // Per key, batches come out in arrival order.
            for key in 0u8..3 {
                let order: Vec<usize> = out
                    .iter()
                    .filter(|(_, b)| b.key == key)
                    .flat_map(|(_, b)| b.items.iter().map(|it| it.0))
                    .collect();
                prop_assert!(order.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
