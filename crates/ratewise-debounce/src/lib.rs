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
//! | `Debouncer` | the **last** value once `wait` of silence follows a burst (trailing, default), and/or the first at once (leading); `max_wait` caps the delay | [`DebounceCore`] |
//! | `EventThrottle` | at most one value per `wait`, first and/or latest; **never two fires closer than `wait`** | [`EventThrottleCore`] |
//! | `Coalescer` | every value, batched per key: a batch closes `max_wait` after its first item (or after a quiet period), or at once at `max_batch` | [`CoalesceCore`] |
//!
//! Each core is a state machine told the time: inputs are "a call at `now`"
//! and "the timer fired at `now`", outputs are "fire this" and `deadline()`.
//! The async handles (feature `tokio`) own the one timer and run the actions
//! one at a time; the stream adapters (feature `stream`) reuse the cores.
//! Semantics follow lodash (leading debounce is silence-based) and RxJS 7
//! (the throttle guarantees spacing). `stop` delivers the pending value at
//! once by default ([`StopMode::Abort`] drops it). A value leaves the state
//! machine before its action runs, so a panicking action (caught, counted,
//! reported to a hook) loses nothing else; no lock is held while an action
//! runs, so it may call, flush or stop its own primitive — but a `flush` or
//! `stop` it awaits through another task waits for itself.
//!
//! # Features
//!
//! * `tokio` — async `Debouncer`, `EventThrottle`, `Coalescer` (one timer each).
//! * `stream` — `Stream` adapters (module `stream`); implies `tokio`.
//!   Without features the crate is the sans-IO cores alone.

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
