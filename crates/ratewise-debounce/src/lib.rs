//! Debounce, event throttle and coalesce: turning a fire-hose of events into
//! the few actions that matter.
//!
//! ```
//! use std::time::Duration;
//! use ratewise_debounce::{DebounceConfig, DebounceCore, Timestamp};
//!
//! // The sans-IO core is told the time; a driver arms one timer at `deadline()`.
//! let ms = |n: u64| Timestamp::from_nanos(n * 1_000_000);
//! let mut search = DebounceCore::new(DebounceConfig::new(Duration::from_millis(300)));
//! for (t, typed) in [(0, "r"), (90, "ra"), (180, "rat")] {
//!     assert_eq!(search.call(ms(t), typed), None); // still typing
//! }
//! assert_eq!(search.deadline(), Some(ms(480)));
//! assert_eq!(search.on_timer(ms(480)), Some("rat")); // one query, the last text
//! ```
//!
//! | primitive | fires | sans-IO core |
//! |---|---|---|
//! | `Debouncer` | the **last** value, once `wait` of silence follows a burst (trailing, default), and/or the first value at once (leading); `max_wait` caps the delay | [`DebounceCore`] |
//! | `EventThrottle` | at most one value per `wait`, first and/or latest; **never two fires closer than `wait`** | [`EventThrottleCore`] |
//! | `Coalescer` | every value, batched per key: a batch closes `max_wait` after its first item (or after a quiet period, as an option), or at once at `max_batch` | [`CoalesceCore`] |
//!
//! # Why it is built this way
//!
//! Each primitive is a **state machine that is told the time** (the
//! `*Core` types, always compiled): inputs are "a call with a value at
//! `now`" and "the timer fired at `now`", outputs are "fire this value" and
//! "arm the timer for `deadline()`". The async handles (feature `tokio`) are
//! a thin driver that owns the one timer and runs the actions; stream
//! adapters (feature `stream`) reuse the same cores. So the semantics can be
//! table-tested and property-tested without a runtime, and the drivers can
//! be tested on tokio's paused clock to the exact virtual nanosecond.
//!
//! Semantics follow what users already know, with three decisions made
//! explicit:
//! * **leading debounce is silence-based** (lodash): calls during the quiet
//!   period are dropped and extend it. A minimum-interval gate is an
//!   `EventThrottle` with the trailing edge off.
//! * **the event throttle guarantees spacing** (RxJS 7): a trailing fire
//!   opens a new window, so a call just after it waits; lodash's throttle
//!   can fire twice in quick succession and this one cannot.
//! * **stop drains by default**: the pending value is delivered at once (it
//!   does not wait out the window); [`StopMode::Abort`] drops it. Stop takes a
//!   timeout, past which undelivered fires are handed back.
//!
//! Invariants the drivers keep:
//! * a value is taken out of the state machine *before* its action runs,
//!   so a panicking action loses nothing else and is never retried; panics
//!   are caught, counted, reported to an optional hook, and the primitive
//!   keeps working;
//! * actions of one primitive run one at a time, in decision order, on a
//!   worker task that exists only while something is pending (no task or
//!   timer is held by an idle primitive);
//! * no lock is held while an action runs, so the action may call, flush,
//!   cancel or stop its own primitive; `flush`/`stop` from inside the
//!   action do not wait (they would wait for themselves);
//! * only `tokio::time` is read, so paused-clock tests are exact.
//!
//! # Debounce, then throttle
//!
//! Wait for a burst to end, then send its last value — but never more than
//! one send per second, however often bursts end. Here the second burst's
//! value is superseded by the third while the throttle holds it back:
//!
//! ```
//! # #[cfg(feature = "tokio")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::{Arc, Mutex, PoisonError};
//! use std::time::Duration;
//! use ratewise_debounce::{DebounceConfig, Debouncer, EventThrottle, EventThrottleConfig};
//! use tokio::time::{sleep, Instant};
//!
//! let rt = tokio::runtime::Builder::new_current_thread()
//!     .enable_time()
//!     .start_paused(true)
//!     .build()?;
//! rt.block_on(async {
//!     let start = Instant::now();
//!     let sent = Arc::new(Mutex::new(Vec::new()));
//!     let log = Arc::clone(&sent);
//!     // Stage 2: at most one send per second.
//!     let throttle = EventThrottle::new(
//!         EventThrottleConfig::new(Duration::from_secs(1)),
//!         move |v: u32| {
//!             let log = Arc::clone(&log);
//!             async move {
//!                 let at = start.elapsed().as_millis();
//!                 log.lock().unwrap_or_else(PoisonError::into_inner).push((v, at));
//!             }
//!         },
//!     )?;
//!     // Stage 1: 100 ms of quiet ends a burst; pass its last value on.
//!     let next = throttle.clone();
//!     let debouncer = Debouncer::new(
//!         DebounceConfig::new(Duration::from_millis(100)),
//!         move |v: u32| {
//!             let _ = next.call(v); // only fails once the throttle is stopped
//!             async {}
//!         },
//!     )?;
//!     for burst in 0..3 {
//!         for i in 0..5 {
//!             debouncer.call(burst * 10 + i)?;
//!             sleep(Duration::from_millis(10)).await;
//!         }
//!         sleep(Duration::from_millis(200)).await;
//!     }
//!     sleep(Duration::from_secs(2)).await;
//!     // Burst ends at 40, 290, 540 ms; debounced at 140, 390, 640 ms.
//!     let sent = sent.lock().unwrap_or_else(PoisonError::into_inner).clone();
//!     assert_eq!(sent, vec![(4, 140), (24, 1140)]);
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })
//! # }
//! # #[cfg(not(feature = "tokio"))]
//! # fn main() {}
//! ```
//!
//! A `flush` or `stop` that the action reaches *through another task* it
//! awaits cannot be told apart from an outside caller and will wait for the
//! action that awaits it: call them from the action itself, or do not await
//! that task.
//!
//! # Features
//!
//! * `tokio` — the async handles [`Debouncer`], [`EventThrottle`] and
//!   [`Coalescer`], each owning one timer.
//! * `stream` — `Stream` adapters ([`stream`]); implies `tokio`.
//!
//! Without features the crate is the sans-IO cores alone.

#![warn(missing_docs)]
// docs.rs labels feature-gated items; `doc_cfg` is nightly-only.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod core;
#[cfg(feature = "tokio")]
mod driver;
#[cfg(feature = "stream")]
#[cfg_attr(docsrs, doc(cfg(feature = "stream")))]
pub mod stream;

pub use self::core::{
    Batch, CoalesceConfig, CoalesceCore, CoalesceWindow, DebounceConfig, DebounceCore,
    EventThrottleConfig, EventThrottleCore,
};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use self::driver::{Coalescer, Debouncer, EventThrottle};
/// The time the cores are told: nanoseconds since a clock's origin.
pub use ratewise::Timestamp;

/// A debounce primitive that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DebounceError {
    /// The async handles spawn their timer task on the runtime current at
    /// construction.
    #[error("no tokio runtime is running: create debouncers, throttles and coalescers inside a runtime (in async code, or after `Runtime::enter`)")]
    NoRuntime,
    /// A coalescer batch must hold at least one item.
    #[error("max_batch must be at least 1, got 0")]
    ZeroBatch,
}

/// A value offered after the primitive was stopped, handed back unused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this debouncer, throttle or coalescer has been stopped; the value was not accepted")]
pub struct Stopped<T>(pub T);

/// What `stop` does with a value that is still pending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StopMode {
    /// Deliver it at once (the trailing window is not waited out), then
    /// stop. The default.
    #[default]
    Drain,
    /// Drop it and stop.
    Abort,
}

/// How a `stop` that did not time out ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopOutcome {
    /// Every queued action has finished.
    Completed,
    /// Called from inside the primitive's own action: stopped, but not
    /// waited for (queued fires still run after the current action).
    NotAwaited,
}

/// A stop that did not finish in time.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StopError<T> {
    /// The timeout passed first. The fires that had not started are
    /// returned here and will not run; an action already running finishes
    /// on its own.
    #[error("stop timed out with {} fire(s) not delivered; they are returned in `undelivered`", undelivered.len())]
    TimedOut {
        /// The values (or batches) never handed to the action.
        undelivered: Vec<T>,
    },
}

/// What a `flush` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FlushOutcome {
    /// Nothing was pending (also in leading-only mode, or once stopped).
    Idle,
    /// The pending value(s) were delivered and their actions have finished
    /// (or panicked, which is reported through the panic hook).
    Delivered,
    /// Called from inside the primitive's own action: the delivery is queued
    /// to run right after the current action, without waiting.
    Scheduled,
}

/// An action that panicked, as reported to a panic hook.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActionPanic {
    /// The panic message, when the payload was a string.
    pub message: String,
}
