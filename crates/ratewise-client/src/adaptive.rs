//! [`Adaptive`]: the rate controller of the default
//! [`Throttle`](super::throttle::Throttle) — AIMD that reads what the server
//! says about its remaining quota, with steps sized by the client's rate.
//! [`Adaptive`] lists its rules.
//!
//! ```
//! use ratewise_client::adaptive::{Adaptive, AdaptiveConfig};
//! use ratewise_client::pacer::RateController;
//! use ratewise_client::{Outcome, ServerHints};
//! use ratewise::Timestamp;
//! use std::time::Duration;
//!
//! let mut c = Adaptive::new(AdaptiveConfig::default())?;
//! let mut now = Timestamp::ZERO;
//! for _ in 0..20 {
//!     c.on_send(now); // 20 sends in one second: 20/s measured
//!     now = now + Duration::from_millis(50);
//! }
//! assert_eq!(c.rate(), None, "no pacing before the first throttle");
//! let cut = c.on_outcome(now, &Outcome::throttled()).unwrap();
//! let empty = Outcome::success().with_hints(ServerHints { remaining: Some(0), ..ServerHints::default() });
//! assert_eq!(c.on_outcome(now, &empty), Some(cut)); // quota exhausted: holds
//! assert!(c.on_outcome(now, &Outcome::success()).unwrap() > cut);
//! # Ok::<(), ratewise_client::ConfigError>(())
//! ```

use std::time::Duration;

use super::config::{at_least, positive, rate_range_and_decrease, within, ConfigError};
use super::pacer::RateController;
use super::{Outcome, Signal};
use ratewise::time::Timestamp;

/// How an [`Adaptive`] controller moves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveConfig {
    /// The lowest pacing rate, requests per second (default 0.05: one
    /// request per 20 s).
    pub min_rate: f64,
    /// The highest pacing rate, requests per second (default 10 000).
    pub max_rate: f64,
    /// The rate a throttle multiplies the current rate by (default 0.5).
    pub decrease_factor: f64,
    /// What one success adds when the server sends no
    /// `RateLimit-Remaining`, as a fraction of the rate just before the
    /// latest cut (at most the rate pacing began at), before probing grows
    /// it (default 0.007).
    pub increase_fraction: f64,
    /// The same when `RateLimit-Remaining` says there is quota to spare
    /// (default 0.003). It is smaller because every client of the quota sees
    /// the same spare quota at the same time and rises together.
    pub increase_fraction_hinted: f64,
    /// With both a remaining count and a limit, the share of the limit left
    /// at which the hinted step is whole (default 0.5); below it the step
    /// shrinks in proportion, to nothing at an empty quota; above it the
    /// step grows in proportion, to ten times at a quota nobody uses.
    /// Clients that share a quota all see it running low, so they slow
    /// their climb together before it overflows. 0 turns this off.
    pub full_step_spare: f64,
    /// The shortest time between two cuts (default 1 s).
    pub decrease_cooldown: Duration,
    /// The send rate assumed when the first throttle comes before any send
    /// was measured (default 1/s); pacing starts at `decrease_factor ×` it.
    pub fallback_rate: f64,
    /// Without a `RateLimit-Remaining` header, how long without a cut
    /// doubles the step (default 20 s): capacity that frees up is claimed
    /// in seconds, not minutes.
    pub probe_doubling: Duration,
    /// The most the step grows by while probing (default 64).
    pub probe_max_factor: f64,
    /// A cut never goes below this share of the rate the server admitted
    /// (successes per second over the last one to two seconds), when at
    /// least [`admitted_min_count`](AdaptiveConfig::admitted_min_count)
    /// successes were measured (default 0.9; 0 turns it off). A partition
    /// refused while its successes keep coming is at the server's rate, and
    /// what it admitted is that rate: a blind halving would leave half of it
    /// unused and take many successes to climb back.
    pub admitted_floor: f64,
    /// Between pacing's start and the next cut, a success (with quota to
    /// spare, or no remaining count) raises the rate by at least this
    /// fraction of itself (default 0.01: doubling in about 70 successes).
    /// The first cut halves a rate measured on an unpaced burst, which says
    /// little about the server: a client of a fast server found far below
    /// its limit climbs back in seconds rather than by small steps, and the
    /// next cut, measured at a paced rate, ends the climb.
    pub start_growth: f64,
    /// [`start_growth`](AdaptiveConfig::start_growth) for a partition whose
    /// calls a driver let out in a slow start before its first cut
    /// (default 0.05: doubling in about 14 successes). The slow start kept
    /// the burst small, so the first cut halves a rate far below what the
    /// many waiting calls want; a lone client never slow-starts and keeps
    /// `start_growth`.
    pub slow_started_growth: f64,
    /// The fewest successes in the measuring window for
    /// [`admitted_floor`](AdaptiveConfig::admitted_floor) to apply
    /// (default 20): a slow client's few successes measure noise, so it
    /// cuts by `decrease_factor` alone.
    pub admitted_min_count: u32,
    /// Where the server sends no remaining count and no window was found, a
    /// success raises a rate `r` by at least `increase_fraction ×
    /// fair_climb × base² / r` (at most doubling it), `base` being the rate
    /// pacing began at (default 0.03; 0 turns it off). Per second that is
    /// the same rise at any rate: a client cut far below its peers climbs
    /// back as fast as they climb, as AIMD's fairness needs. The step
    /// proportional to the client's own rate rises by `r²` per second, so a
    /// client cut in a cascade while its peers took the quota stayed
    /// starved (0.4/s for a minute while seven peers of a 100/s bucket ran
    /// at 25/s). The floor passes that step only below about
    /// `√fair_climb × base`.
    pub fair_climb: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            min_rate: 0.05,
            max_rate: 10_000.0,
            decrease_factor: 0.5,
            increase_fraction: 0.007,
            increase_fraction_hinted: 0.003,
            full_step_spare: 0.5,
            decrease_cooldown: Duration::from_secs(1),
            fallback_rate: 1.0,
            probe_doubling: Duration::from_secs(20),
            probe_max_factor: 64.0,
            admitted_floor: 0.9,
            start_growth: 0.01,
            slow_started_growth: 0.05,
            admitted_min_count: 20,
            fair_climb: 0.03,
        }
    }
}

impl AdaptiveConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        rate_range_and_decrease(self.min_rate, self.max_rate, self.decrease_factor)?;
        at_least("increase_fraction", self.increase_fraction, 0.0)?;
        at_least(
            "increase_fraction_hinted",
            self.increase_fraction_hinted,
            0.0,
        )?;
        within("full_step_spare", self.full_step_spare, 0.0, 1.0)?;
        at_least("probe_max_factor", self.probe_max_factor, 1.0)?;
        within("admitted_floor", self.admitted_floor, 0.0, 1.0)?;
        within("start_growth", self.start_growth, 0.0, 1.0)?;
        within("slow_started_growth", self.slow_started_growth, 0.0, 1.0)?;
        within("fair_climb", self.fair_climb, 0.0, 1.0)?;
        positive("probe_doubling", self.probe_doubling.as_secs_f64())?;
        within(
            "fallback_rate",
            self.fallback_rate,
            self.min_rate,
            self.max_rate,
        )?;
        Ok(())
    }
}

/// How many times the whole hinted step a success adds when the reported
/// quota is entirely unused (in proportion above `full_step_spare`).
const SPARE_BOOST: f64 = 10.0;

/// A first refusal that comes within this of the first success measures
/// the burst before it over this span: a refusal a few milliseconds into a
/// burst has measured the round trip, not a rate.
const START_BURST_SPAN: Duration = Duration::from_millis(100);

/// The fewest successes in such a burst for it to be the first cut's
/// measure: fewer say nothing of the server's rate (many clients sharing
/// one quota each see one or two), and the cut halves the send rate
/// measured over the last one to two seconds.
const START_MIN_SUCCESSES: u32 = 5;

/// Until the second cut, the growth per success after a first cut that
/// measured nothing: the rate doubles per success, as TCP's slow start
/// doubles its window per round trip, and the second cut (to what the
/// server admitted since the first) ends it.
const BLIND_START_GROWTH: f64 = 1.0;

/// A time no clock reaches (585 years of nanoseconds): "not yet" where a
/// plain timestamp stands for an optional one.
const NEVER: Timestamp = Timestamp::from_nanos(u64::MAX);

/// Events counted in whole seconds: the current second and the one before,
/// enough to measure the rate a client was sending at when first throttled
/// (or the rate its successes came back at).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RateMeter {
    /// The first event ever counted.
    first: Option<Timestamp>,
    second: u64,
    current: u32,
    previous: u32,
}

impl RateMeter {
    pub(crate) fn note(&mut self, now: Timestamp) {
        self.first.get_or_insert(now);
        let s = now.as_nanos() / 1_000_000_000;
        if s != self.second {
            self.previous = if s == self.second + 1 {
                self.current
            } else {
                0
            };
            self.current = 0;
            self.second = s;
        }
        self.current = self.current.saturating_add(1);
    }

    /// The events counted over the last one to two seconds, and that span
    /// in seconds (the second so far and the whole one before it).
    fn window(&self, now: Timestamp) -> Option<(u32, f64)> {
        let ns = now.as_nanos();
        let n = match (ns / 1_000_000_000).checked_sub(self.second) {
            Some(0) => self.previous.saturating_add(self.current),
            Some(1) => self.current,
            _ => return None,
        };
        Some((n, 1.0 + (ns % 1_000_000_000) as f64 / 1e9))
    }

    /// Events per second over the last one to two seconds.
    fn rate(&self, now: Timestamp) -> Option<f64> {
        self.rate_of_at_least(now, 1)
    }

    /// [`rate`](Self::rate), but for a meter younger than its window,
    /// since its first event (over at least [`START_BURST_SPAN`]): sends
    /// that began a fifth of a second ago did not go at a fifth of their
    /// pace.
    fn young_rate(&self, now: Timestamp) -> Option<f64> {
        let (n, window) = self.window(now).filter(|&(n, _)| n >= 1)?;
        let age = self
            .first
            .map_or(window, |f| now.saturating_duration_since(f).as_secs_f64());
        let span = if age < window {
            age.max(START_BURST_SPAN.as_secs_f64())
        } else {
            window
        };
        Some(f64::from(n) / span)
    }

    /// Events per second over the last one to two seconds, if at least
    /// `min` were counted there.
    pub(crate) fn rate_of_at_least(&self, now: Timestamp, min: u32) -> Option<f64> {
        let (n, window) = self.window(now)?;
        (n >= min.max(1)).then(|| f64::from(n) / window)
    }

    /// For events that all came within `span` of the first (at least
    /// `min` of them): their count per `span`. A burst answered within a
    /// few round trips has no rate of its own, and dividing it by the
    /// second-long window would understate it a hundredfold.
    fn burst_rate(&self, now: Timestamp, min: u32, span: Duration) -> Option<f64> {
        let first = self.first?;
        let (n, _) = self.window(now)?;
        (n >= min.max(1) && now.saturating_duration_since(first) <= span)
            .then(|| f64::from(n) / span.as_secs_f64())
    }
}

/// How a first cut that measured nothing came about (see [`Adaptive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blind {
    /// The first cut measured something (or none came yet).
    No,
    /// A refusal a round trip after a lone first success: the rate doubles
    /// per success until the second cut.
    LoneSuccess,
    /// A refusal before any success (or before five, while at least two
    /// sends per answer are still out), with sends out at once: the burst's
    /// other answers may all come at once, so the rate doubles at most once
    /// per interval and per [`START_BURST_SPAN`] (after a pause, a bucket's
    /// refilled burst admits sends at any pace: doubling per interval ran
    /// the rate up to its ceiling on that burst alone), and the second cut
    /// sets the step's scale.
    Burst,
}

/// The default throttle's rate controller (see the [module](self)).
///
/// * **No pacing until there is a reason.** Until the first throttle the
///   controller only measures its send rate; pacing then starts at
///   `decrease_factor ×` that rate, as the AWS adaptive mode does.
/// * **`RateLimit-Remaining: 0` holds the rate**; a success with quota to
///   spare adds a fixed fraction of the rate pacing began at (the same step
///   after every cut, so clients sharing a quota converge to equal shares),
///   shrinking once less than `full_step_spare` of the limit is spare and
///   growing up to ten times as the quota left nears the whole limit
///   (capacity nobody uses is claimed in seconds). Where refusals say the
///   quota is empty, the boost stops at the rate of the latest cut (above
///   it, spare quota is a bucket's burst draining) and a shallow cut's
///   step is as gentle as an unhinted one's — until every success for
///   five seconds has said that nine tenths of the limit or more is left:
///   a burst draining would have fallen below that, so the quota is
///   nobody's (clients sharing it have finished) and the boost claims it.
/// * **A count that keeps saying "none left" while it admits is no
///   count**: once more successes than the stated limit said so since the
///   latest refusal, the rate climbs as if the server sent no count (a
///   bucket of one admits request after request with `Remaining: 0`, and
///   a whole-second reset rounds its 50 ms up to a second).
/// * **A refusal's remaining count is the empty mark**: a server that
///   refuses while its headers say quota is left over-states its quota, and
///   only the count above what the refusal said is spare.
/// * **Without a remaining count the step probes**: a fraction of the rate
///   just before the latest cut, doubled every `probe_doubling` without a
///   cut, up to `probe_max_factor ×`.
/// * **A client cut far down climbs as fast as its peers**: without a
///   remaining count or a closed quota, the step is at least what gives the
///   same rise per second at any rate (`fair_climb`), so a client cut in a
///   cascade while its peers took the quota is not left behind.
/// * **A quota found closed slows the probe**: once the partition has found
///   its quota closed for a while
///   ([`RateController::note_closed_quota`]: a window spent, a log full),
///   the step grows at most four-fold while the rate is above what the
///   server admitted over its latest cycle (from the start of one run of
///   refusals to the start of the next). A climb that speeds up the longer
///   it goes unrefused overshoots a window by the window's whole length.
/// * **A quota found shut keeps what it admitted**, where the server sends
///   no remaining count: a cut with no success since the previous one, nor
///   for a cooldown, goes no lower than what got through since the quota
///   last opened (from the first success after a cooldown or more without
///   any), over the time since; once the quota has been found closed for a while, no cut goes
///   below the rate admitted over the latest whole cycle. Halving once per
///   refused probe left a client of a spent window at its floor when the
///   window opened again (300 a minute: 0.07/s, minutes to climb back).
/// * **A first refusal after a driver's slow start**
///   ([`RateController::note_slow_started`]) measures the sends since the
///   first over the time they took (at least a tenth of a second), not
///   over the meter's one to two seconds: the gate spread a burst that
///   began a moment ago, and counting it over a whole second started
///   pacing at a fifth of the server's rate.
/// * **A first refusal within a tenth of a second of the first success**,
///   after at least five successes, measures the burst over that tenth of
///   a second, not over a whole second.
/// * **A first refusal a round trip after a lone first success** measured
///   nothing (a server with no burst, say): pacing starts at half the
///   sends' pace over the tenth of a second they came in, and until the
///   second cut each success doubles the rate, as TCP's slow start doubles
///   its window.
///   So does a first refusal before any success while two or more sends
///   were out within a tenth of a second (or before five successes while
///   at least two sends per answer are still out: a burst answered out of
///   order), but doubling at most once per interval (the burst's other
///   answers come at once), and its second cut sets the additive step's
///   scale.
/// * **Until the second cut** a success adds at least `start_growth` of the
///   rate (the first cut halved a rate measured on an unpaced burst); the
///   cooldown is one interval, and the second cut goes to the rate the
///   server admitted since the first (when at least `admitted_min_count`
///   successes came), not to half an overshoot, nor lower than half of
///   what got through while the client was free to send (a `Retry-After`'s
///   wait since the first cut taken out: a whole-second one, rounded up
///   from milliseconds, would otherwise dilute the count).
/// * **A refusal whose `Retry-After` is longer than `decrease_cooldown`**
///   cuts no higher than the successes since the quota last opened, per
///   second from then to the end of the wait.
/// * **A refusal too soon after a cut to cut again holds the rate** until
///   the next cut may come, unless the pace since the cut is refused as
///   often as it is admitted (twice at least, with a success between):
///   then it cuts at once.
/// * **A cut** comes at most once per `decrease_cooldown` and per interval,
///   never below `admitted_floor` of the rate the server recently admitted.
/// * **A doubling climb after a lone success ends no lower than a quarter of
///   the rate refused**: it was admitted at its pace one or two doublings
///   before, whatever its successes since the first cut averaged (a
///   driver's start gate lets its first calls out one at a time).
/// * Invariant: while pacing, `min_rate ≤ rate ≤ max_rate`.
#[derive(Clone, Debug)]
pub struct Adaptive {
    config: AdaptiveConfig,
    rate: Option<f64>,
    /// The rate pacing began at (the first cut, or the first cap): the
    /// scale of every additive step.
    base: f64,
    /// When the latest cut came ([`NEVER`] before the first: a plain
    /// timestamp keeps the controller small, and every partition holds
    /// one).
    cut_at: Timestamp,
    /// The rate just before the latest cut (or the cap pacing began at):
    /// the scale of the step when the server sends no remaining count.
    at_cut: f64,
    meter: RateMeter,
    /// Successes, counted the same way: the rate the server admitted.
    admitted: RateMeter,
    /// The latest cut's depth as a share of a full `decrease_factor` cut
    /// (1 unless the admitted rate held it up): the unhinted step's scale.
    gentle: f64,
    /// Between the first cut and the next one.
    slow_start: bool,
    /// A driver let this partition's calls out in a slow start.
    slow_started: bool,
    /// Whether the first cut measured nothing, and how (until the second).
    blind: Blind,
    /// When a blind start's rate last grew.
    grown_at: Timestamp,
    /// The remaining count the latest refusal carried: a server that
    /// refuses while its count says quota is left over-states the quota by
    /// that much (or counts another limit than the one refusing), so only
    /// the count above it is spare. (32 bits, saturating: no quota counts
    /// past four billion, and the controller stays small.)
    refused_at_remaining: u32,
    /// Successes since the latest cut.
    since_cut: u32,
    /// Sends since the latest cut.
    sent_since_cut: u32,
    /// Refusals since the latest cut (saturating: only its ratio to the
    /// successes since the cut, while they are few, is read).
    refused_since_cut: u16,
    /// Until when a refusal that came too soon to cut holds the rate.
    /// (`Timestamp::ZERO`: none.)
    held_until: Timestamp,
    /// The latest span a refusal's `Retry-After` told the client to stay
    /// quiet: from the refusal, this many milliseconds (saturating; kept
    /// small so the controller stays small).
    quiet_from: Timestamp,
    /// The length of that span.
    quiet_ms: u32,
    /// The partition found its quota closed for a while: above the rate
    /// the server admitted over its latest cycle, the unhinted step grows
    /// at most `WINDOWED_PROBE_MAX`-fold.
    windowed: bool,
    /// The rate admitted per cycle of refusals.
    cycles: Cycles,
    /// Successes whose remaining count said none left, since the latest
    /// refusal.
    empty_successes: u32,
    /// The first success of the current run whose remaining count said
    /// the quota was nearly whole ([`NEVER`]: the latest said otherwise,
    /// or a refusal came since).
    full_since: Timestamp,
}

/// The share of the limit a remaining count must show for the quota to
/// count as nearly whole.
const FULL_SHARE: f64 = 0.9;

/// How long the quota must have stayed nearly whole, success after
/// success, for the hinted step's boost to go on above the rate of the
/// latest cut: a bucket's burst draining falls below [`FULL_SHARE`] long
/// before, unless the partition sends at about the refill rate or less.
const FULL_FOR: Duration = Duration::from_secs(5);

/// How far the unhinted step may grow above the rate of the latest cycle
/// once the quota has been found closed for a while (else
/// `probe_max_factor`): a climb that speeds up the longer it goes
/// unrefused overshoots a window by the window's whole length.
const WINDOWED_PROBE_MAX: f64 = 4.0;

/// The rate a server admitted over one cycle: from the start of one run of
/// refusals to the start of the next (with at least
/// `admitted_min_count` successes between). Over a window's cycle it is the
/// window's rate, where the one-to-two-second meter says zero or a burst.
#[derive(Clone, Copy, Debug)]
struct Cycles {
    /// When the current cycle's run of refusals began ([`NEVER`]: none
    /// yet).
    start: Timestamp,
    /// Successes since then.
    successes: u32,
    /// Whether the latest answer was a refusal.
    refusing: bool,
    /// Successes per second over the latest whole cycle; negative until
    /// one closes (a plain `f64` keeps the controller small).
    rate: f64,
    /// The first success of the current opening: the first after a
    /// cooldown or more without any (`Timestamp::ZERO` before any).
    opened: Timestamp,
    /// The latest success, in milliseconds after `opened` (saturating).
    last_success_ms: u32,
    /// Successes since `opened`.
    open_successes: u32,
}

impl Default for Cycles {
    fn default() -> Self {
        Cycles {
            start: NEVER,
            successes: 0,
            refusing: false,
            rate: -1.0,
            opened: Timestamp::ZERO,
            last_success_ms: 0,
            open_successes: 0,
        }
    }
}

impl Cycles {
    /// A success at `now`; one that comes `gap` or more after the previous
    /// (or the first) opens a new opening.
    fn success(&mut self, now: Timestamp, gap: Duration) {
        self.refusing = false;
        self.successes = self.successes.saturating_add(1);
        if self.open_successes == 0 || self.without_success(now) >= gap {
            self.opened = now;
            self.open_successes = 0;
        }
        self.open_successes = self.open_successes.saturating_add(1);
        let since = now.saturating_duration_since(self.opened).as_millis();
        self.last_success_ms = u32::try_from(since).unwrap_or(u32::MAX);
    }

    /// From the first success of the current opening to its latest.
    fn open_span(&self) -> Duration {
        Duration::from_millis(u64::from(self.last_success_ms))
    }

    /// Successes per second over the latest whole cycle, once one closed.
    fn latest_rate(&self) -> Option<f64> {
        (self.rate >= 0.0).then_some(self.rate)
    }

    /// How long since the latest success.
    fn without_success(&self, now: Timestamp) -> Duration {
        let last = self
            .opened
            .saturating_add(Duration::from_millis(u64::from(self.last_success_ms)));
        now.saturating_duration_since(last)
    }

    /// Successes per second since the current opening began, when at least
    /// `min` came: over a window closed since, it falls to the window's
    /// rate by the time the window opens again.
    fn opening_rate(&self, now: Timestamp, min: u32) -> Option<f64> {
        self.rate_until(now).filter(|_| self.open_successes >= min)
    }

    /// The successes since the current opening began, per second from
    /// then until `end` (none before a success).
    fn rate_until(&self, end: Timestamp) -> Option<f64> {
        let span = end.saturating_duration_since(self.opened).as_secs_f64();
        (self.open_successes > 0 && span > 0.0).then(|| f64::from(self.open_successes) / span)
    }

    /// A refusal at `now`: a run of them after at least `min` successes
    /// closes a cycle (fewer make a blip inside the current one).
    fn refusal(&mut self, now: Timestamp, min: u32) {
        if self.refusing {
            return;
        }
        self.refusing = true;
        if self.start != NEVER && self.successes < min {
            return;
        }
        if self.start != NEVER {
            let s = self.start;
            let span = now.saturating_duration_since(s).as_secs_f64();
            if span > 0.0 {
                self.rate = f64::from(self.successes) / span;
            }
        }
        self.start = now;
        self.successes = 0;
    }
}

impl Adaptive {
    /// A controller that does not pace until its first throttle.
    ///
    /// # Errors
    /// [`ConfigError`] for a non-positive or inconsistent rate, a decrease
    /// factor outside `(0, 1)`, or a negative increase.
    pub fn new(config: AdaptiveConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Adaptive {
            config,
            rate: None,
            base: config.fallback_rate,
            cut_at: NEVER,
            at_cut: config.fallback_rate,
            meter: RateMeter::default(),
            admitted: RateMeter::default(),
            gentle: 1.0,
            slow_start: false,
            slow_started: false,
            blind: Blind::No,
            grown_at: Timestamp::ZERO,
            refused_at_remaining: 0,
            since_cut: 0,
            sent_since_cut: 0,
            refused_since_cut: 0,
            held_until: Timestamp::ZERO,
            quiet_from: Timestamp::ZERO,
            quiet_ms: 0,
            windowed: false,
            cycles: Cycles::default(),
            empty_successes: 0,
            full_since: NEVER,
        })
    }

    /// How much the unhinted step has grown since the latest cut: doubled
    /// every `probe_doubling`, at most `probe_max_factor`.
    fn probe(&self, now: Timestamp) -> f64 {
        let quiet = self
            .last_cut()
            .map_or(0.0, |c| now.saturating_duration_since(c).as_secs_f64());
        let doublings = quiet / self.config.probe_doubling.as_secs_f64();
        let cycle_rate = self.cycles.latest_rate();
        let above_cycle = match (self.rate, cycle_rate) {
            (Some(r), Some(c)) => r >= c,
            _ => false,
        };
        let max = if self.windowed && above_cycle {
            WINDOWED_PROBE_MAX.min(self.config.probe_max_factor)
        } else {
            self.config.probe_max_factor
        };
        2f64.powf(doublings).min(max)
    }

    /// Successes per second since the latest cut, when at least
    /// `admitted_min_count` came, or [`START_MIN_SUCCESSES`] while most
    /// sends since the cut were refused: then the server, not this
    /// client's pace or pauses, set how many got through.
    fn admitted_since_cut(&self, now: Timestamp) -> Option<f64> {
        let since = now
            .saturating_duration_since(self.last_cut()?)
            .as_secs_f64();
        let refused_most = self.sent_since_cut >= self.since_cut.saturating_mul(2);
        let enough = self.since_cut >= self.config.admitted_min_count
            || (refused_most && self.since_cut >= START_MIN_SUCCESSES);
        (enough && since > 0.0).then(|| f64::from(self.since_cut) / since)
    }

    /// When the latest cut came, if any.
    fn last_cut(&self) -> Option<Timestamp> {
        (self.cut_at != NEVER).then_some(self.cut_at)
    }

    fn quiet_until(&self) -> Timestamp {
        self.quiet_from
            .saturating_add(Duration::from_millis(u64::from(self.quiet_ms)))
    }

    /// Successes per second since the latest cut over the time the server
    /// did not tell the client to stay quiet (the latest `Retry-After`'s
    /// wait taken out), when at least [`START_MIN_SUCCESSES`] came.
    fn admitted_since_cut_while_open(&self, now: Timestamp) -> Option<f64> {
        let cut = self.last_cut()?;
        let quiet = self
            .quiet_until()
            .min(now)
            .saturating_duration_since(self.quiet_from.max(cut));
        let open = now.saturating_duration_since(cut).saturating_sub(quiet);
        (self.since_cut >= START_MIN_SUCCESSES && !open.is_zero())
            .then(|| f64::from(self.since_cut) / open.as_secs_f64())
    }

    /// The hinted step's share: whole from `full_step_spare` of the limit
    /// left, in proportion below it; whole when the limit is unknown.
    fn spare_scale(&self, remaining: u64, limit: Option<u64>) -> f64 {
        match limit {
            Some(l) if l > 0 && self.config.full_step_spare > 0.0 => {
                let spare = (remaining as f64 / l as f64).min(1.0);
                let full = self.config.full_step_spare;
                if spare <= full || full >= 1.0 {
                    spare / full
                } else {
                    1.0 + (SPARE_BOOST - 1.0) * (spare - full) / (1.0 - full)
                }
            }
            _ => 1.0,
        }
    }

    fn clamp(&self, r: f64) -> f64 {
        r.clamp(self.config.min_rate, self.config.max_rate)
    }
}

impl RateController for Adaptive {
    fn name(&self) -> &str {
        "adaptive"
    }

    fn rate(&self) -> Option<f64> {
        self.rate
    }

    fn on_send(&mut self, now: Timestamp) {
        self.meter.note(now);
        self.sent_since_cut = self.sent_since_cut.saturating_add(1);
    }

    fn on_outcome(&mut self, now: Timestamp, outcome: &Outcome) -> Option<f64> {
        match outcome.signal {
            Signal::Throttled => {
                if let Some(left) = outcome.hints.remaining {
                    self.refused_at_remaining = u32::try_from(left).unwrap_or(u32::MAX);
                }
                self.cycles.refusal(now, self.config.admitted_min_count);
                self.empty_successes = 0;
                self.full_since = NEVER;
                // A cut is judged by requests sent at the cut rate: at most
                // one per cooldown, and at most one per interval at the
                // current rate.
                let cool = match self.rate {
                    Some(r) => self
                        .config
                        .decrease_cooldown
                        .max(crate::secs_to_duration(1.0 / r)),
                    None => self.config.decrease_cooldown,
                };
                // While still climbing from the first cut, one interval.
                let cool = if self.slow_start {
                    self.rate.map_or(cool, |r| crate::secs_to_duration(1.0 / r))
                } else {
                    cool
                };
                let cooling = self
                    .last_cut()
                    .is_some_and(|t| now < t.saturating_add(cool));
                // But a pace refused as often as it is admitted since the
                // cut (twice at least, with a success between) is not the
                // old pace's stragglers (the throttle passes on no refusal
                // of an attempt sent before the cut): the new pace is too
                // fast for the server, and the cut comes at once. A server
                // that refuses any call closer than its interval to the
                // previous one (nginx's `limit_req` without a burst) would
                // otherwise refuse every other call for a whole cooldown.
                self.refused_since_cut = self.refused_since_cut.saturating_add(1);
                let refused_as_often = !self.slow_start
                    && self.since_cut >= 1
                    && self.refused_since_cut >= 2
                    && u32::from(self.refused_since_cut) >= self.since_cut;
                let cooling = cooling && !refused_as_often;
                // A refusal too soon after a cut to cut again still says the
                // rate is above the server's: it holds until the next cut
                // may come.
                if cooling {
                    self.held_until = self
                        .last_cut()
                        .map_or(Timestamp::ZERO, |t| t.saturating_add(cool));
                }
                if !cooling {
                    // Before pacing: a burst of successes answered within
                    // `START_BURST_SPAN`, per that span (never above the
                    // sends per span); otherwise the send rate.
                    let from = self.rate.unwrap_or_else(|| {
                        match self
                            .admitted
                            .burst_rate(now, START_MIN_SUCCESSES, START_BURST_SPAN)
                        {
                            Some(a) => self
                                .meter
                                .burst_rate(now, 1, START_BURST_SPAN)
                                .map_or(a, |sent| a.min(sent))
                                .max(self.config.fallback_rate),
                            None => {
                                // A lone success a round trip before the
                                // refusal, or none while several sends were
                                // out at once: a rate unknown but not slow.
                                // (A lone send refused says nothing of
                                // speed: the quota may be someone else's
                                // and spent.)
                                let span = self.meter.burst_rate(now, 2, START_BURST_SPAN);
                                self.blind = match self.since_cut {
                                    1 if self
                                        .admitted
                                        .burst_rate(now, 1, START_BURST_SPAN)
                                        .is_some() =>
                                    {
                                        Blind::LoneSuccess
                                    }
                                    0 if span.is_some() => Blind::Burst,
                                    // Too few successes to measure while most
                                    // sends are still unanswered: they went
                                    // out at once and were answered out of
                                    // order.
                                    n if n < START_MIN_SUCCESSES
                                        && span.is_some()
                                        && self.sent_since_cut >= 2 * (n + 1) =>
                                    {
                                        Blind::Burst
                                    }
                                    _ => Blind::No,
                                };
                                let sent = if self.slow_started {
                                    self.meter.young_rate(now)
                                } else {
                                    self.meter.rate(now)
                                }
                                .unwrap_or(self.config.fallback_rate);
                                // After a lone success, the sends all within
                                // a tenth of a second went one after another:
                                // their count per that span is the pace they
                                // went at. (A burst's sends went at once:
                                // per span they would say nothing.)
                                match span {
                                    Some(span) if self.blind == Blind::LoneSuccess => {
                                        span.max(sent)
                                    }
                                    _ => sent,
                                }
                            }
                        }
                    });
                    // Never below (a share of) what the server admitted
                    // lately, and never above the rate cut from.
                    let admitted = self
                        .admitted
                        .rate_of_at_least(now, self.config.admitted_min_count)
                        .map_or(0.0, |a| a * self.config.admitted_floor);
                    let to = (from * self.config.decrease_factor).max(admitted.min(from));
                    // A refusal that orders a wait longer than a cooldown
                    // says the quota is spent until then: what got through
                    // since it last opened, spread over the time from then
                    // to the end of the wait, is what this client may send
                    // at. (Six clients of a sliding log that each halved
                    // their share of its first burst came back together
                    // three times the log's rate, and met it closed again.)
                    let to = match outcome.hints.retry_after {
                        Some(ra) if ra > self.config.decrease_cooldown => {
                            let until = now.saturating_add(ra);
                            self.cycles.rate_until(until).map_or(to, |r| to.min(r))
                        }
                        _ => to,
                    };
                    // Where the server sends no remaining count, a quota
                    // found closed keeps what it admitted: once closed for a
                    // while, never below the rate of the latest whole cycle;
                    // and a cut with no success since the previous one (the
                    // quota shut, not passed a moment too fast) never below
                    // what got through since the quota last opened, over the
                    // time since. Halving once per refused probe would leave
                    // a client of a closed window at its floor when the
                    // window opens again.
                    let to = if outcome.hints.remaining.is_none() {
                        let cycle = self
                            .cycles
                            .latest_rate()
                            .filter(|_| self.windowed)
                            .unwrap_or(0.0);
                        let cooldown = self.config.decrease_cooldown;
                        let shut = self.since_cut == 0
                            && self.last_cut().is_some()
                            && (self.cycles.without_success(now) >= cooldown
                                || self.cycles.open_span() >= cooldown);
                        let opening = self
                            .cycles
                            .opening_rate(now, self.config.admitted_min_count)
                            .filter(|_| shut)
                            .unwrap_or(0.0);
                        to.max(cycle.max(opening).min(from))
                    } else {
                        to
                    };
                    // The cut that ends the climb from the first one: what
                    // the server admitted since that cut, when below the rate
                    // cut from. The climb overshot a rate measured on a
                    // burst; halving the overshoot can leave it above the
                    // server's rate, while the successes since the first cut
                    // came at no more than that rate.
                    let ends_climb = self
                        .admitted_since_cut(now)
                        .filter(|&a| self.slow_start && a < from);
                    // That count is also the step's scale (below). But a wait
                    // the server ordered since the first cut (a `Retry-After`
                    // of whole seconds rounded up from milliseconds) diluted
                    // it: the rate goes no lower than a full cut from what got
                    // through while the client was free to send.
                    let measured = ends_climb.unwrap_or(to);
                    let to = match (ends_climb, self.admitted_since_cut_while_open(now)) {
                        (Some(a), Some(open)) => {
                            a.max(open.min(from) * self.config.decrease_factor)
                        }
                        (Some(a), None) => a,
                        (None, _) => to,
                    };
                    // A climb that doubled per success after a lone one was
                    // admitted at its pace until one or two doublings before
                    // this refusal: it ends no lower than a quarter of the
                    // rate refused. Where a driver's gate let the climb's
                    // first calls out one at a time, its successes since the
                    // first cut came at the gate's pace, not the server's.
                    // (Only when its latest success came within two intervals
                    // of the pace before the latest doubling: successes that
                    // stopped long before the refusal were a burst's, sent
                    // before the first cut and answered at once.)
                    let df = self.config.decrease_factor;
                    let climbed_paced = self.slow_start
                        && self.blind == Blind::LoneSuccess
                        && now.saturating_duration_since(self.grown_at).as_secs_f64()
                            <= 2.0 / (from * df);
                    let to = if climbed_paced {
                        to.max(from * df * df)
                    } else {
                        to
                    };
                    // A cut the admitted rate held up climbs back as gently:
                    // its gap closes in as many successes as a full cut's.
                    let full = from * (1.0 - df);
                    self.gentle = if full > 0.0 {
                        ((from - to) / full).clamp(0.05, 1.0)
                    } else {
                        1.0
                    };
                    let r = self.clamp(to);
                    // Pacing begins: the step's scale is set once, and the
                    // rise is multiplicative until the next cut (the first
                    // cut's rate came from an unpaced burst).
                    self.slow_start = self.last_cut().is_none() && self.rate.is_none();
                    if self.slow_start {
                        self.base = r;
                    } else {
                        // A blind burst's first cut measured nothing, so
                        // neither did the scale it set: this cut, ending a
                        // climb that doubled per interval, is the first to.
                        if self.blind == Blind::Burst {
                            self.base = self.clamp(measured);
                        }
                        self.blind = Blind::No;
                    }
                    self.at_cut = from;
                    self.grown_at = now;
                    self.since_cut = 0;
                    self.sent_since_cut = 0;
                    self.refused_since_cut = 0;
                    self.rate = Some(r);
                    self.cut_at = now;
                }
                // After the cut, which measured up to this refusal.
                if let Some(ra) = outcome.hints.retry_after {
                    let end = self.quiet_until();
                    if self.quiet_ms == 0 || end < now {
                        self.quiet_from = now;
                    }
                    let until = end.max(now.saturating_add(ra));
                    let span = until.saturating_duration_since(self.quiet_from);
                    self.quiet_ms = u32::try_from(span.as_millis()).unwrap_or(u32::MAX);
                }
            }
            Signal::Success => {
                self.admitted.note(now);
                self.cycles.success(now, self.config.decrease_cooldown);
                self.since_cut = self.since_cut.saturating_add(1);
                // Only the count above what the latest refusal said is spare.
                let floor = u64::from(self.refused_at_remaining);
                let remaining = outcome.hints.remaining.map(|r| r.saturating_sub(floor));
                let limit = outcome.hints.limit.map(|l| l.saturating_sub(floor));
                if remaining == Some(0) {
                    self.empty_successes = self.empty_successes.saturating_add(1);
                }
                // A count that said "none left" on more successes since the
                // latest refusal than the whole quota refills faster than
                // this client spends it (a bucket of one, say, whose reset
                // is rounded up to a second): it holds nothing, and the rate
                // climbs as if the server sent no count.
                let refills = limit.is_some_and(|l| u64::from(self.empty_successes) > l);
                // A quota nearly whole since a while ago is nobody's.
                let nearly_whole = match (remaining, limit) {
                    (Some(left), Some(l)) if l > 0 => left as f64 >= FULL_SHARE * l as f64,
                    _ => false,
                };
                if !nearly_whole {
                    self.full_since = NEVER;
                } else if self.full_since == NEVER {
                    self.full_since = now;
                }
                let full_for_long = self.full_since != NEVER
                    && now.saturating_duration_since(self.full_since) >= FULL_FOR;
                let remaining = remaining.filter(|_| !refills);
                let exhausted = remaining == Some(0) || now < self.held_until;
                if let (Some(r), false) = (self.rate, exhausted) {
                    let mut step = if let Some(left) = remaining {
                        // Spare quota above the rate of the latest cut is
                        // a bucket's burst draining, not unused quota: no
                        // boost there.
                        // (Where refusals come with quota reported left,
                        // the count over-states it: the spare above that
                        // mark is real, and the step keeps its size.)
                        let scale = self.spare_scale(left, limit);
                        let scale = match floor {
                            0 if r >= self.at_cut && !full_for_long => scale.min(1.0) * self.gentle,
                            0 => scale * self.gentle,
                            _ => scale,
                        };
                        self.base * self.config.increase_fraction_hinted * scale
                    } else {
                        // Where this client last found the limit, never above
                        // where pacing began (a first cut from an unpaced burst
                        // measures the burst, not the server).
                        let own = self.at_cut.min(self.base)
                            * self.config.increase_fraction
                            * self.gentle
                            * self.probe(now);
                        // The same rise per second at any rate (see
                        // `fair_climb`), but not over a closed quota's
                        // cycle, where a quick climb meets the window shut.
                        let fair = if self.windowed {
                            0.0
                        } else {
                            let c = &self.config;
                            (c.increase_fraction * c.fair_climb * self.base / r * self.base).min(r)
                        };
                        own.max(fair)
                    };
                    if self.slow_start {
                        let growth = match self.blind {
                            Blind::Burst => {
                                let since = now.saturating_duration_since(self.grown_at);
                                self.grown_at = now;
                                let per = (1.0 / r).max(START_BURST_SPAN.as_secs_f64());
                                (since.as_secs_f64() / per).min(BLIND_START_GROWTH)
                            }
                            Blind::LoneSuccess => {
                                self.grown_at = now;
                                BLIND_START_GROWTH
                            }
                            Blind::No if self.slow_started => self
                                .config
                                .slow_started_growth
                                .max(self.config.start_growth),
                            Blind::No => self.config.start_growth,
                        };
                        step = step.max(r * growth);
                    }
                    self.rate = Some(self.clamp(r + step));
                }
            }
            _ => {}
        }
        self.rate
    }

    fn note_slow_started(&mut self) {
        self.slow_started = true;
    }

    fn note_closed_quota(&mut self) {
        self.windowed = true;
    }

    fn limit_to(&mut self, rate: f64) {
        let r = self.clamp(rate);
        match self.rate {
            Some(cur) if cur <= r => {}
            Some(_) => self.rate = Some(r),
            None => {
                // Pacing begins at the cap: the step's scale is set here.
                self.rate = Some(r);
                self.base = r;
                self.at_cut = r;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerHints;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A controller with the additive steps alone (no multiplicative
    /// start), just cut at `t` from the fallback rate: it and the rate.
    fn additive_only_after_a_cut(t: Timestamp) -> (Adaptive, f64) {
        let mut c = Adaptive::new(AdaptiveConfig {
            start_growth: 0.0,
            ..AdaptiveConfig::default()
        })
        .unwrap();
        let r = c.on_outcome(t, &Outcome::throttled()).unwrap();
        (c, r)
    }

    /// A success whose headers say `left` of `limit` remain.
    fn left_of(left: u64, limit: u64) -> Outcome {
        Outcome::success().with_hints(ServerHints {
            remaining: Some(left),
            limit: Some(limit),
            ..ServerHints::default()
        })
    }

    fn with_remaining(r: u64) -> Outcome {
        Outcome::success().with_hints(ServerHints {
            remaining: Some(r),
            ..ServerHints::default()
        })
    }

    #[test]
    fn a_quota_found_closed_caps_the_probe_above_the_cycles_rate() {
        // Two cuts 200 s apart with 21 successes between: the cycle's rate
        // is 21/200 per second, and the second cut goes there too.
        let cycled = || {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            let t = Timestamp::ZERO;
            c.on_outcome(t, &Outcome::throttled()).unwrap();
            for i in 1..=21 {
                c.on_outcome(t + Duration::from_secs(i), &Outcome::success());
            }
            let r = c
                .on_outcome(t + Duration::from_secs(200), &Outcome::throttled())
                .unwrap();
            assert!((r - 0.105).abs() < 1e-9, "{r}");
            c
        };
        // A success 100 s after that cut: the probe has doubled five times.
        let step = |c: &mut Adaptive| {
            let before = c.rate().unwrap();
            let t = Timestamp::ZERO + Duration::from_secs(300);
            c.on_outcome(t, &Outcome::success()).unwrap() - before
        };
        let mut open = cycled();
        let mut closed = cycled();
        closed.note_closed_quota();
        let (free, capped) = (step(&mut open), step(&mut closed));
        let d = AdaptiveConfig::default();
        assert!(free > 0.0 && capped > 0.0);
        assert!(
            (free / capped - 32.0 / WINDOWED_PROBE_MAX).abs() < 1e-6,
            "{free} against {capped}"
        );
        assert!(WINDOWED_PROBE_MAX < d.probe_max_factor);
        // Below the cycle's rate the probe is whole again: a partition cut
        // far below its share climbs back at the usual speed.
        let mut open = cycled();
        let mut closed = cycled();
        closed.note_closed_quota();
        for c in [&mut open, &mut closed] {
            c.limit_to(0.05);
        }
        assert!((step(&mut open) - step(&mut closed)).abs() < 1e-12);
    }

    #[test]
    fn a_count_that_keeps_saying_none_left_while_it_admits_holds_nothing() {
        let empty = |limit: u64| {
            Outcome::success().with_hints(ServerHints {
                remaining: Some(0),
                limit: Some(limit),
                ..ServerHints::default()
            })
        };
        let t = Timestamp::ZERO;
        // A bucket of one says "none left" after every request it admits.
        let mut one = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let r0 = one.on_outcome(t, &Outcome::throttled()).unwrap();
        assert_eq!(one.on_outcome(t + ms(100), &empty(1)), Some(r0));
        let r1 = one.on_outcome(t + ms(200), &empty(1)).unwrap();
        assert!(r1 > r0, "{r1}");
        // A quota of 100 holds the rate for 100 such successes after a
        // refusal, and a refusal starts the count again.
        let mut hundred = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let r = hundred.on_outcome(t, &Outcome::throttled()).unwrap();
        for i in 1..=100 {
            assert_eq!(hundred.on_outcome(t + ms(10 * i), &empty(100)), Some(r));
        }
        assert!(hundred.on_outcome(t + ms(1_010), &empty(100)).unwrap() > r);
        let cut = hundred
            .on_outcome(t + ms(5_000), &Outcome::throttled())
            .unwrap();
        assert_eq!(hundred.on_outcome(t + ms(5_100), &empty(100)), Some(cut));
    }

    #[test]
    fn a_quota_found_closed_cuts_no_lower_than_the_cycles_rate() {
        // The cycle's rate is 21/200 per second (as above); ten successes
        // raise the rate above it, and a refusal cuts.
        let cut = |closed: bool, remaining: Option<u64>| {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            let t = Timestamp::ZERO;
            c.on_outcome(t, &Outcome::throttled()).unwrap();
            for i in 1..=21 {
                c.on_outcome(t + Duration::from_secs(i), &Outcome::success());
            }
            c.on_outcome(t + Duration::from_secs(200), &Outcome::throttled());
            if closed {
                c.note_closed_quota();
            }
            for i in 1..=10 {
                c.on_outcome(t + Duration::from_secs(200 + i), &Outcome::success());
            }
            let from = c.rate().unwrap();
            let refused = Outcome::throttled().with_hints(ServerHints {
                remaining,
                ..ServerHints::default()
            });
            let to = c
                .on_outcome(t + Duration::from_secs(300), &refused)
                .unwrap();
            (from, to)
        };
        let (from, to) = cut(true, None);
        assert!(from > 0.105 && from < 0.21, "{from}");
        assert!((to - 0.105).abs() < 1e-9, "{to}");
        // Not found closed, or with a remaining count: a plain halving.
        for (closed, remaining) in [(false, None), (true, Some(0))] {
            let (from, to) = cut(closed, remaining);
            assert!((to - from / 2.0).abs() < 1e-9, "{closed} {remaining:?}");
        }
    }

    #[test]
    fn a_quota_shut_keeps_what_it_admitted_since_it_opened() {
        // 100 successes in the first second, then the quota shuts: refusals
        // with no success between them (a window spent, say).
        let run = |remaining: Option<u64>| {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            let t0 = Timestamp::ZERO;
            for i in 1..=100u64 {
                c.on_send(t0 + ms(10 * i - 5));
                c.on_outcome(t0 + ms(10 * i), &Outcome::success());
            }
            let refused = Outcome::throttled().with_hints(ServerHints {
                remaining,
                ..ServerHints::default()
            });
            let rates: Vec<(u64, f64)> = [1_100u64, 2_600, 4_100, 6_100, 9_100]
                .into_iter()
                .map(|at| (at, c.on_outcome(t0 + ms(at), &refused).unwrap()))
                .collect();
            (c, rates)
        };
        let (mut blind, shut) = run(None);
        let (_, counted) = run(Some(0));
        // The first cut is the usual one either way.
        assert_eq!(shut[0].1, counted[0].1);
        // Without a remaining count, each later cut goes no lower than what
        // got through since the quota opened (100 from 10 ms on), over the
        // time since: at 9.1 s, 11/s, where halving has left 5/s.
        for w in shut.windows(2) {
            let ((_, from), (at, to)) = (w[0], w[1]);
            let opening = 100.0 / ((at - 10) as f64 / 1000.0);
            assert!(to >= opening.min(from) - 1e-9, "{to} at {at} ms");
            assert!(to <= from);
        }
        // A server that counts its quota says how much is left: its cuts
        // halve, as they always did.
        for w in counted.windows(2) {
            assert!((w[1].1 - w[0].1 / 2.0).abs() < 1e-9, "{counted:?}");
        }
        assert!(shut[4].1 > 2.0 * counted[4].1, "{shut:?} {counted:?}");
        // A success after a second or more without any opens the quota
        // anew: one success measures nothing, and the cuts halve again.
        let t0 = Timestamp::ZERO;
        blind.on_outcome(t0 + ms(10_000), &Outcome::success());
        let a = blind
            .on_outcome(t0 + ms(11_100), &Outcome::throttled())
            .unwrap();
        let b = blind
            .on_outcome(t0 + ms(13_100), &Outcome::throttled())
            .unwrap();
        assert!((b - a / 2.0).abs() < 1e-9, "{a} then {b}");
    }

    #[test]
    fn a_slow_started_first_cut_measures_the_sends_over_the_time_they_took() {
        // A driver's slow start let the calls out two at once, then more
        // per success: 21 sends in 182 ms (115/s), ten successes among
        // them (too spread to measure as a burst), then a refusal.
        let first_cut = |slow_started: bool| {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            if slow_started {
                c.note_slow_started();
            }
            let t0 = Timestamp::ZERO;
            for i in 0..21u64 {
                c.on_send(t0 + ms(9 * i));
            }
            for i in 1..=10u64 {
                assert_eq!(c.on_outcome(t0 + ms(18 * i), &Outcome::success()), None);
            }
            c.on_outcome(t0 + ms(182), &Outcome::throttled()).unwrap()
        };
        let half = AdaptiveConfig::default().decrease_factor;
        // Counted over the 182 ms they took: half of 115/s.
        let slow_started = first_cut(true);
        assert!(
            (slow_started - half * 21.0 / 0.182).abs() < 1e-6,
            "{slow_started}"
        );
        // A client that sent on its own keeps the meter's whole window
        // (the second so far and the one before): half of 21 / 1.182 s.
        let alone = first_cut(false);
        assert!((alone - half * 21.0 / 1.182).abs() < 1e-6, "{alone}");
    }

    #[test]
    fn a_slow_started_partition_rises_faster_until_its_second_cut() {
        let rise = |slow_started: bool| {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            let t = Timestamp::ZERO;
            let r0 = c.on_outcome(t, &Outcome::throttled()).unwrap();
            if slow_started {
                c.note_slow_started();
            }
            let r1 = c.on_outcome(t + ms(10), &Outcome::success()).unwrap();
            r1 / r0 - 1.0
        };
        let d = AdaptiveConfig::default();
        assert!(
            (rise(false) - d.start_growth).abs() < 1e-12,
            "{}",
            rise(false)
        );
        assert!(
            (rise(true) - d.slow_started_growth).abs() < 1e-12,
            "{}",
            rise(true)
        );
    }

    #[test]
    fn first_throttle_paces_at_half_the_measured_rate() {
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let mut now = Timestamp::ZERO;
        for _ in 0..40 {
            c.on_send(now);
            now = now + ms(50);
        }
        // 40 sends over two seconds.
        let r = c.on_outcome(now, &Outcome::throttled()).unwrap();
        assert!((r - 10.0).abs() < 0.5, "{r}");
        // Within one interval at the new rate a second 429 cuts nothing
        // (until the second cut, the cooldown is one interval).
        assert_eq!(c.on_outcome(now + ms(50), &Outcome::throttled()), Some(r));
        // At a low rate the cooldown is one interval at that rate.
        let mut slow = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let t = Timestamp::ZERO;
        assert_eq!(slow.on_outcome(t, &Outcome::throttled()), Some(0.5));
        assert_eq!(
            slow.on_outcome(t + ms(1500), &Outcome::throttled()),
            Some(0.5)
        );
        assert_eq!(
            slow.on_outcome(t + ms(2000), &Outcome::throttled()),
            Some(0.25)
        );
        let r2 = c.on_outcome(now + ms(1000), &Outcome::throttled()).unwrap();
        assert!((r2 - r / 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_cut_keeps_most_of_what_the_server_admitted_and_climbs_back_as_gently() {
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let mut now = Timestamp::ZERO;
        for _ in 0..400 {
            now = now + ms(5);
            c.on_send(now); // 200/s for two seconds
        }
        let first = c.on_outcome(now, &Outcome::throttled()).unwrap();
        assert!((first - 100.5).abs() < 1e-9, "half of 201/s: {first}");
        // The server admits 100/s, leaving nothing (the rate holds).
        for _ in 0..100 {
            now = now + ms(10);
            c.on_outcome(now, &with_remaining(0));
        }
        assert_eq!(c.rate(), Some(first));
        // A refusal a second later ends the climb from the first cut: the
        // 100/s admitted since that cut, not half of 100.5/s.
        let cut = c.on_outcome(now, &Outcome::throttled()).unwrap();
        assert!((cut - 100.0).abs() < 1e-9, "{cut}");
        // The step back up is scaled by how deep the cut was, so the gap
        // closes in as many successes as a full cut's would.
        let gentle = (first - cut) / (first * 0.5);
        let gentle = gentle.clamp(0.05, 1.0);
        let up = c.on_outcome(now, &Outcome::success()).unwrap() - cut;
        assert!((up - first * 0.007 * gentle).abs() < 1e-9, "{up}");
        // Later cuts keep 90 % of what was admitted over the last second
        // or two: 100 more successes at 100/s, then a refusal.
        for _ in 0..100 {
            now = now + ms(10);
            c.on_outcome(now, &with_remaining(0));
        }
        let later = c.on_outcome(now, &Outcome::throttled()).unwrap();
        assert!((later - 90.0).abs() < 2.0, "about 90 % of 100/s: {later}");
        // Few successes measure nothing: a slow client halves.
        let mut slow = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let t = Timestamp::ZERO;
        slow.on_outcome(t, &Outcome::throttled());
        for i in 0..10 {
            slow.on_outcome(t + ms(100 * i), &Outcome::success());
        }
        let b = slow.rate().unwrap();
        let a = slow
            .on_outcome(t + ms(2_500), &Outcome::throttled())
            .unwrap();
        assert!((a - b / 2.0).abs() < 1e-9, "{b} -> {a}");
        // And the floor can be turned off.
        let mut off = Adaptive::new(AdaptiveConfig {
            admitted_floor: 0.0,
            ..AdaptiveConfig::default()
        })
        .unwrap();
        off.on_outcome(Timestamp::ZERO, &Outcome::throttled());
        let mut now = Timestamp::ZERO;
        for _ in 0..200 {
            now = now + ms(10);
            off.on_outcome(now, &Outcome::success());
        }
        let b = off.rate().unwrap();
        let a = off.on_outcome(now, &Outcome::throttled()).unwrap();
        assert!((a - b / 2.0).abs() < 1e-9);
    }

    #[test]
    fn until_the_second_cut_the_rise_is_multiplicative() {
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let t = Timestamp::ZERO;
        let r = c.on_outcome(t, &Outcome::throttled()).unwrap();
        // `start_growth` of the rate per success (more than the additive
        // step), with or without spare quota reported.
        let mut now = t;
        for _ in 0..35 {
            c.on_outcome(now, &Outcome::success());
            c.on_outcome(now, &with_remaining(5));
            now = now + ms(10);
        }
        let up = c.rate().unwrap();
        let g = 1.0 + AdaptiveConfig::default().start_growth;
        assert!((up - r * g.powi(70)).abs() < 1e-9, "{r} -> {up}");
        // Nothing left holds it, as ever.
        assert_eq!(c.on_outcome(now, &with_remaining(0)), Some(up));
        // The second cut ends it: then the steps are additive again.
        let cut = c.on_outcome(t + ms(5_000), &Outcome::throttled()).unwrap();
        let step = c.on_outcome(t + ms(5_000), &with_remaining(1)).unwrap() - cut;
        assert!((step - r * 0.003).abs() < 1e-9, "{step}");
    }

    #[test]
    fn a_full_bucket_boosts_the_step_only_below_the_rate_of_the_latest_cut() {
        let full = |r| left_of(r, 10);
        let t = Timestamp::ZERO;
        let (mut c, r) = additive_only_after_a_cut(t);
        // Below the rate cut from, a full bucket is unused quota: the boost.
        let below = c.on_outcome(t + ms(10), &full(10)).unwrap() - r;
        // Climb past the rate cut from (the fallback) with full buckets.
        let mut now = t + ms(10);
        while c.rate().unwrap() < AdaptiveConfig::default().fallback_rate {
            now = now + ms(10);
            c.on_outcome(now, &full(10));
        }
        let at = c.rate().unwrap();
        let above = c.on_outcome(now + ms(10), &full(10)).unwrap() - at;
        // Above it, a full bucket is a burst draining (until it has stayed
        // full for FULL_FOR): the unboosted step (half the limit spare is
        // the whole step).
        let unboosted = c.on_outcome(now + ms(20), &full(5)).unwrap() - at - above;
        assert!(below > above * 5.0, "{below} vs {above}");
        assert!((above - unboosted).abs() < 1e-9, "{above} vs {unboosted}");
    }

    #[test]
    fn a_quota_left_whole_for_a_while_boosts_the_step_above_the_latest_cut() {
        let hints = |left| left_of(left, 100);
        let t = Timestamp::ZERO;
        let (mut c, _) = additive_only_after_a_cut(t);
        // Above the rate cut from, with a quota found empty by a refusal.
        let mut now = t;
        while c.rate().unwrap() < AdaptiveConfig::default().fallback_rate {
            now = now + ms(10);
            c.on_outcome(now, &hints(100));
        }
        // A run of nearly whole quotas (90 of 100 left or more), one
        // success per 100 ms: unboosted until it has lasted FULL_FOR.
        let step = |c: &mut Adaptive, now: Timestamp, left| {
            let before = c.rate().unwrap();
            c.on_outcome(now, &hints(left)).unwrap() - before
        };
        now = now + ms(100);
        step(&mut c, now, 50);
        now = now + ms(100);
        let first = step(&mut c, now, 95);
        let mut last = first;
        let run_start = now;
        while now < run_start + FULL_FOR - ms(100) {
            now = now + ms(100);
            last = step(&mut c, now, 90);
        }
        assert!((last - first).abs() < first * 0.2, "{first} vs {last}");
        now = now + ms(200);
        let boosted = step(&mut c, now, 95);
        assert!(boosted > first * 5.0, "{boosted} vs {first}");
        // One count below 90 % ends the run: the next step is unboosted
        // again, and so is the one after it, the run having just begun.
        now = now + ms(100);
        step(&mut c, now, 89);
        now = now + ms(100);
        let again = step(&mut c, now, 95);
        assert!(again < first * 2.0, "{again} vs {first}");
    }

    #[test]
    fn a_climb_refused_on_most_sends_ends_at_what_got_through_from_five_successes() {
        // Fifty tasks start at once against a bucket of ten: one answer is
        // a success, the next a refusal (a first cut), then the burst's
        // other successes double the rate per success.
        let start = |c: &mut Adaptive| {
            let t = Timestamp::ZERO;
            for _ in 0..50 {
                c.on_send(t);
            }
            c.on_outcome(t + ms(1), &Outcome::success());
            let first = c.on_outcome(t + ms(2), &Outcome::throttled()).unwrap();
            let mut climbed = first;
            for i in 0..6 {
                climbed = c.on_outcome(t + ms(3 + i), &Outcome::success()).unwrap();
            }
            assert!(climbed > 16.0 * first, "{first} -> {climbed}");
            climbed
        };
        // Six successes in 100 ms while 24 sends went out: the server let
        // 60/s through, and the cut that ends the climb goes there, not to
        // half of a rate dozens of times too high.
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let climbed = start(&mut c);
        for i in 0..18 {
            c.on_send(Timestamp::ZERO + ms(10 + i));
        }
        let cut = c
            .on_outcome(Timestamp::ZERO + ms(102), &Outcome::throttled())
            .unwrap();
        assert!((cut - 60.0).abs() < 1.0, "{climbed} -> {cut}");
        // The same six successes with no refused send among the sends since
        // the cut measure this client's pace, not the server's: fewer than
        // `admitted_min_count`, and the cut halves.
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let climbed = start(&mut c);
        let cut = c
            .on_outcome(Timestamp::ZERO + ms(102), &Outcome::throttled())
            .unwrap();
        assert!(
            (cut - climbed / 2.0).abs() < 1e-9 * climbed,
            "{climbed} -> {cut}"
        );
    }

    /// A lone success, then a refusal of the send after it, 2 ms in: the
    /// controller and the rate its blind start paces at.
    fn refused_after_a_lone_success() -> (Adaptive, f64) {
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let t = Timestamp::ZERO;
        c.on_send(t);
        c.on_outcome(t + ms(1), &Outcome::success());
        c.on_send(t + ms(1));
        let r = c.on_outcome(t + ms(2), &Outcome::throttled()).unwrap();
        // Two sends within a tenth of a second: 20/s, halved.
        assert!((r - 10.0).abs() < 1e-9, "{r}");
        (c, r)
    }

    #[test]
    fn a_refusal_right_after_a_lone_success_doubles_per_success_until_the_next_cut() {
        let (mut c, r) = refused_after_a_lone_success();
        let t = Timestamp::ZERO;
        let mut now = t + ms(2);
        let mut expected = r;
        for _ in 0..5 {
            now = now + Duration::from_secs_f64(1.0 / expected);
            expected *= 2.0;
            let up = c.on_outcome(now, &Outcome::success()).unwrap();
            assert!((up - expected).abs() < 1e-9, "{up} vs {expected}");
        }
        // The second cut ends the doubling: steps are small again.
        let cut = c.on_outcome(now + ms(1), &Outcome::throttled()).unwrap();
        assert!(cut < expected);
        let step = c.on_outcome(now + ms(500), &Outcome::success()).unwrap() - cut;
        assert!(step < 0.1 * cut, "{step} after a cut to {cut}");
        // Several successes before the refusal: no doubling.
        let mut many = Adaptive::new(AdaptiveConfig::default()).unwrap();
        for i in 0..3 {
            many.on_send(t + ms(i));
            many.on_outcome(t + ms(i), &Outcome::success());
        }
        let r = many.on_outcome(t + ms(3), &Outcome::throttled()).unwrap();
        let up = many.on_outcome(t + ms(400), &Outcome::success()).unwrap();
        assert!(up < 1.1 * r, "{r} -> {up}");
    }

    #[test]
    fn a_doubling_climb_after_a_lone_success_ends_no_lower_than_a_quarter_of_the_rate_refused() {
        // A lone success, a refusal: pacing at 10/s, doubling per success.
        // The climb's successes come 33 ms apart (a driver's start gate lets
        // one call out at a time) while many calls wait: averaged since the
        // first cut they say 30/s, where the pace admitted last was 320.
        let (mut c, _) = refused_after_a_lone_success();
        let mut now = Timestamp::ZERO + ms(2);
        for _ in 0..6 {
            for _ in 0..3 {
                c.on_send(now);
            }
            now = now + ms(33);
            c.on_outcome(now, &Outcome::success()).unwrap();
        }
        assert!((c.rate().unwrap() - 640.0).abs() < 1e-6);
        let cut = c.on_outcome(now + ms(1), &Outcome::throttled()).unwrap();
        assert!((cut - 160.0).abs() < 1e-6, "{cut}");
    }

    #[test]
    fn a_refused_burst_with_no_success_doubles_per_interval_and_its_second_cut_sets_the_step() {
        // Four sends at once, the first answer a refusal (a server with no
        // burst): a blind start, from the send rate over the second.
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let t = Timestamp::ZERO;
        for _ in 0..4 {
            c.on_send(t);
        }
        let r = c.on_outcome(t + ms(1), &Outcome::throttled()).unwrap();
        assert!((r - 2.0).abs() < 0.01, "{r}");
        // The burst's success, a millisecond later, grows it by a
        // millisecond's share of an interval, not twofold.
        let first = c.on_outcome(t + ms(2), &Outcome::success()).unwrap();
        assert!(first < r * 1.01, "{r} -> {first}");
        // A success an interval later (and at least a tenth of a second
        // later) doubles it.
        let mut now = t + ms(2);
        let mut expected = first;
        for _ in 0..4 {
            now = now + Duration::from_secs_f64((1.0 / expected).max(0.1));
            expected *= 2.0;
            let up = c.on_outcome(now, &Outcome::success()).unwrap();
            assert!(
                (up - expected).abs() < 1e-6 * expected,
                "{up} vs {expected}"
            );
        }
        // Above 10/s, successes an interval apart (a bucket's refilled
        // burst draining after a pause) grow it by their share of a tenth
        // of a second, not twofold each.
        let mut fast = Adaptive::new(AdaptiveConfig::default()).unwrap();
        for _ in 0..40 {
            fast.on_send(t);
        }
        let r = fast.on_outcome(t + ms(1), &Outcome::throttled()).unwrap();
        assert!((r - 20.0).abs() < 0.1, "{r}");
        let at = fast.on_outcome(t + ms(1001), &Outcome::success()).unwrap();
        assert!((at - 2.0 * r).abs() < 1e-9 * r, "{r} -> {at}");
        let mut want = at;
        let mut then = t + ms(1001);
        for _ in 0..5 {
            let interval = 1.0 / want;
            then = then + Duration::from_secs_f64(interval);
            want *= 1.0 + interval / 0.1;
            let up = fast.on_outcome(then, &Outcome::success()).unwrap();
            assert!((up - want).abs() < 1e-6 * want, "{up} vs {want}");
        }
        // The second cut halves the overshoot, and its rate is the scale of
        // the additive step from then on (the first measured nothing).
        let cut = c.on_outcome(now + ms(1), &Outcome::throttled()).unwrap();
        assert!((cut - expected / 2.0).abs() < 1e-6 * expected, "{cut}");
        let later = now + ms(100);
        let step = c.on_outcome(later, &Outcome::success()).unwrap() - cut;
        let d = AdaptiveConfig::default();
        assert!(
            (step - cut * d.increase_fraction * c.probe(later)).abs() < 1e-9 * cut,
            "{step} after a cut to {cut}"
        );
        // A lone send refused is no blind start: the quota may be spent.
        let mut lone = Adaptive::new(AdaptiveConfig::default()).unwrap();
        lone.on_send(t);
        let r = lone.on_outcome(t + ms(1), &Outcome::throttled()).unwrap();
        let up = lone.on_outcome(t + ms(1000), &Outcome::success()).unwrap();
        assert!(up < r * (1.0 + d.start_growth) + 1e-9, "{r} -> {up}");
    }

    #[test]
    fn a_retry_after_wait_does_not_dilute_the_cut_that_ends_the_climb() {
        // Fifty sends at once; the first answer a refusal saying "wait 1 s"
        // (a 100/s bucket rounding 10 ms up), then ten successes. After the
        // wait, successes 10 ms apart until the climb is refused again.
        let run = |told: Option<Duration>| {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            let t = Timestamp::ZERO;
            for _ in 0..50 {
                c.on_send(t);
            }
            let hints = ServerHints {
                retry_after: told,
                ..ServerHints::default()
            };
            c.on_outcome(t + ms(1), &Outcome::throttled().with_hints(hints));
            for i in 0..10 {
                c.on_outcome(
                    t + ms(2) + Duration::from_micros(200 * i),
                    &Outcome::success(),
                );
            }
            let mut now = t + ms(1_100);
            for _ in 0..26 {
                c.on_send(now);
                c.on_outcome(now, &Outcome::success());
                now = now + ms(10);
            }
            let from = c.rate().unwrap();
            let cut = c
                .on_outcome(now, &Outcome::throttled().with_hints(hints))
                .unwrap();
            let after = now + ms(100);
            let step = c.on_outcome(after, &Outcome::success()).unwrap() - cut;
            (from, cut, step / c.probe(after), now)
        };
        let d = AdaptiveConfig::default();
        // 36 successes since the first cut over the 1.36 s since it: the
        // count the cut goes to without a `Retry-After`.
        let (from, plain, plain_step, now) = run(None);
        let since = now
            .saturating_duration_since(Timestamp::ZERO + ms(1))
            .as_secs_f64();
        assert!(from > 100.0, "the climb overshot: {from}");
        assert!((plain - 36.0 / since).abs() < 1e-9 * plain, "{plain}");
        // Told to wait 1 s of it, the cut is a full one from what got
        // through in the other 0.36 s (100/s), not the diluted count...
        let (_, told, told_step, _) = run(Some(Duration::from_secs(1)));
        let open = 36.0 / (since - 1.0);
        assert!(
            (told - open * d.decrease_factor).abs() < 1e-9 * told,
            "{told} vs {open} while open"
        );
        // ...while the step keeps the diluted count as its scale.
        assert!((plain_step - plain * d.increase_fraction).abs() < 1e-9 * plain);
        assert!((told_step - plain * d.increase_fraction).abs() < 1e-9 * plain);
    }

    #[test]
    fn a_burst_refused_after_fewer_than_five_successes_is_a_blind_start() {
        // Fifty sends at once, answered out of order: two to four successes,
        // then a refusal. Too few to measure; the rate doubles once per
        // interval (at least a tenth of a second), as after a burst with no
        // success, not by `start_growth` per success.
        for successes in 2..START_MIN_SUCCESSES {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            let t = Timestamp::ZERO;
            for _ in 0..50 {
                c.on_send(t);
            }
            for i in 0..successes {
                c.on_outcome(
                    t + ms(1) + Duration::from_micros(u64::from(i)),
                    &Outcome::success(),
                );
            }
            let r = c.on_outcome(t + ms(2), &Outcome::throttled()).unwrap();
            assert_eq!(c.blind, Blind::Burst, "{successes} successes");
            let up = c.on_outcome(t + ms(102), &Outcome::success()).unwrap();
            assert!((up - 2.0 * r).abs() < 1e-9 * r, "{successes}: {r} -> {up}");
        }
    }

    #[test]
    fn a_burst_refused_within_a_tenth_of_a_second_is_measured_over_it() {
        // Ten successes answered within 5 ms, then a refusal: 10 per 0.1 s,
        // so pacing starts at half of 100/s (not half of 10 per second).
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        let mut now = Timestamp::ZERO;
        for _ in 0..10 {
            c.on_send(now);
            c.on_outcome(now, &Outcome::success());
            now = now + Duration::from_micros(500);
        }
        c.on_send(now);
        let r = c.on_outcome(now, &Outcome::throttled()).unwrap();
        assert!((r - 50.0).abs() < 1e-9, "{r}");
        // One success measures no burst: the two sends' pace over the tenth
        // of a second, halved (a blind start).
        let mut one = Adaptive::new(AdaptiveConfig::default()).unwrap();
        one.on_send(Timestamp::ZERO);
        one.on_outcome(Timestamp::ZERO, &Outcome::success());
        one.on_send(Timestamp::ZERO + ms(1));
        let r = one
            .on_outcome(Timestamp::ZERO + ms(1), &Outcome::throttled())
            .unwrap();
        assert!((r - 10.0).abs() < 1e-9, "{r}");
        // Sent a second apart: no blind start, the two sends over the last
        // one to two seconds (one second here), halved.
        let mut slow = Adaptive::new(AdaptiveConfig::default()).unwrap();
        slow.on_send(Timestamp::ZERO);
        slow.on_outcome(Timestamp::ZERO + ms(5), &Outcome::success());
        let t = Timestamp::ZERO + ms(1_000);
        slow.on_send(t);
        let r = slow.on_outcome(t, &Outcome::throttled()).unwrap();
        assert!((r - 1.0).abs() < 1e-9, "{r}");
        assert_eq!(slow.blind, Blind::No);
    }

    /// [`additive_only_after_a_cut`], then the climb ended by a second cut
    /// at 5 s (a cooldown of a second follows) and a success at 5.1 s: the
    /// controller, the rate cut to, and the rate that success raised.
    fn climb_ended(t: Timestamp) -> (Adaptive, f64, f64) {
        let (mut c, _) = additive_only_after_a_cut(t);
        let cut = c.on_outcome(t + ms(5_000), &Outcome::throttled()).unwrap();
        let up = c.on_outcome(t + ms(5_100), &Outcome::success()).unwrap();
        (c, cut, up)
    }

    #[test]
    fn a_refusal_too_soon_to_cut_holds_the_rate_until_a_cut_may_come() {
        let t = Timestamp::ZERO;
        let (mut c, cut, up) = climb_ended(t);
        assert!(up > cut);
        assert_eq!(c.on_outcome(t + ms(5_200), &Outcome::throttled()), Some(up));
        assert_eq!(c.on_outcome(t + ms(5_300), &Outcome::success()), Some(up));
        // (The cooldown at this slow rate is one interval, four seconds.)
        assert_eq!(c.on_outcome(t + ms(8_900), &Outcome::success()), Some(up));
        assert!(c.on_outcome(t + ms(9_100), &Outcome::success()).unwrap() > up);
    }

    #[test]
    fn a_pace_refused_as_often_as_admitted_after_a_cut_cuts_again_at_once() {
        let t = Timestamp::ZERO;
        let (mut c, cut, up) = climb_ended(t);
        // One refusal for one success: held, as a straggler may be.
        assert_eq!(c.on_outcome(t + ms(5_200), &Outcome::throttled()), Some(up));
        assert_eq!(c.on_outcome(t + ms(5_300), &Outcome::success()), Some(up));
        // A second refusal for two successes: the pace is refused as often
        // as it is admitted, well within the cooldown, and it cuts.
        let again = c.on_outcome(t + ms(5_400), &Outcome::throttled()).unwrap();
        assert!(again < cut, "{again} after {cut}");
        // The count starts over at the cut: one refusal for one success
        // since then holds again.
        let up2 = c.on_outcome(t + ms(5_500), &Outcome::success()).unwrap();
        assert_eq!(
            c.on_outcome(t + ms(5_600), &Outcome::throttled()),
            Some(up2)
        );
    }

    #[test]
    fn a_wait_longer_than_a_cooldown_cuts_to_what_got_through_until_its_end() {
        let t = Timestamp::ZERO;
        let refused_for = |wait: Duration| {
            Outcome::throttled().with_hints(ServerHints {
                retry_after: Some(wait),
                ..ServerHints::default()
            })
        };
        // A client's share of a sliding log's first burst: five sends and
        // five successes in under half a second, then the log is full.
        let burst = || {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            for i in 0..5 {
                c.on_send(t + ms(i * 80));
            }
            for i in 0..5 {
                c.on_outcome(t + ms(i * 80 + 50), &Outcome::success());
            }
            c
        };
        // Told to wait a cooldown: the usual first cut.
        let usual = burst()
            .on_outcome(t + ms(420), &refused_for(Duration::from_secs(1)))
            .unwrap();
        assert_eq!(
            Some(usual),
            burst().on_outcome(t + ms(420), &Outcome::throttled())
        );
        // Told to wait 9 s: the five successes since the first (at 50 ms),
        // spread to the end of the wait, well under the usual cut.
        let r = burst()
            .on_outcome(t + ms(420), &refused_for(Duration::from_secs(9)))
            .unwrap();
        let until_then = 5.0 / (0.37 + 9.0);
        assert!((r - until_then).abs() < 1e-9, "{r} vs {until_then}");
        assert!(r < usual / 3.0, "{r} vs {usual}");
        // Never above the usual cut: a wait just over a cooldown after 50 s
        // of successes at 20/s (19.6/s until its end) leaves it as it is.
        let mut long = Adaptive::new(AdaptiveConfig::default()).unwrap();
        for i in 0..1_000 {
            long.on_send(t + ms(i * 50));
            long.on_outcome(t + ms(i * 50 + 20), &Outcome::success());
        }
        let mut plain = long.clone();
        let at = t + ms(50_000);
        assert_eq!(
            long.on_outcome(at, &refused_for(Duration::from_millis(1_100))),
            plain.on_outcome(at, &Outcome::throttled())
        );
    }

    #[test]
    fn throttle_before_any_send_uses_the_fallback() {
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        assert_eq!(
            c.on_outcome(Timestamp::ZERO, &Outcome::throttled()),
            Some(0.5)
        );
    }

    #[test]
    fn remaining_zero_holds_and_spare_quota_raises_additively() {
        let t = Timestamp::ZERO;
        let (mut c, r) = additive_only_after_a_cut(t);
        for _ in 0..10 {
            assert_eq!(c.on_outcome(t, &with_remaining(0)), Some(r));
        }
        let mut prev = r;
        for _ in 0..100 {
            let now = c.on_outcome(t, &with_remaining(1)).unwrap();
            assert!((now - prev - r * 0.003).abs() < 1e-9, "additive steps");
            prev = now;
        }
        assert!((prev - 1.3 * r).abs() < 1e-9, "a hundred steps add 30 %");
        // Without the header, the step is sized by the rate just before the
        // latest cut (here the 1/s fallback that was halved), but never by
        // more than the rate pacing began at.
        let next = c.on_outcome(t, &Outcome::success()).unwrap();
        assert!((next - prev - r * 0.007).abs() < 1e-9);
        // The hinted step stays the same after a later cut (it is sized by
        // where pacing began, not by the last cut): AIMD's fairness.
        let cut = c.on_outcome(t + ms(5_000), &Outcome::throttled()).unwrap();
        assert!((cut - next / 2.0).abs() < 1e-9);
        let up = c.on_outcome(t + ms(5_000), &with_remaining(1)).unwrap();
        assert!((up - cut - r * 0.003).abs() < 1e-9);
        // The unhinted one is sized by the rate this cut came from (or
        // where pacing began, the smaller).
        let up2 = c.on_outcome(t + ms(5_000), &Outcome::success()).unwrap();
        assert!((up2 - up - next.min(r) * 0.007).abs() < 1e-9);
        let low = c.on_outcome(t + ms(10_000), &Outcome::throttled()).unwrap();
        let from = up2;
        assert!(from < r && (low - from / 2.0).abs() < 1e-9);
        let up3 = c.on_outcome(t + ms(10_000), &Outcome::success()).unwrap();
        assert!(
            (up3 - low - from * 0.007).abs() < 1e-9,
            "below the start, the last limit sizes it"
        );
    }

    #[test]
    fn a_refusal_while_quota_is_reported_left_shows_how_much_the_count_overstates() {
        let t = Timestamp::ZERO;
        let (mut c, r) = additive_only_after_a_cut(t);
        let said = |remaining: u64| {
            Outcome::success().with_hints(ServerHints {
                remaining: Some(remaining),
                limit: Some(80),
                ..ServerHints::default()
            })
        };
        // Refused while the headers said 40 of 80 were left (a cut).
        let refused = Outcome::throttled().with_hints(ServerHints {
            remaining: Some(40),
            limit: Some(80),
            ..ServerHints::default()
        });
        let cut = c.on_outcome(t + ms(5_000), &refused).unwrap();
        assert!(cut < r);
        // 40 "left" is now an empty quota: the rate holds.
        assert_eq!(c.on_outcome(t + ms(5_100), &said(40)), Some(cut));
        // 60 of 80 is 20 of the 40 really there: half of it, the whole step.
        let up = c.on_outcome(t + ms(5_200), &said(60)).unwrap();
        assert!((up - cut - r * 0.003).abs() < 1e-9, "{up} {cut} {r}");
    }

    #[test]
    fn the_hinted_step_follows_the_share_of_the_quota_left() {
        let t = Timestamp::ZERO;
        let step = |remaining: u64, limit: Option<u64>| {
            let (mut c, r) = additive_only_after_a_cut(t);
            let hints = ServerHints {
                remaining: Some(remaining),
                limit,
                ..ServerHints::default()
            };
            let up = c
                .on_outcome(t, &Outcome::success().with_hints(hints))
                .unwrap();
            (up - r) / (r * 0.003)
        };
        // Half the limit to spare: the whole step; above it, up to ten
        // times the step for a quota nobody uses.
        assert!((step(20, Some(40)) - 1.0).abs() < 1e-9);
        assert!((step(30, Some(40)) - 5.5).abs() < 1e-9);
        assert!((step(40, Some(40)) - 10.0).abs() < 1e-9);
        // Below half, in proportion: 8 of 40 left is 40 % of the step.
        assert!(
            (step(8, Some(40)) - 0.4).abs() < 1e-9,
            "{}",
            step(8, Some(40))
        );
        assert!((step(1, Some(40)) - 0.05).abs() < 1e-9);
        // Without a limit the count says nothing of the share: whole.
        assert!((step(1, None) - 1.0).abs() < 1e-9);
        // Turned off, the step is whole whatever is left.
        let mut off = Adaptive::new(AdaptiveConfig {
            start_growth: 0.0,
            full_step_spare: 0.0,
            ..AdaptiveConfig::default()
        })
        .unwrap();
        let r = off.on_outcome(t, &Outcome::throttled()).unwrap();
        let hints = ServerHints {
            remaining: Some(1),
            limit: Some(40),
            ..ServerHints::default()
        };
        let up = off
            .on_outcome(t, &Outcome::success().with_hints(hints))
            .unwrap();
        assert!((up - r - r * 0.003).abs() < 1e-9);
    }

    #[test]
    fn without_a_remaining_count_the_step_doubles_every_quiet_period() {
        let t = Timestamp::ZERO;
        let (mut c, r) = additive_only_after_a_cut(t);
        let step_at = |c: &mut Adaptive, at: Timestamp| {
            let before = c.rate().unwrap();
            c.on_outcome(at, &Outcome::success()).unwrap() - before
        };
        let s0 = step_at(&mut c, t);
        assert!((s0 - r * 0.007).abs() < 1e-9, "{s0}");
        let s20 = step_at(&mut c, t + ms(20_000));
        assert!((s20 - 2.0 * s0).abs() < 1e-9, "20 s quiet doubles: {s20}");
        let s40 = step_at(&mut c, t + ms(40_000));
        assert!((s40 - 4.0 * s0).abs() < 1e-9, "40 s quiet: {s40}");
        let late = step_at(&mut c, t + ms(3_600_000));
        assert!((late - 64.0 * s0).abs() < 1e-9, "capped: {late}");
        // A cut ends the probe; spare quota reported by the server is the
        // hinted, unprobed step however long the quiet.
        let at = t + ms(3_700_000);
        let cut = c.on_outcome(at, &Outcome::throttled()).unwrap();
        let s_after = step_at(&mut c, at);
        assert!(
            (s_after - (2.0 * cut).min(r) * 0.007).abs() < 1e-9,
            "{s_after}"
        );
        let hinted = c.rate().unwrap();
        let h = c.on_outcome(at + ms(600_000), &with_remaining(3)).unwrap() - hinted;
        assert!((h - r * 0.003).abs() < 1e-9, "{h}");
    }

    /// A controller that began pacing at 20/s (40 sends in a second, then
    /// a refusal) and was then cut five times with nothing admitted, down
    /// to 0.625/s; `closed` tells it its quota was found closed.
    fn cut_far_below_where_pacing_began(fair_climb: f64, closed: bool) -> (Adaptive, Timestamp) {
        let mut c = Adaptive::new(AdaptiveConfig {
            fair_climb,
            ..AdaptiveConfig::default()
        })
        .unwrap();
        let mut t = Timestamp::ZERO;
        for _ in 0..40 {
            c.on_send(t);
            t = t + ms(25);
        }
        assert_eq!(c.on_outcome(t, &Outcome::throttled()), Some(20.0));
        for _ in 0..5 {
            t = t + ms(1_100);
            c.on_outcome(t, &Outcome::throttled());
        }
        assert!((c.rate().unwrap() - 0.625).abs() < 1e-9, "{:?}", c.rate());
        if closed {
            c.note_closed_quota();
        }
        (c, t)
    }

    /// Successes at the controller's own pace for `secs`: the rate after.
    fn successes_at_own_pace(c: &mut Adaptive, mut t: Timestamp, secs: f64) -> f64 {
        let end = t + Duration::from_secs_f64(secs);
        while t < end {
            t = t + Duration::from_secs_f64(1.0 / c.rate().unwrap());
            c.on_outcome(t, &Outcome::success());
        }
        c.rate().unwrap()
    }

    #[test]
    fn a_client_cut_far_below_where_pacing_began_rises_per_second_like_its_peers() {
        // 0.007 × 0.03 × 20² = 0.084/s more per second, at any rate.
        let (mut fair, t) = cut_far_below_where_pacing_began(0.03, false);
        let after = successes_at_own_pace(&mut fair, t, 10.0);
        assert!(after > 0.625 + 0.8, "{after}");
        // Without it the step follows the client's own rate: 1.25 × 0.007
        // per success, at 0.625 successes a second.
        let (mut own, t) = cut_far_below_where_pacing_began(0.0, false);
        let slow = successes_at_own_pace(&mut own, t, 10.0);
        assert!(slow < 0.75, "{slow}");
        // Nor over a quota found closed: a quick climb meets it shut.
        let (mut closed, t) = cut_far_below_where_pacing_began(0.03, true);
        let shut = successes_at_own_pace(&mut closed, t, 10.0);
        assert!((shut - slow).abs() < 1e-9, "{shut} vs {slow}");
    }

    #[test]
    fn a_cap_lowers_the_rate_and_starts_pacing() {
        let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
        c.limit_to(2.0);
        assert_eq!(c.rate(), Some(2.0));
        c.limit_to(5.0);
        assert_eq!(c.rate(), Some(2.0), "never raised");
        c.limit_to(0.0);
        assert_eq!(c.rate(), Some(0.05), "floored");
    }

    #[test]
    fn invalid_configs_are_refused() {
        for bad in [
            AdaptiveConfig {
                min_rate: 0.0,
                ..AdaptiveConfig::default()
            },
            AdaptiveConfig {
                decrease_factor: 1.0,
                ..AdaptiveConfig::default()
            },
            AdaptiveConfig {
                increase_fraction: -1.0,
                ..AdaptiveConfig::default()
            },
            AdaptiveConfig {
                min_rate: 5.0,
                max_rate: 1.0,
                ..AdaptiveConfig::default()
            },
            AdaptiveConfig {
                probe_doubling: Duration::ZERO,
                ..AdaptiveConfig::default()
            },
            AdaptiveConfig {
                probe_max_factor: 0.5,
                ..AdaptiveConfig::default()
            },
            AdaptiveConfig {
                admitted_floor: 1.5,
                ..AdaptiveConfig::default()
            },
            AdaptiveConfig {
                full_step_spare: 2.0,
                ..AdaptiveConfig::default()
            },
            AdaptiveConfig {
                fair_climb: -0.1,
                ..AdaptiveConfig::default()
            },
        ] {
            assert!(Adaptive::new(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn rate_stays_within_bounds_and_no_refusal_raises_it(
            steps in proptest::collection::vec(
                (
                    0u8..3,
                    0u64..3_000,
                    proptest::option::of(0u64..5),
                    proptest::option::of(0u64..5_000),
                    proptest::option::of(0u64..8),
                ),
                1..300,
            )
        ) {
            let mut c = Adaptive::new(AdaptiveConfig::default()).unwrap();
            let mut now = Timestamp::ZERO;
            // The count a refusal left as the empty mark, and the successes
            // whose count (above that mark) said none left since a refusal.
            let (mut mark, mut empty) = (0u64, 0u64);
            for (sig, gap, rem, ra, limit) in steps {
                now = now + ms(gap);
                c.on_send(now);
                let signal = [Signal::Success, Signal::Throttled, Signal::ServerError][usize::from(sig)];
                let hints = ServerHints {
                    remaining: rem,
                    limit,
                    retry_after: ra.map(ms),
                    ..ServerHints::default()
                };
                let before = c.rate();
                let after = c.on_outcome(now, &Outcome::new(signal).with_hints(hints));
                if let Some(r) = after {
                    proptest::prop_assert!((0.05..=10_000.0).contains(&r), "{}", r);
                }
                if let (Signal::Throttled, Some(b), Some(a)) = (signal, before, after) {
                    proptest::prop_assert!(a <= b, "a refusal raised {} to {}", b, a);
                }
                match signal {
                    Signal::Throttled => {
                        if let Some(r) = rem {
                            mark = r;
                        }
                        empty = 0;
                    }
                    Signal::Success if rem.map(|r| r.saturating_sub(mark)) == Some(0) => {
                        empty += 1;
                        // "None left" holds the rate until it has been said
                        // on more successes than the stated limit.
                        let l = limit.map(|l| l.saturating_sub(mark));
                        if l.is_none_or(|l| empty <= l) {
                            proptest::prop_assert_eq!(after, before, "{} empty successes, limit {:?}", empty, l);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}
