//! The discrete-event engine: virtual time, one event queue, no threads.
//!
//! Every simulated client thread is a small state machine
//! (`Ready → PreSleep → InFlight → (RetrySleep → InFlight)* → Ready`) that
//! drives a real [`Strategy`](ratewise_client::Strategy) object through its
//! sans-IO interface: `before_call` gives the pre-call sleep, the server
//! model answers each attempt when it is sent, the response comes back after
//! a sampled latency, and `after_attempt` decides between done and retry.
//! Nothing sleeps; the clock jumps from event to event.
//!
//! Determinism: events are ordered by `(time, sequence number)`, all
//! randomness in the engine comes from one ChaCha8 generator seeded with the
//! run's seed (a fixed algorithm, so output is identical on every platform),
//! and each strategy object gets its own seed derived from the run's seed
//! with SplitMix64. The same scenario, strategy and seed therefore give the
//! same events, metrics and JSON, byte for byte.
//!
//! Fidelity to Heroku's harness (the demo runner of the `rate_throttle_client`
//! gem, described in docs/simulator.md): a thread checks its deadline
//! only before starting a new call; every attempt counts as a request and
//! every throttled attempt as a retry; the recorded sleep values include the
//! strategy's jitter; and in duration mode a finishing thread can end its
//! sleeping siblings in the same process.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ratewise::Timestamp;
use ratewise_client::hints::ResetMeaning;
use ratewise_client::{secs_to_duration, Next, Outcome, Signal};

use crate::error::SimError;
use crate::in_flight::InFlightTable;
use crate::metrics::{RunMetrics, ThreadRecord};
use crate::queue::EventQueue;
use crate::samples::Samples;
use crate::scenario::{Scenario, StateSharing};
use crate::strategies::{Fleet, StrategyInfo, StrategyParams};

/// SplitMix64, the mixer every seed of a run is derived with; it lives
/// with the strategies' seeds ([`crate::strategies::derive_seed`]).
pub use crate::strategies::derive_seed;

/// The most chart samples kept per series; beyond it the trace's
/// resolution is halved (see `Engine::decimate_if_full`).
pub const MAX_SAMPLES: usize = 4096;

/// The most clients whose sleep the trace follows. With more, it follows
/// this many spread evenly over the clients (the first and the last
/// included), so the trace and the report's sleep chart stay the same
/// size whatever the client count.
pub const MAX_SLEEP_SERIES: usize = 100;

/// Time series sampled during a run, for the report's charts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// Sample times, simulated seconds.
    pub times: Vec<f64>,
    /// Per followed client thread: its last sleep value at each sample
    /// (seconds, jitter included), as Heroku's chart plots it. Every client
    /// when there are at most [`MAX_SLEEP_SERIES`], else that many spread
    /// evenly.
    pub sleep: Vec<Vec<f64>>,
    /// How many client threads the run had (`sleep` follows all of them or
    /// [`MAX_SLEEP_SERIES`]).
    pub clients: usize,
    /// Server capacity remaining at each sample.
    pub remaining: Vec<f64>,
    /// Successes in the interval ending at each sample.
    pub successes: Vec<u64>,
    /// Throttled responses in the interval ending at each sample.
    pub throttled: Vec<u64>,
}

/// Everything one run produces.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The metrics.
    pub metrics: RunMetrics,
    /// Charts' data.
    pub trace: Trace,
    /// Events processed (for throughput measurements).
    pub events: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Ready,
    PreSleep,
    InFlight,
    RetrySleep,
    Done,
}

/// An event: a thread's wake-up, or the sampler's.
///
/// A wake-up needs no generation to cancel it: the only wake-up ever
/// abandoned is that of a thread already `Done`, which ignores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Wake { thread: u32 },
    Sample,
}

impl Kind {
    /// Packed in 4 bytes for the queue (thread `u32::MAX` is the sampler).
    fn pack(self) -> u32 {
        match self {
            Kind::Wake { thread } => thread,
            Kind::Sample => u32::MAX,
        }
    }

    fn unpack(x: u32) -> Kind {
        match x {
            u32::MAX => Kind::Sample,
            thread => Kind::Wake { thread },
        }
    }
}

/// What the threads of one `[[clients]]` group share.
struct Group {
    join: Timestamp,
    end_at: Option<Timestamp>,
    leave_at: Option<Timestamp>,
    stop_at_remaining: Option<u64>,
    cycle: Option<(f64, f64)>,
    interrupt_siblings: bool,
    /// The group's first thread, process and strategy object, its threads
    /// per process and whether a process's threads share one object: a
    /// thread's process and object follow from its index.
    first_thread: u32,
    first_process: u32,
    first_strategy: u32,
    threads_per_process: u32,
    per_process: bool,
}

impl Group {
    /// Thread `t`'s process, `t` one of the group's threads.
    fn process(&self, t: usize) -> usize {
        self.first_process as usize
            + (t - self.first_thread as usize) / self.threads_per_process as usize
    }

    /// Thread `t`'s strategy object.
    fn strategy(&self, t: usize) -> usize {
        if self.per_process {
            self.first_strategy as usize + self.process(t) - self.first_process as usize
        } else {
            self.first_strategy as usize + t - self.first_thread as usize
        }
    }
}

/// One client thread: only what changes as it runs and its counts (one
/// place in memory per event), in 64 bytes, so a hundred thousand of them
/// fit in 6.4 megabytes. Its group's settings (and through them its process
/// and strategy object) are in `Engine::groups`, the response it awaits in
/// `Engine::responses`. Its [`ThreadRecord`] is made when the run ends.
#[repr(align(64))]
struct Thread {
    /// Attempts, throttled ones included (every other attempt succeeded).
    requests: u64,
    throttled: u64,
    max_sleep_s: f64,
    /// While the thread runs, the seconds its current call has waited so
    /// far; once it is `Done`, when it stopped (simulated seconds).
    wait_then_end_s: f64,
    last_sleep: f64,
    /// Calls still to make; `u64::MAX` without a count.
    calls_left: u64,
    failed_calls: u32,
    phase: Phase,
    cleared: bool,
}

impl Thread {
    fn record(&self) -> ThreadRecord {
        ThreadRecord {
            requests: self.requests,
            successes: self.requests - self.throttled,
            throttled: self.throttled,
            max_sleep_s: self.max_sleep_s,
            failed_calls: u64::from(self.failed_calls),
            finished_at_s: self.wait_then_end_s,
            cleared: self.cleared,
        }
    }
}

struct Engine<'a> {
    scenario: &'a Scenario,
    queue: EventQueue,
    threads: Vec<Thread>,
    groups: Vec<Group>,
    /// Per process, its threads' index range (a process's threads are
    /// contiguous).
    processes: Vec<(u32, u32)>,
    strategies: Box<dyn Fleet>,
    server: Box<dyn crate::server::ServerModel>,
    /// Responses on their way back, by thread.
    responses: InFlightTable,
    rng: ChaCha8Rng,
    waits: Samples,
    /// The threads `trace.sleep` follows.
    followed: Vec<u32>,
    trace: Trace,
    interval_ok: u64,
    interval_429: u64,
    active: usize,
    events: u64,
}

impl Engine<'_> {
    fn push(&mut self, at: Timestamp, kind: Kind) {
        self.queue.push(at.as_nanos(), kind.pack());
    }

    fn wake(&mut self, t: usize, at: Timestamp) {
        self.push(at, Kind::Wake { thread: t as u32 });
    }

    /// Starts loading the thread and the strategy object of the event
    /// after the one being handled (see [`crate::prefetch`]).
    fn prefetch_next(&self) {
        if let Some((_, e)) = self.queue.peek() {
            if let Kind::Wake { thread } = Kind::unpack(e) {
                let t = thread as usize;
                if let Some(th) = self.threads.get(t) {
                    crate::prefetch::prefetch(th);
                    // Read only when the wake-up answers a request; loaded
                    // regardless, as the thread's phase is not here yet.
                    self.responses.prefetch(t);
                    self.strategies.prefetch(self.group(t).strategy(t));
                }
            }
        }
    }

    /// Thread `t`'s group, from its index alone (groups hold contiguous
    /// runs of threads, in order).
    fn group(&self, t: usize) -> &Group {
        let g = self
            .groups
            .partition_point(|g| g.first_thread as usize <= t);
        &self.groups[g - 1]
    }

    fn record_sleep(&mut self, t: usize, d: Duration) {
        self.threads[t].last_sleep = 0.0;
        self.lengthen_sleep(t, d);
    }

    /// The thread sleeps `d` more, as part of its current sleep.
    fn lengthen_sleep(&mut self, t: usize, d: Duration) {
        let s = d.as_secs_f64();
        let th = &mut self.threads[t];
        th.last_sleep += s;
        th.wait_then_end_s += s;
        th.max_sleep_s = th.max_sleep_s.max(th.last_sleep);
    }

    fn finish(&mut self, t: usize, now: Timestamp, cleared: bool) {
        if self.threads[t].phase == Phase::Done {
            return;
        }
        self.mark_done(t, now, cleared);
        if self.group(t).interrupt_siblings {
            let (first, end) = self.processes[self.group(t).process(t)];
            for s in first as usize..end as usize {
                if s != t
                    && matches!(
                        self.threads[s].phase,
                        Phase::PreSleep | Phase::RetrySleep | Phase::Ready
                    )
                {
                    self.mark_done(s, now, false);
                }
            }
        }
    }

    /// Ends thread `t` at `now` (its pending wake-up, if any, will find it
    /// `Done`) and records when and whether it cleared its work.
    fn mark_done(&mut self, t: usize, now: Timestamp, cleared: bool) {
        let th = &mut self.threads[t];
        th.phase = Phase::Done;
        th.wait_then_end_s = now.as_secs_f64();
        th.cleared = cleared;
        self.active -= 1;
    }

    /// The thread is free to start a new call at `now`.
    fn begin_call(&mut self, t: usize, now: Timestamp) {
        let g = self.group(t);
        if g.end_at.is_some_and(|e| now > e) || g.leave_at.is_some_and(|l| now >= l) {
            self.finish(t, now, false);
            return;
        }
        if self.threads[t].calls_left == 0 {
            self.finish(t, now, true);
            return;
        }
        if let Some((busy, idle)) = g.cycle {
            let since = now.saturating_duration_since(g.join).as_secs_f64();
            let pos = since % (busy + idle);
            if pos >= busy {
                let resume = now.saturating_add(secs_to_duration(busy + idle - pos));
                self.threads[t].phase = Phase::Ready;
                self.wake(t, resume);
                return;
            }
        }
        let d = self.strategies.before_call(self.group(t).strategy(t), now);
        self.threads[t].wait_then_end_s = 0.0;
        self.record_sleep(t, d);
        self.threads[t].phase = Phase::PreSleep;
        if d.is_zero() {
            // No wait: the same as a wake-up now, without the queue.
            self.due(t, now);
        } else {
            self.wake(t, now.saturating_add(d));
        }
    }

    /// The thread's wait has passed: the strategy may ask for more
    /// ([`Fleet::before_send`]), else the attempt is sent. A further wait
    /// lengthens the sleep it follows.
    fn due(&mut self, t: usize, now: Timestamp) {
        let more = self.strategies.before_send(self.group(t).strategy(t), now);
        if more.is_zero() {
            self.send(t, now);
            return;
        }
        self.lengthen_sleep(t, more);
        self.wake(t, now.saturating_add(more));
    }

    fn send(&mut self, t: usize, now: Timestamp) {
        // The latency is drawn first so that a server capping concurrent
        // requests knows when this one's response leaves.
        let lat = self.scenario.latency.sample(self.rng.random::<f64>());
        let resp = self.server.handle_for(now, lat);
        let th = &mut self.threads[t];
        th.requests += 1;
        if resp.throttled {
            th.throttled += 1;
            self.interval_429 += 1;
        } else {
            self.interval_ok += 1;
        }
        let lat = lat + resp.delay;
        self.responses.put(t, resp);
        self.threads[t].phase = Phase::InFlight;
        self.wake(t, now.saturating_add(lat));
    }

    fn respond(&mut self, t: usize, now: Timestamp) {
        let resp = self.responses.take(t);
        let outcome = match &resp.wire {
            // What a real client reads from the status, headers and body,
            // through ratewise's own classifier and parser.
            Some(w) => ratewise_client::classify::outcome(
                w.status,
                &w.headers[..],
                w.body.as_deref().map(str::as_bytes),
                crate::stack::wall_clock(now),
            ),
            None => Outcome {
                signal: if resp.throttled {
                    Signal::Throttled
                } else {
                    Signal::Success
                },
                hints: resp.hints,
            },
        };
        match self
            .strategies
            .after_attempt(self.group(t).strategy(t), now, &outcome)
        {
            Next::Retry(d) => {
                self.record_sleep(t, d);
                self.threads[t].phase = Phase::RetrySleep;
                self.wake(t, now.saturating_add(d));
            }
            Next::Done | Next::GiveUp => {
                let th = &mut self.threads[t];
                self.waits.push(th.wait_then_end_s);
                if resp.throttled {
                    // The call ended without success (the strategy gave up
                    // or hands 429s back): the work item is still to do.
                    th.failed_calls = th.failed_calls.saturating_add(1);
                } else if th.calls_left != u64::MAX {
                    th.calls_left = th.calls_left.saturating_sub(1);
                }
                th.phase = Phase::Ready;
                let stop = matches!(
                    (self.group(t).stop_at_remaining, outcome.hints.remaining),
                    (Some(k), Some(r)) if r <= k
                );
                if stop {
                    self.finish(t, now, true);
                } else {
                    self.begin_call(t, now);
                }
            }
        }
    }

    /// Halves the trace's resolution once it holds [`MAX_SAMPLES`] points:
    /// keeps every other sample of the instantaneous series and sums the
    /// per-interval counts pairwise. Returns the factor to apply to the
    /// sampling interval (1 or 2), so memory stays bounded on long runs.
    fn decimate_if_full(&mut self) -> u32 {
        if self.trace.times.len() < MAX_SAMPLES {
            return 1;
        }
        fn keep_odd<T: Copy>(v: &mut Vec<T>) {
            let kept: Vec<T> = v.iter().copied().skip(1).step_by(2).collect();
            *v = kept;
        }
        fn sum_pairs(v: &mut Vec<u64>) {
            let summed: Vec<u64> = v.chunks(2).map(|c| c.iter().sum()).collect();
            *v = summed;
        }
        let t = &mut self.trace;
        // Keep the samples at the end of each pair, where the summed
        // intervals end.
        keep_odd(&mut t.times);
        keep_odd(&mut t.remaining);
        for series in &mut t.sleep {
            keep_odd(series);
        }
        sum_pairs(&mut t.successes);
        sum_pairs(&mut t.throttled);
        2
    }

    fn sample(&mut self, now: Timestamp) {
        self.trace.times.push(now.as_secs_f64());
        for (series, &t) in self.trace.sleep.iter_mut().zip(&self.followed) {
            series.push(self.threads[t as usize].last_sleep);
        }
        let rem = self.server.remaining(now);
        self.trace.remaining.push(rem);
        self.trace.successes.push(self.interval_ok);
        self.trace.throttled.push(self.interval_429);
        self.interval_ok = 0;
        self.interval_429 = 0;
    }
}

/// The threads the trace follows: all of `n`, or [`MAX_SLEEP_SERIES`]
/// spread evenly from the first to the last.
fn followed(n: usize) -> Vec<u32> {
    if n <= MAX_SLEEP_SERIES {
        return (0..n as u32).collect();
    }
    let k = MAX_SLEEP_SERIES;
    (0..k).map(|i| (i * (n - 1) / (k - 1)) as u32).collect()
}

/// Runs `scenario` once with `strategy` and `seed`.
///
/// A run still going at the scenario's `max_time_s` stops there; its
/// unfinished threads count as not cleared.
///
/// # Errors
/// [`SimError::Invalid`] if the scenario's server parameters are invalid.
pub fn run(scenario: &Scenario, strategy: &StrategyInfo, seed: u64) -> Result<RunOutput, SimError> {
    let server = scenario.server.build()?;
    let initial_delay = scenario.strategy.initial_delay_s.map(secs_to_duration);
    let mut threads = Vec::with_capacity(scenario.client_count());
    let mut objects = 0u32;
    let mut groups = Vec::with_capacity(scenario.clients.len());
    let mut processes = Vec::new();
    // The quota a client believes it has: the scenario's explicit
    // `[strategy] quota_count / quota_window_s`, else its fair share of the
    // server's documented quota among all the scenario's client threads.
    let known_quota = scenario
        .strategy
        .quota_count
        .zip(scenario.strategy.quota_window_s)
        .map(|(c, w)| (c, secs_to_duration(w)))
        .or_else(|| scenario.server.fair_share(scenario.client_count()));
    let reset_meaning: ResetMeaning = scenario
        .strategy
        .reset_meaning
        .map(Into::into)
        .unwrap_or_default();
    for group in &scenario.clients {
        let w = &group.workload;
        let join = Timestamp::from_secs_f64(group.join_s);
        groups.push(Group {
            join,
            end_at: w
                .duration_s
                .map(|d| Timestamp::from_secs_f64(group.join_s + d)),
            leave_at: group.leave_s.map(Timestamp::from_secs_f64),
            stop_at_remaining: w.stop_when_remaining_at_most,
            cycle: w.busy_s.zip(w.idle_s),
            interrupt_siblings: w.interrupt_siblings,
            first_thread: threads.len() as u32,
            first_process: processes.len() as u32,
            first_strategy: objects,
            threads_per_process: group.threads,
            per_process: group.state == StateSharing::PerProcess,
        });
        for _ in 0..group.processes {
            // Objects are numbered in thread order, one per process when its
            // threads share one, so `Group::strategy` finds them by index.
            if group.state == StateSharing::PerProcess {
                objects += 1;
            }
            let first = threads.len() as u32;
            for _ in 0..group.threads {
                if group.state != StateSharing::PerProcess {
                    objects += 1;
                }
                threads.push(Thread {
                    requests: 0,
                    throttled: 0,
                    max_sleep_s: 0.0,
                    wait_then_end_s: 0.0,
                    last_sleep: 0.0,
                    calls_left: w.requests.unwrap_or(u64::MAX),
                    failed_calls: 0,
                    phase: Phase::Ready,
                    cleared: false,
                });
            }
            processes.push((first, threads.len() as u32));
        }
    }
    let strategies =
        strategy.instantiate_fleet(&mut (0..u64::from(objects)).map(|n| StrategyParams {
            seed: derive_seed(seed ^ derive_seed(n.wrapping_add(0x5EED))),
            initial_delay,
            known_quota,
            reset_meaning,
        }))?;
    let n = threads.len();
    let followed = followed(n);
    let mut engine = Engine {
        scenario,
        queue: EventQueue::with_capacity(n + 1),
        active: n,
        threads,
        groups,
        processes,
        strategies,
        server,
        responses: InFlightTable::new(n),
        rng: ChaCha8Rng::seed_from_u64(seed),
        waits: Samples::new(),
        trace: Trace {
            sleep: vec![Vec::new(); followed.len()],
            clients: n,
            ..Trace::default()
        },
        followed,
        interval_ok: 0,
        interval_429: 0,
        events: 0,
    };
    // A sample at time T counts what happened before T: it comes first
    // among the events at its time.
    engine.queue.push(0, Kind::Sample.pack());
    for t in 0..n {
        let join = engine.group(t).join;
        engine.wake(t, join);
    }
    let limit = Timestamp::from_secs_f64(scenario.max_time_s);
    let mut interval = secs_to_duration(scenario.sample_interval_s);
    while let Some((now_ns, kind)) = engine.queue.pop() {
        let kind = Kind::unpack(kind);
        let now = Timestamp::from_nanos(now_ns);
        if engine.active == 0 {
            break;
        }
        if now > limit {
            // The safety stop: whatever is still going stops here and did
            // not clear (a strategy whose sleeps outgrow the run is a
            // result to report, not an error that loses the others).
            for t in 0..engine.threads.len() {
                if engine.threads[t].phase != Phase::Done {
                    engine.mark_done(t, limit, false);
                }
            }
            break;
        }
        engine.events += 1;
        match kind {
            Kind::Sample => {
                engine.sample(now);
                interval *= engine.decimate_if_full();
                let next = now.saturating_add(interval);
                engine
                    .queue
                    .push_first(next.as_nanos(), Kind::Sample.pack());
            }
            Kind::Wake { thread } => {
                let thread = thread as usize;
                engine.prefetch_next();
                match engine.threads[thread].phase {
                    Phase::Ready => engine.begin_call(thread, now),
                    Phase::PreSleep | Phase::RetrySleep => engine.due(thread, now),
                    Phase::InFlight => engine.respond(thread, now),
                    Phase::Done => {}
                }
            }
        }
    }
    let end = engine
        .threads
        .iter()
        .map(|t| t.wait_then_end_s)
        .fold(0.0_f64, f64::max);
    let offered = engine.server.offered(Timestamp::from_secs_f64(end));
    // The per-client state goes before the per-client results are summed.
    let Engine {
        threads,
        strategies,
        mut waits,
        trace,
        events,
        ..
    } = engine;
    drop(strategies);
    let records: Vec<ThreadRecord> = threads.into_iter().map(|t| t.record()).collect();
    let metrics = RunMetrics::compute(records, &mut waits, offered, scenario.overhead_s, end);
    Ok(RunOutput {
        metrics,
        trace,
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every registered strategy runs the same held by value (its
    /// `fleet` constructor) as boxed one by one (`build`), in groups of
    /// per-thread and per-process objects side by side.
    #[test]
    fn a_fleet_by_value_runs_as_boxed_objects_do() {
        let src = r#"
name = "mixed"
description = "two groups, objects per thread and per process"
sample_interval_s = 1
[latency]
kind = "uniform"
min_s = 0.05
max_s = 0.15
[server]
kind = "limiter"
algorithm = "gcra"
rate_per_s = 20.0
burst = 10
[[clients]]
processes = 3
threads = 2
state = "per_process"
workload = { duration_s = 20 }
[[clients]]
processes = 2
threads = 3
workload = { requests = 40 }
"#;
        let scenario = Scenario::parse(src, "mixed.toml").unwrap_or_else(|e| panic!("{e}"));
        for info in crate::strategies::ALL {
            let boxed = StrategyInfo {
                fleet: None,
                ..*info
            };
            let a = run(&scenario, info, 3).unwrap_or_else(|e| panic!("{e}"));
            let b = run(&scenario, &boxed, 3).unwrap_or_else(|e| panic!("{e}"));
            assert!(a.metrics.requests > 0, "{}", info.name);
            assert_eq!(a.metrics, b.metrics, "{}", info.name);
            assert_eq!(a.trace, b.trace, "{}", info.name);
        }
    }

    #[test]
    fn a_thread_is_64_bytes() {
        // What a fleet of a hundred thousand clients pays per client.
        assert!(std::mem::size_of::<Thread>() <= 64);
    }

    #[test]
    fn long_runs_keep_a_bounded_trace_with_every_response_counted() {
        let src = r#"
name = "long"
description = "a fine sampling interval over a long run"
sample_interval_s = 0.01
[server]
kind = "limiter"
algorithm = "gcra"
rate_per_s = 5.0
burst = 5
[[clients]]
threads = 3
workload = { duration_s = 600 }
"#;
        let scenario = Scenario::parse(src, "long.toml").unwrap_or_else(|e| panic!("{e}"));
        let eb = crate::strategies::find("eb").unwrap_or_else(|e| panic!("{e}"));
        let out = run(&scenario, &eb, 1).unwrap_or_else(|e| panic!("{e}"));
        let t = &out.trace;
        assert!(t.times.len() <= MAX_SAMPLES && t.times.len() > MAX_SAMPLES / 4);
        assert!(t.sleep.iter().all(|s| s.len() == t.times.len()));
        assert_eq!(t.remaining.len(), t.times.len());
        assert_eq!(t.successes.len(), t.times.len());
        assert!(t.times.windows(2).all(|w| w[0] < w[1]));
        // Nothing lost in the pairwise sums, up to the responses after the
        // last sample.
        let counted: u64 = t.successes.iter().chain(&t.throttled).sum();
        assert!(counted <= out.metrics.requests);
        assert!(
            counted + 100 >= out.metrics.requests,
            "{counted} vs {}",
            out.metrics.requests
        );
    }

    fn null_run(src: &str) -> RunOutput {
        let scenario = Scenario::parse(src, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let null = crate::strategies::find("null").unwrap_or_else(|e| panic!("{e}"));
        run(&scenario, &null, 1).unwrap_or_else(|e| panic!("{e}"))
    }

    const BASE: &str = r#"
name = "t"
description = "t"
sample_interval_s = 1
latency = { kind = "constant", s = 0.5 }
[server]
kind = "decrease_only"
starting = 1000000
"#;

    #[test]
    fn a_fleet_is_followed_by_a_bounded_spread_of_clients() {
        assert_eq!(followed(3), [0, 1, 2]);
        let f = followed(250_001);
        assert_eq!(f.len(), MAX_SLEEP_SERIES);
        assert_eq!((f[0], f[f.len() - 1]), (0, 250_000));
        assert!(f.windows(2).all(|w| w[0] < w[1]));
        let out = null_run(&format!(
            "{BASE}[[clients]]\nprocesses = 50\nthreads = 5\nworkload = {{ requests = 2 }}\n"
        ));
        assert_eq!(out.trace.clients, 250);
        assert_eq!(out.trace.sleep.len(), MAX_SLEEP_SERIES);
        assert!(out
            .trace
            .sleep
            .iter()
            .all(|s| s.len() == out.trace.times.len()));
        assert_eq!(out.metrics.threads.len(), 250);
        assert_eq!(out.metrics.successes, 500);
    }

    #[test]
    fn busy_idle_cycles_send_nothing_while_idle() {
        let out = null_run(&format!(
            "{BASE}[[clients]]\nworkload = {{ duration_s = 40, busy_s = 10, idle_s = 10 }}\n"
        ));
        // 2 requests per second while busy, 20 busy seconds in 40.
        let m = &out.metrics;
        assert!((39..=42).contains(&m.requests), "{}", m.requests);
        let t = &out.trace;
        for (time, ok) in t.times.iter().zip(&t.successes) {
            // Samples at 12..=20 and 32..=40 s cover idle intervals only.
            let idle = (12.0..=20.0).contains(time) || (32.0..=40.0).contains(time);
            if idle {
                assert_eq!(*ok, 0, "request sent while idle at {time}");
            }
        }
    }

    #[test]
    fn huge_durations_saturate_instead_of_panicking() {
        let src = "name = \"t\"\ndescription = \"t\"\nsample_interval_s = 1e30\n\
                   [strategy]\nquota_count = 1\nquota_window_s = 1e30\n\
                   [server]\nkind = \"decrease_only\"\nstarting = 3\n\
                   [[clients]]\nworkload = { requests = 3, busy_s = 1e30, idle_s = 1e30 }\n";
        let scenario = Scenario::parse(src, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        // A strategy may reject a quota that large (a typed error); none
        // may panic, and those that run either clear the job or are
        // stopped, not cleared, at the scenario's time limit.
        let mut ran = 0;
        for info in crate::strategies::ALL {
            if let Ok(out) = run(&scenario, info, 1) {
                if out.metrics.time_to_clear_s.is_some() {
                    assert_eq!(out.metrics.successes, 3, "{}", info.name);
                } else {
                    assert!(out.metrics.successes < 3, "{}", info.name);
                    let stop = scenario.max_time_s;
                    assert!(
                        (out.metrics.sim_time_s - stop).abs() < 1e-6,
                        "{}",
                        info.name
                    );
                }
                ran += 1;
            }
        }
        assert!(ran > 0);
    }

    #[test]
    fn a_run_past_max_time_stops_there_not_cleared() {
        // Three requests from a stock of three, then one more that never
        // succeeds: `null` hands each 429 back and tries again forever.
        let src = "name = \"t\"\ndescription = \"t\"\nmax_time_s = 50\n\
                   [server]\nkind = \"decrease_only\"\nstarting = 3\n\
                   [[clients]]\nworkload = { requests = 3, duration_s = 1000 }\n\
                   [[clients]]\nworkload = { requests = 1, duration_s = 1000 }\n";
        let scenario = Scenario::parse(src, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let info = crate::strategies::find("null").unwrap_or_else(|e| panic!("{e}"));
        let out = run(&scenario, &info, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.metrics.time_to_clear_s, None);
        assert!(
            (out.metrics.sim_time_s - 50.0).abs() < 1e-9,
            "{}",
            out.metrics.sim_time_s
        );
        assert_eq!(out.metrics.successes, 3);
    }

    #[test]
    fn groups_join_and_leave_on_time() {
        let out = null_run(&format!(
            "{BASE}[[clients]]\nname = \"early\"\nleave_s = 20\nworkload = {{ duration_s = 100 }}\n\
             [[clients]]\nname = \"late\"\njoin_s = 50\nworkload = {{ duration_s = 10 }}\n"
        ));
        let th = &out.metrics.threads;
        assert!(
            (th[0].finished_at_s - 20.0).abs() < 1e-9,
            "{}",
            th[0].finished_at_s
        );
        assert_eq!(th[0].requests, 40);
        // Joins at 50, starts no call after 60 (a call at exactly 60 is allowed).
        assert!(
            (th[1].finished_at_s - 60.5).abs() < 1e-9,
            "{}",
            th[1].finished_at_s
        );
        assert_eq!(th[1].requests, 21);
        assert_eq!(out.metrics.time_to_clear_s, None);
    }
}
