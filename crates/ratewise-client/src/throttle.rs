//! [`Throttle`]: the client strategies composed for real use, shared by many
//! tasks.
//!
//! Per partition (per host, credential, table, …) a throttle holds:
//!
//! 1. a **pacer** — a core [`Gcra`](ratewise::Gcra) whose rate is
//!    `min(controller, policy rate, hint cap)`: the controller is
//!    [`Adaptation`] (fixed, AIMD, CUBIC or the default adaptive one), the
//!    policy rate is [`POLICY_HEADROOM`] × an IETF `RateLimit-Policy`'s
//!    `q / w` (once its quota has run out: a count of none left, a
//!    refusal, or no count at all), and the hint cap ([`HintCap`]) comes from `RateLimit-*`
//!    headers. Where the headers have shown their reset ends a window,
//!    quota left sets a floor: the pace that spends it by the reset (unless
//!    a refusal came while the count said quota was left), and the cuts
//!    made by the refusals that showed the window are undone once it comes
//!    back whole. A refusal while the hint cap holds the pace below the
//!    controller's cuts from the cap. Every attempt, retries included,
//!    takes a slot;
//! 2. a **pause** — a throttled response stops the whole partition until the
//!    server's `Retry-After` (capped, jittered) or the backoff delay; a
//!    whole-second `Retry-After` pauses a fast partition only two intervals
//!    at its admitted rate. A quota that stays **closed** (bare refusals, an
//!    attempt sent after the first refusal refused too, no success since:
//!    a spent window, a full log) is probed by one send at a time, each
//!    waiting for the previous one's answer; a refused probe pauses the
//!    partition for a gap that doubles with each refused probe (at most
//!    [`CLOSED_PROBE_GAP_MAX`]) and moves the calls queued behind it past
//!    that pause; once closed for
//!    [`CLOSED_PAUSE_AFTER`] the pause grows to half the time it has been
//!    closed (at most [`CLOSED_PAUSE_MAX`]), and the controller is told
//!    ([`RateController::note_closed_quota`]);
//! 3. a per-call **backoff** and attempt limit, an optional deadline, an
//!    optional **retry budget** and an optional **SRE adaptive throttle**.
//!
//! It is sans-IO: [`Throttle::acquire_at`], [`Throttle::try_acquire_at`],
//! [`Throttle::recheck_at`] and [`Throttle::record_at`] take `now`, and a
//! `Throttle` holds no runtime state: the async handle `AsyncThrottle`
//! (feature `tokio`) owns the clock and the start gates and loops over them. A cut or a pause
//! while calls hold future slots re-plans the partition, and each waiting
//! call takes a new slot ([`Throttle::recheck_at`]). `Throttle` is a cheap
//! `Clone`; no lock is held across an `.await`, so a cancelled caller leaves
//! the state consistent.
//!
//! Invariants:
//! * A header never raises the rate above the controller's (a hint cap in
//!   force is only ever lowered, and goes early only once the reset it
//!   was read from shows a window's end, [`HintCap::observe`]), except to spend a
//!   detected window's remaining quota by its reset, which never asks for
//!   more than the window holds.
//! * A `Retry-After` never pauses longer than `max_retry_after` and never
//!   grants a retry the backoff's `max_retries` refuses.
//! * `attempts ≥ successes + throttled`; every counter only grows.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use crate::JitterRng;
use rand::Rng;

use super::adaptive::{Adaptive, AdaptiveConfig, RateMeter};
use super::aimd::{Aimd, AimdConfig};
use super::backoff::{call_end, honouring_retry_after, Backoff, BackoffConfig};
use super::budget::{RetryBudget, RetryBudgetConfig};
use super::config::{at_least_one, within, ConfigError};
use super::cubic::{Cubic, CubicConfig};
use super::hints::{HintCap, ResetMeaning};
use super::pacer::{Pacer, PacerSpec, RateController};
use super::sre::{SreConfig, SreThrottler};
use super::{Next, Outcome, ServerHints, Signal};
use crate::config::duration_to_nanos_saturating;
use ratewise::time::Timestamp;

/// The share of a `RateLimit-Policy`'s stated rate (`q / w`) a partition
/// paces at: arrivals jitter on the network and clocks differ, so a client
/// pacing at exactly the limit finds the server's bucket empty and some of
/// its requests early.
pub const POLICY_HEADROOM: f64 = 0.95;

/// The fewest successes over the last one to two seconds for a partition's
/// admitted rate to shorten the pause after a `Retry-After` of a second or
/// less (see the module docs).
const SHORT_PAUSE_MIN_ADMITTED: u32 = 5;

/// How many intervals at the admitted rate such a shortened pause lasts.
const SHORT_PAUSE_INTERVALS: f64 = 2.0;

/// How far the pace must rise above the one the waiting calls' slots were
/// handed out at before they take new slots.
const REPLAN_ON_RISE: f64 = 2.0;

/// How a partition's pacing rate adapts.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Adaptation {
    /// No proactive pacing (hints may still pace).
    None,
    /// A fixed rate, requests per second.
    Fixed(f64),
    /// Additive increase, multiplicative decrease (reference 001).
    Aimd(AimdConfig),
    /// CUBIC as in the AWS SDKs' adaptive mode; paces only after the first
    /// throttle.
    Cubic(CubicConfig),
    /// The default: AIMD that paces only after the first throttle, holds its
    /// rate while `RateLimit-Remaining` says the quota is exhausted and
    /// rises by a scale-free step ([`Adaptive`]).
    Adaptive(AdaptiveConfig),
}

/// Everything a [`Throttle`] is made of.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottleConfig {
    /// Pacing controller (default: [`Adaptation::Adaptive`] with its
    /// defaults: no pacing until the first throttle, then AIMD gated by
    /// `RateLimit-Remaining`, one cut per second at most).
    pub adaptation: Adaptation,
    /// Backoff between attempts of one call (default: 100 ms × 2ⁿ, full
    /// jitter, capped at 2 s, no retry limit of its own: the pause and the
    /// pacer space retries, the backoff only keeps one call from spinning). Its `max_retries`,
    /// if set, also limits retries, and a `Retry-After` never lifts that
    /// limit: the server's word only sets how long to wait before a retry the
    /// backoff allows.
    pub backoff: BackoffConfig,
    /// The pacer's burst (default `Some(1)`: strictly even pacing, so a
    /// send that went out late never makes the next one early). A server
    /// with no burst of its own (nginx's `limit_req` without `burst`, a
    /// sliding log) refuses a request that follows the previous one by
    /// less than its interval, whatever the average; a pacer that caught up
    /// after a late send drew exactly those refusals. `None` for about one
    /// second of rate, `max(1, floor(rate))`, as the AWS adaptive limiter.
    pub burst: Option<u64>,
    /// Attempts per call, the first included (default `u32::MAX`: a call is
    /// never given up while the server is merely throttling; set a limit or
    /// a [`deadline`](ThrottleConfig::deadline) to bound it).
    pub max_attempts: u32,
    /// Longest a call may take, waits included (default none).
    pub deadline: Option<Duration>,
    /// The longest `Retry-After` honoured (default 60 s).
    pub max_retry_after: Duration,
    /// Jitter fraction added to a partition pause (default 0.1).
    pub pause_jitter: f64,
    /// Retry budget (default: AWS standard, 500 tokens). It pays for
    /// retries after server errors, timeouts and failures only: a throttled
    /// attempt's retry goes through the pause and the pacer, so it adds no
    /// load beyond the pace the server allows, and never pays the budget.
    pub budget: Option<RetryBudgetConfig>,
    /// SRE client-side adaptive throttling (default off).
    pub sre: Option<SreConfig>,
    /// Whether the server's hints pace the partition (default on): a
    /// `RateLimit-Policy`'s `q / w`, and `RateLimit-Remaining` with its reset
    /// (see the [module docs](self)).
    pub use_hints: bool,
    /// What the server's reset header means (default: [`ResetMeaning::Auto`],
    /// told apart from what the server's headers do).
    pub hint_reset: ResetMeaning,
    /// Seed for every random draw (jitter, SRE coin flips).
    pub seed: u64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            adaptation: Adaptation::Adaptive(AdaptiveConfig::default()),
            backoff: BackoffConfig::exponential(Duration::from_millis(100), 2.0)
                .with_max_delay(Duration::from_secs(2)),
            burst: Some(1),
            max_attempts: u32::MAX,
            deadline: None,
            max_retry_after: Duration::from_secs(60),
            pause_jitter: 0.1,
            budget: Some(RetryBudgetConfig::default()),
            sre: None,
            use_hints: true,
            hint_reset: ResetMeaning::Auto,
            seed: 0,
        }
    }
}

/// Why a call stopped without success.
///
/// Each reason is either the *server's* refusal or the *client's*
/// ([`StopReason::is_client_side`]): a stop is client-side when the client
/// declined to send an attempt the server never saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The attempt limit (or the backoff's retry limit) was reached: every
    /// allowed attempt was sent and refused. Server-side.
    MaxAttempts,
    /// The next attempt could not start before the call's deadline, so it
    /// was not sent. Client-side.
    Deadline,
    /// The retry budget could not pay for another retry, so it was not sent
    /// (the AWS retry quota: the client protecting a struggling service).
    /// Client-side.
    BudgetExhausted,
    /// The SRE throttle rejected the call locally. Client-side.
    RejectedLocally,
    /// The server asked not to retry ([`ServerHints::no_retry`], e.g. a
    /// negative gRPC pushback). Server-side.
    ///
    /// [`ServerHints::no_retry`]: super::ServerHints::no_retry
    RetryForbidden,
}

impl StopReason {
    /// `true` when the client itself refused to send the next attempt
    /// ([`Deadline`](StopReason::Deadline),
    /// [`BudgetExhausted`](StopReason::BudgetExhausted),
    /// [`RejectedLocally`](StopReason::RejectedLocally)); `false` when the
    /// server's refusals used up every attempt allowed
    /// ([`MaxAttempts`](StopReason::MaxAttempts)) or the server forbade a
    /// retry ([`RetryForbidden`](StopReason::RetryForbidden)).
    pub const fn is_client_side(self) -> bool {
        match self {
            StopReason::MaxAttempts | StopReason::RetryForbidden => false,
            StopReason::Deadline | StopReason::BudgetExhausted | StopReason::RejectedLocally => {
                true
            }
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::MaxAttempts => "the attempt limit was reached",
            StopReason::Deadline => "the call's deadline would pass before the next attempt",
            StopReason::BudgetExhausted => "the retry budget is exhausted",
            StopReason::RejectedLocally => {
                "rejected locally: the backend has been refusing most requests"
            }
            StopReason::RetryForbidden => "the server asked not to retry",
        })
    }
}

/// What [`Throttle::record_at`] says to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The call is over; hand the response to the caller.
    Done,
    /// Attempt again, not before this long from now (then acquire a slot).
    Retry(Duration),
    /// Stop, reporting the last response as a failure.
    GiveUp(StopReason),
}

/// The per-call state: attempts, backoff, budget cost, start time.
#[derive(Debug)]
pub struct Call {
    started: Timestamp,
    attempts: u32,
    backoff: Backoff,
    last_cost: Option<u32>,
    /// When the latest attempt was due to be sent.
    sent_at: Timestamp,
    /// Whether the latest attempt went through a pacer in force.
    paced: bool,
    /// The partition's schedule its latest slot was taken from
    /// ([`Throttle::recheck_at`]).
    plan: u64,
}

impl Call {
    /// Attempts made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    fn deadline(&self, deadline: Option<Duration>) -> Option<Timestamp> {
        deadline.map(|d| self.started.saturating_add(d))
    }
}

/// A throttle's counters, as a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThrottleMetrics {
    /// Attempts sent (retries included).
    pub attempts: u64,
    /// Successful attempts.
    pub successes: u64,
    /// Throttled attempts.
    pub throttled: u64,
    /// Retries decided.
    pub retries: u64,
    /// Calls that gave up (any [`StopReason`]).
    pub gave_up: u64,
    /// Calls rejected locally (SRE).
    pub rejected_locally: u64,
    /// Sum of the waits handed out before attempts.
    pub total_sleep: Duration,
    /// The longest such wait.
    pub max_sleep: Duration,
    /// The latest such wait.
    pub current_delay: Duration,
    /// The latest pacing rate set in any partition, if pacing.
    pub current_rate: Option<f64>,
}

#[derive(Default, Debug)]
struct Counters {
    attempts: AtomicU64,
    successes: AtomicU64,
    throttled: AtomicU64,
    retries: AtomicU64,
    gave_up: AtomicU64,
    rejected_locally: AtomicU64,
    total_sleep_ns: AtomicU64,
    max_sleep_ns: AtomicU64,
    current_delay_ns: AtomicU64,
    /// `f64::to_bits` of the latest rate; NaN bits mean "not pacing".
    current_rate_bits: AtomicU64,
}

impl Counters {
    fn note_wait(&self, d: Duration) {
        let ns = duration_to_nanos_saturating(d);
        self.total_sleep_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_sleep_ns.fetch_max(ns, Ordering::Relaxed);
        self.current_delay_ns.store(ns, Ordering::Relaxed);
    }
}

struct PartitionState {
    controller: Option<Controller>,
    hints: HintCap,
    /// The partition's pause: a refusal's (backoff, `Retry-After`, closed
    /// quota) or a window's end from the headers.
    paused_until: Timestamp,
    /// While probing a closed quota, when the latest lone probe's answer
    /// is due: the next send waits for it ([`lone_probe`]). Apart from
    /// `paused_until`, so that a refused probe voids the chain of slots
    /// queued behind it without touching a pause the server asked for.
    probe_until: Timestamp,
    budget: Option<RetryBudget>,
    sre: Option<SreThrottler>,
    rng: JitterRng,
    /// Whether the pacer is in force (a controller or hint rate exists).
    pacing: bool,
    /// The sustained rate the server's `RateLimit-Policy` states, with the
    /// headroom taken off; the pace never exceeds it.
    policy_rate: Option<f64>,
    /// Whether the policy's rate is in force: from the first response
    /// that said its quota was spent (or refused, or gave no count).
    policy_engaged: bool,
    /// When pacing began or the rate was last cut: a throttle answering an
    /// attempt sent before then says nothing about the current rate.
    cut_at: Timestamp,
    /// Whether any attempt of this partition has been answered.
    answered: bool,
    /// Successes counted per second: the rate the server admitted lately.
    admitted: RateMeter,
    /// The pacer's schedule: bumped whenever a cut or a pause re-plans it
    /// ([`Pacer::restart_at`]), so a call holding a slot of an older one
    /// takes a new slot before it sends ([`Throttle::recheck_at`]).
    plan: u64,
    /// The pacing rate the current schedule's slots were handed out at
    /// (set when pacing begins and by every re-plan, [`replan`]).
    plan_rate: f64,
    /// When the latest shortened pause ended, until an attempt sent after
    /// it succeeds: a refusal of such an attempt says the short pause was
    /// too short, and the next pause honours the whole `Retry-After`.
    short_pause_end: Option<Timestamp>,
    /// When the first bare refusal (no `Retry-After`) since the latest
    /// success was answered: the quota has looked closed since then.
    closed_since: Option<Timestamp>,
    /// The latest answer's round trip (from its slot to its answer).
    round_trip: Duration,
    /// Whether an attempt sent after the first bare refusal was refused
    /// too: the quota is closed, not merely passed a moment too fast, and
    /// sends go as lone probes ([`lone_probe`]) until one succeeds.
    probing: bool,
    /// Lone probes refused since the latest success ([`probe_gap`]).
    closed_probes: u32,
    /// A refusal came while its remaining count said quota was left: the
    /// count over-states (or counts another limit), and sets no floor
    /// ([`window_floor`]).
    count_overstated: bool,
    /// The controller as it was before the refusals that showed the reset
    /// to be a window's end ([`WindowUndo`]).
    undo: WindowUndo,
}

/// Whether the refusals that showed the reset to be a window's end may have
/// taught the controller nothing (a window's refusal, once known as one,
/// does not cut). While the reset still read as a bucket's refill, they cut;
/// once a window has come back whole, the controller goes back to what it
/// was before them. A client cut to a crawl by the first window's refusals
/// would otherwise spend every later window at that crawl. (Where the quota
/// comes back only in part, as a sliding window counter's does while its
/// previous window still weighs, the cuts stand.)
#[derive(Debug, Default)]
enum WindowUndo {
    /// No run of empty answers in progress, or the reset's meaning was
    /// settled before it began.
    #[default]
    None,
    /// The controller as it was just before the first answer of the
    /// current run that said no quota was left; dropped once one says some
    /// is left, unless the run showed the reset to be a window's end.
    Empty(Controller),
    /// The run showed a window: the controller is restored to this if the
    /// next success finds at least [`WHOLE_AGAIN`] of the quota left.
    Window(Controller),
}

/// The share of the limit that must be left at a window's first success
/// for the window to count as having come back whole.
const WHOLE_AGAIN: f64 = 0.5;

impl PartitionState {
    /// Until when no send may go: the pause, or a lone probe's answer.
    fn hold_until(&self) -> Timestamp {
        self.paused_until.max(self.probe_until)
    }
}

struct Partition {
    pacer: Pacer,
    /// The latest send time handed out (nanoseconds): while it is ahead,
    /// calls hold slots of the current schedule.
    last_slot: AtomicU64,
    /// The async drivers' start (first contact, then slow start) is over:
    /// every call goes without touching the start gates' shared map.
    #[cfg(feature = "tokio")]
    started: std::sync::atomic::AtomicBool,
    state: Mutex<PartitionState>,
}

/// A partition's controller: one of those a [`ThrottleConfig`] names,
/// cloned from the template's into each new partition (and kept aside while
/// a quota's count says it is empty, [`undo_window_cuts`]). Boxed, so a
/// partition holds a pointer.
#[derive(Clone, Debug)]
enum Controller {
    Aimd(Box<Aimd>),
    Cubic(Box<Cubic>),
    Adaptive(Box<Adaptive>),
}

impl Controller {
    fn get(&self) -> &dyn RateController {
        match self {
            Controller::Aimd(c) => &**c,
            Controller::Cubic(c) => &**c,
            Controller::Adaptive(c) => &**c,
        }
    }

    fn get_mut(&mut self) -> &mut dyn RateController {
        match self {
            Controller::Aimd(c) => &mut **c,
            Controller::Cubic(c) => &mut **c,
            Controller::Adaptive(c) => &mut **c,
        }
    }
}

impl RateController for Controller {
    fn name(&self) -> &str {
        self.get().name()
    }
    fn rate(&self) -> Option<f64> {
        self.get().rate()
    }
    fn on_send(&mut self, now: Timestamp) {
        self.get_mut().on_send(now);
    }
    fn on_outcome(&mut self, now: Timestamp, outcome: &Outcome) -> Option<f64> {
        self.get_mut().on_outcome(now, outcome)
    }
    fn limit_to(&mut self, rate: f64) {
        self.get_mut().limit_to(rate);
    }
    fn note_slow_started(&mut self) {
        self.get_mut().note_slow_started();
    }
    fn note_closed_quota(&mut self) {
        self.get_mut().note_closed_quota();
    }
}

/// Validated parts, cloned into each new partition: building a partition
/// cannot fail once `Throttle::new` has succeeded.
struct Template {
    pacer: PacerSpec,
    controller: Option<Controller>,
    budget: Option<RetryBudget>,
    sre: Option<SreThrottler>,
    pacing: bool,
    backoff: Backoff,
}

impl Template {
    fn new(config: &ThrottleConfig) -> Result<Template, ConfigError> {
        let (controller, rate) = match config.adaptation {
            Adaptation::None => (None, 1.0),
            Adaptation::Fixed(r) => (None, super::config::positive("fixed rate", r)?),
            Adaptation::Aimd(c) => (
                Some(Controller::Aimd(Box::new(Aimd::new(c)?))),
                c.initial_rate,
            ),
            Adaptation::Cubic(c) => (
                Some(Controller::Cubic(Box::new(Cubic::new(c)?))),
                c.min_fill_rate,
            ),
            Adaptation::Adaptive(c) => (
                Some(Controller::Adaptive(Box::new(Adaptive::new(c)?))),
                c.fallback_rate,
            ),
        };
        let pacer = Pacer::new(rate)
            .and_then(|p| match config.burst {
                Some(b) => p.with_burst(b),
                None => Ok(p),
            })
            .map_err(|_| ConfigError::OutOfRange {
                field: "rate and burst",
                expected: "a rate and burst a pacer can represent",
                value: rate,
            })?;
        let pacing = match &controller {
            None => matches!(config.adaptation, Adaptation::Fixed(_)),
            Some(c) => c.rate().is_some(),
        };
        Ok(Template {
            pacer: pacer.spec(),
            controller,
            budget: config.budget.map(RetryBudget::new).transpose()?,
            sre: config.sre.map(|c| SreThrottler::new(c, 0)).transpose()?,
            pacing,
            backoff: Backoff::new(config.backoff, 0)?,
        })
    }

    fn partition(&self, seed: u64, meaning: ResetMeaning) -> Partition {
        Partition {
            pacer: Pacer::from_spec(self.pacer),
            last_slot: AtomicU64::new(0),
            #[cfg(feature = "tokio")]
            started: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(PartitionState {
                controller: self.controller.clone(),
                // Quota left admits the next request: hints act only when
                // nothing is left (pacing is the controller's job).
                hints: HintCap::with_meaning(meaning).spreading_windows(false),
                paused_until: Timestamp::ZERO,
                probe_until: Timestamp::ZERO,
                budget: self.budget.clone(),
                sre: self.sre.as_ref().map(|s| s.with_seed(seed_for(seed, 1))),
                rng: JitterRng::seed_from_u64(seed_for(seed, 2)),
                pacing: self.pacing,
                policy_rate: None,
                policy_engaged: false,
                cut_at: Timestamp::ZERO,
                answered: false,
                admitted: RateMeter::default(),
                plan: 0,
                plan_rate: 0.0,
                short_pause_end: None,
                closed_since: None,
                round_trip: Duration::ZERO,
                probing: false,
                closed_probes: 0,
                count_overstated: false,
                undo: WindowUndo::None,
            }),
        }
    }
}

struct Inner<K> {
    config: ThrottleConfig,
    template: Template,
    calls: AtomicU64,
    partitions: RwLock<HashMap<K, Arc<Partition>>>,
    created: AtomicU64,
    counters: Counters,
}

/// An adaptive client throttle, shared by cloning, partitioned by `K`.
///
/// ```
/// use std::time::Duration;
/// use ratewise_client::throttle::{Step, Throttle, ThrottleConfig};
/// use ratewise_client::Outcome;
/// use ratewise::Timestamp;
///
/// let throttle: Throttle<&str> = Throttle::new(ThrottleConfig::default())?;
/// let t = Timestamp::ZERO;
/// let mut call = throttle.begin(t);
/// let wait = throttle.acquire_at(&"api.example.com", &mut call, t, t).unwrap();
/// assert_eq!(wait, Duration::ZERO);
/// let step = throttle.record_at(&"api.example.com", &mut call, t, &Outcome::throttled());
/// assert!(matches!(step, Step::Retry(_)));
/// // The whole partition is paused, not just this call.
/// assert!(throttle.try_acquire_at(&"api.example.com", t).is_err());
/// assert!(throttle.try_acquire_at(&"other.example.com", t).is_ok());
/// # Ok::<(), ratewise_client::ConfigError>(())
/// ```
pub struct Throttle<K = ()> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Throttle<K> {
    fn clone(&self) -> Self {
        Throttle {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> std::fmt::Debug for Throttle<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("config", &self.inner.config)
            .field("metrics", &self.metrics())
            .finish()
    }
}

/// Re-plans `part`'s schedule after a cut, a new pause, or a rise to
/// [`REPLAN_ON_RISE`] × the pace of the current plan. When calls hold
/// slots still to come, the pacer's next slot is at the pause's end (or
/// `now`), evenly after it, and every such call takes a new slot before it
/// sends ([`Throttle::recheck_at`]). When none does, the schedule stands
/// (the pacer already moved to the new rate) and only resumes evenly after
/// a pause, without the credit it gained meanwhile.
fn replan(part: &Partition, st: &mut PartitionState, now: Timestamp, rise: bool) {
    if !st.pacing {
        return;
    }
    st.plan_rate = part.pacer.rate();
    if part.last_slot.load(Ordering::Relaxed) > now.as_nanos() {
        st.plan = st.plan.wrapping_add(1);
        // On a rise a call may have sent a moment ago (the answer that
        // raised the rate came from one): the new plan's first slot is an
        // interval from now, so a server that admits no burst sees no two
        // sends closer than the new pace.
        let first = if rise {
            now.saturating_add(crate::secs_to_duration(1.0 / st.plan_rate))
        } else {
            now
        };
        part.pacer.restart_at(st.hold_until().max(first));
    } else if st.hold_until() > now {
        part.pacer.resume_at(st.hold_until());
    }
}

/// The partition pause after a refusal whose `Retry-After` is `ra`, when
/// it may be shorter than `ra`: a `Retry-After` of a second or less may be a
/// few milliseconds' wait rounded up to whole seconds (a 100/s bucket says
/// "1"), and a partition whose successes came back at `a` per second lately
/// (at least [`SHORT_PAUSE_MIN_ADMITTED`] of them) finds its next slot
/// within a few intervals at `a`. The refused call itself still waits `ra`;
/// only the partition's other calls resume sooner, at the pace the cut left.
/// `None` (honour `ra`) for a longer `Retry-After`, a slow partition, or
/// when an attempt sent after the previous short pause was refused before
/// any such attempt succeeded (a window that is really closed for `ra`).
fn short_pause(
    st: &mut PartitionState,
    call: &Call,
    now: Timestamp,
    ra: Duration,
) -> Option<Duration> {
    if ra > Duration::from_secs(1) {
        return None;
    }
    let doubted = st.short_pause_end.is_some_and(|end| call.sent_at >= end);
    if doubted {
        st.short_pause_end = None;
        return None;
    }
    let a = st
        .admitted
        .rate_of_at_least(now, SHORT_PAUSE_MIN_ADMITTED)?;
    let pause = crate::secs_to_duration(SHORT_PAUSE_INTERVALS / a).min(ra);
    st.short_pause_end = Some(
        st.short_pause_end
            .map_or(now + pause, |e| e.max(now + pause)),
    );
    Some(pause)
}

/// The floor a detected window's quota left sets on the pace
/// ([`HintCap::window_floor`]): a partition paced no slower uses each window
/// whole (a controller cut low by the first window's refusals would
/// otherwise leave most of every later one unused). Never above the rate a
/// `RateLimit-Policy` states; `None` once a refusal said quota was left (the
/// count over-states).
fn window_floor(st: &PartitionState, hints: &ServerHints) -> Option<f64> {
    let floor = st
        .hints
        .window_floor(hints)
        .filter(|_| !st.count_overstated)?;
    Some(st.policy_rate.map_or(floor, |p| floor.min(p)))
}

/// Moves `st`'s [`WindowUndo`] on for an answer's `hints`, once the hint
/// cap has taken them in (`window_found`: these hints showed the reset to
/// be a window's end), before the controller hears of the answer: a window
/// found whole again restores the controller.
fn undo_window_cuts(
    st: &mut PartitionState,
    window_found: bool,
    signal: Signal,
    hints: &ServerHints,
) {
    st.undo = match (std::mem::take(&mut st.undo), hints.remaining) {
        (WindowUndo::Empty(before), _) if window_found => WindowUndo::Window(before),
        (WindowUndo::Window(before), Some(left)) if signal == Signal::Success => {
            if hints
                .limit
                .is_some_and(|l| left as f64 >= WHOLE_AGAIN * l as f64)
            {
                st.controller = Some(before);
            }
            WindowUndo::None
        }
        (WindowUndo::Empty(_), Some(left)) if left > 0 => WindowUndo::None,
        // (Only an answer with a limit and a reset can show a window.)
        (WindowUndo::None, Some(0))
            if st.hints.detected() != Some(ResetMeaning::WindowEnd)
                && hints.limit.is_some()
                && hints.reset_after.is_some() =>
        {
            match &st.controller {
                Some(c) => WindowUndo::Empty(c.clone()),
                None => WindowUndo::None,
            }
        }
        (undo, _) => undo,
    };
}

/// Called only when the partition was probing as the slot was taken (no
/// second lock on the common path). While the partition probes a closed
/// quota (see the module docs), a send
/// at `at` goes alone: the partition's next send waits until its answer is
/// due (1.5 of the latest round trips, at most [`CLOSED_PAUSE_MAX`]), so a
/// closed quota costs one refusal per probe, not one per send the pace
/// would let out meanwhile.
fn lone_probe(part: &Partition, at: Timestamp) {
    let mut st = part.state.lock().unwrap_or_else(PoisonError::into_inner);
    if st.probing {
        let wait = st.round_trip.mul_f64(1.5).min(CLOSED_PAUSE_MAX);
        st.probe_until = st.probe_until.max(at.saturating_add(wait));
    }
}

/// How long a quota must have looked closed (bare refusals, no success)
/// before the partition's pause grows past the refused call's own backoff:
/// longer than any bucket at a sane rate takes to admit again, and longer
/// than a client sharing a short window with others waits for its turn.
pub const CLOSED_PAUSE_AFTER: Duration = Duration::from_secs(8);

/// The longest partition pause a closed quota grows to.
pub const CLOSED_PAUSE_MAX: Duration = Duration::from_secs(8);

/// The partition pause after a bare refusal when the quota has looked
/// closed for `closed`: half of that from [`CLOSED_PAUSE_AFTER`] on, at
/// most [`CLOSED_PAUSE_MAX`] (zero before). A quota closed for a minute
/// is probed at growing intervals, a handful of times, not once per
/// backoff delay of each waiting call; the probe that finds it open comes
/// at most half the closed time (and `CLOSED_PAUSE_MAX`) late.
fn closed_pause(closed: Duration) -> Duration {
    if closed < CLOSED_PAUSE_AFTER {
        return Duration::ZERO;
    }
    (closed / 2).min(CLOSED_PAUSE_MAX)
}

/// The longest gap the refused probes of a closed quota are spaced by:
/// after the k-th refused probe since the latest success, the partition
/// pauses at least the backoff's first delay doubled k − 1 times, at most
/// this.
pub const CLOSED_PROBE_GAP_MAX: Duration = Duration::from_secs(1);

/// The partition pause after the `k`-th refused probe of a closed quota
/// (`k` ≥ 1): `initial` (the backoff's first delay) doubled `k − 1` times,
/// at most [`CLOSED_PROBE_GAP_MAX`]. Calls waiting on a closed quota each
/// retry after their own backoff, which is short for a call refused once
/// or twice, so twenty calls sharing a partition probed a closed log four
/// to six times a second, each probe refused. The partition's own count
/// spaces the probes instead: from the quota's second closed second on,
/// about one probe a second.
fn probe_gap(initial: Duration, k: u32) -> Duration {
    let doublings = k.saturating_sub(1).min(20);
    initial
        .saturating_mul(1 << doublings)
        .min(CLOSED_PROBE_GAP_MAX)
}

fn seed_for(seed: u64, n: u64) -> u64 {
    seed ^ n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl<K: Hash + Eq + Clone + Send + Sync> Throttle<K> {
    /// A throttle with `config`.
    ///
    /// # Errors
    /// [`ConfigError`] for any invalid part (all are validated here, once,
    /// into the template every partition is cloned from), `max_attempts = 0`,
    /// or a pause jitter outside `[0, 1]`.
    pub fn new(config: ThrottleConfig) -> Result<Self, ConfigError> {
        at_least_one("max_attempts", config.max_attempts)?;
        within("pause_jitter", config.pause_jitter, 0.0, 1.0)?;
        let template = Template::new(&config)?;
        Ok(Throttle {
            inner: Arc::new(Inner {
                config,
                template,
                calls: AtomicU64::new(0),
                partitions: RwLock::new(HashMap::new()),
                created: AtomicU64::new(0),
                counters: Counters {
                    current_rate_bits: AtomicU64::new(f64::NAN.to_bits()),
                    ..Counters::default()
                },
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ThrottleConfig {
        &self.inner.config
    }

    /// Whether `key`'s start (first contact and slow start) is over.
    #[cfg(feature = "tokio")]
    pub(crate) fn start_over(&self, key: &K) -> bool {
        self.partition(key).started.load(Ordering::Acquire)
    }

    /// Marks `key`'s start as over: from now on its calls skip the gate.
    #[cfg(feature = "tokio")]
    pub(crate) fn end_start(&self, key: &K) {
        self.partition(key).started.store(true, Ordering::Release);
    }

    /// Tells `key`'s controller that a driver's slow start lets its calls
    /// out ([`RateController::note_slow_started`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn note_slow_started(&self, key: &K) {
        let part = self.partition(key);
        let mut st = part.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = st.controller.as_mut() {
            c.note_slow_started();
        }
    }

    fn partition(&self, key: &K) -> Arc<Partition> {
        {
            let map = self
                .inner
                .partitions
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(p) = map.get(key) {
                return Arc::clone(p);
            }
        }
        let mut map = self
            .inner
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = map.get(key) {
            return Arc::clone(p);
        }
        let n = self.inner.created.fetch_add(1, Ordering::Relaxed);
        let p = Arc::new(self.inner.template.partition(
            seed_for(self.inner.config.seed, n),
            self.inner.config.hint_reset,
        ));
        map.insert(key.clone(), Arc::clone(&p));
        p
    }

    /// Drops `key`'s partition (its pacer, pause, budget and statistics); the
    /// next use starts it afresh. Partitions are never dropped otherwise, so
    /// callers with unbounded key sets should forget idle keys.
    pub fn forget(&self, key: &K) {
        self.inner
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// Number of partitions in use.
    pub fn partitions(&self) -> usize {
        self.inner
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Starts a call at `now`.
    pub fn begin(&self, now: Timestamp) -> Call {
        let n = self.inner.calls.fetch_add(1, Ordering::Relaxed);
        Call {
            started: now,
            attempts: 0,
            backoff: self
                .inner
                .template
                .backoff
                .with_seed(seed_for(self.inner.config.seed, n.wrapping_add(1 << 32))),
            last_cost: None,
            sent_at: now,
            paced: false,
            plan: 0,
        }
    }

    /// Reserves the next attempt's slot in `key`'s partition: no earlier than
    /// `not_before`, after any pause, at the pacer's rate. Returns how long
    /// after `now` to send. Counts the attempt.
    ///
    /// A slot reserved for a future instant holds the pacer until then, so
    /// for a retry prefer sleeping until its `not_before` first and acquiring
    /// then (as the async driver does): "sleep, then re-acquire".
    ///
    /// # Errors
    /// [`StopReason::RejectedLocally`] when the SRE throttle refuses, and
    /// [`StopReason::Deadline`] when the slot would come after the call's
    /// deadline (nothing is reserved then).
    pub fn acquire_at(
        &self,
        key: &K,
        call: &mut Call,
        now: Timestamp,
        not_before: Timestamp,
    ) -> Result<Duration, StopReason> {
        self.acquire_inner(key, call, now, not_before, true)
    }

    /// [`Throttle::acquire_at`] without the refusals: no SRE coin and no
    /// deadline check, only the pause and the pacer. For a call that was
    /// already refused (and counted as refused) and is sent anyway later, as
    /// the simulation adapter does.
    pub(crate) fn acquire_unrefused_at(
        &self,
        key: &K,
        call: &mut Call,
        now: Timestamp,
        not_before: Timestamp,
    ) -> Duration {
        self.acquire_inner(key, call, now, not_before, false)
            .unwrap_or_else(|_| not_before.saturating_duration_since(now))
    }

    fn acquire_inner(
        &self,
        key: &K,
        call: &mut Call,
        now: Timestamp,
        not_before: Timestamp,
        may_refuse: bool,
    ) -> Result<Duration, StopReason> {
        let part = self.partition(key);
        let c = &self.inner.counters;
        let (pacing, start, probing) = {
            let mut st = part.state.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(sre) = st.sre.as_mut() {
                if !may_refuse {
                    // Sent after all: the backend sees one more request.
                    sre.note_request(now);
                } else if !sre.should_send(now) {
                    c.rejected_locally.fetch_add(1, Ordering::Relaxed);
                    c.gave_up.fetch_add(1, Ordering::Relaxed);
                    return Err(StopReason::RejectedLocally);
                }
            }
            if let Some(ctl) = st.controller.as_mut() {
                ctl.on_send(now);
            }
            call.plan = st.plan;
            (
                st.pacing,
                not_before.max(st.hold_until()).max(now),
                st.probing,
            )
        };
        let deadline = call
            .deadline(self.inner.config.deadline)
            .filter(|_| may_refuse);
        let wait = match (pacing, deadline) {
            (true, Some(dl)) => part
                .pacer
                .acquire_within_at(now, start, dl.saturating_duration_since(start))
                .map_err(|_| StopReason::Deadline),
            (true, None) => Ok(part.pacer.acquire_at(now, start)),
            (false, Some(dl)) if start > dl => Err(StopReason::Deadline),
            (false, _) => Ok(start.saturating_duration_since(now)),
        };
        match wait {
            Ok(w) => {
                call.attempts += 1;
                call.sent_at = now.saturating_add(w);
                if probing {
                    lone_probe(&part, call.sent_at);
                }
                part.last_slot
                    .fetch_max(call.sent_at.as_nanos(), Ordering::Relaxed);
                call.paced = pacing;
                c.attempts.fetch_add(1, Ordering::Relaxed);
                // Count only the wait the pacer or a pause added; a retry's
                // own delay was counted when `record_at` decided it.
                c.note_wait(w.saturating_sub(not_before.saturating_duration_since(now)));
                Ok(w)
            }
            Err(e) => {
                c.gave_up.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Called by a driver when the slot [`Throttle::acquire_at`] gave `call`
    /// comes due, just before it sends: the extra wait before sending, zero
    /// almost always. When the partition was cut, paused or sped up well
    /// past the pace the slot was taken at, the slot belongs to a schedule
    /// that no longer holds (the old pace, or inside the pause): the call
    /// takes a new slot, after the pause and at the current pace, and is to
    /// wait that long and ask again. A driver may also ask before the slot
    /// comes due (a rise moves far-off slots closer): the answer is then the
    /// wait still left, to the same slot or to the new one. A driver that skips this sends at the old schedule; after a
    /// cut many tasks would then keep sending at the pace that was just
    /// refused. The attempt is not counted again, and the call's deadline
    /// is not checked again (it was checked when the first slot was taken).
    pub fn recheck_at(&self, key: &K, call: &mut Call, now: Timestamp) -> Duration {
        let part = self.partition(key);
        let (pacing, start, probing) = {
            let st = part.state.lock().unwrap_or_else(PoisonError::into_inner);
            if call.plan == st.plan {
                return call.sent_at.saturating_duration_since(now);
            }
            call.plan = st.plan;
            (st.pacing, st.hold_until().max(now), st.probing)
        };
        let wait = if pacing {
            part.pacer.acquire_at(now, start)
        } else {
            start.saturating_duration_since(now)
        };
        call.sent_at = now.saturating_add(wait);
        if probing {
            lone_probe(&part, call.sent_at);
        }
        call.paced = pacing;
        part.last_slot
            .fetch_max(call.sent_at.as_nanos(), Ordering::Relaxed);
        self.inner.counters.note_wait(wait);
        wait
    }

    /// Non-blocking: takes a slot in `key`'s partition if one is free at
    /// `now`, else says how long the caller would wait (taking nothing).
    /// For servers that turn their own empty bucket into a 429.
    ///
    /// # Errors
    /// The wait, when the partition is paused or its pacer is empty.
    pub fn try_acquire_at(&self, key: &K, now: Timestamp) -> Result<(), Duration> {
        let part = self.partition(key);
        let (pacing, held_until, probing) = {
            let st = part.state.lock().unwrap_or_else(PoisonError::into_inner);
            (st.pacing, st.hold_until(), st.probing)
        };
        if held_until > now {
            return Err(held_until.saturating_duration_since(now));
        }
        if pacing {
            part.pacer.try_acquire_at(now)?;
        }
        if probing {
            lone_probe(&part, now);
        }
        self.inner.counters.attempts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Records what an attempt in `key`'s partition produced at `now`, adapts
    /// the partition, and says what the call should do next.
    pub fn record_at(&self, key: &K, call: &mut Call, now: Timestamp, outcome: &Outcome) -> Step {
        let cfg = &self.inner.config;
        let c = &self.inner.counters;
        let part = self.partition(key);
        let mut st = part.state.lock().unwrap_or_else(PoisonError::into_inner);

        // 1. Adapt the pace: the controller (or the fixed base rate) first,
        //    then hints may only lower it, until the cap lapses; then the
        //    rate is the controller's (or the base rate, or no pacing), never
        //    above.
        //    A window's refusal (a 429 whose reset reads as the end of a
        //    fixed window) is answered by the pause until the window ends,
        //    when the whole quota returns; it says nothing about the pace,
        //    so the controller does not cut for it.
        st.answered = true;
        st.round_trip = now.saturating_duration_since(call.sent_at);
        if cfg.use_hints {
            let window_found = st.hints.observe(now, &outcome.hints);
            if cfg.hint_reset == ResetMeaning::Auto {
                undo_window_cuts(&mut st, window_found, outcome.signal, &outcome.hints);
            }
            if st.hints.pause_until() > st.paused_until {
                st.paused_until = st.hints.pause_until();
                replan(&part, &mut st, now, false);
            }
            if let Some((q, w)) = outcome.hints.policy {
                let r = q as f64 / w.as_secs_f64() * POLICY_HEADROOM;
                if r.is_finite() && r > 0.0 {
                    st.policy_rate = Some(r);
                }
            }
        }
        let window_refusal = cfg.use_hints
            && outcome.signal == Signal::Throttled
            && outcome.hints.reset_after.is_some()
            && st.hints.reading(outcome.hints.limit) == ResetMeaning::WindowEnd;
        // A throttle answering an attempt sent before the rate was last cut
        // (or before pacing began) was sent at the old pace: it says nothing
        // about the current one. Nor does one answering an unpaced attempt
        // once the server has stated its rate: pacing starts at that rate.
        let stale = outcome.signal == Signal::Throttled
            && (call.sent_at < st.cut_at
                || (!call.paced && cfg.use_hints && st.policy_rate.is_some()));
        // A refusal while the hints' cap holds the pace below the
        // controller's says the cap's pace is too fast: the cut is from
        // there. A cut from far above it would not slow the sends (two
        // clients of one bucket, each held at the `limit / reset` of its
        // empty answers: 429s halving one controller from far above the cap
        // and the other's from below it, down to a crawl).
        if outcome.signal == Signal::Throttled && !window_refusal && !stale && cfg.use_hints {
            // (Lowers only; an unpaced controller is not started here.)
            let cap = st.hints.cap_at(now);
            let paced = st.controller.as_mut().filter(|c| c.rate().is_some());
            if let (Some(cap), Some(ctl)) = (cap, paced) {
                ctl.limit_to(cap);
            }
        }
        let before = st.controller.as_ref().and_then(|ctl| ctl.rate());
        let controller_rate = match cfg.adaptation {
            Adaptation::Fixed(r) => Some(r),
            _ if window_refusal || stale => before,
            _ => st
                .controller
                .as_mut()
                .and_then(|ctl| ctl.on_outcome(now, outcome)),
        };
        // The policy's rate is the server's own word on the sustained pace:
        // pacing starts there, before any 429, and never goes above it —
        // once the quota it states has run out (a count of none left, or
        // a refusal), or from the first response when no count says what
        // is left. Quota left is there to be spent: a job smaller than a
        // window's quota, or than a bucket's burst, paced at the sustained
        // rate would take a window's length where it needs a moment.
        if outcome.signal == Signal::Throttled || outcome.hints.remaining.is_none_or(|r| r == 0) {
            st.policy_engaged = true;
        }
        let controller_rate = match st
            .policy_rate
            .filter(|_| cfg.use_hints && st.policy_engaged)
        {
            Some(p) => {
                let r = match st.controller.as_mut() {
                    Some(ctl) if !matches!(cfg.adaptation, Adaptation::Fixed(_)) => {
                        ctl.limit_to(p);
                        ctl.rate()
                    }
                    _ => controller_rate,
                };
                Some(r.map_or(p, |r| r.min(p)))
            }
            None => controller_rate,
        };
        let rate = if cfg.use_hints {
            st.hints.limit(controller_rate, now)
        } else {
            controller_rate
        };
        if outcome.signal == Signal::Throttled && outcome.hints.remaining.is_some_and(|l| l > 0) {
            st.count_overstated = true;
        }
        let floor = if cfg.use_hints {
            window_floor(&st, &outcome.hints)
        } else {
            None
        };
        let rate = match (rate, floor) {
            (Some(r), Some(floor)) => Some(r.max(floor)),
            (r, _) => r,
        };
        let began = !st.pacing && rate.is_some();
        let cut = outcome.signal == Signal::Throttled
            && matches!((before, controller_rate), (Some(b), Some(a)) if a < b);
        if began || cut {
            st.cut_at = now;
        }
        // A rise re-plans too once the pace is well above the one the
        // waiting calls' slots were handed out at: otherwise calls queued at
        // a slow pace (many tasks sharing a partition just after its first
        // cut) keep their far-off slots, and the rise takes effect only
        // when the queue has turned over.
        let risen = rate.is_some_and(|r| r > st.plan_rate * REPLAN_ON_RISE);
        let replan_after = (cut || risen) && st.pacing && rate.is_some();
        st.pacing = rate.is_some();
        if let Some(r) = rate {
            if (r - part.pacer.rate()).abs() > 1e-9 * r.max(1.0) {
                part.pacer.set_rate_at(r, now);
            }
            if began {
                // Credit saved while not pacing is no licence to burst: the
                // response that started pacing says the server is at its limit
                // (or states the limit), so pacing starts from an empty pacer.
                part.pacer.drain_at(now);
                st.plan_rate = r;
            }
            c.current_rate_bits
                .store(part.pacer.rate().to_bits(), Ordering::Relaxed);
        }
        if replan_after {
            // Slots handed out at the old pace are not used at it.
            replan(&part, &mut st, now, risen && !cut);
        }
        if let Some(sre) = st.sre.as_mut() {
            sre.on_outcome(now, outcome);
        }

        // 2. Success or a failure not worth retrying ends the call.
        match outcome.signal {
            Signal::Success => {
                c.successes.fetch_add(1, Ordering::Relaxed);
                st.admitted.note(now);
                st.closed_since = None;
                st.probing = false;
                st.closed_probes = 0;
                if st.short_pause_end.is_some_and(|end| call.sent_at >= end) {
                    st.short_pause_end = None;
                }
                if let Some(b) = st.budget.as_mut() {
                    b.on_success(call.last_cost.take());
                }
                return Step::Done;
            }
            Signal::Throttled => {
                c.throttled.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        let end = call_end(outcome);
        if end == Some(Next::Done) {
            return Step::Done;
        }

        // 3. Whether, then how long: the backoff decides whether another
        //    retry is allowed at all (`None` = its retry limit is reached,
        //    whatever the server says); the server's word (capped) only
        //    lengthens the wait.
        let retry_after = outcome
            .hints
            .retry_after
            .map(|d| d.min(cfg.max_retry_after));
        let delay = call
            .backoff
            .next_delay()
            .map(|b| honouring_retry_after(b, retry_after));

        // 4. A throttle pauses the whole partition, with jitter on the resume.
        if outcome.signal == Signal::Throttled {
            let pause = match retry_after {
                Some(ra) => short_pause(&mut st, call, now, ra).unwrap_or(ra),
                None => {
                    // A bare refusal: the quota may be closed. Refused
                    // again for an attempt sent after the first refusal was
                    // answered, it is: probe it one send at a time.
                    if st.closed_since.is_some_and(|t| call.sent_at >= t) {
                        st.probing = true;
                    }
                    let since = *st.closed_since.get_or_insert(now);
                    let closed = closed_pause(now.saturating_duration_since(since));
                    // Closed for long while probed: the server counts a
                    // window, which the controller's climb must respect.
                    if st.probing && !closed.is_zero() {
                        if let Some(ctl) = st.controller.as_mut() {
                            ctl.note_closed_quota();
                        }
                    }
                    let mut pause = delay.unwrap_or(Duration::ZERO).max(closed);
                    if st.probing {
                        // Probes come from whichever calls wait, each at its
                        // own first backoff: the partition spaces them.
                        st.closed_probes = st.closed_probes.saturating_add(1);
                        pause = pause.max(probe_gap(cfg.backoff.initial, st.closed_probes));
                    }
                    pause
                }
            };
            let u: f64 = st.rng.random();
            let pause = pause.saturating_add(pause.mul_f64(u * cfg.pause_jitter));
            let until = now.saturating_add(pause);
            // A refused lone probe voids the slots handed out behind it
            // (each a round trip and a half after the previous, and each
            // would be sent and refused in turn): the partition re-plans
            // and they are taken again after the pause.
            let probe_refused = retry_after.is_none() && st.probing;
            if probe_refused {
                st.probe_until = Timestamp::ZERO;
            }
            if until > st.paused_until || probe_refused {
                st.paused_until = st.paused_until.max(until);
                // The pause is no saving: the pace resumes evenly after it,
                // not with a burst of the credit the pacer gained meanwhile,
                // and slots handed out before it are taken again after it.
                replan(&part, &mut st, now, false);
            }
        }

        // 5. May we retry at all? The server's refusal (`call_end`'s give-up)
        //    comes first.
        if end == Some(Next::GiveUp) {
            return self.give_up(StopReason::RetryForbidden);
        }
        let Some(delay) = delay else {
            return self.give_up(StopReason::MaxAttempts);
        };
        if call.attempts >= cfg.max_attempts {
            return self.give_up(StopReason::MaxAttempts);
        }
        if let Some(dl) = call.deadline(cfg.deadline) {
            if now.saturating_add(delay) > dl {
                return self.give_up(StopReason::Deadline);
            }
        }
        if let Some(b) = st
            .budget
            .as_mut()
            .filter(|_| outcome.signal != Signal::Throttled)
        {
            match b.try_acquire(outcome.signal) {
                Some(cost) => call.last_cost = Some(cost),
                None => return self.give_up(StopReason::BudgetExhausted),
            }
        }
        c.retries.fetch_add(1, Ordering::Relaxed);
        c.note_wait(delay);
        Step::Retry(delay)
    }

    fn give_up(&self, reason: StopReason) -> Step {
        self.inner.counters.gave_up.fetch_add(1, Ordering::Relaxed);
        Step::GiveUp(reason)
    }

    /// The pacing rate of `key`'s partition, if it paces.
    pub fn rate_of(&self, key: &K) -> Option<f64> {
        let part = self.partition(key);
        let pacing = part
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pacing;
        pacing.then(|| part.pacer.rate())
    }

    /// Whether any attempt in `key`'s partition has been answered (recorded
    /// with [`Throttle::record_at`]). Until then the throttle knows nothing
    /// of the server's limits; a driver may send a partition's first attempt
    /// alone and hold the others until its answer is recorded, so that a
    /// server stating its rate (`RateLimit-Policy`) is paced from the start
    /// instead of answering a burst with 429s, as the reqwest middleware
    /// does.
    pub fn answered(&self, key: &K) -> bool {
        let part = self.partition(key);
        let answered = part
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .answered;
        answered
    }

    /// Retry-budget tokens left in `key`'s partition, if it has a budget.
    pub fn budget_of(&self, key: &K) -> Option<u32> {
        let part = self.partition(key);
        let st = part.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.budget.as_ref().map(RetryBudget::available)
    }
}

impl<K> Throttle<K> {
    /// A snapshot of the counters.
    pub fn metrics(&self) -> ThrottleMetrics {
        let c = &self.inner.counters;
        let rate = f64::from_bits(c.current_rate_bits.load(Ordering::Relaxed));
        ThrottleMetrics {
            attempts: c.attempts.load(Ordering::Relaxed),
            successes: c.successes.load(Ordering::Relaxed),
            throttled: c.throttled.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            gave_up: c.gave_up.load(Ordering::Relaxed),
            rejected_locally: c.rejected_locally.load(Ordering::Relaxed),
            total_sleep: Duration::from_nanos(c.total_sleep_ns.load(Ordering::Relaxed)),
            max_sleep: Duration::from_nanos(c.max_sleep_ns.load(Ordering::Relaxed)),
            current_delay: Duration::from_nanos(c.current_delay_ns.load(Ordering::Relaxed)),
            current_rate: (!rate.is_nan()).then_some(rate),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Jitter;
    use crate::ServerHints;
    // Quota intervals are whole nanoseconds, so a pacer's rate can differ
    // from the rate it was set to by a few parts in 10⁷.

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A throttled response asking to retry after `d`.
    fn throttled_after(d: Duration) -> Outcome {
        Outcome::throttled().with_hints(ServerHints {
            retry_after: Some(d),
            ..ServerHints::default()
        })
    }

    fn config() -> ThrottleConfig {
        ThrottleConfig {
            adaptation: Adaptation::Aimd(AimdConfig::default()),
            backoff: BackoffConfig::exponential(ms(100), 2.0).with_jitter(Jitter::None),
            pause_jitter: 0.0,
            burst: Some(1),
            ..ThrottleConfig::default()
        }
    }

    #[test]
    fn every_attempt_goes_through_the_pacer() {
        let th: Throttle<u8> = Throttle::new(config()).unwrap();
        let t = Timestamp::ZERO;
        let mut waits = vec![];
        for _ in 0..3 {
            let mut call = th.begin(t);
            waits.push(th.acquire_at(&0, &mut call, t, t).unwrap());
        }
        assert_eq!(waits, [ms(0), ms(100), ms(200)], "10/s AIMD start, burst 1");
        assert_eq!(th.metrics().attempts, 3);
    }

    #[test]
    fn the_default_pace_never_catches_up_after_a_late_send() {
        // 10/s: a send 250 ms after the first (late for its slot) does not
        // let the next go at once; it waits one whole interval. With a
        // burst of one second of rate it would have gone with it, 0 ms
        // apart: a server with no burst refuses that one.
        let fixed = |burst| ThrottleConfig {
            adaptation: Adaptation::Fixed(10.0),
            burst,
            ..ThrottleConfig::default()
        };
        assert_eq!(ThrottleConfig::default().burst, Some(1));
        for (burst, third) in [(ThrottleConfig::default().burst, ms(100)), (None, ms(0))] {
            let th: Throttle<u8> = Throttle::new(fixed(burst)).unwrap();
            let t = Timestamp::ZERO;
            let late = t + ms(250);
            let mut waits = vec![];
            for now in [t, late, late] {
                let mut call = th.begin(now);
                waits.push(th.acquire_at(&0, &mut call, now, now).unwrap());
            }
            assert_eq!(waits, [ms(0), ms(0), third], "burst {burst:?}");
        }
    }

    #[test]
    fn a_throttle_pauses_the_partition_and_cuts_the_rate() {
        let th: Throttle<u8> = Throttle::new(config()).unwrap();
        let t = Timestamp::ZERO;
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        let hint = throttled_after(Duration::from_secs(2));
        assert_eq!(
            th.record_at(&0, &mut call, t, &hint),
            Step::Retry(Duration::from_secs(2))
        );
        assert_eq!(th.rate_of(&0), Some(5.0));
        // Another call in the same partition waits out the pause too.
        let mut other = th.begin(t);
        assert!(th.acquire_at(&0, &mut other, t, t).unwrap() >= Duration::from_secs(2));
        assert_eq!(th.try_acquire_at(&0, t + ms(500)), Err(ms(1500)));
        // Another partition is untouched.
        assert_eq!(th.try_acquire_at(&1, t), Ok(()));
        assert_eq!(th.partitions(), 2);
        th.forget(&0);
        assert_eq!(th.partitions(), 1);
        assert_eq!(th.try_acquire_at(&0, t), Ok(()), "a fresh partition");
    }

    /// `n` calls take slots of partition 0 at `t`.
    fn sends(th: &Throttle<u8>, t: Timestamp, n: usize) -> Vec<Call> {
        (0..n)
            .map(|_| {
                let mut call = th.begin(t);
                th.acquire_at(&0, &mut call, t, t).unwrap();
                call
            })
            .collect()
    }

    #[test]
    fn a_closed_quota_is_probed_by_one_send_at_a_time() {
        // A fixed 20/s: sends 50 ms apart, answers 100 ms after a send.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(20.0),
            ..config()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        let bare = Outcome::throttled();
        // One bare refusal: the pace may only have been a moment too
        // fast; the partition pauses for the backoff and goes on at its
        // pace, several sends a round trip.
        let mut first = sends(&th, t, 1).remove(0);
        let answered = t + ms(100);
        assert!(matches!(
            th.record_at(&0, &mut first, answered, &bare),
            Step::Retry(_)
        ));
        let after_first = sends(&th, answered, 3);
        let gaps: Vec<Duration> = after_first
            .windows(2)
            .map(|w| w[1].sent_at.saturating_duration_since(w[0].sent_at))
            .collect();
        assert!(gaps.iter().all(|g| *g <= ms(51)), "{gaps:?}");
        // An attempt sent after that refusal is refused too: the quota is
        // closed. From now on each send waits for the previous one's
        // answer (1.5 round trips of 100 ms), whatever the pace allows.
        let mut second = after_first.into_iter().next().unwrap();
        let at = second.sent_at + ms(100);
        assert!(matches!(
            th.record_at(&0, &mut second, at, &bare),
            Step::Retry(_)
        ));
        let probes = sends(&th, at, 3);
        for w in probes.windows(2) {
            let gap = w[1].sent_at.saturating_duration_since(w[0].sent_at);
            assert!(gap >= ms(150), "probes {gap:?} apart");
        }
        // A success reopens it: the pace alone spaces sends again.
        let mut ok = probes.into_iter().last().unwrap();
        let open = ok.sent_at + ms(100);
        assert_eq!(
            th.record_at(&0, &mut ok, open, &Outcome::success()),
            Step::Done
        );
        let reopened = sends(&th, open + ms(1000), 3);
        for w in reopened.windows(2) {
            let gap = w[1].sent_at.saturating_duration_since(w[0].sent_at);
            assert!(gap <= ms(51), "{gap:?}");
        }
    }

    /// A fixed 20/s throttle (answers come 100 ms after a send; backoff
    /// 100 ms, then 200 ms, no jitter) whose quota two bare refusals have
    /// closed, and the time of the second refusal.
    fn closed_at_20_per_s() -> (Throttle<u8>, Timestamp) {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(20.0),
            ..config()
        })
        .unwrap();
        let mut at = Timestamp::ZERO;
        for _ in 0..2 {
            let mut call = sends(&th, at, 1).remove(0);
            at = call.sent_at + ms(100);
            th.record_at(&0, &mut call, at, &Outcome::throttled());
        }
        (th, at)
    }

    #[test]
    fn a_refused_probe_pauses_the_probes_queued_behind_it() {
        let (th, at) = closed_at_20_per_s();
        let bare = Outcome::throttled();
        // Four calls queue: lone probes, 150 ms apart.
        let mut probes = sends(&th, at, 4);
        let s0 = probes[0].sent_at;
        // The first probe is refused (its call's first refusal: 100 ms).
        // The partition pauses until then, and the probes queued behind it
        // take new slots after the pause instead of each being sent, and
        // refused, at its old slot.
        let answered = s0 + ms(100);
        th.record_at(&0, &mut probes[0], answered, &bare);
        let pause_end = answered + ms(100);
        let chain_end = probes[3].sent_at;
        let old = probes[1].sent_at;
        assert!(old < pause_end, "the slot was inside the pause: {old:?}");
        let wait = th.recheck_at(&0, &mut probes[1], old);
        assert!(
            !wait.is_zero(),
            "the queued probe went out inside the pause"
        );
        assert!(probes[1].sent_at >= pause_end, "{:?}", probes[1].sent_at);
        // Right after the pause: the slots handed out behind the refused
        // probe hold nothing back any more.
        assert!(
            probes[1].sent_at < chain_end,
            "{:?} waited for the old slots (up to {chain_end:?})",
            probes[1].sent_at
        );
        // And the next one waits for that probe's answer.
        let next = probes[2].sent_at.max(probes[1].sent_at);
        th.recheck_at(&0, &mut probes[2], next);
        let gap = probes[2]
            .sent_at
            .saturating_duration_since(probes[1].sent_at);
        assert!(gap >= ms(150), "probes {gap:?} apart");
    }

    #[test]
    fn a_refused_probe_never_cuts_a_retry_after_pause_short() {
        // A closed quota; then a call is refused with `Retry-After: 5`,
        // and a probe sent before it is refused bare.
        let (th, at) = closed_at_20_per_s();
        let bare = Outcome::throttled();
        // Three calls hold lone probes' slots, 150 ms apart.
        let mut probes = sends(&th, at, 3);
        let told = probes[0].sent_at + ms(100);
        let five = Outcome::throttled().with_hints(ServerHints {
            retry_after: Some(Duration::from_secs(5)),
            ..ServerHints::default()
        });
        th.record_at(&0, &mut probes[0], told, &five);
        // The second was already out; its bare refusal comes while the
        // third still holds a slot.
        let later = probes[1].sent_at + ms(100);
        th.record_at(&0, &mut probes[1], later, &bare);
        let next = sends(&th, later, 1).remove(0);
        assert!(
            next.sent_at >= told + Duration::from_secs(5),
            "sent {:?} into a 5 s Retry-After given at {told:?}",
            next.sent_at
        );
    }

    #[test]
    fn refused_probes_of_a_closed_quota_are_spaced_by_a_doubling_gap() {
        // Each probe comes from a fresh call, whose own backoff would be
        // 100 ms every time.
        let (th, mut at) = closed_at_20_per_s();
        let bare = Outcome::throttled();
        let mut gaps = vec![];
        for _ in 0..6 {
            let mut call = sends(&th, at, 1).remove(0);
            gaps.push(call.sent_at.saturating_duration_since(at));
            at = call.sent_at + ms(100);
            th.record_at(&0, &mut call, at, &bare);
        }
        // The refusal that closed the quota was the first probe refused
        // (100 ms); then the gap doubles up to CLOSED_PROBE_GAP_MAX.
        let want = [100, 200, 400, 800, 1000, 1000].map(ms);
        assert_eq!(gaps, want, "{gaps:?}");
        assert_eq!(probe_gap(ms(100), 30), CLOSED_PROBE_GAP_MAX);
        // A success ends the run: the next refusal pauses for the
        // backoff alone.
        let mut ok = sends(&th, at, 1).remove(0);
        at = ok.sent_at + ms(100);
        th.record_at(&0, &mut ok, at, &Outcome::success());
        let mut again = sends(&th, at, 1).remove(0);
        at = again.sent_at + ms(100);
        th.record_at(&0, &mut again, at, &bare);
        let next = sends(&th, at, 1).remove(0);
        assert_eq!(next.sent_at.saturating_duration_since(at), ms(100));
    }

    #[test]
    fn a_quota_closed_for_long_is_probed_at_growing_intervals() {
        // One call, a fixed 10/s pace, answers 100 ms after each send,
        // against a quota closed for a minute: until CLOSED_PAUSE_AFTER
        // the backoff (capped at 2 s) spaces the probes; then the pause
        // grows to half the closed time, at most CLOSED_PAUSE_MAX. With
        // the backoff alone the minute would cost about 30 probes.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(10.0),
            backoff: BackoffConfig::exponential(ms(100), 2.0)
                .with_max_delay(Duration::from_secs(2))
                .with_jitter(Jitter::None),
            ..config()
        })
        .unwrap();
        let reopens = Timestamp::ZERO + Duration::from_secs(60);
        let mut call = th.begin(Timestamp::ZERO);
        let mut now = Timestamp::ZERO;
        let mut sent = vec![];
        loop {
            let at = now + th.acquire_at(&0, &mut call, now, now).unwrap();
            sent.push(at);
            let answered = at + ms(100);
            if at >= reopens {
                let ok = th.record_at(&0, &mut call, answered, &Outcome::success());
                assert_eq!(ok, Step::Done);
                break;
            }
            let Step::Retry(d) = th.record_at(&0, &mut call, answered, &Outcome::throttled())
            else {
                panic!("the default retries while throttled");
            };
            now = answered + d;
        }
        let gaps: Vec<Duration> = sent
            .windows(2)
            .map(|w| w[1].saturating_duration_since(w[0]))
            .collect();
        let probes = sent.len() - 1;
        assert!(
            (8..=16).contains(&probes),
            "{probes} refused in a closed minute: {gaps:?}"
        );
        let max = CLOSED_PAUSE_MAX + ms(100);
        assert!(gaps.iter().all(|g| *g <= max), "{gaps:?}");
        assert!(
            gaps.iter().any(|g| *g > ms(2100)),
            "the pause grew: {gaps:?}"
        );
        // Found open at most CLOSED_PAUSE_MAX (and a round trip) late.
        assert!(sent[probes] <= reopens + max, "{:?}", sent[probes]);
        // A success ends the closed run: a new refusal pauses only for
        // the backoff again.
        let t = sent[probes] + ms(200);
        let mut next = th.begin(t);
        let at = t + th.acquire_at(&0, &mut next, t, t).unwrap();
        let step = th.record_at(&0, &mut next, at + ms(100), &Outcome::throttled());
        assert_eq!(step, Step::Retry(ms(100)));
        assert!(th.try_acquire_at(&0, at + ms(201)).is_ok());
    }

    #[test]
    fn retry_after_is_capped() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            max_retry_after: Duration::from_secs(5),
            ..config()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        let hint = throttled_after(Duration::from_secs(3600));
        assert_eq!(
            th.record_at(&0, &mut call, t, &hint),
            Step::Retry(Duration::from_secs(5))
        );
        assert_eq!(th.try_acquire_at(&0, t), Err(Duration::from_secs(5)));
    }

    #[test]
    fn stops_at_max_attempts_deadline_and_budget() {
        let t = Timestamp::ZERO;
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            max_attempts: 2,
            adaptation: Adaptation::None,
            ..config()
        })
        .unwrap();
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        let Step::Retry(d) = th.record_at(&0, &mut call, t, &Outcome::throttled()) else {
            panic!("expected a retry");
        };
        let t1 = t + d;
        th.acquire_at(&0, &mut call, t1, t1).unwrap();
        assert_eq!(
            th.record_at(&0, &mut call, t1, &Outcome::throttled()),
            Step::GiveUp(StopReason::MaxAttempts)
        );

        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            deadline: Some(ms(150)),
            adaptation: Adaptation::None,
            ..config()
        })
        .unwrap();
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        assert_eq!(
            th.record_at(&0, &mut call, t, &Outcome::throttled()),
            Step::Retry(ms(100))
        );
        let t1 = t + ms(100);
        th.acquire_at(&0, &mut call, t1, t1).unwrap();
        assert_eq!(
            th.record_at(&0, &mut call, t1, &Outcome::throttled()),
            Step::GiveUp(StopReason::Deadline),
            "200 ms more would pass the 150 ms deadline"
        );

        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            budget: Some(RetryBudgetConfig {
                capacity: 5,
                ..RetryBudgetConfig::default()
            }),
            adaptation: Adaptation::None,
            ..config()
        })
        .unwrap();
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        // A throttled attempt's retry is paced and paused, never paid from
        // the budget (the budget guards against retrying failures).
        assert!(matches!(
            th.record_at(&0, &mut call, t, &Outcome::throttled()),
            Step::Retry(_)
        ));
        assert_eq!(th.budget_of(&0), Some(5));
        let failed = Outcome::new(Signal::ServerError);
        assert!(matches!(
            th.record_at(&0, &mut call, t, &failed),
            Step::Retry(_)
        ));
        assert_eq!(th.budget_of(&0), Some(0));
        assert_eq!(
            th.record_at(&0, &mut call, t, &failed),
            Step::GiveUp(StopReason::BudgetExhausted)
        );
        assert_eq!(th.metrics().gave_up, 1);
    }

    #[test]
    fn the_pace_resumes_evenly_after_a_pause() {
        // 10/s with a burst of 10: a 2 s pause would save 10 slots of credit.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(10.0),
            pause_jitter: 0.0,
            ..ThrottleConfig::default()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        th.record_at(&0, &mut call, t, &throttled_after(Duration::from_secs(2)));
        let waits: Vec<Duration> = (0..3)
            .map(|_| th.acquire_at(&0, &mut th.begin(t), t, t).unwrap())
            .collect();
        assert_eq!(
            waits,
            [ms(2_000), ms(2_100), ms(2_200)],
            "one interval apart after the pause, not a burst at its end"
        );
    }

    #[test]
    fn a_stated_policy_paces_only_once_its_quota_left_runs_out() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig::default()).unwrap();
        let t = Timestamp::ZERO;
        let left = |remaining| {
            Outcome::success().with_hints(ServerHints {
                policy: Some((100, Duration::from_secs(60))),
                remaining: Some(remaining),
                reset_after: Some(Duration::from_secs(60)),
                ..ServerHints::default()
            })
        };
        // 100 a minute, 60 of them left: no pacing, the quota is there.
        let mut a = th.begin(t);
        th.acquire_at(&0, &mut a, t, t).unwrap();
        th.record_at(&0, &mut a, t + ms(1), &left(60));
        assert_eq!(th.rate_of(&0), None);
        let mut b = th.begin(t + ms(2));
        assert_eq!(
            th.acquire_at(&0, &mut b, t + ms(2), t + ms(2)),
            Ok(Duration::ZERO)
        );
        // None left: the policy's rate from then on.
        th.record_at(&0, &mut b, t + ms(3), &left(0));
        let r = th.rate_of(&0).unwrap();
        assert!((r - 100.0 / 60.0 * POLICY_HEADROOM).abs() < 1e-6, "{r}");
        // And it stays in force when quota is left again.
        let mut c = th.begin(t + ms(4));
        th.acquire_at(&0, &mut c, t + ms(4), t + ms(4)).unwrap();
        th.record_at(&0, &mut c, t + ms(5), &left(60));
        assert!(th.rate_of(&0).unwrap() <= r + 1e-9);
    }

    #[test]
    fn a_stated_policy_paces_from_the_first_response() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig::default()).unwrap();
        let t = Timestamp::ZERO;
        let policy = |signal| {
            Outcome::new(signal).with_hints(ServerHints {
                policy: Some((100, Duration::from_secs(1))),
                ..ServerHints::default()
            })
        };
        // Two unpaced attempts; the first answer states 100 per second.
        let mut a = th.begin(t);
        let mut b = th.begin(t);
        assert_eq!(th.acquire_at(&0, &mut a, t, t), Ok(Duration::ZERO));
        assert_eq!(th.acquire_at(&0, &mut b, t, t), Ok(Duration::ZERO));
        assert!(!th.answered(&0));
        assert_eq!(
            th.record_at(&0, &mut a, t + ms(1), &policy(Signal::Success)),
            Step::Done
        );
        assert!(th.answered(&0));
        let r = th.rate_of(&0).unwrap();
        assert!((r - 100.0 * POLICY_HEADROOM).abs() < 1e-3, "{r}");
        // Pacing starts from an empty pacer: slots one interval apart, no
        // burst of saved credit.
        let later = t + ms(2);
        let mut c = th.begin(later);
        let mut d = th.begin(later);
        let w1 = th.acquire_at(&0, &mut c, later, later).unwrap();
        let w2 = th.acquire_at(&0, &mut d, later, later).unwrap();
        // Pacing began at 1 ms, as if a send had just emptied the pacer:
        // slots one interval at 95/s (10.5 ms) apart, not a burst.
        let gap = w2.saturating_sub(w1);
        assert!(
            w1 > ms(9) && w1 < ms(10) && gap > ms(10) && gap < ms(11),
            "{w1:?} then {w2:?}"
        );
        // The unpaced attempt's 429 was sent before pacing began: no cut.
        assert!(matches!(
            th.record_at(&0, &mut b, t + ms(2), &policy(Signal::Throttled)),
            Step::Retry(_)
        ));
        assert_eq!(th.rate_of(&0), Some(r));
        // A 429 to a paced attempt still cuts, and the pace never exceeds
        // the policy's rate however many successes follow.
        th.record_at(&0, &mut c, later + ms(20), &policy(Signal::Throttled));
        let cut = th.rate_of(&0).unwrap();
        assert!(cut < r * 0.6, "{cut}");
        for i in 0..2_000 {
            let now = later + ms(30 + i);
            let mut e = th.begin(now);
            let _ = th.acquire_at(&0, &mut e, now, now);
            th.record_at(&0, &mut e, now, &policy(Signal::Success));
        }
        assert!(th.rate_of(&0).unwrap() <= r + 1e-6);
    }

    #[test]
    fn the_default_never_gives_up_while_merely_throttled() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig::default()).unwrap();
        let mut now = Timestamp::ZERO;
        let mut call = th.begin(now);
        for _ in 0..1_000 {
            let wait = th.acquire_at(&0, &mut call, now, now).unwrap();
            now = now + wait;
            match th.record_at(&0, &mut call, now, &Outcome::throttled()) {
                Step::Retry(d) => now = now + d,
                other => panic!("gave up: {other:?}"),
            }
        }
        assert_eq!(call.attempts(), 1_000);
        assert_eq!(th.metrics().gave_up, 0);
        // A deadline the user sets still applies.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            deadline: Some(Duration::from_secs(30)),
            ..ThrottleConfig::default()
        })
        .unwrap();
        let t0 = Timestamp::ZERO;
        let mut now = t0;
        let mut call = th.begin(now);
        let stop = loop {
            match th.acquire_at(&0, &mut call, now, now) {
                Ok(wait) => now = now + wait,
                Err(e) => break e,
            }
            match th.record_at(&0, &mut call, now, &Outcome::throttled()) {
                Step::Retry(d) => now = now + d,
                Step::GiveUp(e) => break e,
                Step::Done => unreachable!(),
            }
        };
        assert_eq!(stop, StopReason::Deadline);
        assert!(stop.is_client_side());
        assert!(now <= t0 + Duration::from_secs(30));
    }

    #[test]
    fn retry_after_never_extends_the_backoffs_retry_limit() {
        // The backoff allows one retry; the attempt limit would allow four.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::None,
            backoff: BackoffConfig::constant(ms(100))
                .with_jitter(Jitter::None)
                .with_max_retries(1),
            max_attempts: 5,
            ..config()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        let throttled = throttled_after(Duration::from_secs(1));
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        assert_eq!(
            th.record_at(&0, &mut call, t, &throttled),
            Step::Retry(Duration::from_secs(1)),
            "Retry-After sets how long (longer than the 100 ms backoff)"
        );
        let t1 = t + Duration::from_secs(1);
        th.acquire_at(&0, &mut call, t1, t1).unwrap();
        assert_eq!(
            th.record_at(&0, &mut call, t1, &throttled),
            Step::GiveUp(StopReason::MaxAttempts),
            "the backoff's limit holds whatever Retry-After says"
        );
        // The same without Retry-After gives up at the same point.
        let mut call = th.begin(t1);
        th.acquire_at(&1, &mut call, t1, t1).unwrap();
        assert_eq!(
            th.record_at(&1, &mut call, t1, &Outcome::throttled()),
            Step::Retry(ms(100))
        );
        assert_eq!(
            th.record_at(&1, &mut call, t1, &Outcome::throttled()),
            Step::GiveUp(StopReason::MaxAttempts)
        );
        assert_eq!(th.metrics().gave_up, 2);
    }

    #[test]
    fn a_server_refusal_to_retry_ends_the_call() {
        let th: Throttle<u8> = Throttle::new(config()).unwrap();
        let t = Timestamp::ZERO;
        let forbidden = Outcome::throttled().with_hints(ServerHints {
            retry_after: Some(ms(300)),
            no_retry: true,
            policy: None,
            ..ServerHints::default()
        });
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        let budget = th.budget_of(&0);
        assert_eq!(
            th.record_at(&0, &mut call, t, &forbidden),
            Step::GiveUp(StopReason::RetryForbidden)
        );
        assert!(!StopReason::RetryForbidden.is_client_side());
        assert_eq!(th.budget_of(&0), budget, "no retry, nothing paid");
        // It was still a throttle: counted, the rate cut, the partition paused.
        let m = th.metrics();
        assert_eq!((m.throttled, m.retries, m.gave_up), (1, 0, 1));
        assert_eq!(th.rate_of(&0), Some(5.0));
        assert_eq!(th.try_acquire_at(&0, t), Err(ms(300)));
        // A server error with the refusal is not retried either.
        let mut call = th.begin(t);
        th.acquire_at(&1, &mut call, t, t).unwrap();
        let failed = Outcome {
            signal: Signal::ServerError,
            hints: ServerHints {
                no_retry: true,
                policy: None,
                ..ServerHints::default()
            },
        };
        assert_eq!(
            th.record_at(&1, &mut call, t, &failed),
            Step::GiveUp(StopReason::RetryForbidden)
        );
    }

    #[test]
    fn hints_lower_the_pace_before_any_429() {
        let th: Throttle<u8> = Throttle::new(config()).unwrap();
        let t = Timestamp::ZERO;
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        // An empty bucket of 2 that is full again in 10 s.
        assert_eq!(th.record_at(&0, &mut call, t, &capped(2, 10)), Step::Done);
        assert_eq!(
            th.rate_of(&0),
            Some(0.2),
            "refilling 2 over 10 s, below AIMD's 10/s"
        );
        assert_eq!(th.metrics().throttled, 0);
        // A generous hint never raises the rate: the 0.2/s cap holds until
        // its reset.
        let lots = Outcome::success().with_hints(ServerHints {
            remaining: Some(1_000_000),
            limit: Some(1_000_000),
            reset_after: Some(Duration::from_secs(1)),
            ..ServerHints::default()
        });
        th.record_at(&0, &mut th.begin(t), t, &lots);
        assert_eq!(th.rate_of(&0), Some(0.2));
        th.record_at(&0, &mut th.begin(t), t, &capped(1_000, 1));
        assert_eq!(th.rate_of(&0), Some(0.2));
    }

    #[test]
    fn a_window_with_quota_left_sets_no_cap_and_an_empty_one_pauses() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            hint_reset: ResetMeaning::WindowEnd,
            ..config()
        })
        .unwrap(); // AIMD 10/s
        let t = Timestamp::ZERO;
        let window = |remaining| {
            Outcome::success().with_hints(ServerHints {
                remaining: Some(remaining),
                reset_after: Some(Duration::from_secs(10)),
                ..ServerHints::default()
            })
        };
        th.record_at(&0, &mut th.begin(t), t, &window(2));
        assert_eq!(th.rate_of(&0), Some(10.0), "quota left: no cap");
        assert_eq!(th.try_acquire_at(&0, t), Ok(()));
        th.record_at(&0, &mut th.begin(t), t, &window(0));
        assert_eq!(th.rate_of(&0), Some(10.0), "the pace is not cut");
        assert_eq!(
            th.try_acquire_at(&0, t + ms(500)),
            Err(Duration::from_millis(9_500)),
            "nothing left: paused until the window ends"
        );
    }

    /// An empty bucket of `limit` that is full again in `reset_secs`: read
    /// as a refill, a cap of `limit / reset_secs` until then.
    fn capped(limit: u64, reset_secs: u64) -> Outcome {
        Outcome::success().with_hints(ServerHints {
            remaining: Some(0),
            limit: Some(limit),
            reset_after: Some(Duration::from_secs(reset_secs)),
            ..ServerHints::default()
        })
    }

    #[test]
    fn without_a_controller_a_header_never_raises_the_pace() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::None,
            ..config()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        th.record_at(&0, &mut call, t, &capped(1, 10));
        assert_eq!(th.rate_of(&0), Some(0.1));
        // One generous response must not move 0.1/s to 500/s.
        let t1 = t + ms(500);
        th.record_at(&0, &mut th.begin(t1), t1, &capped(500, 1));
        assert_eq!(th.rate_of(&0), Some(0.1));
        // When the cap lapses, back to the base: no pacing at all.
        let t2 = t + Duration::from_secs(10);
        th.record_at(&0, &mut th.begin(t2), t2, &Outcome::success());
        assert_eq!(th.rate_of(&0), None);
        // A fixed base rate comes back to exactly that rate, never above.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(3.0),
            ..config()
        })
        .unwrap();
        th.record_at(&0, &mut th.begin(t), t, &capped(1, 10));
        assert_eq!(th.rate_of(&0), Some(0.1));
        th.record_at(&0, &mut th.begin(t1), t1, &capped(500, 1));
        assert_eq!(th.rate_of(&0), Some(0.1));
        th.record_at(&0, &mut th.begin(t2), t2, &capped(500, 1));
        let back = th.rate_of(&0).unwrap();
        assert!((back - 3.0).abs() < 1e-6, "{back}");
    }

    #[test]
    fn cubic_before_its_first_throttle_is_not_raised_by_a_header() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Cubic(CubicConfig::default()),
            ..config()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        th.record_at(&0, &mut th.begin(t), t, &capped(1, 10));
        assert_eq!(th.rate_of(&0), Some(0.1));
        let t1 = t + ms(500);
        th.record_at(&0, &mut th.begin(t1), t1, &capped(500, 1));
        assert_eq!(th.rate_of(&0), Some(0.1));
    }

    #[test]
    fn the_pace_returns_to_the_controller_when_a_cap_lapses() {
        // A cap (an empty bucket's `limit / reset`) holds the pace down until
        // it lapses; then the controller's rate applies at once instead of a
        // crawl back from the cap (`limit / reset` is only a lower bound of
        // the bucket's refill rate). A window sets no cap at all.
        let t = Timestamp::ZERO;
        for (meaning, hint) in [
            (ResetMeaning::Refill, capped(3, 3)),
            (ResetMeaning::Auto, capped(3, 3)),
        ] {
            let th: Throttle<u8> = Throttle::new(ThrottleConfig {
                hint_reset: meaning,
                ..config()
            })
            .unwrap(); // AIMD 10/s
            th.record_at(&0, &mut th.begin(t), t, &hint); // 1/s for 3 s
            assert_eq!(th.rate_of(&0), Some(1.0), "{meaning:?}");
            let during = t + ms(1500);
            th.record_at(&0, &mut th.begin(during), during, &Outcome::success());
            assert_eq!(
                th.rate_of(&0),
                Some(1.0),
                "{meaning:?}: held until the reset"
            );
            let later = t + Duration::from_secs(3);
            th.record_at(&0, &mut th.begin(later), later, &Outcome::success());
            assert_eq!(
                th.rate_of(&0),
                Some(10.0),
                "{meaning:?}: the controller's rate"
            );
        }
    }

    /// The controller's (or base) rate of `key`'s partition: `None` when
    /// there is neither (no pacing without hints).
    fn controller_rate(th: &Throttle<u8>, key: u8) -> Option<f64> {
        match th.config().adaptation {
            Adaptation::Fixed(r) => Some(r),
            _ => th
                .partition(&key)
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .controller
                .as_ref()
                .and_then(|c| c.rate()),
        }
    }

    fn cap_in_force(th: &Throttle<u8>, key: u8, now: Timestamp) -> bool {
        th.partition(&key)
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .hints
            .cap_at(now)
            .is_some()
    }

    proptest::proptest! {
        #[test]
        fn a_header_never_raises_the_effective_rate(
            adaptation in 0u8..4,
            refill in proptest::prelude::any::<bool>(),
            steps in proptest::collection::vec(
                (0u8..3, 0u64..2_000, proptest::option::of((0u64..1_000, 0u64..30, 1u64..2_000))),
                1..200,
            ),
        ) {
            let adaptation = match adaptation {
                0 => Adaptation::None,
                1 => Adaptation::Fixed(5.0),
                2 => Adaptation::Aimd(AimdConfig::default()),
                _ => Adaptation::Cubic(CubicConfig::default()),
            };
            let th: Throttle<u8> = Throttle::new(ThrottleConfig {
                adaptation,
                hint_reset: if refill { ResetMeaning::Refill } else { ResetMeaning::WindowEnd },
                ..config()
            })
            .unwrap();
            let inf = f64::INFINITY;
            let mut now = Timestamp::ZERO;
            for (sig, gap_ms, hint) in steps {
                now = now + ms(gap_ms);
                // What the pace was just before this response: the rate in
                // force while a cap holds, else the controller's (or base).
                let before = if cap_in_force(&th, 0, now) {
                    th.rate_of(&0).unwrap_or(inf)
                } else {
                    controller_rate(&th, 0).unwrap_or(inf)
                };
                let signal = [Signal::Success, Signal::Throttled, Signal::ServerError][usize::from(sig)];
                let hints = ServerHints {
                    remaining: hint.map(|h| h.0),
                    reset_after: hint.map(|h| Duration::from_secs(h.1)),
                    limit: hint.map(|h| h.2),
                    ..ServerHints::default()
                };
                let mut call = th.begin(now);
                th.record_at(&0, &mut call, now, &Outcome { signal, hints });
                let after = th.rate_of(&0).unwrap_or(inf);
                let ctl = controller_rate(&th, 0);
                // Never above what it was or what the controller now says…
                proptest::prop_assert!(
                    after <= before.max(ctl.unwrap_or(0.0)) * (1.0 + 1e-6),
                    "{} -> {} (controller {:?})", before, after, ctl
                );
                // … and never above the controller (or base) because of a header.
                if let Some(c) = ctl {
                    proptest::prop_assert!(after <= c * (1.0 + 1e-6), "{} > controller {}", after, c);
                }
            }
        }
    }

    #[test]
    fn sre_rejects_locally_when_the_backend_refuses() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            sre: Some(SreConfig::default()),
            adaptation: Adaptation::None,
            budget: None,
            max_attempts: 1,
            ..config()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        let mut rejected = 0;
        for _ in 0..200 {
            let mut call = th.begin(t);
            match th.acquire_at(&0, &mut call, t, t) {
                Ok(_) => {
                    th.record_at(&0, &mut call, t, &Outcome::new(Signal::ServerError));
                }
                Err(StopReason::RejectedLocally) => rejected += 1,
                Err(other) => panic!("{other:?}"),
            }
        }
        assert!(rejected > 100, "{rejected}");
        assert_eq!(th.metrics().rejected_locally, rejected);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn invariants_hold_under_random_traffic(
            seed in proptest::prelude::any::<u64>(),
            steps in proptest::collection::vec(
                (0u8..3, 0u8..5, 0u64..500, proptest::option::of(0u64..10_000),
                 proptest::option::of((0u64..100, 0u64..120))),
                1..300,
            ),
        ) {
            let cfg = ThrottleConfig {
                seed,
                max_retry_after: Duration::from_secs(30),
                pause_jitter: 0.1,
                ..ThrottleConfig::default()
            };
            let th: Throttle<u8> = Throttle::new(cfg).unwrap();
            let mut now = Timestamp::ZERO;
            for (key, sig, gap_ms, retry_after_ms, hint) in steps {
                now = now + ms(gap_ms);
                let mut call = th.begin(now);
                let wait = th.acquire_at(&key, &mut call, now, now);
                proptest::prop_assert!(wait.is_ok());
                let signal = [Signal::Success, Signal::Throttled, Signal::ServerError,
                              Signal::Timeout, Signal::Failure][usize::from(sig)];
                let hints = ServerHints {
                    retry_after: retry_after_ms.map(ms),
                    remaining: hint.map(|h| h.0),
                    reset_after: hint.map(|h| Duration::from_secs(h.1)),
                    limit: None,
                    no_retry: false,
                    policy: None,
                };
                let step = th.record_at(&key, &mut call, now, &Outcome { signal, hints });
                if let Step::Retry(d) = step {
                    proptest::prop_assert!(d <= Duration::from_secs(30).max(Duration::from_secs(20)));
                }
                // The default controller's bounds (`AdaptiveConfig`).
                if let Some(rate) = th.rate_of(&key) {
                    proptest::prop_assert!(rate > 0.0 && rate <= 10_000.0 * (1.0 + 1e-6), "rate {}", rate);
                }
                let m = th.metrics();
                proptest::prop_assert!(m.attempts >= m.successes + m.throttled);
            }
        }
    }

    #[test]
    fn invalid_configs() {
        assert!(Throttle::<u8>::new(ThrottleConfig {
            max_attempts: 0,
            ..config()
        })
        .is_err());
        assert!(Throttle::<u8>::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(f64::NAN),
            ..config()
        })
        .is_err());
    }

    #[test]
    fn many_threads_call_through_one_shared_throttle_at_once() {
        // Eight threads, one partition, each with its own calls in flight
        // at the same time, each re-checking its slot before it sends as the
        // drivers do (other threads' cuts and pauses re-plan it): every call
        // ends, every attempt is counted once.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig::default()).unwrap();
        let threads: Vec<_> = (0..8u64)
            .map(|i| {
                let th = th.clone();
                std::thread::spawn(move || {
                    let mut now = Timestamp::from_nanos(i);
                    let mut done = 0;
                    for n in 0..200u64 {
                        let mut call = th.begin(now);
                        loop {
                            now = now + th.acquire_at(&0, &mut call, now, now).unwrap();
                            loop {
                                let more = th.recheck_at(&0, &mut call, now);
                                if more.is_zero() {
                                    break;
                                }
                                now = now + more;
                            }
                            let o = if (n + i) % 7 == 0 && call.attempts() < 3 {
                                Outcome::throttled()
                            } else {
                                Outcome::success()
                            };
                            match th.record_at(&0, &mut call, now, &o) {
                                Step::Done => break,
                                Step::Retry(d) => now = now + d,
                                Step::GiveUp(e) => panic!("{e}"),
                            }
                        }
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let done: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(done, 1_600);
        let m = th.metrics();
        assert_eq!(m.successes, 1_600);
        assert_eq!(m.attempts, m.successes + m.throttled);
        assert_eq!(m.gave_up, 0);
    }

    #[test]
    fn a_cut_or_pause_re_plans_the_slots_other_calls_hold() {
        let th: Throttle<u8> = Throttle::new(config()).unwrap(); // AIMD 10/s, burst 1
        let t = Timestamp::ZERO;
        let mut calls: Vec<Call> = (0..3).map(|_| th.begin(t)).collect();
        let waits: Vec<_> = calls
            .iter_mut()
            .map(|c| th.acquire_at(&0, c, t, t).unwrap())
            .collect();
        assert_eq!(waits, [ms(0), ms(100), ms(200)]);
        // Nothing changed: asked early, the wait left to its slot.
        assert_eq!(th.recheck_at(&0, &mut calls[1], t + ms(10)), ms(90));
        // The first is refused at 50 ms: cut to 5/s, paused 100 ms (to
        // 150 ms). The slots at 100 and 200 ms were handed out at 10/s.
        let step = th.record_at(&0, &mut calls[0], t + ms(50), &Outcome::throttled());
        assert_eq!(step, Step::Retry(ms(100)));
        assert_eq!(th.rate_of(&0), Some(5.0));
        assert_eq!(th.recheck_at(&0, &mut calls[1], t + ms(100)), ms(50));
        assert_eq!(th.recheck_at(&0, &mut calls[2], t + ms(200)), ms(150));
        // Their new slots stand.
        assert_eq!(
            th.recheck_at(&0, &mut calls[1], t + ms(150)),
            Duration::ZERO
        );
        assert_eq!(
            th.recheck_at(&0, &mut calls[2], t + ms(350)),
            Duration::ZERO
        );
        assert_eq!(th.metrics().attempts, 3, "a new slot is not a new attempt");
        // A lone call holds no slot ahead: its refusal leaves the schedule
        // as it was (the pace is cut, the pause resumes evenly).
        let lone: Throttle<u8> = Throttle::new(config()).unwrap();
        let mut call = lone.begin(t);
        lone.acquire_at(&0, &mut call, t, t).unwrap();
        lone.record_at(&0, &mut call, t + ms(50), &Outcome::throttled());
        let retry = lone
            .acquire_at(&0, &mut call, t + ms(150), t + ms(150))
            .unwrap();
        assert_eq!(
            lone.recheck_at(&0, &mut call, t + ms(150) + retry),
            Duration::ZERO
        );
    }

    #[test]
    fn a_rise_to_twice_the_pace_re_plans_the_slots_other_calls_hold() {
        // AIMD that adds 10/s per success.
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Aimd(AimdConfig {
                max_rate: 100.0,
                increase_step: 10.0,
                increase_every: 1,
                ..AimdConfig::default()
            }),
            ..config()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        // A refusal at 50 ms: cut to 5/s, paused 100 ms (to 150 ms).
        let mut first = th.begin(t);
        th.acquire_at(&0, &mut first, t, t).unwrap();
        th.record_at(&0, &mut first, t + ms(50), &Outcome::throttled());
        assert_eq!(th.rate_of(&0), Some(5.0));
        // Three calls queue at 5/s: slots at 150, 350 and 550 ms.
        let now = t + ms(60);
        let mut calls: Vec<Call> = (0..3).map(|_| th.begin(now)).collect();
        let waits: Vec<_> = calls
            .iter_mut()
            .map(|c| th.acquire_at(&0, c, now, now).unwrap())
            .collect();
        assert_eq!(waits, [ms(90), ms(290), ms(490)]);
        // The first succeeds at 160 ms: 15/s, three times the pace the other
        // two slots were handed out at.
        assert_eq!(
            th.recheck_at(&0, &mut calls[0], t + ms(150)),
            Duration::ZERO
        );
        th.record_at(&0, &mut calls[0], t + ms(160), &Outcome::success());
        assert!((th.rate_of(&0).unwrap() - 15.0).abs() < 1e-6);
        // The schedule starts over at the new pace, one interval after the
        // rise (the call that just sent is not followed at once): a call
        // arriving now is not queued behind the slots handed out at 5/s
        // (without the re-plan it would wait 186.7 ms, behind them
        // re-expressed at 15/s) but waits for 160 + 66.7 ms.
        let mut fresh = th.begin(t + ms(170));
        let wait = th
            .acquire_at(&0, &mut fresh, t + ms(170), t + ms(170))
            .unwrap();
        let expected = Duration::from_secs_f64(0.160 + 1.0 / 15.0 - 0.170);
        assert!(
            wait.abs_diff(expected) < Duration::from_micros(10),
            "{wait:?}"
        );
        // The calls holding the old slots take new ones when they wake.
        assert_eq!(
            th.recheck_at(&0, &mut calls[1], t + ms(350)),
            Duration::ZERO
        );
        assert_eq!(
            th.recheck_at(&0, &mut calls[2], t + ms(550)),
            Duration::ZERO
        );
        assert_eq!(
            th.metrics().attempts,
            5,
            "five calls, one attempt each: a new slot is not a new attempt"
        );
    }

    /// One success every 10 ms for a second in partition 0; the time after.
    fn admitting_100_a_second(th: &Throttle<u8>) -> Timestamp {
        let mut now = Timestamp::ZERO;
        for _ in 0..100 {
            now = now + ms(10);
            let mut call = th.begin(now);
            th.acquire_at(&0, &mut call, now, now).unwrap();
            th.record_at(&0, &mut call, now, &Outcome::success());
        }
        now
    }

    #[test]
    fn a_whole_second_retry_after_pauses_a_fast_partition_briefly() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            pause_jitter: 0.0,
            ..ThrottleConfig::default()
        })
        .unwrap();
        let t = Timestamp::ZERO;
        let now = admitting_100_a_second(&th);
        let one = throttled_after(Duration::from_secs(1));
        let mut refused = th.begin(now);
        th.acquire_at(&0, &mut refused, now, now).unwrap();
        // The refused call itself waits the whole second ...
        let Step::Retry(d) = th.record_at(&0, &mut refused, now, &one) else {
            panic!("retried")
        };
        assert!(d >= Duration::from_secs(1), "{d:?}");
        // ... the partition only two intervals at 100/s.
        assert_eq!(th.try_acquire_at(&0, now), Err(ms(20)));
        // A call sent after that short pause and refused again says the
        // wait was real: the next pause is the whole second.
        let later = now + ms(30);
        let mut next = th.begin(later);
        let w = th.acquire_at(&0, &mut next, later, later).unwrap();
        let at = later + w;
        th.record_at(&0, &mut next, at, &one);
        assert_eq!(th.try_acquire_at(&0, at), Err(Duration::from_secs(1)));
        // A slow partition, or a longer Retry-After, is honoured in full.
        let mut call = th.begin(t);
        th.acquire_at(&1, &mut call, t, t).unwrap();
        th.record_at(&1, &mut call, t, &one);
        assert_eq!(th.try_acquire_at(&1, t), Err(Duration::from_secs(1)));
        let two = throttled_after(Duration::from_secs(2));
        let fast: Throttle<u8> = Throttle::new(ThrottleConfig {
            pause_jitter: 0.0,
            ..ThrottleConfig::default()
        })
        .unwrap();
        let now = admitting_100_a_second(&fast);
        let mut call = fast.begin(now);
        fast.acquire_at(&0, &mut call, now, now).unwrap();
        fast.record_at(&0, &mut call, now, &two);
        assert_eq!(fast.try_acquire_at(&0, now), Err(Duration::from_secs(2)));
    }

    #[test]
    fn a_detected_windows_quota_left_is_spent_by_its_reset() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            adaptation: Adaptation::Fixed(0.5),
            ..config()
        })
        .unwrap();
        let window = |remaining: u64, reset: u64, refused: bool| {
            let o = if refused {
                Outcome::throttled()
            } else {
                Outcome::success()
            };
            o.with_hints(ServerHints {
                remaining: Some(remaining),
                limit: Some(100),
                reset_after: Some(Duration::from_secs(reset)),
                retry_after: refused.then(|| Duration::from_secs(reset)),
                ..ServerHints::default()
            })
        };
        let close = |key: u8, want: f64| {
            let got = th.rate_of(&key).unwrap();
            assert!((got - want).abs() < 1e-6 * want, "{got} ≠ {want}");
        };
        let t = Timestamp::ZERO;
        // Quota left before the headers have shown what their reset means:
        // the controller's pace.
        th.record_at(&0, &mut th.begin(t), t, &window(60, 50, false));
        close(0, 0.5);
        // A 429 whose `Retry-After` is the reset: a window, which ends then.
        let t1 = t + Duration::from_secs(10);
        th.record_at(&0, &mut th.begin(t1), t1, &window(0, 40, true));
        let detected = th.partition(&0).state.lock().unwrap().hints.detected();
        assert_eq!(detected, Some(ResetMeaning::WindowEnd));
        // The next window: 99 left for 60 s, above the controller's pace.
        let t2 = t + Duration::from_secs(50);
        th.record_at(&0, &mut th.begin(t2), t2, &window(99, 60, false));
        close(0, 99.0 / 60.0);
        // Less left than the controller's pace spends: the controller's.
        th.record_at(&0, &mut th.begin(t2), t2, &window(10, 60, false));
        close(0, 0.5);
        // A refusal while the count says quota is left: the count
        // over-states, and sets no floor from then on.
        th.record_at(&0, &mut th.begin(t2), t2, &window(50, 60, true));
        th.record_at(&0, &mut th.begin(t2), t2, &window(99, 60, false));
        close(0, 0.5);
    }

    #[test]
    fn the_cuts_of_the_refusals_that_showed_a_window_are_undone_once_it_comes_back_whole() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig::default()).unwrap();
        // A window of 100 ending at 60 s, told as `X-RateLimit-*` with the
        // limit: until the reset instant has stood still a while, it reads
        // as a bucket's refill, and its refusals cut.
        let answer = |now: Timestamp, left: u64, refused: bool| {
            let o = if refused {
                Outcome::throttled()
            } else {
                Outcome::success()
            };
            let end = Timestamp::ZERO + Duration::from_secs(60);
            o.with_hints(ServerHints {
                remaining: Some(left),
                limit: Some(100),
                reset_after: Some(end.saturating_duration_since(now)),
                ..ServerHints::default()
            })
        };
        let at = |ms: u64| Timestamp::ZERO + Duration::from_millis(ms);
        let send = |key: u8, now: Timestamp, left: u64, refused: bool| {
            let mut call = th.begin(now);
            th.acquire_at(&key, &mut call, now, now).unwrap();
            th.record_at(&key, &mut call, now, &answer(now, left, refused));
        };
        let controller = |key: u8| controller_rate(&th, key);
        // Partitions 0 and 2 spend their quota unpaced (others share the
        // window).
        for key in [0, 2] {
            for (i, left) in [80, 40, 10].into_iter().enumerate() {
                send(key, at(300 * i as u64), left, false);
            }
            assert_eq!(th.rate_of(&key), None);
        }
        // Partition 1 paces already: a bare refusal ended its burst.
        for i in 0..10 {
            send(1, at(10 * i), 90 - i, false);
        }
        th.record_at(&1, &mut th.begin(at(100)), at(100), &Outcome::throttled());
        assert!(th.rate_of(&1).is_some(), "a bare refusal starts the pace");
        send(1, at(900), 10, false);
        let paced = th.rate_of(&1).unwrap();
        for key in [0, 1, 2] {
            // Refusals of the empty window, the same reset instant each time.
            for ms in [1_000, 1_500, 2_000, 2_600] {
                send(key, at(ms), 0, true);
            }
            let reading = th.partition(&key).state.lock().unwrap().hints.detected();
            assert_eq!(reading, None, "not yet told apart");
            let cut = controller(key);
            assert!(
                cut.is_some_and(|c| c < paced),
                "{key}: {cut:?} is a cut of {paced}"
            );
            // The instant stood still for 2.5 s: a window's end, and a pause
            // until then.
            send(key, at(3_600), 0, true);
            let reading = th.partition(&key).state.lock().unwrap().hints.detected();
            assert_eq!(reading, Some(ResetMeaning::WindowEnd));
            assert_eq!(
                th.try_acquire_at(&key, at(3_600)),
                Err(Duration::from_millis(56_400)),
                "paused until the window ends"
            );
            assert_eq!(
                controller(key),
                cut,
                "the cuts stand until the window is back"
            );
        }
        // The next window comes back whole: its refusals said nothing of the
        // pace, and the controller is what it was before them.
        send(0, at(60_100), 95, false);
        assert_eq!(th.rate_of(&0), None, "unpaced, as before the cuts");
        for _ in 0..10 {
            assert_eq!(th.try_acquire_at(&0, at(60_100)), Ok(()));
        }
        send(1, at(60_100), 95, false);
        let back = controller(1);
        assert!(
            back.is_some_and(|r| r >= paced),
            "{back:?}: from {paced} on"
        );
        // A quota that comes back only in part (a sliding window counter's
        // previous window still weighs): the cuts stand.
        let cut = controller(2);
        send(2, at(60_100), 10, false);
        assert!(controller(2).is_some_and(|r| r < paced) && cut.is_some());
    }

    #[test]
    fn a_refusal_under_the_hints_cap_cuts_from_the_cap() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig::default()).unwrap();
        let at = |ms: u64| Timestamp::ZERO + Duration::from_millis(ms);
        // A burst answered at once, then a bare refusal: pacing from there.
        for i in 0..10 {
            th.record_at(&0, &mut th.begin(at(i)), at(i), &Outcome::success());
        }
        th.record_at(&0, &mut th.begin(at(10)), at(10), &Outcome::throttled());
        let controller = |th: &Throttle<u8>| controller_rate(th, 0).unwrap();
        let cap = 17.0 / 9.0;
        assert!(controller(&th) > 2.0 * cap, "{}", controller(&th));
        // An empty bucket of 17, full again in 9 s: paced at 17 / 9.
        let empty = |signal: Signal| {
            Outcome::new(signal).with_hints(ServerHints {
                remaining: Some(0),
                limit: Some(17),
                reset_after: Some(Duration::from_secs(9)),
                ..ServerHints::default()
            })
        };
        let t = at(2_000);
        th.record_at(&0, &mut th.begin(t), t, &empty(Signal::Success));
        assert!((th.rate_of(&0).unwrap() - cap).abs() < 1e-3);
        assert!(controller(&th) > 2.0 * cap, "a success leaves it be");
        // Refused at that pace (another client shares the bucket): the cut
        // is from the cap, and slows the sends.
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        let t = at(3_500);
        th.record_at(&0, &mut call, t, &empty(Signal::Throttled));
        assert!(th.rate_of(&0).unwrap() < 0.6 * cap, "{:?}", th.rate_of(&0));
    }

    #[test]
    fn a_windows_refusal_pauses_until_the_window_ends_without_a_cut() {
        let th: Throttle<u8> = Throttle::new(ThrottleConfig {
            hint_reset: ResetMeaning::WindowEnd,
            ..config()
        })
        .unwrap(); // AIMD 10/s
        let t = Timestamp::ZERO;
        let refused = Outcome::throttled().with_hints(ServerHints {
            remaining: Some(0),
            limit: Some(100),
            reset_after: Some(Duration::from_secs(40)),
            retry_after: Some(Duration::from_secs(40)),
            ..ServerHints::default()
        });
        let mut call = th.begin(t);
        th.acquire_at(&0, &mut call, t, t).unwrap();
        assert!(matches!(
            th.record_at(&0, &mut call, t, &refused),
            Step::Retry(_)
        ));
        assert_eq!(th.try_acquire_at(&0, t), Err(Duration::from_secs(40)));
        assert_eq!(th.rate_of(&0), Some(10.0), "the window's end, not the pace");
        // A plain 429 still cuts.
        th.record_at(&1, &mut th.begin(t), t, &Outcome::throttled());
        assert_eq!(th.rate_of(&1), Some(5.0));
    }
}
