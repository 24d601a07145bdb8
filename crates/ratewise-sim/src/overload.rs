//! The server side: an admission controller in front of a server with finite
//! workers and a queue, under open-loop traffic and a capacity that moves.
//! It scores the core's concurrency controllers (`ratewise::concurrency`) on
//! goodput, latency, refusals, recovery and oscillation.
//!
//! ```
//! use ratewise_sim::overload::{run, OverloadScenario, Controller};
//!
//! let scenario = OverloadScenario::capacity_halving();
//! let none = run(&scenario, Controller::None, 1);
//! let aimd = run(&scenario, Controller::Aimd, 1);
//! // Without admission control the queue grows without bound once capacity
//! // halves: most requests time out.
//! assert!(aimd.goodput_per_s > none.goodput_per_s);
//! assert!(aimd.p99_latency_ms < none.p99_latency_ms);
//! ```
//!
//! # The model
//!
//! * **Arrivals** are open-loop (clients do not slow down when the server
//!   does): Poisson at a steady rate, or bursty (the rate alternates between
//!   high and low phases with the same mean).
//! * **The server** has `workers` that each serve one request at a time in
//!   an exponentially distributed service time (mean `service_ms` divided by
//!   the capacity factor in force), and an unbounded FIFO queue in front of
//!   them: the queue is where latency grows with load. A *latency spike*
//!   adds a fixed delay to every response without occupying a worker (a slow
//!   dependency the handler waits on), so capacity is unchanged.
//! * **Clients time out** after `timeout_ms`: a response later than that is a
//!   failure for the client (the server did the work anyway) and a *drop* for
//!   the controller.
//! * **The controller** is asked at each arrival (`try_acquire`): a refusal
//!   is an immediate 503. Completed requests report their latency and
//!   whether they were dropped.
//!
//! Everything is seeded (ChaCha8); the same seed gives the same numbers.

use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ratewise::concurrency::{
    Aimd, Completion, ConcurrencyLimiter, EnvoyGradient, Fixed, Gradient2, Knee, LimitAlgorithm,
    Permit, Vegas,
};
use ratewise::Timestamp;

use crate::report::esc;

/// How requests arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrivals {
    /// Poisson arrivals at `per_s` requests per second.
    Poisson {
        /// Mean rate.
        per_s: f64,
    },
    /// Alternating phases of `period_ms`: `high` × the mean, then
    /// `2 − high` × the mean.
    Bursty {
        /// Mean rate.
        per_s: f64,
        /// Rate multiplier of the high phase (between 1 and 2).
        high: f64,
        /// Length of each phase.
        period_ms: u64,
    },
}

/// A change of the server's capacity or latency at a time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change {
    /// From `at_ms` on, workers serve at `factor` × their base speed.
    Capacity {
        /// When.
        at_ms: u64,
        /// Speed factor (0.5 halves capacity).
        factor: f64,
    },
    /// From `at_ms` on, every response takes `extra_ms` more, without
    /// occupying a worker.
    Latency {
        /// When.
        at_ms: u64,
        /// The added delay.
        extra_ms: u64,
    },
}

/// A server-side scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct OverloadScenario {
    /// Its name.
    pub name: &'static str,
    /// What it shows.
    pub description: &'static str,
    /// How long it runs.
    pub duration_ms: u64,
    /// Worker count.
    pub workers: usize,
    /// Mean service time of one request at full speed.
    pub service_ms: f64,
    /// Client timeout.
    pub timeout_ms: u64,
    /// The traffic.
    pub arrivals: Arrivals,
    /// Capacity and latency changes, in time order.
    pub changes: Vec<Change>,
}

impl OverloadScenario {
    /// Requests per second the server can complete at full speed.
    pub fn capacity_per_s(&self) -> f64 {
        self.workers as f64 * 1000.0 / self.service_ms
    }

    /// The 99th percentile latency with no queueing at full speed: the
    /// service time's own p99 (exponential: mean × ln 100).
    pub fn no_load_p99_ms(&self) -> f64 {
        self.service_ms * 100f64.ln()
    }

    /// The latency bound recovery is judged against at `t_ms`: 2 × the
    /// no-load p99 of the server in force then (service times scale with
    /// 1 / speed), plus the delay a latency change adds to every response.
    pub fn recovery_bound_ms(&self, t_ms: u64) -> f64 {
        2.0 * self.no_load_p99_ms() / self.speed_at(t_ms) + self.extra_at(t_ms) as f64
    }

    fn base(name: &'static str, description: &'static str) -> Self {
        OverloadScenario {
            name,
            description,
            duration_ms: 60_000,
            workers: 20,
            service_ms: 20.0,
            timeout_ms: 1_000,
            arrivals: Arrivals::Poisson { per_s: 800.0 },
            changes: Vec::new(),
        }
    }

    /// Steady overload: 1.5 × capacity for a minute.
    pub fn steady_overload() -> Self {
        OverloadScenario {
            arrivals: Arrivals::Poisson { per_s: 1_500.0 },
            ..Self::base(
                "steady-overload",
                "Poisson arrivals at 1.5x the capacity of 20 workers (1000/s) for 60 s",
            )
        }
    }

    /// Capacity halves at 20 s and recovers at 40 s, under 80 % load.
    pub fn capacity_halving() -> Self {
        OverloadScenario {
            changes: vec![
                Change::Capacity {
                    at_ms: 20_000,
                    factor: 0.5,
                },
                Change::Capacity {
                    at_ms: 40_000,
                    factor: 1.0,
                },
            ],
            ..Self::base(
                "capacity-halving",
                "800/s on 1000/s of capacity; capacity halves at 20 s and recovers at 40 s",
            )
        }
    }

    /// A slow dependency adds 100 ms to every response from 20 s to 40 s;
    /// capacity does not change.
    pub fn latency_spike() -> Self {
        OverloadScenario {
            changes: vec![
                Change::Latency {
                    at_ms: 20_000,
                    extra_ms: 100,
                },
                Change::Latency {
                    at_ms: 40_000,
                    extra_ms: 0,
                },
            ],
            ..Self::base(
                "latency-spike",
                "800/s on 1000/s of capacity; responses take 100 ms longer from 20 s to 40 s, capacity unchanged",
            )
        }
    }

    /// Bursty traffic averaging 90 % of capacity.
    pub fn bursty() -> Self {
        OverloadScenario {
            arrivals: Arrivals::Bursty {
                per_s: 900.0,
                high: 1.8,
                period_ms: 2_000,
            },
            ..Self::base(
                "bursty",
                "arrivals alternate 2 s at 1620/s and 2 s at 180/s (mean 900/s) on 1000/s of capacity",
            )
        }
    }

    /// Every shipped server-side scenario.
    pub fn all() -> Vec<OverloadScenario> {
        vec![
            Self::steady_overload(),
            Self::capacity_halving(),
            Self::latency_spike(),
            Self::bursty(),
        ]
    }

    /// A shipped scenario by name.
    pub fn by_name(name: &str) -> Option<OverloadScenario> {
        Self::all().into_iter().find(|s| s.name == name)
    }

    fn speed_at(&self, t_ms: u64) -> f64 {
        self.changes
            .iter()
            .filter_map(|c| match *c {
                Change::Capacity { at_ms, factor } if at_ms <= t_ms => Some(factor),
                _ => None,
            })
            .next_back()
            .unwrap_or(1.0)
            .max(0.01)
    }

    fn extra_at(&self, t_ms: u64) -> u64 {
        self.changes
            .iter()
            .filter_map(|c| match *c {
                Change::Latency { at_ms, extra_ms } if at_ms <= t_ms => Some(extra_ms),
                _ => None,
            })
            .next_back()
            .unwrap_or(0)
    }
}

/// The admission controller under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// No admission control: every request is queued.
    None,
    /// A fixed limit tuned for the original capacity: the workers plus a
    /// quarter of them queued.
    FixedTuned,
    /// Netflix AIMD, defaults (20 to 200, ×0.9), with the client timeout as
    /// its timeout.
    Aimd,
    /// Netflix Vegas, defaults.
    Vegas,
    /// Netflix Gradient2, defaults (with ratewise's fixes).
    Gradient2,
    /// Envoy's gradient controller, defaults.
    Envoy,
    /// ratewise's own controller ([`Knee`]), defaults, with the client
    /// timeout as its timeout: the recommended one.
    Knee,
}

impl Controller {
    /// Every controller, in table order.
    pub const ALL: [Controller; 7] = [
        Controller::None,
        Controller::FixedTuned,
        Controller::Aimd,
        Controller::Vegas,
        Controller::Gradient2,
        Controller::Envoy,
        Controller::Knee,
    ];

    /// Its name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Controller::None => "none",
            Controller::FixedTuned => "fixed",
            Controller::Aimd => "aimd",
            Controller::Vegas => "vegas",
            Controller::Gradient2 => "gradient2",
            Controller::Envoy => "envoy",
            Controller::Knee => "knee",
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct OverloadResult {
    /// The scenario.
    pub scenario: &'static str,
    /// The controller.
    pub controller: &'static str,
    /// Requests that arrived.
    pub arrived: u64,
    /// Responses within the client timeout, per second of the run.
    pub goodput_per_s: f64,
    /// Goodput as a share of the most that could have been served, given
    /// when the work arrived and when the capacity was there (mean rates).
    pub goodput_share: f64,
    /// Share of arrivals refused at once by the controller.
    pub refused_share: f64,
    /// Share of admitted requests that timed out.
    pub timed_out_share: f64,
    /// Median latency of requests served within the timeout.
    pub p50_latency_ms: f64,
    /// 99th percentile latency of admitted requests (timed-out ones count at
    /// their full latency).
    pub p99_latency_ms: f64,
    /// After each change, whole seconds until the p99 latency of the
    /// requests arriving in a 1 s window is back within 2 × the no-load p99
    /// of the server in force after it (the service-time p99 at the speed
    /// in force, plus any latency the change added); the run's length if
    /// never.
    pub recovery_s: Vec<f64>,
    /// In the last 10 s before the first change (or of the run), the
    /// controller's limit swing: (max − min) / mean.
    pub oscillation: f64,
    /// One point a second: (time s, limit, in flight, p99 latency ms of
    /// that second's arrivals; NaN when none of them was answered by the
    /// end of the run; the limit is NaN without a controller).
    pub timeline: Vec<(f64, f64, f64, f64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// A worker finishes the request `id`.
    Served,
    /// The response to `id` reaches the client.
    Responded,
    Arrival,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Event {
    at_ns: u64,
    seq: u64,
    kind: Kind,
    id: usize,
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // A min-heap on (time, insertion order).
        (other.at_ns, other.seq).cmp(&(self.at_ns, self.seq))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

struct Request {
    arrived_ns: u64,
    permit: Option<Permit>,
}

/// A controller as one object the event loop can drive.
enum Limiter {
    None,
    Fixed(ConcurrencyLimiter<Fixed>),
    Aimd(ConcurrencyLimiter<Aimd>),
    Vegas(ConcurrencyLimiter<Vegas>),
    Gradient2(ConcurrencyLimiter<Gradient2>),
    Envoy(ConcurrencyLimiter<EnvoyGradient>),
    Knee(ConcurrencyLimiter<Knee>),
}

impl Limiter {
    fn new(c: Controller, s: &OverloadScenario, seed: u64) -> Self {
        let timeout = Duration::from_millis(s.timeout_ms);
        match c {
            Controller::None => Limiter::None,
            Controller::FixedTuned => {
                Limiter::Fixed(ConcurrencyLimiter::new(Fixed(s.workers + s.workers / 4)))
            }
            Controller::Aimd => Limiter::Aimd(ConcurrencyLimiter::new(
                Aimd::default().with_timeout(timeout),
            )),
            Controller::Vegas => {
                Limiter::Vegas(ConcurrencyLimiter::new(Vegas::new(20, 1000, seed)))
            }
            Controller::Gradient2 => Limiter::Gradient2(ConcurrencyLimiter::new(
                Gradient2::default().with_timeout(timeout),
            )),
            Controller::Envoy => Limiter::Envoy(ConcurrencyLimiter::new(EnvoyGradient::new(seed))),
            Controller::Knee => Limiter::Knee(ConcurrencyLimiter::new(
                Knee::default().with_timeout(timeout),
            )),
        }
    }

    /// A permit, `Some(None)` when there is no controller, `None` if refused.
    fn acquire(&self, now: Timestamp) -> Option<Option<Permit>> {
        fn one<A: LimitAlgorithm + 'static>(
            l: &ConcurrencyLimiter<A>,
            now: Timestamp,
        ) -> Option<Option<Permit>> {
            l.try_acquire(now).map(Some)
        }
        match self {
            Limiter::None => Some(None),
            Limiter::Fixed(l) => one(l, now),
            Limiter::Aimd(l) => one(l, now),
            Limiter::Vegas(l) => one(l, now),
            Limiter::Gradient2(l) => one(l, now),
            Limiter::Envoy(l) => one(l, now),
            Limiter::Knee(l) => one(l, now),
        }
    }

    fn complete(&self, p: Permit, now: Timestamp, c: Completion) {
        match self {
            Limiter::None => {}
            Limiter::Fixed(l) => l.complete(p, now, c),
            Limiter::Aimd(l) => l.complete(p, now, c),
            Limiter::Vegas(l) => l.complete(p, now, c),
            Limiter::Gradient2(l) => l.complete(p, now, c),
            Limiter::Envoy(l) => l.complete(p, now, c),
            Limiter::Knee(l) => l.complete(p, now, c),
        }
    }

    fn limit(&self) -> f64 {
        match self {
            Limiter::None => f64::NAN,
            Limiter::Fixed(l) => l.limit() as f64,
            Limiter::Aimd(l) => l.limit() as f64,
            Limiter::Vegas(l) => l.limit() as f64,
            Limiter::Gradient2(l) => l.limit() as f64,
            Limiter::Envoy(l) => l.limit() as f64,
            Limiter::Knee(l) => l.limit() as f64,
        }
    }
}

/// The `p`th percentile (0–100) of `v`, sorting it first: the simulator's
/// nearest-rank [`percentile`](crate::metrics::percentile).
fn percentile_of(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::metrics::percentile(v, p)
}

fn exp_sample(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    -mean * u.ln()
}

/// Appends a timeline point for every whole second up to `up_to_ms` not yet
/// recorded; its latency is filled in at the end of the run, once every
/// request of that second that will be answered has been.
fn ticks(
    up_to_ms: u64,
    next_tick_ms: &mut u64,
    limiter: &Limiter,
    inflight: usize,
    timeline: &mut Vec<(f64, f64, f64, f64)>,
) {
    while *next_tick_ms <= up_to_ms {
        timeline.push((
            *next_tick_ms as f64 / 1000.0,
            limiter.limit(),
            inflight as f64,
            f64::NAN,
        ));
        *next_tick_ms += 1_000;
    }
}

/// Runs `scenario` with `controller` and `seed`.
pub fn run(scenario: &OverloadScenario, controller: Controller, seed: u64) -> OverloadResult {
    let s = scenario;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let limiter = Limiter::new(controller, s, seed);
    let end_ns = s.duration_ms * 1_000_000;
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut BinaryHeap<Event>, at_ns: u64, kind: Kind, id: usize| {
        seq += 1;
        heap.push(Event {
            at_ns,
            seq,
            kind,
            id,
        });
    };
    let mut requests: Vec<Request> = Vec::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut busy = 0usize;
    let mut inflight = 0usize;
    let mut arrived = 0u64;
    let mut refused = 0u64;
    let mut timed_out = 0u64;
    let mut good = 0u64;
    let mut good_latencies: Vec<f64> = Vec::new();
    let mut all_latencies: Vec<f64> = Vec::new();
    // Per second: admitted latencies, for the timeline and recovery.
    let seconds = (s.duration_ms / 1000) as usize + 1;
    let mut per_second: Vec<Vec<f64>> = vec![Vec::new(); seconds];
    let mut timeline = Vec::with_capacity(seconds);
    let mut next_tick_ms = 1_000u64;

    let rate_at = |t_ms: u64| match s.arrivals {
        Arrivals::Poisson { per_s } => per_s,
        Arrivals::Bursty {
            per_s,
            high,
            period_ms,
        } => {
            if (t_ms / period_ms.max(1)) % 2 == 0 {
                per_s * high
            } else {
                per_s * (2.0 - high)
            }
        }
    };
    let first_gap = exp_sample(&mut rng, 1e9 / rate_at(0));
    push(&mut heap, first_gap as u64, Kind::Arrival, 0);

    while let Some(ev) = heap.pop() {
        if ev.at_ns > end_ns {
            break;
        }
        let now_ns = ev.at_ns;
        let now_ms = now_ns / 1_000_000;
        let up_to = now_ms.min(s.duration_ms);
        ticks(up_to, &mut next_tick_ms, &limiter, inflight, &mut timeline);
        let now = Timestamp::from_nanos(now_ns);
        match ev.kind {
            Kind::Arrival => {
                arrived += 1;
                let gap = exp_sample(&mut rng, 1e9 / rate_at(now_ms));
                push(&mut heap, now_ns + gap.max(1.0) as u64, Kind::Arrival, 0);
                match limiter.acquire(now) {
                    None => refused += 1,
                    Some(permit) => {
                        let id = requests.len();
                        requests.push(Request {
                            arrived_ns: now_ns,
                            permit,
                        });
                        inflight += 1;
                        if busy < s.workers {
                            busy += 1;
                            let service =
                                exp_sample(&mut rng, s.service_ms * 1e6 / s.speed_at(now_ms));
                            push(&mut heap, now_ns + service as u64, Kind::Served, id);
                        } else {
                            queue.push_back(id);
                        }
                    }
                }
            }
            Kind::Served => {
                // The worker takes the next queued request.
                if let Some(next) = queue.pop_front() {
                    let service = exp_sample(&mut rng, s.service_ms * 1e6 / s.speed_at(now_ms));
                    push(&mut heap, now_ns + service as u64, Kind::Served, next);
                } else {
                    busy -= 1;
                }
                let extra = s.extra_at(now_ms) * 1_000_000;
                push(&mut heap, now_ns + extra, Kind::Responded, ev.id);
            }
            Kind::Responded => {
                inflight -= 1;
                let r = &mut requests[ev.id];
                let latency_ms = (now_ns - r.arrived_ns) as f64 / 1e6;
                let ok = latency_ms <= s.timeout_ms as f64;
                all_latencies.push(latency_ms);
                let sec = (r.arrived_ns / 1_000_000_000) as usize;
                if let Some(v) = per_second.get_mut(sec) {
                    v.push(latency_ms);
                }
                if ok {
                    good += 1;
                    good_latencies.push(latency_ms);
                } else {
                    timed_out += 1;
                }
                if let Some(p) = r.permit.take() {
                    let c = if ok {
                        Completion::Success
                    } else {
                        Completion::Dropped
                    };
                    limiter.complete(p, now, c);
                }
            }
        }
    }

    // The ticks after the last event.
    ticks(
        s.duration_ms,
        &mut next_tick_ms,
        &limiter,
        inflight,
        &mut timeline,
    );
    // Each second's p99, over every request of it answered by the end.
    let second_p99: Vec<f64> = per_second
        .iter_mut()
        .map(|v| {
            if v.is_empty() {
                f64::NAN
            } else {
                percentile_of(v, 99.0)
            }
        })
        .collect();
    for (point, p99) in timeline.iter_mut().zip(&second_p99) {
        point.3 = *p99;
    }
    let duration_s = s.duration_ms as f64 / 1000.0;
    let admitted = arrived - refused;
    // The most that could have been served: work can wait in the queue but
    // not be served before it arrives, so with A and C the mean cumulative
    // arrivals and capacity, the bound is min over t of A(t) + C(T) − C(t)
    // (on a 100 ms grid).
    let slices = s.duration_ms / 100;
    let capacity_total: f64 = (0..slices)
        .map(|k| s.speed_at(k * 100) * s.capacity_per_s() * 0.1)
        .sum();
    let (mut arrived_so_far, mut capacity_so_far) = (0.0, 0.0);
    let mut available = capacity_total;
    for k in 0..slices {
        arrived_so_far += rate_at(k * 100) * 0.1;
        capacity_so_far += s.speed_at(k * 100) * s.capacity_per_s() * 0.1;
        available = f64::min(available, arrived_so_far + capacity_total - capacity_so_far);
    }
    let change_times: Vec<u64> = s
        .changes
        .iter()
        .map(|c| match *c {
            Change::Capacity { at_ms, .. } | Change::Latency { at_ms, .. } => at_ms,
        })
        .collect();
    let recovery_s = change_times
        .iter()
        .map(|&at| {
            let from = (at / 1000) as usize;
            let bound = s.recovery_bound_ms(at);
            second_p99
                .iter()
                .enumerate()
                .skip(from)
                .find(|(_, p99)| **p99 <= bound)
                .map_or(duration_s, |(i, _)| (i - from) as f64)
        })
        .collect();
    let steady_end = change_times.first().copied().unwrap_or(s.duration_ms) / 1000;
    let window: Vec<f64> = timeline
        .iter()
        .filter(|p| p.0 > steady_end as f64 - 10.0 && p.0 <= steady_end as f64)
        .map(|p| p.1)
        .filter(|l| l.is_finite())
        .collect();
    let oscillation = if window.is_empty() {
        0.0
    } else {
        let max = window.iter().copied().fold(f64::MIN, f64::max);
        let min = window.iter().copied().fold(f64::MAX, f64::min);
        let mean = window.iter().sum::<f64>() / window.len() as f64;
        (max - min) / mean.max(1e-9)
    };
    OverloadResult {
        scenario: s.name,
        controller: controller.name(),
        arrived,
        goodput_per_s: good as f64 / duration_s,
        goodput_share: good as f64 / available.max(1.0),
        refused_share: refused as f64 / arrived.max(1) as f64,
        timed_out_share: timed_out as f64 / admitted.max(1) as f64,
        p50_latency_ms: percentile_of(&mut good_latencies, 50.0),
        p99_latency_ms: percentile_of(&mut all_latencies, 99.0),
        recovery_s,
        oscillation,
        timeline,
    }
}

/// What `ratewise overload` prints for one scenario: a line naming it
/// (description, capacity, no-load p99), then [`table`].
pub fn text_report(s: &OverloadScenario, results: &[OverloadResult]) -> String {
    format!(
        "{}: {} (capacity {:.0}/s, no-load p99 {:.0} ms)\n{}",
        s.name,
        s.description,
        s.capacity_per_s(),
        s.no_load_p99_ms(),
        table(results)
    )
}

/// A text table of `results`, one row a controller.
pub fn table(results: &[OverloadResult]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>13} {:>6}",
        "Controller",
        "Goodput/s",
        "Share",
        "Refused",
        "TimedOut",
        "p50 ms",
        "p99 ms",
        "Recovery s",
        "Swing"
    );
    for r in results {
        let recovery = if r.recovery_s.is_empty() {
            "-".to_string()
        } else {
            r.recovery_s
                .iter()
                .map(|v| format!("{v:.0}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        let _ = writeln!(
            out,
            "{:<10} {:>9.0} {:>7.1}% {:>7.1}% {:>8.1}% {:>9.1} {:>9.1} {:>13} {:>6.2}",
            r.controller,
            r.goodput_per_s,
            100.0 * r.goodput_share,
            100.0 * r.refused_share,
            100.0 * r.timed_out_share,
            r.p50_latency_ms,
            r.p99_latency_ms,
            recovery,
            r.oscillation,
        );
    }
    out
}

/// One controller's timeline as an inline SVG: the limit and the requests
/// in flight on the left axis, the p99 latency of each second's arrivals on
/// the right axis (dashed), and the scenario's changes as vertical lines.
fn timeline_svg(s: &OverloadScenario, r: &OverloadResult) -> String {
    use std::fmt::Write;
    let (w, h, left, right, top, bottom) = (640.0, 220.0, 56.0, 64.0, 24.0, 36.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let t_max = s.duration_ms as f64 / 1000.0;
    let count_max = r
        .timeline
        .iter()
        .flat_map(|p| [p.1, p.2])
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        .ceil();
    // The bound recovery is judged against, a step at each change.
    let mut bound = vec![(0.0, s.recovery_bound_ms(0))];
    for c in &s.changes {
        let at = match *c {
            Change::Capacity { at_ms, .. } | Change::Latency { at_ms, .. } => at_ms,
        };
        bound.push((at as f64 / 1000.0, bound[bound.len() - 1].1));
        bound.push((at as f64 / 1000.0, s.recovery_bound_ms(at)));
    }
    bound.push((t_max, bound[bound.len() - 1].1));
    let lat_max = r
        .timeline
        .iter()
        .map(|p| p.3)
        .chain(bound.iter().map(|b| b.1))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .ceil();
    let x = |t: f64| left + pw * t / t_max;
    let y_count = |v: f64| top + ph * (1.0 - v / count_max);
    let y_lat = |v: f64| top + ph * (1.0 - v / lat_max);
    let line = |pts: Vec<(f64, f64)>| {
        pts.iter()
            .map(|(a, b)| format!("{a:.1},{b:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="overload-chart" data-controller="{}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{}: limit, in flight and p99 latency over time">"#,
        r.controller,
        esc(r.controller)
    );
    let _ = write!(
        svg,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##
    );
    for c in &s.changes {
        let at = match *c {
            Change::Capacity { at_ms, .. } | Change::Latency { at_ms, .. } => at_ms,
        } as f64
            / 1000.0;
        let _ = write!(
            svg,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{top}" y2="{1:.1}" stroke="#d55" stroke-dasharray="2 3"/>"##,
            x(at),
            top + ph
        );
    }
    let pts = bound.iter().map(|&(t, b)| (x(t), y_lat(b))).collect();
    let _ = write!(
        svg,
        r##"<polyline class="bound" points="{}" fill="none" stroke="#e9a" stroke-width="1"/>"##,
        line(pts)
    );
    if r.timeline.iter().any(|p| p.1.is_finite()) {
        let pts = r.timeline.iter().map(|p| (x(p.0), y_count(p.1))).collect();
        let _ = write!(
            svg,
            r##"<polyline class="series limit" points="{}" fill="none" stroke="#1f4e9c" stroke-width="2"/>"##,
            line(pts)
        );
    }
    let pts = r.timeline.iter().map(|p| (x(p.0), y_count(p.2))).collect();
    let _ = write!(
        svg,
        r##"<polyline class="series inflight" points="{}" fill="none" stroke="#2a9d5c" stroke-width="1.5"/>"##,
        line(pts)
    );
    // A second none of whose arrivals was answered by the end of the run
    // has no latency to draw (its requests are still queued): the line
    // breaks there instead of falling to zero.
    let mut segment: Vec<(f64, f64)> = Vec::new();
    let mut segments = Vec::new();
    for p in &r.timeline {
        if p.3.is_nan() {
            segments.push(std::mem::take(&mut segment));
        } else {
            segment.push((x(p.0), y_lat(p.3)));
        }
    }
    segments.push(segment);
    for seg in segments.into_iter().filter(|s| s.len() > 1) {
        let _ = write!(
            svg,
            r##"<polyline class="series latency" points="{}" fill="none" stroke="#b5651d" stroke-width="1.5" stroke-dasharray="5 3"/>"##,
            line(seg)
        );
    }
    // Axes: whole-number ticks, both axes labelled with their unit.
    for k in 0..=4 {
        let f = f64::from(k) / 4.0;
        let _ = write!(
            svg,
            r##"<text x="{0:.1}" y="{1:.1}" font-size="10" text-anchor="end">{2:.0}</text><text x="{3:.1}" y="{1:.1}" font-size="10">{4:.0}</text><text x="{5:.1}" y="{6:.1}" font-size="10" text-anchor="middle">{7:.0}</text>"##,
            left - 4.0,
            top + ph * (1.0 - f) + 3.0,
            count_max * f,
            left + pw + 4.0,
            lat_max * f,
            x(t_max * f),
            top + ph + 14.0,
            t_max * f
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{0:.1}" y="{1:.1}" font-size="11" text-anchor="middle">time (s)</text><text x="12" y="{2:.1}" font-size="11" transform="rotate(-90 12 {2:.1})" text-anchor="middle">requests (limit, in flight)</text><text x="{3:.1}" y="{2:.1}" font-size="11" transform="rotate(90 {3:.1} {2:.1})" text-anchor="middle">p99 latency (ms)</text><text x="{left}" y="14" font-size="12" font-weight="bold">{4}</text></svg>"##,
        left + pw / 2.0,
        h - 4.0,
        top + ph / 2.0,
        w - 10.0,
        esc(r.controller)
    );
    svg
}

/// A self-contained HTML page: for each scenario, the table and one chart
/// per controller of its limit, in-flight count and p99 latency over time.
pub fn html(runs: &[(OverloadScenario, Vec<OverloadResult>)]) -> String {
    use std::fmt::Write;
    let mut out = String::from(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>ratewise overload report</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}pre{background:#f6f6f6;padding:1em;overflow:auto}
.charts{display:flex;flex-wrap:wrap;gap:12px}.legend span{margin-right:1.5em}</style></head><body>
<h1>Admission control under overload</h1>
<p class="legend"><span style="color:#1f4e9c">━ limit</span><span style="color:#2a9d5c">━ in flight</span><span style="color:#b5651d">╍ p99 latency of each second's arrivals (right axis)</span><span style="color:#e9a">━ 2 × no-load p99 of the server in force</span><span style="color:#d55">┆ capacity or latency change</span></p>
"#,
    );
    for (s, results) in runs {
        let _ = write!(
            out,
            "<h2>{}</h2><p>{}; capacity {:.0}/s, no-load p99 {:.0} ms.</p><pre>{}</pre><div class=\"charts\">",
            esc(s.name),
            esc(s.description),
            s.capacity_per_s(),
            s.no_load_p99_ms(),
            esc(&table(results))
        );
        for r in results {
            out.push_str(&timeline_svg(s, r));
        }
        out.push_str("</div>");
    }
    out.push_str(
        r#"<script>
// For tests and readers: how many series the browser actually laid out.
const drawn = [...document.querySelectorAll('polyline.series')]
  .filter(p => { const b = p.getBBox(); return b.width > 0; }).length;
document.body.setAttribute('data-rendered-series', String(drawn));
document.body.setAttribute('data-charts', String(document.querySelectorAll('svg.overload-chart').length));
</script></body></html>"#,
    );
    out
}
