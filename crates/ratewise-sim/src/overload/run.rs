//! The event loop of the server-side simulator and the figures it measures.

use std::collections::{BTreeMap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ratewise::concurrency::{Completion, Permit};
use ratewise::Timestamp;
use serde::Serialize;

use crate::overload::controller::{Controller, Limiter};
use crate::overload::scenario::{Change, OverloadScenario};
use crate::queue::EventQueue;
use crate::samples::Samples;

/// What one run measured. Field names are the JSON's; `docs/simulator.md`
/// defines each.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OverloadResult {
    /// The scenario.
    pub scenario: String,
    /// The controller.
    pub controller: &'static str,
    /// Whether it is [`Controller::DEFAULT`].
    pub default: bool,
    /// Calls the clients made (first attempts).
    pub calls: u64,
    /// Requests the server saw (first attempts and retries).
    pub arrived: u64,
    /// The most calls in progress at once (waiting for an answer or a
    /// retry): the size of the fleet the run held in memory.
    pub peak_calls_in_flight: u64,
    /// Responses within the latency objective, per second of the run: the
    /// headline figure.
    pub goodput_within_objective_per_s: f64,
    /// The same as a share of the capacity there was to use: the sum over
    /// 100 ms slices of min(demand, capacity), demand counting calls, not
    /// retries.
    pub goodput_within_objective_share: f64,
    /// 99th percentile latency of admitted requests that arrived in a
    /// second when the server saw more requests than it could serve (over
    /// every admitted request if there was no such second).
    pub p99_overloaded_ms: f64,
    /// The 99.9th percentile of the same.
    pub p999_overloaded_ms: f64,
    /// Seconds in which the server saw more requests than its capacity.
    pub overloaded_s: u64,
    /// 99th percentile time from a request's arrival to its refusal; `None`
    /// when nothing was refused.
    pub refusal_p99_ms: Option<f64>,
    /// After each change, milliseconds until the goodput within the
    /// objective over the next second is within 5 % of its steady value
    /// (its mean over the second half of the time until the next change or
    /// the end); the phase's length if never.
    pub convergence_ms: Vec<f64>,
    /// Goodput within the objective over the run's last 10 s, as a share of
    /// the capacity there was to use then: near 0 after a collapse that
    /// outlived its cause.
    pub final_share: f64,
    /// Share of the workers' busy time spent on requests whose caller had
    /// given up by the time they were answered.
    pub wasted_work_share: f64,
    /// Requests the server saw ÷ calls the clients made.
    pub retry_amplification: f64,
    /// Per class, the share of finished calls that got an answer within
    /// the client timeout (on some attempt).
    pub success_by_priority: BTreeMap<&'static str, f64>,
    /// The same per tenant.
    pub success_by_tenant: BTreeMap<String, f64>,
    /// Jain's fairness index of the tenants' success rates: 1 when equal,
    /// 1/n when one tenant gets everything.
    pub jain_fairness: f64,
    /// Responses within the client timeout, per second of the run.
    pub goodput_per_s: f64,
    /// Goodput as a share of the most that could have been served, given
    /// when the work arrived and when the capacity was there (mean rates).
    pub goodput_share: f64,
    /// Share of the requests the server saw refused at once.
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
    #[serde(skip)]
    pub timeline: Vec<(f64, f64, f64, f64)>,
    /// One point a second: the goodput within the objective of the second
    /// ending then (by response time), as a share of the capacity there was
    /// to use in it.
    #[serde(skip)]
    pub goodput_timeline: Vec<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A worker finishes the request `id`.
    Served,
    /// The response to `id` reaches the client.
    Responded,
    /// A new call arrives.
    Arrival,
    /// The caller of request `id` gives up on it.
    GiveUp,
    /// Call `id` sends another attempt.
    Retry,
    /// The worker count changes.
    Workers,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Event {
    at_ns: u64,
    kind: Kind,
    id: usize,
}

/// One attempt the server saw and admitted. Its slot is reused once no
/// event refers to it.
struct Request {
    call: usize,
    arrived_ns: u64,
    started_ns: u64,
    service_ns: u64,
    answered: bool,
    permit: Option<Permit>,
    /// Events still to come about it: its response, and its caller's
    /// time-out if one was scheduled.
    pending: u8,
}

/// One call a client made. Its slot is reused once it is finished and no
/// attempt or retry of it is left.
struct Call {
    tenant: usize,
    retries_left: u32,
    /// Answered within the timeout, or out of attempts.
    finished: bool,
    /// Attempts in the server and retries scheduled.
    pending: u32,
}

/// Slots reused through a free list, so memory follows what is in flight,
/// not the length of the run.
struct Slab<T> {
    items: Vec<T>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, item: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = item;
                i
            }
            None => {
                self.items.push(item);
                self.items.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) {
        self.free.push(i);
    }

    /// Slots in use.
    fn live(&self) -> usize {
        self.items.len() - self.free.len()
    }
}

impl<T> std::ops::Index<usize> for Slab<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        &self.items[i]
    }
}

impl<T> std::ops::IndexMut<usize> for Slab<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.items[i]
    }
}

/// Per tenant: calls finished, and of them succeeded.
type TenantCounts = Vec<(u64, u64)>;

/// Marks call `id` finished (once) and counts it for its tenant.
fn finish(calls: &mut Slab<Call>, by_tenant: &mut TenantCounts, id: usize, succeeded: bool) {
    let c = &mut calls[id];
    if !c.finished {
        c.finished = true;
        by_tenant[c.tenant].0 += 1;
        by_tenant[c.tenant].1 += u64::from(succeeded);
    }
}

/// One event about request `id` has come: frees its slot when it was the
/// last.
fn release_request(requests: &mut Slab<Request>, id: usize) {
    let r = &mut requests[id];
    r.pending -= 1;
    if r.pending == 0 {
        requests.remove(id);
    }
}

/// Frees call `id`'s slot if it is finished and nothing refers to it.
fn release_call(calls: &mut Slab<Call>, id: usize) {
    let c = &calls[id];
    if c.finished && c.pending == 0 {
        calls.remove(id);
    }
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

/// The event queue, in (time, insertion order); an event's kind and id
/// are packed in 4 bytes (the kind in the low 3 bits; ids are slots of
/// requests and calls in flight, far below 2^29).
struct Events {
    queue: EventQueue,
}

const KINDS: [Kind; 6] = [
    Kind::Served,
    Kind::Responded,
    Kind::Arrival,
    Kind::GiveUp,
    Kind::Retry,
    Kind::Workers,
];

impl Events {
    fn push(&mut self, at_ns: u64, kind: Kind, id: usize) {
        // `KINDS` lists the kinds in declaration order: the discriminant
        // is the index.
        debug_assert!(id < 1 << 29, "slot {id} does not pack");
        self.queue.push(at_ns, (id as u32) << 3 | kind as u32);
    }

    fn pop(&mut self) -> Option<Event> {
        let (at_ns, packed) = self.queue.pop()?;
        Some(Event {
            at_ns,
            kind: KINDS[(packed & 7) as usize],
            id: (packed >> 3) as usize,
        })
    }
}

/// Latencies kept exactly per second of arrival; past it a second's
/// latencies are a histogram (see [`Samples`]).
const PER_SECOND_EXACT: usize = 1 << 14;

/// Bin width of the goodput series convergence is read from.
const BIN_MS: u64 = 10;

/// Runs `scenario` with `controller` and `seed`.
pub fn run(scenario: &OverloadScenario, controller: Controller, seed: u64) -> OverloadResult {
    let s = scenario;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let limiter = Limiter::new(controller, s, seed);
    let end_ns = s.duration_ms * 1_000_000;
    let timeout_ns = s.timeout_ms * 1_000_000;
    let objective_ms = s.objective_ms();
    let tenants = s.tenants_or_default();
    let share_sum: f64 = tenants.iter().map(|t| t.share).sum();
    let mut ev = Events {
        queue: EventQueue::new(),
    };
    let mut requests: Slab<Request> = Slab::new();
    let mut calls: Slab<Call> = Slab::new();
    let mut call_count = 0u64;
    let mut peak_calls = 0usize;
    let mut by_tenant: TenantCounts = vec![(0, 0); tenants.len()];
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut workers = s.workers;
    let mut busy = 0usize;
    let mut inflight = 0usize;
    let mut arrived = 0u64;
    let mut refused = 0u64;
    let mut timed_out = 0u64;
    let mut good = 0u64;
    let mut good_objective = 0u64;
    let (mut busy_ns, mut wasted_ns) = (0u64, 0u64);
    let mut good_latencies = Samples::new();
    let mut all_latencies = Samples::new();
    // Per second: admitted latencies by arrival second, for the timeline
    // and recovery; requests seen; responses within the objective.
    let seconds = (s.duration_ms / 1000) as usize + 1;
    let mut per_second: Vec<Samples> = (0..seconds)
        .map(|_| Samples::with_exact_limit(PER_SECOND_EXACT))
        .collect();
    let mut seen_per_second = vec![0u64; seconds];
    let mut objective_bins = vec![0u64; (s.duration_ms / BIN_MS) as usize + 1];
    let mut timeline = Vec::with_capacity(seconds);
    let mut next_tick_ms = 1_000u64;

    let first_gap = exp_sample(&mut rng, 1e9 / s.rate_at(0));
    ev.push(first_gap as u64, Kind::Arrival, 0);
    for (i, c) in s.changes.iter().enumerate() {
        if let Change::Workers { at_ms, .. } = *c {
            ev.push(at_ms * 1_000_000, Kind::Workers, i);
        }
    }

    // Starts serving request `id` now.
    let service = |rng: &mut ChaCha8Rng, now_ms: u64| {
        exp_sample(rng, s.service_ms * 1e6 / s.speed_at(now_ms)) as u64
    };

    while let Some(e) = ev.pop() {
        if e.at_ns > end_ns {
            break;
        }
        let now_ns = e.at_ns;
        let now_ms = now_ns / 1_000_000;
        ticks(
            now_ms.min(s.duration_ms),
            &mut next_tick_ms,
            &limiter,
            inflight,
            &mut timeline,
        );
        let now = Timestamp::from_nanos(now_ns);
        // A new attempt (a new call's first, or a retry) at admission.
        let mut attempt = |call: usize,
                           rng: &mut ChaCha8Rng,
                           ev: &mut Events,
                           calls: &mut Slab<Call>,
                           requests: &mut Slab<Request>,
                           by_tenant: &mut TenantCounts| {
            arrived += 1;
            if let Some(n) = seen_per_second.get_mut((now_ms / 1000) as usize) {
                *n += 1;
            }
            let priority = tenants[calls[call].tenant].priority.priority();
            match limiter.acquire(now, priority) {
                None => {
                    refused += 1;
                    let c = &mut calls[call];
                    if c.retries_left > 0 {
                        c.retries_left -= 1;
                        c.pending += 1;
                        ev.push(now_ns + s.retry_backoff_ms * 1_000_000, Kind::Retry, call);
                    } else {
                        finish(calls, by_tenant, call, false);
                        release_call(calls, call);
                    }
                }
                Some(permit) => {
                    calls[call].pending += 1;
                    let id = requests.insert(Request {
                        call,
                        arrived_ns: now_ns,
                        started_ns: now_ns,
                        service_ns: 0,
                        answered: false,
                        permit,
                        pending: 1 + u8::from(s.retries > 0),
                    });
                    inflight += 1;
                    if s.retries > 0 {
                        ev.push(now_ns + timeout_ns + 1, Kind::GiveUp, id);
                    }
                    if busy < workers {
                        busy += 1;
                        ev.push(now_ns + service(rng, now_ms), Kind::Served, id);
                    } else {
                        queue.push_back(id);
                    }
                }
            }
        };
        match e.kind {
            Kind::Arrival => {
                let gap = exp_sample(&mut rng, 1e9 / s.rate_at(now_ms).max(1e-9));
                ev.push(now_ns + gap.max(1.0) as u64, Kind::Arrival, 0);
                let tenant = if tenants.len() > 1 {
                    let mut u = rng.random_range(0.0..share_sum);
                    tenants
                        .iter()
                        .position(|t| {
                            u -= t.share;
                            u < 0.0
                        })
                        .unwrap_or(tenants.len() - 1)
                } else {
                    0
                };
                call_count += 1;
                let id = calls.insert(Call {
                    tenant,
                    retries_left: s.retries,
                    finished: false,
                    pending: 0,
                });
                peak_calls = peak_calls.max(calls.live());
                attempt(
                    id,
                    &mut rng,
                    &mut ev,
                    &mut calls,
                    &mut requests,
                    &mut by_tenant,
                );
            }
            Kind::Retry => {
                calls[e.id].pending -= 1;
                attempt(
                    e.id,
                    &mut rng,
                    &mut ev,
                    &mut calls,
                    &mut requests,
                    &mut by_tenant,
                );
            }
            Kind::Workers => {
                if let Some(Change::Workers { workers: w, .. }) = s.changes.get(e.id) {
                    workers = *w;
                }
                while busy < workers {
                    let Some(next) = queue.pop_front() else { break };
                    busy += 1;
                    requests[next].started_ns = now_ns;
                    ev.push(now_ns + service(&mut rng, now_ms), Kind::Served, next);
                }
            }
            Kind::Served => {
                let r = &mut requests[e.id];
                r.service_ns = now_ns - r.started_ns;
                busy_ns += r.service_ns;
                // The worker takes the next queued request, unless workers
                // went away.
                match queue.front() {
                    Some(&next) if busy <= workers => {
                        queue.pop_front();
                        requests[next].started_ns = now_ns;
                        ev.push(now_ns + service(&mut rng, now_ms), Kind::Served, next);
                    }
                    _ => busy -= 1,
                }
                let extra = s.extra_at(now_ms) * 1_000_000;
                ev.push(now_ns + extra, Kind::Responded, e.id);
            }
            Kind::GiveUp => {
                let (call, answered) = (requests[e.id].call, requests[e.id].answered);
                release_request(&mut requests, e.id);
                // An answered request's call may be gone already; an
                // unanswered one still counts in its call's `pending`.
                if answered {
                    continue;
                }
                let c = &mut calls[call];
                if !c.finished {
                    if c.retries_left > 0 {
                        c.retries_left -= 1;
                        c.pending += 1;
                        ev.push(now_ns + s.retry_backoff_ms * 1_000_000, Kind::Retry, call);
                    } else {
                        finish(&mut calls, &mut by_tenant, call, false);
                    }
                }
            }
            Kind::Responded => {
                inflight -= 1;
                let r = &mut requests[e.id];
                r.answered = true;
                let latency_ms = (now_ns - r.arrived_ns) as f64 / 1e6;
                let ok = now_ns - r.arrived_ns <= timeout_ns;
                all_latencies.push(latency_ms);
                let sec = (r.arrived_ns / 1_000_000_000) as usize;
                if let Some(v) = per_second.get_mut(sec) {
                    v.push(latency_ms);
                }
                let call = r.call;
                if ok {
                    good += 1;
                    good_latencies.push(latency_ms);
                    finish(&mut calls, &mut by_tenant, call, true);
                    if latency_ms <= objective_ms {
                        good_objective += 1;
                        if let Some(b) = objective_bins.get_mut((now_ms / BIN_MS) as usize) {
                            *b += 1;
                        }
                    }
                } else {
                    timed_out += 1;
                    wasted_ns += r.service_ns;
                    if s.retries == 0 {
                        finish(&mut calls, &mut by_tenant, call, false);
                    }
                }
                if let Some(p) = r.permit.take() {
                    let c = if ok {
                        Completion::Success
                    } else {
                        Completion::Dropped
                    };
                    limiter.complete(p, now, c);
                }
                release_request(&mut requests, e.id);
                calls[call].pending -= 1;
                release_call(&mut calls, call);
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
    // The seconds in which the server saw more than it could serve, and the
    // latencies of the requests admitted in them.
    let overloaded: Vec<bool> = seen_per_second
        .iter()
        .enumerate()
        .map(|(sec, &n)| {
            let from = sec as u64 * 1000;
            let capacity: f64 = (0..10).map(|k| s.capacity_at(from + k * 100) * 0.1).sum();
            from < s.duration_ms && n as f64 > capacity
        })
        .collect();
    let overloaded_s = overloaded.iter().filter(|o| **o).count() as u64;
    let mut overload_latencies = Samples::new();
    for (sec, v) in per_second.iter().enumerate() {
        if overloaded_s == 0 || overloaded[sec] {
            overload_latencies.merge(v);
        }
    }
    let p99_overloaded_ms = overload_latencies.percentile(99.0);
    let p999_overloaded_ms = overload_latencies.percentile(99.9);
    // Each second's p99, over every request of it answered by the end.
    let second_p99: Vec<f64> = per_second
        .iter_mut()
        .map(|v| {
            if v.is_empty() {
                f64::NAN
            } else {
                v.percentile(99.0)
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
    let capacity_total: f64 = (0..slices).map(|k| s.capacity_at(k * 100) * 0.1).sum();
    let (mut arrived_so_far, mut capacity_so_far) = (0.0, 0.0);
    let mut available = capacity_total;
    for k in 0..slices {
        arrived_so_far += s.rate_at(k * 100) * 0.1;
        capacity_so_far += s.capacity_at(k * 100) * 0.1;
        available = f64::min(available, arrived_so_far + capacity_total - capacity_so_far);
    }
    // The capacity there was to use within the objective: per slice, the
    // lesser of demand and capacity.
    let usable = |from_ms: u64, to_ms: u64| -> f64 {
        (from_ms / 100..to_ms / 100)
            .map(|k| f64::min(s.rate_at(k * 100), s.capacity_at(k * 100)) * 0.1)
            .sum()
    };
    let change_times: Vec<u64> = s.changes.iter().map(Change::at_ms).collect();
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
    let convergence_ms = change_times
        .iter()
        .enumerate()
        .map(|(i, &at)| {
            let end = change_times
                .get(i + 1)
                .copied()
                .unwrap_or(s.duration_ms)
                .max(at);
            convergence(&objective_bins, at, end)
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
    let per_bin_s = (1000 / BIN_MS) as usize;
    let goodput_timeline = (0..(s.duration_ms / 1000) as usize)
        .map(|sec| {
            let from = sec * per_bin_s;
            let got: u64 = objective_bins[from..from + per_bin_s].iter().sum();
            let there = usable(sec as u64 * 1000, (sec as u64 + 1) * 1000);
            if there > 0.0 {
                got as f64 / there
            } else {
                f64::NAN
            }
        })
        .collect();
    let last_from = s.duration_ms.saturating_sub(10_000);
    let last_good: u64 = objective_bins[(last_from / BIN_MS) as usize..].iter().sum();
    let rate = |(n, ok): (u64, u64)| {
        if n == 0 {
            f64::NAN
        } else {
            ok as f64 / n as f64
        }
    };
    let mut by_priority: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for (t, &(n, ok)) in tenants.iter().zip(&by_tenant) {
        let e = by_priority.entry(t.priority.name()).or_default();
        e.0 += n;
        e.1 += ok;
    }
    let tenant_rates: Vec<f64> = by_tenant.iter().map(|&x| rate(x)).collect();
    let (sum, sum_sq) = tenant_rates
        .iter()
        .filter(|x| x.is_finite())
        .fold((0.0, 0.0), |(a, b), x| (a + x, b + x * x));
    let counted = tenant_rates.iter().filter(|x| x.is_finite()).count() as f64;
    // A slot is added only when every slot is in use.
    debug_assert_eq!(calls.items.len(), peak_calls);
    OverloadResult {
        scenario: s.name.clone(),
        controller: controller.name(),
        default: controller == Controller::DEFAULT,
        calls: call_count,
        peak_calls_in_flight: peak_calls as u64,
        arrived,
        goodput_within_objective_per_s: good_objective as f64 / duration_s,
        goodput_within_objective_share: good_objective as f64 / usable(0, s.duration_ms).max(1.0),
        p99_overloaded_ms,
        p999_overloaded_ms,
        overloaded_s,
        // Refusals are answered at admission, before any queue.
        refusal_p99_ms: (refused > 0).then_some(0.0),
        convergence_ms,
        final_share: last_good as f64 / usable(last_from, s.duration_ms).max(1.0),
        wasted_work_share: wasted_ns as f64 / busy_ns.max(1) as f64,
        retry_amplification: arrived as f64 / call_count.max(1) as f64,
        success_by_priority: by_priority.into_iter().map(|(k, v)| (k, rate(v))).collect(),
        success_by_tenant: tenants
            .iter()
            .zip(&tenant_rates)
            .map(|(t, r)| (t.name.clone(), *r))
            .collect(),
        jain_fairness: if sum_sq > 0.0 {
            sum * sum / (counted * sum_sq)
        } else {
            1.0
        },
        goodput_per_s: good as f64 / duration_s,
        goodput_share: good as f64 / available.max(1.0),
        refused_share: refused as f64 / arrived.max(1) as f64,
        timed_out_share: timed_out as f64 / admitted.max(1) as f64,
        p50_latency_ms: good_latencies.percentile(50.0),
        p99_latency_ms: all_latencies.percentile(99.0),
        recovery_s,
        oscillation,
        timeline,
        goodput_timeline,
    }
}

/// Milliseconds from `at_ms` until the count of `bins` (of [`BIN_MS`]) over
/// the next second is within 5 % of its steady value, the mean over the
/// second half of `at_ms..end_ms`; `end_ms − at_ms` if never.
fn convergence(bins: &[u64], at_ms: u64, end_ms: u64) -> f64 {
    let (from, to) = ((at_ms / BIN_MS) as usize, (end_ms / BIN_MS) as usize);
    let to = to.min(bins.len());
    let window = (1000 / BIN_MS) as usize;
    let mid = from + (to - from) / 2;
    if to <= from + 2 * window || to <= mid {
        return (end_ms - at_ms) as f64;
    }
    let steady = bins[mid..to].iter().sum::<u64>() as f64 / (to - mid) as f64 * window as f64;
    let mut count: u64 = bins[from..from + window].iter().sum();
    for start in from..=to - window {
        if (count as f64 - steady).abs() <= 0.05 * steady {
            return ((start - from) as u64 * BIN_MS) as f64;
        }
        if start + window < to {
            count = count + bins[start + window] - bins[start];
        }
    }
    (end_ms - at_ms) as f64
}
