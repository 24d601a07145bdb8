//! Property tests for the keyed limiter and the hierarchy, against models
//! that never forget a key and only ever see admitted requests.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use ratewise::hierarchy::Hierarchy;
use ratewise::keyed::{KeyedError, KeyedLimiter, NoClock};
use ratewise::{CheckError, Gcra, Quota, RateLimiter, Timestamp, TokenBucket};

fn ms(n: u64) -> Timestamp {
    Timestamp::from_nanos(n * 1_000_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Eviction never lets a key exceed its quota: every answer for a
    /// tracked key equals the answer of a model limiter that never forgets
    /// the key, however often the keyed limiter evicted and re-created it.
    #[test]
    fn eviction_is_invisible_to_tracked_keys(
        max_keys in 1usize..6,
        shards in 1usize..3,
        ops in proptest::collection::vec((0u64..8, 1u64..4, 0u64..250, any::<bool>()), 1..300),
    ) {
        let quota = Quota::per_second(10).unwrap().with_burst(3).unwrap();
        let keyed = KeyedLimiter::<u64>::builder(quota)
            .max_keys(max_keys)
            .shards(shards)
            .build();
        let mut model: HashMap<u64, Gcra<NoClock>> = HashMap::new();
        let mut now = 0;
        let mut answered = 0;
        for (key, n, dt, maintain) in ops {
            now += dt;
            if maintain {
                keyed.maintain(ms(now), 3);
            }
            let m = model.entry(key).or_insert_with(|| Gcra::with_clock(quota, NoClock));
            match keyed.check_at(&key, n, ms(now)) {
                Ok(d) => {
                    let md = m.check_at(n, ms(now)).unwrap();
                    prop_assert_eq!(d, md, "key {} at {} ms", key, now);
                    answered += 1;
                }
                Err(KeyedError::Full { retry_after, .. }) => {
                    // Refused before anything was recorded: the model is
                    // not told. The key's shard really is full (with one
                    // shard, that is the whole table).
                    if keyed.shard_count() == 1 {
                        prop_assert_eq!(keyed.len(), keyed.max_keys());
                    } else {
                        prop_assert!(keyed.len() >= keyed.max_keys() / keyed.shard_count());
                    }
                    prop_assert!(retry_after <= quota.window());
                }
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
            prop_assert!(keyed.len() <= keyed.max_keys());
        }
        prop_assert!(answered > 0);
    }

    /// Lenient eviction forgives at most its bound: the keyed limiter
    /// answers exactly as per-key models that forget a key only when the
    /// keyed limiter dropped it, and every dropped key was at most
    /// `max_debt` from full capacity at that moment (0 with strict
    /// eviction). Evictions of keys that still owed capacity are all
    /// counted as lenient.
    #[test]
    fn lenient_eviction_forgives_at_most_its_bound(
        max_keys in 1usize..6,
        max_debt_ms in prop_oneof![Just(0u64), Just(50), Just(150), Just(400)],
        ops in proptest::collection::vec((0u64..8, 1u64..4, 0u64..120, any::<bool>()), 1..300),
    ) {
        let quota = Quota::per_second(10).unwrap().with_burst(3).unwrap();
        let max_debt = Duration::from_millis(max_debt_ms);
        let keyed = KeyedLimiter::<u64>::builder(quota)
            .max_keys(max_keys)
            .shards(1)
            .lenient_eviction(max_debt)
            .build();
        let mut model: HashMap<u64, Gcra<NoClock>> = HashMap::new();
        let mut now = 0;
        let mut forgiven = 0u64;
        for (key, n, dt, maintain) in ops {
            now += dt;
            let t = ms(now);
            if maintain {
                keyed.maintain(t, 3);
            }
            match keyed.check_at(&key, n, t) {
                Ok(d) => {
                    let m = model.entry(key).or_insert_with(|| Gcra::with_clock(quota, NoClock));
                    let md = m.check_at(n, t).unwrap();
                    prop_assert_eq!(d, md, "key {} at {} ms", key, now);
                }
                Err(KeyedError::Full { .. }) => {
                    // Nobody within reach of the leniency: nothing dropped.
                    prop_assert_eq!(keyed.len(), keyed.max_keys());
                }
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
            // Keys the limiter dropped during this step: each owed at most
            // `max_debt`; their models forget them too.
            let dropped: Vec<u64> = model.keys().copied().filter(|k| !keyed.contains(k)).collect();
            for k in dropped {
                let debt = model[&k].peek_at(1, t).unwrap().reset_after;
                prop_assert!(debt <= max_debt, "key {} dropped owing {:?}", k, debt);
                if !debt.is_zero() {
                    forgiven += 1;
                }
                model.remove(&k);
            }
            prop_assert!(keyed.len() <= keyed.max_keys());
        }
        prop_assert_eq!(forgiven, keyed.lenient_evictions());
    }

    /// A hierarchy admits a request only if every level's model admits it,
    /// and denies only if some level's model denies it; denied requests are
    /// never shown to the models. Since every answer matches, no level was
    /// ever charged for a denied request (the models would then disagree
    /// later) and no level ever admitted beyond its quota.
    #[test]
    fn hierarchy_never_overadmits_and_never_charges_denials(
        ops in proptest::collection::vec((0u32..4, 0u8..3, 1u64..5, 0u64..120), 1..300),
    ) {
        let user_q = Quota::per_second(5).unwrap().with_burst(4).unwrap();
        let ep_q = Quota::per_second(8).unwrap().with_burst(6).unwrap();
        let global_q = Quota::per_second(12).unwrap().with_burst(8).unwrap();
        struct Req { user: u32, ep: u8 }
        let h = Hierarchy::<Req>::new()
            .keyed("user", KeyedLimiter::<u32>::builder(user_q).max_keys(64).build(), |r| &r.user)
            .keyed(
                "endpoint",
                KeyedLimiter::<u8>::builder(ep_q)
                    .limiter(|q| TokenBucket::with_clock(q, NoClock))
                    .max_keys(64)
                    .build(),
                |r| &r.ep,
            )
            .global("global", Gcra::with_clock(global_q, NoClock));
        let mut users: HashMap<u32, Gcra<NoClock>> = HashMap::new();
        let mut eps: HashMap<u8, TokenBucket<NoClock>> = HashMap::new();
        let global = Gcra::with_clock(global_q, NoClock);
        let mut now = 0;
        let (mut admitted, mut denied) = (0, 0);
        for (user, ep, n, dt) in ops {
            now += dt;
            let t = ms(now);
            let mu = users.entry(user).or_insert_with(|| Gcra::with_clock(user_q, NoClock));
            let me = eps.entry(ep).or_insert_with(|| TokenBucket::with_clock(ep_q, NoClock));
            let peeks = [mu.peek_at(n, t), me.peek_at(n, t), global.peek_at(n, t)];
            match h.check_at(&Req { user, ep }, n, t) {
                Ok(d) if d.allowed => {
                    admitted += 1;
                    prop_assert!(mu.check_at(n, t).unwrap().allowed, "user over-admitted");
                    prop_assert!(me.check_at(n, t).unwrap().allowed, "endpoint over-admitted");
                    prop_assert!(global.check_at(n, t).unwrap().allowed, "global over-admitted");
                }
                Ok(d) => {
                    denied += 1;
                    // Some level refuses; the reported one refuses with the
                    // largest retry-after of all refusing levels.
                    let waits: Vec<Option<Duration>> = peeks
                        .iter()
                        .map(|p| p.as_ref().ok().filter(|d| !d.allowed).and_then(|d| d.retry_after))
                        .collect();
                    let max = waits.iter().flatten().max().copied();
                    prop_assert!(max.is_some(), "denied though every level admits");
                    prop_assert_eq!(d.retry_after, max);
                    let lvl = d.refused_level.unwrap();
                    prop_assert_eq!(waits[lvl], max);
                }
                Err(e) => {
                    let exceeds = matches!(e.source, CheckError::ExceedsBurst { .. });
                    prop_assert!(exceeds, "unexpected error {}", e);
                    prop_assert!(peeks[e.index].is_err());
                }
            }
        }
        prop_assert_eq!(h.stats().allowed.sum(), admitted);
        prop_assert_eq!(h.stats().denied.sum(), denied);
    }
}

/// Admissions `(time, weight)` never exceed `burst + span / interval` in any
/// window of time: the guarantee of an exact limiter, which holds even when
/// threads present times out of order.
fn assert_window_bound(mut adm: Vec<(Timestamp, u64)>, q: Quota, what: &str) {
    adm.sort();
    for i in 0..adm.len() {
        let mut sum = 0;
        for j in i..adm.len() {
            sum += adm[j].1;
            let span = (adm[j].0 - adm[i].0).as_nanos() as u64;
            let bound = q.burst() + span / q.emission_nanos();
            assert!(
                sum <= bound,
                "{what}: {sum} units within {span} ns > {bound}"
            );
        }
    }
}

/// Many threads on one hierarchy with real contention and a moving time
/// (each thread with its own offset, so times also arrive out of order):
/// no level admits beyond its quota in any window, and once time has moved
/// on, every level is back at full capacity: nothing was left charged by a
/// rolled-back request.
#[test]
fn hierarchy_under_concurrency_stays_within_every_quota() {
    use std::sync::Mutex;
    struct Req {
        user: u32,
    }
    let user_q = Quota::per_second(50).unwrap().with_burst(20).unwrap();
    let global_q = Quota::per_second(200).unwrap().with_burst(60).unwrap();
    let h = Hierarchy::<Req>::new()
        .keyed(
            "user",
            KeyedLimiter::<u32>::builder(user_q).build(),
            |r: &Req| &r.user,
        )
        .global("global", Gcra::with_clock(global_q, NoClock));
    let log = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (h, log) = (&h, &log);
            s.spawn(move || {
                for i in 0..2000u64 {
                    let now = ms(i / 4 + u64::from(t));
                    let user = (i as u32 + t) % 6;
                    let n = i % 3 + 1;
                    if h.check_at(&Req { user }, n, now).unwrap().allowed {
                        log.lock().unwrap().push((user, n, now));
                    }
                }
            });
        }
    });
    let log = log.into_inner().unwrap();
    assert!(log.len() > 100, "{}", log.len());
    assert_window_bound(log.iter().map(|a| (a.2, a.1)).collect(), global_q, "global");
    for u in 0..6 {
        let adm = log
            .iter()
            .filter(|a| a.0 == u)
            .map(|a| (a.2, a.1))
            .collect();
        assert_window_bound(adm, user_q, "user");
    }
    let later = ms(100_000);
    for u in 0..6 {
        let d = h
            .peek_level_at(0, &Req { user: u }, 1, later)
            .unwrap()
            .unwrap();
        assert_eq!(d.remaining, 20);
    }
    let d = h
        .peek_level_at(1, &Req { user: 0 }, 1, later)
        .unwrap()
        .unwrap();
    assert_eq!(d.remaining, 60);
}
