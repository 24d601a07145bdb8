use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use indexmap::map::raw_entry_v1::RawEntryApiV1;
use indexmap::IndexMap;
use ratewise::{Clock, Decision, MonotonicClock, Quota};

const HOT_KEYS: u64 = 10_000;

fn key_order(thread: u64) -> Vec<u64> {
    (0..HOT_KEYS)
        .map(|i| (i * 7_919 + thread * 104_729) % HOT_KEYS)
        .collect()
}

fn run_threads<F: Fn(&u64) -> bool + Sync>(threads: u64, iters: u64, check: &F) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let keys = key_order(t);
                let mut admitted = 0u64;
                for i in 0..iters {
                    let key = &keys[(i % HOT_KEYS) as usize];
                    admitted += u64::from(check(key));
                }
                black_box(admitted);
            });
        }
    });
    start.elapsed()
}

struct Slot {
    tat: AtomicU64,
    quota: Quota,
}

#[inline]
fn gcra(slot: &Slot, now: u64) -> Decision {
    let q = slot.quota;
    let mut tat = slot.tat.load(Ordering::Acquire);
    loop {
        let tau = q.window_nanos();
        let new_tat = tat.max(now).saturating_add(q.emission_nanos());
        let ahead = new_tat.saturating_sub(now);
        if ahead > tau {
            let a = tat.max(now) - now;
            return Decision {
                allowed: false,
                limit: q.burst(),
                remaining: q.units_in(tau.saturating_sub(a)),
                reset_after: Duration::from_nanos(a),
                retry_after: Some(Duration::from_nanos(ahead - tau)),
                delay: Duration::ZERO,
            };
        }
        match slot
            .tat
            .compare_exchange_weak(tat, new_tat, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                return Decision {
                    allowed: true,
                    limit: q.burst(),
                    remaining: q.units_in(tau.saturating_sub(ahead)),
                    reset_after: Duration::from_nanos(ahead),
                    retry_after: None,
                    delay: Duration::ZERO,
                }
            }
            Err(a) => tat = a,
        }
    }
}

fn bench(c: &mut Criterion) {
    let q = Quota::per_second(1000).unwrap();
    let clock = MonotonicClock::new();
    let pap: papaya::HashMap<u64, Slot, foldhash::fast::RandomState> = papaya::HashMap::builder()
        .hasher(foldhash::fast::RandomState::default())
        .build();
    let hs = foldhash::fast::RandomState::default();
    let shards: Vec<
        crossbeam_utils::CachePadded<
            parking_lot::RwLock<IndexMap<u64, Slot, foldhash::fast::RandomState>>,
        >,
    > = (0..8)
        .map(|_| {
            crossbeam_utils::CachePadded::new(parking_lot::RwLock::new(IndexMap::with_hasher(
                hs.clone(),
            )))
        })
        .collect();
    let theirs = governor::RateLimiter::dashmap(governor::Quota::per_second(
        NonZeroU32::new(1000).expect("non-zero"),
    ));
    let ours = ratewise::KeyedLimiter::<u64>::builder(q)
        .max_keys(100_000)
        .build();
    let ours_pre = ratewise::KeyedLimiter::<u64>::builder(q)
        .max_keys(100_000)
        .preallocate(true)
        .build();
    for k in 0..HOT_KEYS {
        pap.pin().insert(
            k,
            Slot {
                tat: AtomicU64::new(0),
                quota: q,
            },
        );
        use std::hash::BuildHasher;
        let h = hs.hash_one(k);
        shards[(h >> 40) as usize & 7].write().insert(
            k,
            Slot {
                tat: AtomicU64::new(0),
                quota: q,
            },
        );
        let _ = theirs.check_key(&k);
        let _ = ours.check(&k, 1);
        let _ = ours_pre.check(&k, 1);
    }
    for threads in [1u64, 2] {
        let mut g = c.benchmark_group(format!("proto/{threads}_threads"));
        g.throughput(Throughput::Elements(threads));
        g.bench_function("papaya", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| {
                    let now = clock.now().as_nanos();
                    let m = pap.pin();
                    match m.get(k) {
                        Some(s) => gcra(s, now).allowed,
                        None => false,
                    }
                })
            })
        });
        g.bench_function("rwlock", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| {
                    use std::hash::BuildHasher;
                    let now = clock.now().as_nanos();
                    let h = hs.hash_one(k);
                    let s = shards[(h >> 40) as usize & 7].read();
                    match s.raw_entry_v1().from_hash(h, |x| x == k) {
                        Some((_, s)) => gcra(s, now).allowed,
                        None => false,
                    }
                })
            })
        });
        g.bench_function("clock_only", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| clock.now().as_nanos() & 1 == *k & 1)
            })
        });
        g.bench_function("current_fold", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| {
                    ours.check(k, 1).map(|d| d.allowed).unwrap_or(false)
                })
            })
        });
        g.bench_function("new_pre", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| {
                    ours_pre.check(k, 1).map(|d| d.allowed).unwrap_or(false)
                })
            })
        });
        g.bench_function("new_at_fixed", |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &|k| {
                    ours.check_at(k, 1, ratewise::Timestamp::from_nanos(1_000_000_000))
                        .map(|d| d.allowed)
                        .unwrap_or(false)
                })
            })
        });
        g.bench_function("governor", |b| {
            b.iter_custom(|iters| run_threads(threads, iters, &|k| theirs.check_key(k).is_ok()))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
