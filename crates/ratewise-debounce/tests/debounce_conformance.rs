//! Conformance suite C1–C41 of the debounce semantics list: one test per
//! item, named after it, each on tokio's paused clock asserting exact
//! virtual timestamps (C42). Times are milliseconds since the test started.
#![cfg(feature = "tokio")]

use std::future::{ready, Ready};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use ratewise::Timestamp;
use ratewise_debounce::{
    CoalesceConfig, CoalesceWindow, Coalescer, DebounceConfig, DebounceCore, Debouncer,
    EventThrottle, EventThrottleConfig, EventThrottleCore, FlushOutcome, StopError, StopMode,
    StopOutcome, Stopped,
};
use tokio::time::{sleep, sleep_until, Instant};

type Log<T> = Arc<Mutex<Vec<(T, u64)>>>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn elapsed_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn new_log<T>() -> Log<T> {
    Arc::new(Mutex::new(Vec::new()))
}

fn push<T>(log: &Log<T>, v: T, start: Instant) {
    log.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((v, elapsed_ms(start)));
}

fn snapshot<T: Clone>(log: &Log<T>) -> Vec<(T, u64)> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// An action that records `(value, ms since start)`.
fn recorder<T: Send + 'static>(
    log: &Log<T>,
    start: Instant,
) -> impl Fn(T) -> Ready<()> + Send + Sync + 'static {
    let log = Arc::clone(log);
    move |v| {
        push(&log, v, start);
        ready(())
    }
}

/// A coalescer action that records `((key, items), ms since start)`.
fn batch_recorder<K: Send + 'static, V: Send + 'static>(
    log: &Log<(K, Vec<V>)>,
    start: Instant,
) -> impl Fn(K, Vec<V>) -> Ready<()> + Send + Sync + 'static {
    let log = Arc::clone(log);
    move |k, items| {
        push(&log, (k, items), start);
        ready(())
    }
}

async fn at(start: Instant, t: u64) {
    sleep_until(start + ms(t)).await;
}

fn debouncer(config: DebounceConfig, log: &Log<u64>, start: Instant) -> Debouncer<u64> {
    Debouncer::new(config, recorder(log, start)).expect("inside a runtime")
}

fn throttle(config: EventThrottleConfig, log: &Log<u64>, start: Instant) -> EventThrottle<u64> {
    EventThrottle::new(config, recorder(log, start)).expect("inside a runtime")
}

/// The two value handles, so one helper drives either.
trait Call {
    fn call_ok(&self, v: u64);
}

impl Call for Debouncer<u64> {
    fn call_ok(&self, v: u64) {
        self.call(v).expect("not stopped");
    }
}

impl Call for EventThrottle<u64> {
    fn call_ok(&self, v: u64) {
        self.call(v).expect("not stopped");
    }
}

/// Calls `h` with value = time at each time in `times`.
async fn drive(h: &impl Call, start: Instant, times: impl IntoIterator<Item = u64>) {
    for t in times {
        at(start, t).await;
        h.call_ok(t);
    }
}

/// Builds a handle with `make` on a fresh log, calls it with value = time at
/// each time in `times`, then waits until `until` and returns what it fired.
async fn script<H: Call>(
    make: impl FnOnce(&Log<u64>, Instant) -> H,
    times: impl IntoIterator<Item = u64>,
    until: u64,
) -> Vec<(u64, u64)> {
    let start = Instant::now();
    let log = new_log();
    let h = make(&log, start);
    drive(&h, start, times).await;
    at(start, until).await;
    snapshot(&log)
}

/// [`script`] on a fresh debouncer.
async fn debounce_script(
    config: DebounceConfig,
    times: impl IntoIterator<Item = u64>,
    until: u64,
) -> Vec<(u64, u64)> {
    script(|log, start| debouncer(config, log, start), times, until).await
}

/// [`script`] on a fresh event throttle.
async fn throttle_script(
    config: EventThrottleConfig,
    times: impl IntoIterator<Item = u64>,
    until: u64,
) -> Vec<(u64, u64)> {
    script(|log, start| throttle(config, log, start), times, until).await
}

fn wait100() -> DebounceConfig {
    DebounceConfig::new(ms(100))
}

fn throttle100() -> EventThrottleConfig {
    EventThrottleConfig::new(ms(100))
}

// ---------------------------------------------------------------- debounce

#[tokio::test(start_paused = true)]
async fn c01_trailing_burst_fires_last_value_at_last_call_plus_wait() {
    assert_eq!(
        debounce_script(wait100(), [0, 30, 60, 90], 1000).await,
        vec![(90, 190)]
    );
}

#[tokio::test(start_paused = true)]
async fn c02_single_call_fires_once_at_call_plus_wait() {
    assert_eq!(
        debounce_script(wait100(), [50], 1000).await,
        vec![(50, 150)]
    );
}

#[tokio::test(start_paused = true)]
async fn c03_zero_wait_is_deferred_and_same_tick_calls_coalesce() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(DebounceConfig::new(Duration::ZERO), &log, start);
    d.call(1).expect("not stopped");
    d.call(2).expect("not stopped");
    d.call(3).expect("not stopped");
    assert!(snapshot(&log).is_empty(), "never synchronous");
    assert!(d.is_pending());
    at(start, 10).await;
    d.call(4).expect("not stopped");
    assert_eq!(snapshot(&log), vec![(3, 0)]);
    at(start, 1000).await;
    assert_eq!(snapshot(&log), vec![(3, 0), (4, 10)]);
}

#[tokio::test(start_paused = true)]
async fn c04_leading_fires_first_and_quiet_calls_extend_the_silence() {
    // a@0 fires; b@50 and c@120 are dropped and extend the quiet period to
    // 220 (a minimum-interval gate would have fired c@120); d@260 fires.
    assert_eq!(
        debounce_script(
            wait100().leading(true).trailing(false),
            [0, 50, 120, 260],
            1000
        )
        .await,
        vec![(0, 0), (260, 260)]
    );
}

#[tokio::test(start_paused = true)]
async fn c05_both_edges_single_call_fires_once_leading() {
    assert_eq!(
        debounce_script(wait100().leading(true), [0], 1000).await,
        vec![(0, 0)]
    );
}

#[tokio::test(start_paused = true)]
async fn c06_both_edges_burst_fires_first_then_last() {
    assert_eq!(
        debounce_script(wait100().leading(true), [0, 30, 60], 1000).await,
        vec![(0, 0), (60, 160)]
    );
}

#[tokio::test(start_paused = true)]
async fn c07_both_edges_disabled_never_fires_even_with_max_wait() {
    let start = Instant::now();
    let log = new_log();
    let plain = debouncer(wait100().trailing(false), &log, start);
    let maxed = debouncer(wait100().trailing(false).max_wait(ms(150)), &log, start);
    for t in (0..=500).step_by(20) {
        at(start, t).await;
        plain.call(t).expect("not stopped");
        maxed.call(t).expect("not stopped");
    }
    assert_eq!(plain.flush().await, FlushOutcome::Idle);
    at(start, 2000).await;
    assert!(snapshot(&log).is_empty());
}

#[tokio::test(start_paused = true)]
async fn c08_max_wait_under_continuous_stream() {
    let fires = debounce_script(wait100().max_wait(ms(250)), (0..=1000).step_by(50), 3000).await;
    assert_eq!(
        fires,
        vec![
            (200, 250),
            (450, 500),
            (700, 750),
            (950, 1000),
            (1000, 1100)
        ]
    );
    // At most one action per max-wait while the stream lasts, each with the
    // latest value at that time.
    for w in fires.windows(2) {
        assert!(w[1].1 - w[0].1 <= 250);
    }
}

#[tokio::test(start_paused = true)]
async fn c09_max_wait_below_wait_is_raised_to_wait() {
    let start = Instant::now();
    let low = new_log();
    let equal = new_log();
    let a = debouncer(wait100().max_wait(ms(50)), &low, start);
    let b = debouncer(wait100().max_wait(ms(100)), &equal, start);
    for t in (0..=200).step_by(20) {
        at(start, t).await;
        a.call(t).expect("not stopped");
        b.call(t).expect("not stopped");
    }
    at(start, 1000).await;
    let expected = vec![(80, 100), (180, 200), (200, 300)];
    assert_eq!(snapshot(&low), expected);
    assert_eq!(snapshot(&equal), expected);
}

#[tokio::test(start_paused = true)]
async fn c10_wait_equal_max_wait_gives_exactly_two_actions() {
    assert_eq!(
        debounce_script(
            DebounceConfig::new(ms(200)).max_wait(ms(200)),
            [0, 190, 200, 210],
            2000
        )
        .await,
        vec![(190, 200), (210, 400)]
    );
}

#[tokio::test(start_paused = true)]
async fn c11_isolated_call_after_max_wait_burst_does_not_fire_at_once() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(wait100().max_wait(ms(200)), &log, start);
    drive(&d, start, (0..=500).step_by(50)).await;
    at(start, 1500).await;
    let burst = snapshot(&log);
    assert_eq!(burst, vec![(150, 200), (350, 400), (500, 600)]);
    d.call(2000).expect("not stopped"); // at 1500
    assert!(d.is_pending());
    at(start, 1599).await;
    assert_eq!(snapshot(&log).len(), 3, "no immediate fire");
    at(start, 3000).await;
    assert_eq!(snapshot(&log).last(), Some(&(2000, 1600)));
}

#[tokio::test(start_paused = true)]
async fn c12_no_phantom_action_and_no_timer_leak() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(wait100().max_wait(ms(300)), &log, start);
    d.call(1).expect("not stopped");
    at(start, 5000).await;
    assert_eq!(snapshot(&log), vec![(1, 100)]);
    assert!(!d.is_pending());
    // The worker has exited: nothing of ours is left on the runtime.
    tokio::task::yield_now().await;
    assert_eq!(
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn c13_leading_only_with_max_wait_fires_once_per_window() {
    assert_eq!(
        debounce_script(
            wait100().leading(true).trailing(false).max_wait(ms(100)),
            (0..=500).step_by(20),
            2000
        )
        .await,
        vec![
            (0, 0),
            (100, 100),
            (200, 200),
            (300, 300),
            (400, 400),
            (500, 500)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn c14_action_may_call_the_debouncer_again() {
    let start = Instant::now();
    let log = new_log();
    let slot: Arc<OnceLock<Debouncer<u64>>> = Arc::new(OnceLock::new());
    let (l, s) = (Arc::clone(&log), Arc::clone(&slot));
    let d = Debouncer::new(wait100(), move |v: u64| {
        push(&l, v, start);
        if v < 3 {
            if let Some(d) = s.get() {
                d.call(v + 1).expect("not stopped");
            }
        }
        ready(())
    })
    .expect("inside a runtime");
    assert!(slot.set(d.clone()).is_ok());
    d.call(0).expect("not stopped");
    at(start, 2000).await;
    assert_eq!(snapshot(&log), vec![(0, 100), (1, 200), (2, 300), (3, 400)]);
}

// ---------------------------------------------------------------- controls

#[tokio::test(start_paused = true)]
async fn c15_cancel_drops_pending_and_resets() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(wait100().leading(true), &log, start);
    drive(&d, start, [0, 10]).await;
    at(start, 20).await;
    d.cancel();
    assert!(!d.is_pending());
    drive(&d, start, [30]).await; // like a first call: leading
    at(start, 1000).await;
    assert_eq!(snapshot(&log), vec![(0, 0), (30, 30)]);

    let tlog = new_log();
    let t = throttle(throttle100(), &tlog, start);
    drive(&t, start, [1000, 1010]).await;
    at(start, 1020).await;
    t.cancel();
    drive(&t, start, [1030]).await;
    at(start, 2000).await;
    assert_eq!(snapshot(&tlog), vec![(1000, 1000), (1030, 1030)]);
}

#[tokio::test(start_paused = true)]
async fn c16_flush_runs_now_and_no_trailing_follows() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(wait100(), &log, start);
    drive(&d, start, [0, 10]).await;
    at(start, 50).await;
    assert_eq!(d.flush().await, FlushOutcome::Delivered);
    // The action has finished when flush returns.
    assert_eq!(snapshot(&log), vec![(10, 50)]);
    assert!(!d.is_pending());
    at(start, 1000).await;
    assert_eq!(snapshot(&log), vec![(10, 50)]);

    let tlog = new_log();
    let t = throttle(throttle100(), &tlog, start);
    drive(&t, start, [1000, 1010]).await;
    at(start, 1020).await;
    assert_eq!(t.flush().await, FlushOutcome::Delivered);
    at(start, 2000).await;
    assert_eq!(snapshot(&tlog), vec![(1000, 1000), (1010, 1020)]);
}

#[tokio::test(start_paused = true)]
async fn c17_flush_when_idle_or_leading_only_is_a_no_op() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(wait100(), &log, start);
    assert_eq!(d.flush().await, FlushOutcome::Idle);
    let lead = debouncer(wait100().leading(true).trailing(false), &log, start);
    drive(&lead, start, [0]).await;
    at(start, 10).await;
    assert_eq!(lead.flush().await, FlushOutcome::Idle);
    at(start, 1000).await;
    assert_eq!(snapshot(&log), vec![(0, 0)]);
    let t = throttle(throttle100(), &log, start);
    assert_eq!(t.flush().await, FlushOutcome::Idle);
}

#[tokio::test(start_paused = true)]
async fn c18_is_pending_iff_a_trailing_fire_is_scheduled() {
    let start = Instant::now();
    let log = new_log();
    let trailing = debouncer(wait100(), &log, start);
    assert!(!trailing.is_pending());
    trailing.call(1).expect("not stopped");
    assert!(trailing.is_pending());
    at(start, 150).await;
    assert!(!trailing.is_pending());

    // Decision: unlike lodash's pending(), false in leading-only mode.
    let lead = debouncer(wait100().leading(true).trailing(false), &log, start);
    lead.call(2).expect("not stopped");
    lead.call(3).expect("not stopped");
    assert!(!lead.is_pending());

    let both = debouncer(wait100().leading(true), &log, start);
    both.call(4).expect("not stopped");
    assert!(!both.is_pending(), "a single call has nothing to trail");
    both.call(5).expect("not stopped");
    assert!(both.is_pending());
}

#[tokio::test(start_paused = true)]
async fn c19_backwards_clock_is_an_edge_and_durations_saturate() {
    let t = |n: u64| Timestamp::from_nanos(n * 1_000_000);
    let mut d = DebounceCore::new(wait100().leading(true).max_wait(ms(200)));
    assert_eq!(d.call(t(1000), 1), Some(1));
    assert_eq!(d.on_timer(t(1100)), None);
    assert_eq!(d.deadline(), None);
    // Backwards while idle: an edge, so the leading edge fires.
    assert_eq!(d.call(t(500), 2), Some(2));
    assert_eq!(d.deadline(), Some(t(600)));
    // Backwards while the timer is armed: also an edge (a max-wait fire).
    assert_eq!(d.call(t(0), 3), Some(3));
    // A timer seen "before" the last call fires instead of computing a
    // negative elapsed time.
    let mut tr = DebounceCore::new(wait100());
    assert_eq!(tr.call(t(1000), 1), None);
    assert_eq!(tr.on_timer(t(500)), Some(1));
    // Deadlines saturate at the end of time.
    assert_eq!(tr.call(Timestamp::MAX, 2), None);
    assert_eq!(tr.deadline(), Some(Timestamp::MAX));
    assert_eq!(tr.flush(Timestamp::MAX), Some(2));

    let mut th = EventThrottleCore::new(throttle100());
    assert_eq!(th.call(t(1000), 1), Some(1));
    assert_eq!(th.call(t(10), 2), None); // backwards: inside the window
    assert_eq!(th.on_timer(t(1100)), Some(2));
    assert_eq!(th.call(Timestamp::MAX, 3), Some(3));
    assert_eq!(th.deadline(), None);
}

/// C19 in the driver: a wait too long for any clock neither panics nor
/// fires; flush still delivers.
#[tokio::test(start_paused = true)]
async fn c19_huge_durations_saturate_in_the_driver() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(DebounceConfig::new(Duration::MAX), &log, start);
    let t = throttle(EventThrottleConfig::new(Duration::MAX), &log, start);
    d.call(1).expect("not stopped");
    t.call(2).expect("not stopped");
    t.call(3).expect("not stopped");
    at(start, 100_000).await;
    assert_eq!(snapshot(&log), vec![(2, 0)]);
    assert_eq!(d.flush().await, FlushOutcome::Delivered);
    assert_eq!(t.flush().await, FlushOutcome::Delivered);
    assert_eq!(snapshot(&log), vec![(2, 0), (1, 100_000), (3, 100_000)]);
}

// ---------------------------------------------------------------- throttle

#[tokio::test(start_paused = true)]
async fn c20_throttle_defaults_first_now_last_at_first_plus_wait() {
    assert_eq!(
        throttle_script(throttle100(), [0, 20, 50], 1000).await,
        vec![(0, 0), (50, 100)]
    );
}

#[tokio::test(start_paused = true)]
async fn c21_throttle_single_call_fires_once() {
    assert_eq!(
        throttle_script(throttle100(), [30], 1000).await,
        vec![(30, 30)]
    );
}

#[tokio::test(start_paused = true)]
async fn c22_throttle_continuous_stream_one_per_wait_with_latest() {
    assert_eq!(
        throttle_script(throttle100(), (0..=500).step_by(10), 2000).await,
        vec![
            (0, 0),
            (90, 100),
            (190, 200),
            (290, 300),
            (390, 400),
            (490, 500),
            (500, 600)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn c23_throttle_without_leading_fires_latest_at_first_plus_wait() {
    // 1000 is a lone call.
    assert_eq!(
        throttle_script(throttle100().leading(false), [0, 30, 60, 1000], 2000).await,
        vec![(60, 100), (1000, 1100)]
    );
}

#[tokio::test(start_paused = true)]
async fn c24_throttle_without_trailing_drops_window_calls() {
    assert_eq!(
        throttle_script(
            throttle100().trailing(false),
            [0, 30, 60, 120, 150, 220],
            2000
        )
        .await,
        vec![(0, 0), (120, 120), (220, 220)]
    );
}

#[tokio::test(start_paused = true)]
async fn c25_throttle_with_both_edges_disabled_never_fires() {
    let start = Instant::now();
    let log = new_log();
    let t = throttle(throttle100().leading(false).trailing(false), &log, start);
    drive(&t, start, (0..=500).step_by(25)).await;
    assert!(!t.is_pending());
    at(start, 2000).await;
    assert!(snapshot(&log).is_empty());
}

#[tokio::test(start_paused = true)]
async fn c26_throttle_actions_never_closer_than_wait() {
    // The trailing fire at 100 opens a window: 110 waits until 200
    // (lodash would fire it at once, 10 ms after the trailing one).
    let fires = throttle_script(throttle100(), [0, 50, 110], 1000).await;
    assert_eq!(fires, vec![(0, 0), (50, 100), (110, 200)]);
    for w in fires.windows(2) {
        assert!(w[1].1 - w[0].1 >= 100);
    }
}

/// C26 where the actions *start*: a slow first action delays the next start,
/// and the one after that still waits `wait` from there.
#[tokio::test(start_paused = true)]
async fn c26_spacing_holds_between_action_starts_after_a_slow_action() {
    let start = Instant::now();
    let log = new_log();
    let l = Arc::clone(&log);
    let t = EventThrottle::new(throttle100(), move |v: u64| {
        push(&l, v, start);
        sleep(ms(if v == 0 { 190 } else { 0 }))
    })
    .expect("inside a runtime");
    drive(&t, start, [0, 50, 100, 150, 200]).await;
    at(start, 2000).await;
    let fires = snapshot(&log);
    assert_eq!(fires, vec![(0, 0), (50, 190), (150, 290), (200, 390)]);
}

#[tokio::test(start_paused = true)]
async fn c27_throttle_zero_wait_runs_every_call() {
    let start = Instant::now();
    let log = new_log();
    let t = throttle(EventThrottleConfig::new(Duration::ZERO), &log, start);
    t.call(1).expect("not stopped");
    t.call(2).expect("not stopped");
    t.call(3).expect("not stopped");
    drive(&t, start, [10]).await;
    at(start, 100).await;
    assert_eq!(snapshot(&log), vec![(1, 0), (2, 0), (3, 0), (10, 10)]);
}

// ---------------------------------------------------------------- stop

#[tokio::test(start_paused = true)]
async fn c28_stop_with_drain_delivers_pending_now() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(wait100(), &log, start);
    drive(&d, start, [0, 10]).await;
    at(start, 50).await;
    assert_eq!(
        d.stop(StopMode::Drain, ms(1000)).await,
        Ok(StopOutcome::Completed)
    );
    assert_eq!(snapshot(&log), vec![(10, 50)]);
    at(start, 1000).await;
    assert_eq!(snapshot(&log), vec![(10, 50)]);
    assert!(d.is_stopped());
}

#[tokio::test(start_paused = true)]
async fn c29_stop_with_abort_drops_pending() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(wait100(), &log, start);
    let t = throttle(throttle100(), &log, start);
    drive(&d, start, [0, 10]).await;
    drive(&t, start, [20, 30]).await; // 20 fires, 30 is held
    at(start, 50).await;
    assert_eq!(
        d.stop(StopMode::Abort, ms(1000)).await,
        Ok(StopOutcome::Completed)
    );
    assert_eq!(
        t.stop(StopMode::Abort, ms(1000)).await,
        Ok(StopOutcome::Completed)
    );
    at(start, 1000).await;
    assert_eq!(snapshot(&log), vec![(20, 20)]);
}

#[tokio::test(start_paused = true)]
async fn c30_stop_timeout_reports_undelivered() {
    let start = Instant::now();
    let log: Log<(char, Vec<u32>)> = new_log();
    let l = Arc::clone(&log);
    // Each action takes 100 ms of (virtual) time.
    let c = Coalescer::new(
        CoalesceConfig::new(ms(1000), 10).expect("valid"),
        move |k: char, items: Vec<u32>| {
            push(&l, (k, items), start);
            sleep(ms(100))
        },
    )
    .expect("inside a runtime");
    for k in ['a', 'b', 'c'] {
        c.push(k, 1).expect("not stopped");
    }
    at(start, 10).await;
    let result = c.stop(StopMode::Drain, ms(150)).await;
    assert_eq!(elapsed_ms(start), 160);
    match result {
        Err(StopError::TimedOut { undelivered }) => {
            assert_eq!(undelivered.len(), 1);
            assert_eq!(undelivered[0].key, 'c');
            assert_eq!(undelivered[0].items, vec![1]);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    at(start, 2000).await;
    assert_eq!(
        snapshot(&log),
        vec![(('a', vec![1]), 10), (('b', vec![1]), 110)]
    );
    // Stopping again waits for nothing more.
    assert_eq!(
        c.stop(StopMode::Drain, ms(1)).await,
        Ok(StopOutcome::Completed)
    );
}

#[tokio::test(start_paused = true)]
async fn c31_stop_or_flush_inside_the_action_does_not_deadlock() {
    let start = Instant::now();
    let log = new_log();
    let outcomes: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let slot: Arc<OnceLock<Debouncer<u64>>> = Arc::new(OnceLock::new());
    let (l, s, o) = (Arc::clone(&log), Arc::clone(&slot), Arc::clone(&outcomes));
    let d = Debouncer::new(wait100(), move |v: u64| {
        push(&l, v, start);
        let (s, o) = (Arc::clone(&s), Arc::clone(&o));
        async move {
            let Some(d) = s.get() else { return };
            if v == 1 {
                d.call(2).expect("not stopped");
                let f = d.flush().await;
                let st = d.stop(StopMode::Drain, ms(1000)).await;
                o.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(format!("{f:?} {st:?}"));
            }
        }
    })
    .expect("inside a runtime");
    assert!(slot.set(d.clone()).is_ok());
    d.call(1).expect("not stopped");
    let done = tokio::time::timeout(ms(10_000), async {
        at(start, 1000).await;
        d.stop(StopMode::Drain, ms(1000)).await
    })
    .await;
    assert_eq!(done, Ok(Ok(StopOutcome::Completed)), "no deadlock");
    assert_eq!(snapshot(&log), vec![(1, 100), (2, 100)]);
    assert_eq!(
        outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
        vec!["Scheduled Ok(NotAwaited)".to_owned()]
    );
}

#[tokio::test(start_paused = true)]
async fn c32_calls_after_stop_are_rejected_and_stop_is_idempotent() {
    let start = Instant::now();
    let log = new_log();
    let d = debouncer(wait100(), &log, start);
    let t = throttle(throttle100(), &log, start);
    let c = Coalescer::new(
        CoalesceConfig::new(ms(100), 5).expect("valid"),
        batch_recorder::<u8, u64>(&new_log(), start),
    )
    .expect("inside a runtime");
    for _ in 0..2 {
        assert_eq!(
            d.stop(StopMode::Drain, ms(10)).await,
            Ok(StopOutcome::Completed)
        );
        assert_eq!(
            t.stop(StopMode::Abort, ms(10)).await,
            Ok(StopOutcome::Completed)
        );
        assert_eq!(
            c.stop(StopMode::Drain, ms(10)).await,
            Ok(StopOutcome::Completed)
        );
    }
    assert_eq!(d.call(7), Err(Stopped(7)));
    assert_eq!(t.call(8), Err(Stopped(8)));
    assert_eq!(c.push(1, 9), Err(Stopped(9)));
    assert_eq!(d.flush().await, FlushOutcome::Idle);
    at(start, 1000).await;
    assert!(snapshot(&log).is_empty());
}

#[tokio::test(start_paused = true)]
async fn c33_panic_in_action_is_caught_and_reported() {
    let start = Instant::now();
    let log = new_log();
    let reports: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let (l, r) = (Arc::clone(&log), Arc::clone(&reports));
    let d = Debouncer::with_panic_hook(
        wait100(),
        move |v: u64| {
            if v == 1 {
                panic!("boom on {v}");
            }
            push(&l, v, start);
            async move {
                if v == 2 {
                    panic!("async boom");
                }
            }
        },
        move |p| {
            r.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(p.message)
        },
    )
    .expect("inside a runtime");
    drive(&d, start, [0]).await;
    d.call(1).expect("not stopped"); // the panicking value, at 0
    at(start, 200).await;
    d.call(2).expect("not stopped");
    at(start, 400).await;
    d.call(3).expect("not stopped");
    at(start, 1000).await;
    assert_eq!(d.panics(), 2);
    assert_eq!(
        reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
        vec!["boom on 1".to_owned(), "async boom".to_owned()]
    );
    // Nothing was delivered twice, and later calls still fire.
    assert_eq!(snapshot(&log), vec![(2, 300), (3, 500)]);
}

// ---------------------------------------------------------------- coalesce

type BatchLog = Log<(char, Vec<u32>)>;

/// A 100 ms window of at most 10 items.
fn coalesce100() -> CoalesceConfig {
    CoalesceConfig::new(ms(100), 10).expect("valid")
}

fn coalescer(config: CoalesceConfig, log: &BatchLog, start: Instant) -> Coalescer<char, u32> {
    Coalescer::new(config, batch_recorder(log, start)).expect("inside a runtime")
}

async fn push_at(c: &Coalescer<char, u32>, start: Instant, script: &[(u64, char, u32)]) {
    for &(t, k, v) in script {
        at(start, t).await;
        c.push(k, v).expect("not stopped");
    }
}

/// A fresh coalescer on a fresh log, fed `script`; returns the start, the
/// log and the coalescer.
async fn coalesce_fed(
    config: CoalesceConfig,
    script: &[(u64, char, u32)],
) -> (Instant, BatchLog, Coalescer<char, u32>) {
    let start = Instant::now();
    let log = new_log();
    let c = coalescer(config, &log, start);
    push_at(&c, start, script).await;
    (start, log, c)
}

/// [`coalesce_fed`], then waits until `until` and returns what it delivered.
async fn coalesce_script(
    config: CoalesceConfig,
    script: &[(u64, char, u32)],
    until: u64,
) -> Vec<((char, Vec<u32>), u64)> {
    let (start, log, _c) = coalesce_fed(config, script).await;
    at(start, until).await;
    snapshot(&log)
}

#[tokio::test(start_paused = true)]
async fn c34_window_starts_at_first_item_and_is_not_extended() {
    let (start, log, _c) = coalesce_fed(
        coalesce100(),
        &[(0, 'a', 1), (50, 'a', 2), (90, 'a', 3), (150, 'a', 4)],
    )
    .await;
    at(start, 1000).await;
    assert_eq!(
        snapshot(&log),
        vec![(('a', vec![1, 2, 3]), 100), (('a', vec![4]), 250)]
    );

    // The named quiet-period option: closes after 50 ms of silence, capped
    // at 200 ms from the first item.
    let qlog = new_log();
    let window = CoalesceWindow::QuietPeriod {
        quiet: ms(50),
        max_wait: ms(200),
    };
    let q = coalescer(
        CoalesceConfig::with_window(window, 100).expect("valid"),
        &qlog,
        start,
    );
    push_at(&q, start, &[(1000, 'q', 1), (1040, 'q', 2), (1080, 'q', 3)]).await;
    at(start, 1500).await;
    let stream: Vec<(u64, char, u32)> = (0..10).map(|i| (2000 + 30 * i, 'r', i as u32)).collect();
    push_at(&q, start, &stream).await;
    at(start, 3000).await;
    assert_eq!(
        snapshot(&qlog),
        vec![
            (('q', vec![1, 2, 3]), 1130),
            (('r', (0..7).collect()), 2200),
            (('r', vec![7, 8, 9]), 2320)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn c35_reaching_max_batch_flushes_at_once_and_next_item_opens_fresh_window() {
    assert_eq!(
        coalesce_script(
            CoalesceConfig::new(ms(100), 3).expect("valid"),
            &[(0, 'a', 1), (10, 'a', 2), (20, 'a', 3), (30, 'a', 4)],
            1000
        )
        .await,
        vec![(('a', vec![1, 2, 3]), 20), (('a', vec![4]), 130)]
    );
}

#[tokio::test(start_paused = true)]
async fn c36_single_item_at_or_above_cap_is_flushed_at_once() {
    let start = Instant::now();
    let log = new_log();
    let c = coalescer(coalesce100(), &log, start);
    at(start, 0).await;
    c.push_weighted('a', 1, 1).expect("not stopped");
    at(start, 10).await;
    c.push_weighted('a', 2, 25).expect("not stopped"); // alone above the cap
    at(start, 20).await;
    c.push_weighted('b', 3, 10).expect("not stopped"); // alone at the cap
    sleep(ms(1)).await;
    assert_eq!(
        snapshot(&log),
        vec![
            (('a', vec![1]), 10),
            (('a', vec![2]), 10),
            (('b', vec![3]), 20)
        ]
    );
    let one = new_log();
    let c1 = coalescer(CoalesceConfig::new(ms(100), 1).expect("valid"), &one, start);
    c1.push('z', 9).expect("not stopped");
    sleep(ms(1)).await;
    assert_eq!(snapshot(&one), vec![(('z', vec![9]), 21)]);
}

#[tokio::test(start_paused = true)]
async fn c37_no_empty_and_no_oversized_batch() {
    let start = Instant::now();
    let log = new_log();
    let c = coalescer(CoalesceConfig::new(ms(100), 3).expect("valid"), &log, start);
    assert_eq!(c.flush().await, FlushOutcome::Idle);
    let mut script = Vec::new();
    for i in 0..60u32 {
        let t = u64::from(i * i % 97) * 7 + u64::from(i) * 13;
        script.push((t, ['a', 'b', 'c'][(i % 3) as usize], i));
    }
    script.sort_by_key(|s| s.0);
    push_at(&c, start, &script).await;
    at(start, 5000).await;
    assert_eq!(c.flush().await, FlushOutcome::Idle);
    let batches = snapshot(&log);
    assert!(batches
        .iter()
        .all(|((_, items), _)| (1..=3).contains(&items.len())));
    let delivered: usize = batches.iter().map(|((_, items), _)| items.len()).sum();
    assert_eq!(delivered, 60);
    assert!(
        batches.len() >= 20,
        "60 items in batches of at most 3 need at least 20 batches"
    );
}

#[tokio::test(start_paused = true)]
async fn c38_keys_batch_independently() {
    let mut script: Vec<(u64, char, u32)> = (0..30).map(|i| (10 * u64::from(i), 'h', i)).collect();
    script.push((5, 'b', 100));
    script.sort_by_key(|s| s.0);
    let all = coalesce_script(
        CoalesceConfig::new(ms(100), 5).expect("valid"),
        &script,
        1000,
    )
    .await;
    let cold: Vec<_> = all
        .iter()
        .filter(|((k, _), _)| *k == 'b')
        .cloned()
        .collect();
    assert_eq!(cold, vec![(('b', vec![100]), 105)]);
    let hot: Vec<_> = all
        .iter()
        .filter(|((k, _), _)| *k == 'h')
        .cloned()
        .collect();
    let expected: Vec<_> = (0..6)
        .map(|j| {
            (
                ('h', (5 * j..5 * j + 5).collect()),
                u64::from(5 * j + 4) * 10,
            )
        })
        .collect();
    assert_eq!(hot, expected);
}

#[tokio::test(start_paused = true)]
async fn c39_flush_makes_everything_due_and_waits_for_actions() {
    let start = Instant::now();
    let log: BatchLog = new_log();
    let slot: Arc<OnceLock<Coalescer<char, u32>>> = Arc::new(OnceLock::new());
    let (l, s) = (Arc::clone(&log), Arc::clone(&slot));
    let c = Coalescer::new(coalesce100(), move |k: char, items: Vec<u32>| {
        let first = items.first().copied();
        push(&l, (k, items), start);
        // Pushed while the flush is in progress: lands in a later batch.
        if k == 'a' && first == Some(1) {
            if let Some(c) = s.get() {
                c.push('a', 2).expect("not stopped");
            }
        }
        sleep(ms(5))
    })
    .expect("inside a runtime");
    assert!(slot.set(c.clone()).is_ok());
    c.push('a', 1).expect("not stopped");
    c.push('b', 1).expect("not stopped");
    at(start, 10).await;
    assert_eq!(c.flush().await, FlushOutcome::Delivered);
    assert_eq!(elapsed_ms(start), 20, "returns after both actions finished");
    assert_eq!(
        snapshot(&log),
        vec![(('a', vec![1]), 10), (('b', vec![1]), 15)]
    );
    at(start, 1000).await;
    assert_eq!(snapshot(&log).last(), Some(&(('a', vec![2]), 110)));
}

#[tokio::test(start_paused = true)]
async fn c40_stop_with_drain_flushes_every_key() {
    let (start, log, c) = coalesce_fed(
        coalesce100(),
        &[(0, 'a', 1), (5, 'b', 2), (10, 'c', 3), (15, 'a', 4)],
    )
    .await;
    at(start, 20).await;
    assert_eq!(
        c.stop(StopMode::Drain, ms(100)).await,
        Ok(StopOutcome::Completed)
    );
    assert_eq!(
        snapshot(&log),
        vec![
            (('a', vec![1, 4]), 20),
            (('b', vec![2]), 20),
            (('c', vec![3]), 20)
        ]
    );
    at(start, 1000).await;
    assert_eq!(snapshot(&log).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn c41_items_keep_arrival_order_within_a_key() {
    let script: Vec<(u64, char, u32)> = (1..=7)
        .flat_map(|i| [(u64::from(i), 'a', i), (u64::from(i), 'b', 100 + i)])
        .collect();
    let all = coalesce_script(
        CoalesceConfig::new(ms(100), 3).expect("valid"),
        &script,
        1000,
    )
    .await;
    let a: Vec<Vec<u32>> = all
        .iter()
        .filter(|((k, _), _)| *k == 'a')
        .map(|((_, items), _)| items.clone())
        .collect();
    assert_eq!(a, vec![vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
    let b: Vec<u32> = all
        .into_iter()
        .filter(|((k, _), _)| *k == 'b')
        .flat_map(|((_, items), _)| items)
        .collect();
    assert_eq!(b, (101..=107).collect::<Vec<_>>());
}
