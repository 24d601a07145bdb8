//! Faults: redis-server killed with SIGKILL mid-load and restarted on the
//! same port; a server paused with CLIENT PAUSE. Every decision returns
//! within the command timeout plus a margin, the failure policy is honoured
//! and counted, the breaker stops calling a dead Redis, and decisions come
//! from Redis again within 1 s of it being back.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ratewise::backend::DecisionSource;
use ratewise::Quota;
use ratewise_redis::{
    connect, Algorithm, FailurePolicy, LeaseConfig, Options, RedisLimiter, ResilienceConfig,
    TwoTierLimiter,
};

const TIMEOUT: Duration = Duration::from_millis(50);
const COOL_DOWN: Duration = Duration::from_millis(250);
/// Scheduling slack on a busy 2-core machine.
const MARGIN: Duration = Duration::from_millis(150);
const TASKS: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Seen {
    at: Instant,
    latency: Duration,
    source: DecisionSource,
    allowed: bool,
}

/// Every decision the load made, in order; waiters are woken on each one,
/// so a test waits for progress, never for a stretch of time.
#[derive(Default)]
struct Log {
    seen: Mutex<Vec<Seen>>,
    grew: Condvar,
}

impl Log {
    fn push(&self, s: Seen) {
        self.seen.lock().unwrap().push(s);
        self.grew.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Seen>> {
        self.seen.lock().unwrap()
    }

    /// Blocks until `done` holds for the decisions so far (at most 5 s of
    /// no satisfying progress: the load has stalled).
    fn wait_until(&self, done: impl Fn(&[Seen]) -> bool) {
        let guard = self.seen.lock().unwrap();
        let (guard, timeout) = self
            .grew
            .wait_timeout_while(guard, Duration::from_secs(5), |v| !done(v))
            .unwrap();
        assert!(!timeout.timed_out(), "no load progress");
        drop(guard);
    }

    /// Blocks until at least `n` decisions have been recorded.
    fn wait_for(&self, n: usize) {
        self.wait_until(|v| v.len() >= n);
    }

    /// Blocks until a decision has been made at or after `at`.
    fn wait_past(&self, at: Instant) {
        self.wait_until(|v| v.last().is_some_and(|s| s.at >= at));
    }
}

fn limiter(rt: &tokio::runtime::Runtime, url: &str, policy: FailurePolicy) -> RedisLimiter {
    let conn = rt.block_on(connect(url)).expect("connect");
    RedisLimiter::with_options(
        conn,
        Quota::per_second(1000).unwrap(),
        Algorithm::Gcra,
        Options {
            policy,
            resilience: ResilienceConfig {
                timeout: TIMEOUT,
                failure_threshold: 3,
                cool_down: COOL_DOWN,
            },
            ..Options::default()
        },
    )
    .unwrap()
}

/// Load from `TASKS` tasks until `stop`; every decision is recorded.
fn load(
    rt: &tokio::runtime::Runtime,
    l: &RedisLimiter,
    stop: &Arc<AtomicBool>,
    seen: &Arc<Log>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..TASKS)
        .map(|i| {
            let (l, stop, seen) = (l.clone(), stop.clone(), seen.clone());
            rt.spawn(async move {
                let key = format!("user-{}", i % 4);
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let d = l.check(&key, 1).await.expect("the policy answers");
                    seen.push(Seen {
                        at: t,
                        latency: t.elapsed(),
                        source: d.source,
                        allowed: d.decision.allowed,
                    });
                    // A degraded decision is made in memory without
                    // awaiting anything: pace the loop as a server's
                    // request rate would, and let the runtime's other
                    // tasks (the reconnection) run.
                    if d.source.is_degraded() {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect()
}

/// Polls until a decision comes from Redis; returns how long that took and
/// how many degraded decisions the polling itself got.
fn until_backend(rt: &tokio::runtime::Runtime, l: &RedisLimiter) -> (Duration, usize) {
    let t = Instant::now();
    let mut degraded = 0;
    loop {
        let d = rt.block_on(l.check("probe", 1)).unwrap();
        if d.source == DecisionSource::Backend {
            return (t.elapsed(), degraded);
        }
        degraded += 1;
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "Redis decisions did not come back"
        );
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(5)).await });
    }
}

fn kill_mid_load(policy: FailurePolicy) {
    let mut server = common::RedisServer::start();
    let expected = match &policy {
        FailurePolicy::FailOpen => DecisionSource::FailOpen,
        FailurePolicy::FailClosed => DecisionSource::FailClosed,
        _ => DecisionSource::LocalFallback,
    };
    let rt = common::multi_thread_runtime();
    let l = limiter(&rt, &server.url(), policy);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Log::default());
    let tasks = load(&rt, &l, &stop, &seen);
    seen.wait_for(500);
    server.kill9();
    let killed = Instant::now();
    let before = seen.lock().len();
    // Let the outage span several cool-downs under load.
    seen.wait_for(before + 2000);
    seen.wait_past(killed + COOL_DOWN * 3);
    server.restart();
    let (recovered, probes) = until_backend(&rt, &l);
    let settled = seen.lock().len();
    seen.wait_for(settled + 200);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        rt.block_on(t).unwrap();
    }
    let seen = seen.lock();
    let worst = seen.iter().map(|s| s.latency).max().unwrap();
    assert!(
        worst <= TIMEOUT + MARGIN,
        "a decision took {worst:?} (timeout {TIMEOUT:?})"
    );
    let degraded: Vec<&Seen> = seen.iter().filter(|s| s.source.is_degraded()).collect();
    assert!(!degraded.is_empty(), "no decision was made without Redis");
    assert!(degraded.iter().all(|s| s.source == expected));
    match expected {
        DecisionSource::FailOpen => assert!(degraded.iter().all(|s| s.allowed)),
        DecisionSource::FailClosed => assert!(degraded.iter().all(|s| !s.allowed)),
        _ => {
            // The local share: 1000/s over 4 instances = 250/s per key, 4
            // keys, over the span of degraded decisions. A key's share
            // starts spent, so no burst: the rate alone (and one unit for
            // the rounding of each key's first refill).
            let first = degraded.iter().map(|s| s.at).min().unwrap();
            let last = degraded.iter().map(|s| s.at + s.latency).max().unwrap();
            let allowed = degraded.iter().filter(|s| s.allowed).count() as f64;
            let bound = 4.0 * (1.0 + 250.0 * (last - first).as_secs_f64());
            assert!(allowed > 0.0 && allowed <= bound, "{allowed} > {bound}");
        }
    }
    // Decisions after recovery come from Redis.
    assert!(seen[settled..]
        .iter()
        .any(|s| s.source == DecisionSource::Backend));
    assert!(
        recovered <= Duration::from_secs(1),
        "Redis decisions came back {recovered:?} after the restart"
    );
    // Counted: every degraded decision, and the breaker spared Redis.
    let stats = l.stats();
    println!(
        "{expected:?}: worst decision {worst:?}, back on Redis {recovered:?} after restart, {} degraded, {stats:?}",
        degraded.len()
    );
    assert_eq!(stats.degraded() as usize, degraded.len() + probes);
    assert!(stats.breaker_opened >= 1);
    let failed_calls = stats.redis_errors + stats.timeouts;
    let cool_downs = killed.elapsed().as_millis() / COOL_DOWN.as_millis() + 2;
    assert!(
        failed_calls <= (TASKS as u64) * (cool_downs as u64),
        "{failed_calls} failed Redis calls for {} degraded decisions",
        degraded.len()
    );
    assert!(stats.short_circuited > failed_calls, "{stats:?}");
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn kill_9_fail_open() {
    kill_mid_load(FailurePolicy::FailOpen);
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn kill_9_fail_closed() {
    kill_mid_load(FailurePolicy::FailClosed);
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn kill_9_local_fallback() {
    kill_mid_load(FailurePolicy::local_share(Quota::per_second(1000).unwrap(), 4).unwrap());
}

/// `CLIENT PAUSE`: Redis accepts connections but answers nothing. Decisions
/// time out into the policy, the breaker opens, and Redis decides again
/// within 1 s after the pause ends.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn client_pause_times_out_into_the_policy() {
    let server = common::RedisServer::start();
    let rt = common::multi_thread_runtime();
    let l = limiter(&rt, &server.url(), FailurePolicy::FailClosed);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Log::default());
    let tasks = load(&rt, &l, &stop, &seen);
    seen.wait_for(500);
    let pause = Duration::from_millis(800);
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis() as u64)
        .arg("ALL")
        .query::<()>(&mut server.sync())
        .unwrap();
    let paused = Instant::now();
    let before = seen.lock().len();
    seen.wait_for(before + 200);
    seen.wait_past(paused + pause);
    let (recovered, _) = until_backend(&rt, &l);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        rt.block_on(t).unwrap();
    }
    let seen = seen.lock();
    let worst = seen.iter().map(|s| s.latency).max().unwrap();
    assert!(worst <= TIMEOUT + MARGIN, "a decision took {worst:?}");
    let degraded: Vec<&Seen> = seen.iter().filter(|s| s.source.is_degraded()).collect();
    assert!(!degraded.is_empty());
    assert!(degraded
        .iter()
        .all(|s| s.source == DecisionSource::FailClosed && !s.allowed));
    let stats = l.stats();
    println!("CLIENT PAUSE: worst decision {worst:?}, back on Redis {recovered:?} after the pause, {stats:?}");
    assert!(
        stats.timeouts >= 1 && stats.breaker_opened >= 1,
        "{stats:?}"
    );
    assert!(stats.short_circuited > stats.timeouts, "{stats:?}");
    assert!(recovered <= Duration::from_secs(1), "{recovered:?}");
}

/// Two-tier mode: with Redis killed, a key without a lease is answered by
/// the policy within the timeout, and counted; after the restart, leases
/// come from Redis again within 1 s.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn two_tier_survives_kill_9() {
    let mut server = common::RedisServer::start();
    let rt = common::multi_thread_runtime();
    let l = rt.block_on(async {
        let conn = connect(&server.url()).await.expect("connect");
        TwoTierLimiter::new(
            conn,
            Quota::per_second(1000).unwrap(),
            Options {
                policy: FailurePolicy::FailClosed,
                resilience: ResilienceConfig {
                    timeout: TIMEOUT,
                    failure_threshold: 3,
                    cool_down: COOL_DOWN,
                },
                ..Options::default()
            },
            LeaseConfig::default(),
        )
        .unwrap()
    });
    rt.block_on(async {
        for _ in 0..200 {
            let d = l.check("warm", 1).await.unwrap();
            assert_eq!(d.source, DecisionSource::Backend);
        }
    });
    server.kill9();
    let (worst, degraded) = rt.block_on(async {
        let (mut worst, mut degraded) = (Duration::ZERO, 0u64);
        for k in 0..50 {
            let t = Instant::now();
            let d = l.check(format!("cold-{k}"), 1).await.unwrap();
            worst = worst.max(t.elapsed());
            assert_eq!(d.source, DecisionSource::FailClosed);
            assert!(!d.decision.allowed);
            degraded += 1;
        }
        (worst, degraded)
    });
    assert!(worst <= TIMEOUT + MARGIN, "{worst:?}");
    assert_eq!(l.stats().fail_closed, degraded);
    server.restart();
    let t = Instant::now();
    rt.block_on(async {
        while l.check("after", 1).await.unwrap().source != DecisionSource::Backend {
            assert!(
                t.elapsed() < Duration::from_secs(3),
                "leases did not come back"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    assert!(t.elapsed() <= Duration::from_secs(1), "{:?}", t.elapsed());
}

/// The whole quota spent on Redis, then an outage under load, then Redis
/// back: the local share admits no burst (it starts spent), and what it
/// admitted is charged to Redis on the key's first decision afterwards, so
/// the refill Redis saw during the outage is not admitted a second time.
/// Over the whole run the key admits no more than the quota allows over
/// that time (burst + rate × elapsed).
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn an_outage_admits_no_burst_and_is_charged_when_redis_returns() {
    const RATE: u64 = 100;
    let mut server = common::RedisServer::start();
    let rt = common::multi_thread_runtime();
    let quota = Quota::per_second(RATE).unwrap();
    let conn = rt.block_on(connect(&server.url())).expect("connect");
    let l = RedisLimiter::with_options(
        conn,
        quota,
        Algorithm::Gcra,
        Options {
            policy: FailurePolicy::local_share(quota, 1).unwrap(),
            resilience: ResilienceConfig {
                timeout: TIMEOUT,
                failure_threshold: 3,
                cool_down: COOL_DOWN,
            },
            ..Options::default()
        },
    )
    .unwrap();
    let started = Instant::now();
    let check = |n: u64| rt.block_on(l.check("k", n)).expect("the policy answers");
    let spend = check(RATE);
    assert!(spend.decision.allowed && spend.source == DecisionSource::Backend);
    let mut admitted = RATE;
    server.kill9();
    // Demand well above the rate for a little over a second of outage
    // (the load's length, not a wait for anything).
    let killed = Instant::now();
    let mut local = 0;
    while killed.elapsed() < Duration::from_millis(1200) {
        let d = check(1);
        assert!(d.source.is_degraded());
        if d.decision.allowed {
            local += 1;
        }
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(2)).await });
    }
    let outage = killed.elapsed().as_secs_f64();
    assert!(
        local > 0,
        "the local share admitted nothing in {outage:.2} s"
    );
    assert!(
        local as f64 <= 1.0 + RATE as f64 * outage,
        "{local} admitted in a {outage:.2} s outage at {RATE}/s: a burst"
    );
    admitted += local;
    server.restart();
    until_backend(&rt, &l);
    // Every unit Redis will give now, in a tight loop.
    let mut after = 0;
    loop {
        let d = check(1);
        if !d.decision.allowed {
            break;
        }
        assert_eq!(d.source, DecisionSource::Backend);
        after += 1;
    }
    admitted += after;
    let elapsed = started.elapsed().as_secs_f64();
    let bound = (RATE as f64 * (1.0 + elapsed)).ceil() as u64 + 1;
    println!(
        "outage {outage:.2} s: {local} admitted locally, {after} by Redis right after; \
         {admitted} in {elapsed:.2} s (bound {bound})"
    );
    assert!(
        admitted <= bound,
        "{admitted} admitted in {elapsed:.2} s; the quota allows {bound}"
    );
}
