//! Behaviour against a real, private redis-server: conformance with the
//! in-memory limiters, the quota bound under concurrency, expiry, bad input.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ratewise::backend::{AsyncKeyedLimiter, DecisionSource};
use ratewise::{CheckError, Quota, QuotaError};
use ratewise_redis::{
    connect, Algorithm, Error, FailurePolicy, LeaseConfig, MultiLimiter, Options, RedisLimiter,
    ResilienceConfig, TwoTierLimiter,
};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Default options with a patient timeout: these tests check decisions,
/// not timeouts (the fault tests do), and share a busy machine.
fn patient() -> Options {
    Options {
        resilience: ResilienceConfig {
            timeout: Duration::from_secs(5),
            ..ResilienceConfig::default()
        },
        ..Options::default()
    }
}

fn options() -> Options {
    Options {
        // Explicit-time tests move their clock faster or slower than real
        // time; keep keys alive for the whole test.
        expiry_slack: Duration::from_secs(600),
        policy: FailurePolicy::Error,
        ..patient()
    }
}

static KEY: AtomicU64 = AtomicU64::new(0);
fn fresh_key() -> String {
    format!("k{}", KEY.fetch_add(1, Ordering::Relaxed))
}

/// Runs `ops` against Redis (explicit time) and the in-memory twin; every
/// decision must be identical, evidence included.
fn conform(
    rt: &tokio::runtime::Runtime,
    redis: &RedisLimiter,
    alg: Algorithm,
    q: Quota,
    start_us: u64,
    ops: &[common::Op],
) -> Result<(), TestCaseError> {
    let mem = common::memory(alg, q);
    let key = fresh_key();
    redis.set_key_quota(&key, q).expect("valid quota");
    let mut now = start_us;
    for (i, op) in ops.iter().enumerate() {
        now += op.dt_us;
        let at = Duration::from_micros(now);
        let call = if op.peek {
            rt.block_on(redis.peek_at(&key, op.n, at))
        } else {
            rt.block_on(redis.check_at(&key, op.n, at))
        };
        let r = call.expect("redis").decision;
        let m = common::memory_step(&*mem, op, now);
        prop_assert_eq!(r, m, "{} step {} at {} µs: {:?}", alg, i, now, op);
    }
    Ok(())
}

fn conformance(alg: Algorithm, cases: u32) {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).expect("connect");
    let redis = RedisLimiter::with_options(conn, Quota::per_second(1).unwrap(), alg, options())
        .expect("limiter");
    common::run_scenarios(cases, 25, false, |q, start, ops| {
        conform(&rt, &redis, alg, q, start, ops)
    });
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn gcra_on_redis_decides_as_the_in_memory_gcra() {
    conformance(Algorithm::Gcra, 1000);
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn token_bucket_on_redis_decides_as_the_in_memory_token_bucket() {
    conformance(Algorithm::TokenBucket, 200);
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn fixed_window_on_redis_decides_as_the_in_memory_fixed_window() {
    conformance(Algorithm::FixedWindow, 200);
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn sliding_window_counter_on_redis_decides_as_the_in_memory_counter() {
    conformance(Algorithm::SlidingWindowCounter, 200);
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn sliding_window_log_on_redis_decides_as_the_in_memory_log() {
    conformance(Algorithm::SlidingWindowLog, 200);
}

/// 8 clients, each with its own connection (its own `RedisLimiter`, so no
/// two share a multiplexed connection), hammer one key on Redis's clock for
/// 10 s of real time, each with 4 requests in flight (so each client also
/// batches). In total they admit no more than `r·T + b` (T from before the
/// first request to after the last answer); and with every admission
/// stamped by the time its script decided at (scripts run one at a time,
/// so the stamps follow the order Redis applied them), every closed span of
/// `d` holds at most `⌊d/I⌋ + b`.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn eight_connections_keep_the_bound_in_total_and_in_every_window() {
    let server = common::RedisServer::start();
    let rt = common::multi_thread_runtime();
    let quota = Quota::per_second(200).unwrap().with_burst(20).unwrap();
    let run = Duration::from_secs(10);
    let (mut stamps, decisions, round_trips, elapsed) = rt.block_on(async {
        let mut limiters = Vec::new();
        for _ in 0..8 {
            let conn = connect(&server.url()).await.expect("connect");
            limiters
                .push(RedisLimiter::with_options(conn, quota, Algorithm::Gcra, patient()).unwrap());
        }
        let start = Instant::now();
        let mut tasks = Vec::new();
        for l in &limiters {
            for _ in 0..4 {
                let l = l.clone();
                tasks.push(tokio::spawn(async move {
                    let mut admitted = Vec::new();
                    let mut decisions = 0u64;
                    while start.elapsed() < run {
                        let t = l.check_timed("hot", 1).await.expect("decision");
                        assert_eq!(t.decision.source, DecisionSource::Backend);
                        if t.decision.decision.allowed {
                            let at = t.redis_time.expect("decided by Redis");
                            admitted.push(u64::try_from(at.as_nanos()).unwrap());
                        }
                        decisions += 1;
                    }
                    (admitted, decisions)
                }));
            }
        }
        let mut all = Vec::new();
        let mut decisions = 0;
        for t in tasks {
            let (a, d) = t.await.unwrap();
            all.extend(a);
            decisions += d;
        }
        let round_trips: u64 = limiters.iter().map(|l| l.stats().round_trips).sum();
        (all, decisions, round_trips, start.elapsed())
    });
    println!("{decisions} decisions in {round_trips} round trips over {elapsed:?}");
    let admitted = stamps.len() as u64;
    assert!(decisions > admitted, "the load must exceed the quota");
    let bound = quota.units_in(u64::try_from(elapsed.as_nanos()).unwrap()) + quota.burst();
    assert!(admitted <= bound, "admitted {admitted} > r·T + b = {bound}");
    // The quota was actually used: GCRA admits at the rate under load (half
    // of the run's refill, to tolerate a stalled machine).
    assert!(
        admitted >= quota.burst() + quota.units_in(5_000_000_000),
        "admitted only {admitted}"
    );
    stamps.sort_unstable();
    for i in 0..stamps.len() {
        for j in i..stamps.len() {
            let count = (j - i + 1) as u64;
            let bound = quota.units_in(stamps[j] - stamps[i]) + quota.burst();
            assert!(
                count <= bound,
                "{count} admissions within {} ns > bound {bound}",
                stamps[j] - stamps[i]
            );
        }
    }
}

/// Every key expires when its state is back to a fresh key's: right after a
/// check its TTL is the time to full (rounded up to a whole ms), and after a
/// flood of distinct keys and one reset period the database is empty.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn keys_expire_when_back_to_full() {
    let server = common::RedisServer::start();
    let rt = rt();
    let mut sync = server.sync();
    for alg in Algorithm::ALL {
        let conn = rt.block_on(connect(&server.url())).unwrap();
        // 10 per 100 s: long enough that a stalled test machine cannot let
        // the key expire between the check and the PTTL.
        let quota = Quota::per(10, Duration::from_secs(100)).unwrap();
        let l = RedisLimiter::with_options(conn, quota, alg, patient()).unwrap();
        // Explicit time: the TTL is exactly the time to full.
        let key = fresh_key();
        let now = Duration::from_secs(1_000_000) + Duration::from_millis(20_020);
        let d = rt.block_on(l.check_at(&key, 3, now)).unwrap().decision;
        assert!(d.allowed);
        let pttl: i64 = redis::cmd("PTTL")
            .arg(l.redis_key(&key))
            .query(&mut sync)
            .unwrap();
        let ttf = i64::try_from(d.reset_after.as_micros().div_ceil(1000)).unwrap();
        assert!(
            pttl <= ttf && pttl >= ttf - 2_000,
            "{alg}: PTTL {pttl} ms, time to full {ttf} ms"
        );
        // Peek and denial write nothing.
        let before: Vec<u8> = redis::cmd("DUMP")
            .arg(l.redis_key(&key))
            .query(&mut sync)
            .unwrap();
        rt.block_on(l.peek_at(&key, 1, now)).unwrap();
        rt.block_on(l.check_at(&key, 10, now)).unwrap();
        let after: Vec<u8> = redis::cmd("DUMP")
            .arg(l.redis_key(&key))
            .query(&mut sync)
            .unwrap();
        assert_eq!(before, after, "{alg}: peek or denial changed the key");
    }
    redis::cmd("FLUSHALL").query::<()>(&mut sync).unwrap();
    // Expiries are announced (keyspace notifications), so the drain below
    // waits on them rather than polling on a timer.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Ex")
        .query::<()>(&mut sync)
        .unwrap();
    let mut events = server.sync();
    events
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut expired = events.as_pubsub();
    expired.subscribe("__keyevent@0__:expired").unwrap();
    // A flood of distinct keys on Redis's clock, every algorithm.
    let keys = 2_000;
    rt.block_on(async {
        for alg in Algorithm::ALL {
            let conn = connect(&server.url()).await.unwrap();
            let quota = Quota::per(10, Duration::from_millis(100)).unwrap();
            let l = RedisLimiter::with_options(conn, quota, alg, patient()).unwrap();
            let mut set = tokio::task::JoinSet::new();
            for w in 0..32 {
                let l = l.clone();
                set.spawn(async move {
                    for i in (w..keys).step_by(32) {
                        let d = l.check(format!("{alg}-{i}"), 1).await.unwrap();
                        assert!(d.decision.allowed && d.source == DecisionSource::Backend);
                    }
                });
            }
            while let Some(r) = set.join_next().await {
                r.unwrap();
            }
        }
    });
    assert!(server.dbsize() > 0);
    // The longest time to full here is the window counters' two windows
    // (200 ms); Redis's active expiry then needs a few of its 100 ms cycles.
    while server.dbsize() > 0 {
        // The next expiry, or 5 s without one: keys that never expire.
        assert!(
            expired.get_message().is_ok(),
            "{} keys left and none expiring",
            server.dbsize()
        );
    }
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn bad_input_is_a_typed_error_and_writes_nothing() {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).unwrap();
    let q = Quota::per_second(5).unwrap();
    let l = RedisLimiter::new(conn.clone(), q).unwrap();
    rt.block_on(async {
        assert!(matches!(l.check("", 1).await, Err(Error::EmptyKey)));
        let long = "x".repeat(1025);
        assert!(matches!(
            l.check(&long, 1).await,
            Err(Error::KeyTooLong {
                len: 1025,
                max: 1024
            })
        ));
        assert!("x".repeat(1024).len() == 1024);
        assert!(matches!(
            l.check("a", 0).await,
            Err(Error::Check(CheckError::ZeroWeight))
        ));
        assert!(matches!(
            l.peek("a", 6).await,
            Err(Error::Check(CheckError::ExceedsBurst {
                requested: 6,
                burst: 5
            }))
        ));
        assert!(matches!(
            l.check_at("a", 1, Duration::from_secs(200 * 365 * 86_400))
                .await,
            Err(Error::TimeOutOfRange { .. })
        ));
        assert!(matches!(l.reset("").await, Err(Error::EmptyKey)));
    });
    // Huge periods: refused by the core's quota domain (a window of at most
    // 2^61 ns, about 73 years), which lies inside what Lua's integers hold
    // exactly (2^52 µs, about 142 years), so no quota reaches Redis inexact.
    assert!(matches!(
        Quota::per(1, Duration::from_secs(200 * 365 * 86_400)),
        Err(QuotaError::RateTooLow { .. })
    ));
    let longest = Quota::from_parts(ratewise::quota::MAX_WINDOW_NANOS, 1).unwrap();
    assert!(RedisLimiter::new(conn.clone(), longest).is_ok());
    // The counter's products need burst × window ≤ 2^52 µs.
    let wide = Quota::per(1_000_000, Duration::from_secs(86_400 * 30)).unwrap();
    assert!(matches!(
        RedisLimiter::with_options(
            conn.clone(),
            wide,
            Algorithm::SlidingWindowCounter,
            Options::default()
        ),
        Err(Error::Quota(_))
    ));
    // NaN rates never become a quota at all.
    assert!(matches!(
        Quota::from_rate(f64::NAN),
        Err(QuotaError::InvalidRate { .. })
    ));
    // A brace in the prefix would break hash tags.
    assert!(matches!(
        RedisLimiter::with_options(
            conn,
            q,
            Algorithm::Gcra,
            Options {
                prefix: "{rl}:".into(),
                ..Options::default()
            }
        ),
        Err(Error::InvalidPrefix { .. })
    ));
    // Nothing reached Redis: no keys, no script calls.
    assert_eq!(server.dbsize(), 0);
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.sync())
        .unwrap();
    assert!(!info.contains("cmdstat_evalsha"), "{info}");
    assert_eq!(l.stats().backend, 0);
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn weights_reset_overrides_and_sub_one_per_second_rates() {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).unwrap();
    // One request every 2.5 s (0.4/s), burst 2.
    let slow = Quota::per(2, Duration::from_secs(5)).unwrap();
    let l = RedisLimiter::with_options(conn, slow, Algorithm::Gcra, options()).unwrap();
    let t = Duration::from_secs(5_000);
    rt.block_on(async {
        let d = l.check_at("w", 2, t).await.unwrap().decision;
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.reset_after, Duration::from_secs(5));
        let d = l.check_at("w", 1, t).await.unwrap().decision;
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(2500)));
        // retry_after is exact to the microsecond.
        let just_before = t + Duration::from_millis(2500) - Duration::from_micros(1);
        assert!(
            !l.peek_at("w", 1, just_before)
                .await
                .unwrap()
                .decision
                .allowed
        );
        assert!(
            l.peek_at("w", 1, t + Duration::from_millis(2500))
                .await
                .unwrap()
                .decision
                .allowed
        );
        // reset forgets the key.
        l.reset("w").await.unwrap();
        assert!(l.check_at("w", 2, t).await.unwrap().decision.allowed);
        // A per-key override applies from the next call.
        l.set_key_quota("vip", Quota::per_second(100).unwrap())
            .unwrap();
        let d = l.check_at("vip", 50, t).await.unwrap().decision;
        assert!(d.allowed);
        assert_eq!(d.limit, 100);
        l.clear_key_quota("vip");
        assert!(matches!(
            l.check_at("vip", 50, t).await,
            Err(Error::Check(CheckError::ExceedsBurst { .. }))
        ));
        // A quota for one call.
        let d = l
            .check_with_quota("other", 3, Quota::per_second(3).unwrap())
            .await
            .unwrap();
        assert_eq!(d.decision.limit, 3);
        // The shared trait, generically, with str, String and byte keys.
        async fn admit<K: ?Sized, L: AsyncKeyedLimiter<K>>(l: &L, k: &K) -> bool {
            l.check(k, 1)
                .await
                .map(|d| d.decision.allowed)
                .unwrap_or(false)
        }
        assert!(admit::<str, _>(&l, "generic").await);
        assert!(admit::<String, _>(&l, &"generic2".to_string()).await);
        assert!(admit::<[u8], _>(&l, b"generic3".as_slice()).await);
    });
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn several_limits_commit_all_or_nothing() {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).unwrap();
    let per_user = Quota::per_second(5).unwrap();
    let per_endpoint = Quota::per_second(3).unwrap();
    let global = Quota::per_second(100).unwrap();
    let m = MultiLimiter::new(conn, [per_user, per_endpoint, global], options()).unwrap();
    let t = Duration::from_secs(7_000);
    rt.block_on(async {
        let keys = ["{u1}:user", "{u1}:search", "{u1}:all"];
        for _ in 0..3 {
            let d = m.check_at(&keys, 1, t).await.unwrap();
            assert!(d.overall.decision.allowed);
            assert_eq!(d.denied_level, None);
        }
        // The endpoint level (3/s) refuses; the user level is not charged.
        let d = m.check_at(&keys, 1, t).await.unwrap();
        assert_eq!(d.denied_level, Some(1));
        assert!(!d.overall.decision.allowed);
        assert_eq!(
            d.overall.decision.retry_after,
            Some(Duration::from_nanos(333_334_000))
        );
        assert_eq!(d.levels[0].remaining, 2, "user level charged by a refusal");
        // Another endpoint for the same user still has the user's 2 left.
        let other = ["{u1}:user", "{u1}:upload", "{u1}:all"];
        assert!(
            m.check_at(&other, 2, t)
                .await
                .unwrap()
                .overall
                .decision
                .allowed
        );
        let d = m.check_at(&other, 1, t).await.unwrap();
        assert_eq!(d.denied_level, Some(0));
        assert_eq!(d.levels[2].remaining, 95);
        assert!(matches!(
            m.check_at(&keys[..2], 1, t).await,
            Err(Error::LevelMismatch { levels: 3, keys: 2 })
        ));
    });
}

/// Redis memory per tracked key, each algorithm, against redis_rate's
/// layout (one string per key holding a number — the same as our GCRA).
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn memory_per_key() {
    let server = common::RedisServer::start();
    let rt = rt();
    let mut sync = server.sync();
    let quota = Quota::per_second(10).unwrap();
    let mut report = Vec::new();
    for alg in Algorithm::ALL {
        let conn = rt.block_on(connect(&server.url())).unwrap();
        let l = RedisLimiter::with_options(conn, quota, alg, options()).unwrap();
        let key = format!("user-000042-{alg}");
        rt.block_on(l.check_at(&key, 1, Duration::from_secs(9_000)))
            .unwrap();
        let bytes: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(l.redis_key(&key))
            .query(&mut sync)
            .unwrap();
        assert!(bytes > 0 && bytes < 200, "{alg}: {bytes} B");
        report.push(format!("{alg}: {bytes} B"));
    }
    redis::cmd("SET")
        .arg("ratewise:user-000042-peer")
        .arg("1732435200123456")
        .query::<()>(&mut sync)
        .unwrap();
    let peer: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("ratewise:user-000042-peer")
        .query(&mut sync)
        .unwrap();
    println!(
        "memory per key: {}; redis_rate-style string, same key length: {peer} B",
        report.join(", ")
    );
}

/// Two-tier mode: 4 limiters (as 4 processes, each on its own connection)
/// with 4 tasks each hammer one key. Every admitted unit was leased from
/// the Redis bucket first, so the total stays within `r·T + b`; and most
/// decisions never reach Redis.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn two_tier_leases_never_exceed_the_global_quota() {
    let server = common::RedisServer::start();
    let rt = common::multi_thread_runtime();
    let quota = Quota::per_second(500).unwrap().with_burst(50).unwrap();
    let run = Duration::from_millis(1000);
    let (admitted, decisions, leased, redis_calls, elapsed) = rt.block_on(async {
        let mut limiters = Vec::new();
        for _ in 0..4 {
            let conn = connect(&server.url()).await.expect("connect");
            limiters
                .push(TwoTierLimiter::new(conn, quota, patient(), LeaseConfig::default()).unwrap());
        }
        let start = Instant::now();
        let mut tasks = Vec::new();
        for l in &limiters {
            for _ in 0..4 {
                let l = l.clone();
                tasks.push(tokio::spawn(async move {
                    let (mut admitted, mut decisions) = (0u64, 0u64);
                    while start.elapsed() < run {
                        let d = l.check("hot", 1).await.expect("decision");
                        assert_eq!(d.source, DecisionSource::Backend);
                        admitted += u64::from(d.decision.allowed);
                        decisions += 1;
                        tokio::task::yield_now().await;
                    }
                    (admitted, decisions)
                }));
            }
        }
        let (mut admitted, mut decisions) = (0, 0);
        for t in tasks {
            let (a, d) = t.await.unwrap();
            admitted += a;
            decisions += d;
        }
        let elapsed = start.elapsed();
        let leased = limiters.iter().map(|l| l.lease_stats().leased).sum::<u64>();
        let calls = limiters
            .iter()
            .map(|l| l.lease_stats().redis_calls)
            .sum::<u64>();
        (admitted, decisions, leased, calls, elapsed)
    });
    let bound = quota.units_in(u64::try_from(elapsed.as_nanos()).unwrap()) + quota.burst();
    assert!(admitted <= leased, "admitted {admitted} > leased {leased}");
    assert!(leased <= bound, "leased {leased} > r·T + b = {bound}");
    assert!(admitted >= quota.burst(), "admitted only {admitted}");
    assert!(
        redis_calls * 10 < decisions,
        "{redis_calls} Redis calls for {decisions} decisions"
    );
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn two_tier_rejects_bad_input_before_redis() {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).unwrap();
    let l = TwoTierLimiter::new(
        conn,
        Quota::per_second(10).unwrap(),
        options(),
        LeaseConfig::default(),
    )
    .unwrap();
    rt.block_on(async {
        assert!(matches!(l.check("", 1).await, Err(Error::EmptyKey)));
        assert!(matches!(
            l.check("k", 0).await,
            Err(Error::Check(CheckError::ZeroWeight))
        ));
        assert!(matches!(
            l.check("k", 11).await,
            Err(Error::Check(CheckError::ExceedsBurst { .. }))
        ));
        // A weighted request larger than the adaptive lease still passes.
        assert!(l.check("k", 10).await.unwrap().decision.allowed);
        let d = l.check("k", 1).await.unwrap();
        assert!(!d.decision.allowed);
        assert!(d.decision.retry_after.is_some());
    });
    assert_eq!(l.lease_stats().leased, 10);
}
