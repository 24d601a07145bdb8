//! Batching against a real, private redis-server: requests that queue
//! behind a call in flight go as one script call — for one key or for
//! several — and are decided exactly as the same requests one by one, each
//! key on its own; a failed batch is answered by the failure policy request
//! by request, and a key Redis refuses fails only its own requests; a
//! cancelled leader or waiter never strands the others.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use proptest::prelude::*;
use ratewise::backend::{BackendDecision, DecisionSource};
use ratewise::Quota;
use ratewise_redis::{connect, Algorithm, Error, FailurePolicy, Options, RedisLimiter};

type Call<'a> = Pin<Box<dyn Future<Output = Result<BackendDecision, Error>> + 'a>>;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn options() -> Options {
    Options {
        // Explicit-time tests move their clock freely; keep keys alive.
        expiry_slack: Duration::from_secs(600),
        policy: FailurePolicy::Error,
        resilience: ratewise_redis::ResilienceConfig {
            timeout: Duration::from_secs(5),
            ..Default::default()
        },
        ..Options::default()
    }
}

/// Failures answered by refusing, with a breaker these tests never open.
fn fail_closed() -> Options {
    Options {
        policy: FailurePolicy::FailClosed,
        resilience: ratewise_redis::ResilienceConfig {
            timeout: Duration::from_secs(5),
            failure_threshold: 1000,
            ..Default::default()
        },
        ..Options::default()
    }
}

static KEY: AtomicU64 = AtomicU64::new(0);
fn fresh_key() -> String {
    format!("b{}", KEY.fetch_add(1, Ordering::Relaxed))
}

/// Polls every call in order, again and again, until all are done; a call
/// at `cancel` positions is dropped after its first poll. The first two
/// calls polled find the key's two leader places free and go alone; the
/// others queue behind them in this order and go as the next batch(es).
async fn run_in_order<'a>(
    mut calls: Vec<Option<Call<'a>>>,
    cancel: &[usize],
) -> Vec<Option<Result<BackendDecision, Error>>> {
    let mut out: Vec<Option<Result<BackendDecision, Error>>> = calls.iter().map(|_| None).collect();
    let mut first = true;
    std::future::poll_fn(|cx: &mut Context<'_>| {
        for (i, call) in calls.iter_mut().enumerate() {
            if let Some(f) = call {
                if let Poll::Ready(r) = f.as_mut().poll(cx) {
                    out[i] = Some(r);
                    *call = None;
                }
            }
        }
        if first {
            first = false;
            for &i in cancel {
                calls[i] = None;
            }
        }
        if calls.iter().all(Option::is_none) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out
}

/// Sends `ops` (explicit times, in order) all at once, spread over `keys`
/// keys by a rule that varies with the scenario: the first two alone, the
/// rest as one batch (holding several keys when `keys` > 1). Every decision
/// must equal its key's in-memory twin's for that key's requests one by
/// one, evidence included, and the whole took at most three round trips.
fn batch_conforms(
    rt: &tokio::runtime::Runtime,
    redis: &RedisLimiter,
    alg: Algorithm,
    q: Quota,
    start_us: u64,
    ops: &[common::Op],
    keys: usize,
) -> Result<(), TestCaseError> {
    let names: Vec<String> = (0..keys).map(|_| fresh_key()).collect();
    for k in &names {
        redis.set_key_quota(k, q).expect("valid quota");
    }
    let key_of = |i: usize, op: &common::Op| (i + op.n as usize + usize::from(op.peek)) % keys;
    let mut now = start_us;
    let mut times = Vec::new();
    for op in ops {
        now += op.dt_us;
        times.push(now);
    }
    let calls: Vec<Option<Call<'_>>> = ops
        .iter()
        .zip(&times)
        .enumerate()
        .map(|(i, (op, &t))| {
            let at = Duration::from_micros(t);
            let key = names[key_of(i, op)].clone();
            let call: Call<'_> = if op.peek {
                Box::pin(async move { redis.peek_at(&key, op.n, at).await })
            } else {
                Box::pin(async move { redis.check_at(&key, op.n, at).await })
            };
            Some(call)
        })
        .collect();
    let trips = redis.stats().round_trips;
    let answers = rt.block_on(run_in_order(calls, &[]));
    let used = redis.stats().round_trips - trips;
    prop_assert_eq!(used, ops.len().min(3) as u64);
    let twins: Vec<_> = (0..keys).map(|_| common::memory(alg, q)).collect();
    for (i, ((op, &t), r)) in ops.iter().zip(&times).zip(answers).enumerate() {
        let r = r.expect("answered").expect("decided");
        prop_assert_eq!(r.source, DecisionSource::Backend);
        let k = key_of(i, op);
        let m = common::memory_step(&*twins[k], op, t);
        prop_assert_eq!(
            r.decision,
            m,
            "{} step {} (key {}) at {} µs: {:?}",
            alg,
            i,
            k,
            t,
            op
        );
    }
    Ok(())
}

/// `cases` scenarios of [`batch_conforms`] over `keys` keys.
fn batch_conformance(alg: Algorithm, cases: u32, keys: usize) {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).expect("connect");
    let redis = RedisLimiter::with_options(conn, Quota::per_second(1).unwrap(), alg, options())
        .expect("limiter");
    // As the one-by-one conformance tests, plus scenarios with every
    // request at one instant, and longer.
    common::run_scenarios(cases, 40, true, |q, start, ops| {
        batch_conforms(&rt, &redis, alg, q, start, ops, keys)
    });
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn a_gcra_batch_decides_as_the_in_memory_gcra_one_by_one() {
    batch_conformance(Algorithm::Gcra, 500, 1);
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn batches_of_every_other_algorithm_decide_as_their_twins_one_by_one() {
    for alg in Algorithm::ALL {
        if alg != Algorithm::Gcra {
            batch_conformance(alg, 60, 1);
        }
    }
}

/// Batches over several keys, every algorithm: each key decides as its
/// in-memory twin one by one, whatever the other keys in the batch do.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn a_batch_over_several_keys_decides_each_as_its_twin_one_by_one() {
    for alg in Algorithm::ALL {
        batch_conformance(alg, if alg == Algorithm::Gcra { 200 } else { 40 }, 3);
    }
}

/// A key that holds another type, batched with a good key: its requests
/// are answered by the policy and counted once as a Redis error; the good
/// key's are decided by Redis as if alone. GCRA's batch script and the
/// generic one (the sliding-window log's) alike.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn a_refused_key_in_a_batch_fails_alone() {
    let server = common::RedisServer::start();
    let rt = rt();
    for alg in [Algorithm::Gcra, Algorithm::SlidingWindowLog] {
        let conn = rt.block_on(connect(&server.url())).expect("connect");
        let l = RedisLimiter::with_options(
            conn,
            Quota::per(3, Duration::from_secs(3600)).unwrap(),
            alg,
            Options {
                prefix: format!("refused-{alg}:"),
                ..fail_closed()
            },
        )
        .unwrap();
        common::wrong_type(&server, l.redis_key("typed"));
        // good, typed, good, typed, …: the first two alone, eight batched.
        let calls: Vec<Option<Call<'_>>> = (0..10)
            .map(|i| {
                let key = if i % 2 == 0 { "good" } else { "typed" };
                Some(Box::pin(l.check(key, 1)) as Call<'_>)
            })
            .collect();
        let answers = rt.block_on(run_in_order(calls, &[]));
        let mut admitted = 0;
        for (i, a) in answers.into_iter().enumerate() {
            let d = a.unwrap().unwrap();
            if i % 2 == 0 {
                assert_eq!(d.source, DecisionSource::Backend, "{alg}, call {i}");
                admitted += usize::from(d.decision.allowed);
            } else {
                assert_eq!(d.source, DecisionSource::FailClosed, "{alg}, call {i}");
                assert!(!d.decision.allowed);
            }
        }
        // The good key's burst of 3, then refusals: its own decisions.
        assert_eq!(admitted, 3, "{alg}");
        let s = l.stats();
        // 2 alone, then one batch; the typed key failed once alone and once
        // (counted once) in the batch.
        assert_eq!(
            (s.round_trips, s.redis_errors, s.fail_closed, s.backend),
            (3, 2, 5, 5),
            "{alg}"
        );
    }
}

/// Concurrent checks for one key on Redis's clock: one call alone, the
/// rest in batches of at most `max_batch`; every request is answered by
/// Redis and exactly the burst is admitted.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn concurrent_requests_for_one_key_share_round_trips() {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).expect("connect");
    let quota = Quota::per(10, Duration::from_secs(3600)).unwrap();
    let l = RedisLimiter::with_options(
        conn,
        quota,
        Algorithm::Gcra,
        Options {
            max_batch: 16,
            ..options()
        },
    )
    .unwrap();
    let calls: Vec<Option<Call<'_>>> = (0..50)
        .map(|_| Some(Box::pin(l.check("hot", 1)) as Call<'_>))
        .collect();
    let answers = rt.block_on(run_in_order(calls, &[]));
    let allowed = answers
        .into_iter()
        .map(|a| a.unwrap().unwrap())
        .inspect(|d| assert_eq!(d.source, DecisionSource::Backend))
        .filter(|d| d.decision.allowed)
        .count();
    assert_eq!(allowed, 10);
    let s = l.stats();
    assert_eq!(s.backend, 50);
    // 2 alone, then 48 queued: batches of 16, 16, 16.
    assert_eq!(s.round_trips, 5);
    // Batching off: one round trip per request.
    let conn = rt.block_on(connect(&server.url())).expect("connect");
    let single = RedisLimiter::with_options(
        conn,
        quota,
        Algorithm::Gcra,
        Options {
            max_batch: 1,
            ..options()
        },
    )
    .unwrap();
    let calls: Vec<Option<Call<'_>>> = (0..20)
        .map(|_| Some(Box::pin(single.check("other", 1)) as Call<'_>))
        .collect();
    rt.block_on(run_in_order(calls, &[]));
    assert_eq!(single.stats().round_trips, 20);
}

/// A batch Redis refuses (the key holds another type: WRONGTYPE) is
/// answered by the failure policy for every one of its requests, and
/// counted per request.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn a_failed_batch_is_answered_by_the_policy_for_every_request() {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).expect("connect");
    let l = RedisLimiter::with_options(
        conn,
        Quota::per_second(100).unwrap(),
        Algorithm::Gcra,
        fail_closed(),
    )
    .unwrap();
    common::wrong_type(&server, l.redis_key("typed"));
    let calls: Vec<Option<Call<'_>>> = (0..10)
        .map(|_| Some(Box::pin(l.check("typed", 1)) as Call<'_>))
        .collect();
    for a in rt.block_on(run_in_order(calls, &[])) {
        let d = a.unwrap().unwrap();
        assert_eq!(d.source, DecisionSource::FailClosed);
        assert!(!d.decision.allowed);
    }
    let s = l.stats();
    // 2 alone, then a batch of 8.
    assert_eq!((s.round_trips, s.redis_errors, s.fail_closed), (3, 3, 10));
}

/// Both leaders are dropped while their calls are in flight, and a waiter
/// already in the next batch gives up too: the lead passes to the next live
/// waiter, and every remaining request is answered by Redis.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn cancelled_leaders_and_waiters_strand_nobody() {
    let server = common::RedisServer::start();
    let rt = rt();
    let conn = rt.block_on(connect(&server.url())).expect("connect");
    let l = RedisLimiter::with_options(
        conn,
        Quota::per(100, Duration::from_secs(3600)).unwrap(),
        Algorithm::Gcra,
        options(),
    )
    .unwrap();
    let calls: Vec<Option<Call<'_>>> = (0..12)
        .map(|_| Some(Box::pin(l.check("cancel", 1)) as Call<'_>))
        .collect();
    let answers = rt.block_on(run_in_order(calls, &[0, 1, 5]));
    for (i, a) in answers.into_iter().enumerate() {
        match i {
            0 | 1 | 5 => assert!(a.is_none()),
            _ => {
                let d = a.expect("answered").expect("decided");
                assert_eq!(d.source, DecisionSource::Backend, "request {i}");
                assert!(d.decision.allowed);
            }
        }
    }
    // The key is free again: a lone request goes at once.
    let d = rt.block_on(l.check("cancel", 1)).unwrap();
    assert_eq!(d.source, DecisionSource::Backend);
    // The cancelled leaders' calls may or may not have reached Redis; the
    // dropped waiter's request was never sent: 9 to 11 units spent before
    // this one.
    let remaining = d.decision.remaining;
    assert!((88..=90).contains(&remaining), "remaining {remaining}");
    assert!(l.stats().backend >= 10);
}

/// Drops the inner future after it has been polled `polls` times without
/// finishing: a caller giving up at some point of its request's life
/// (queued, handed the lead, mid-call).
struct GiveUpAfter<F> {
    inner: Option<Pin<Box<F>>>,
    polls: u32,
}

impl<F: Future> Future for GiveUpAfter<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(v) = inner.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        self.polls = self.polls.saturating_sub(1);
        if self.polls == 0 {
            self.inner = None;
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

/// 32 tasks on a multi-thread runtime hammer one key, each request given
/// up after a pseudo-random number of polls (so leaders and waiters are
/// cancelled at every stage). Nothing hangs, the answers that arrive come
/// from Redis, and afterwards the key's table entry is gone: three requests
/// sent together take three round trips again (two alone, one batched),
/// which they would not if a leader place had leaked.
#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn requests_given_up_at_any_point_leave_no_key_locked() {
    let server = common::RedisServer::start();
    let rt = common::multi_thread_runtime();
    let conn = rt.block_on(connect(&server.url())).expect("connect");
    let l = RedisLimiter::with_options(
        conn,
        Quota::per_second(1_000_000).unwrap(),
        Algorithm::Gcra,
        options(),
    )
    .unwrap();
    let (answered, given_up) = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for t in 0..32u64 {
            let l = l.clone();
            set.spawn(async move {
                let (mut answered, mut given_up) = (0u32, 0u32);
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..200 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let polls = (x % 4) as u32 + 1;
                    let call = GiveUpAfter {
                        inner: Some(Box::pin(l.check("chaos", 1))),
                        polls,
                    };
                    match call.await {
                        Some(d) => {
                            let d = d.expect("decided");
                            assert_eq!(d.source, DecisionSource::Backend);
                            answered += 1;
                        }
                        None => given_up += 1,
                    }
                }
                (answered, given_up)
            });
        }
        let (mut a, mut g) = (0, 0);
        // A watchdog, not a speed bound: a key left locked would make the
        // waiters wait forever.
        let all = async {
            while let Some(r) = set.join_next().await {
                let (x, y) = r.expect("no task panicked");
                a += x;
                g += y;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), all)
            .await
            .expect("requests hung: a key stayed locked");
        (a, g)
    });
    println!("{answered} answered, {given_up} given up");
    assert!(answered > 0 && given_up > 0, "{answered} / {given_up}");
    let before = l.stats().round_trips;
    let calls: Vec<Option<Call<'_>>> = (0..3)
        .map(|_| Some(Box::pin(l.check("chaos", 1)) as Call<'_>))
        .collect();
    let answers = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(60), run_in_order(calls, &[])).await
        })
        .expect("requests hung: a key stayed locked");
    for a in answers {
        assert_eq!(a.unwrap().unwrap().source, DecisionSource::Backend);
    }
    assert_eq!(l.stats().round_trips - before, 3);
}
