//! governor's behavioural tests (`governor/tests/direct.rs` and
//! `keyed_hashmap.rs`), ported onto `Gcra` and `KeyedLimiter`. Each test
//! names the governor test it comes from. governor's `check` is
//! `check_at(1, now).allowed`; its `check_only`/`peek` is `peek_at`; its
//! `check_n` is a weighted check; its `consume` (borrowing from the future) is
//! a reservation with no wait limit; its `InsufficientCapacity` is
//! `CheckError::ExceedsBurst` (invariant 7).
//!
//! Where ratewise differs on purpose, the test asserts ratewise's documented
//! behaviour and says where it is documented.

use std::time::Duration;

use ratewise::keyed::KeyedLimiter;
use ratewise::{CheckError, Clock, Gcra, ManualClock, Quota, RateLimiter};

const MS: Duration = Duration::from_millis(1);

fn gcra(per_second: u64) -> (Gcra<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (
        Gcra::with_clock(Quota::per_second(per_second).unwrap(), clock.clone()),
        clock,
    )
}

fn keyed(
    per_second: u64,
) -> (
    KeyedLimiter<u32, ratewise::keyed::GcraState, ManualClock>,
    ManualClock,
) {
    let clock = ManualClock::new();
    let k = KeyedLimiter::<u32>::builder(Quota::per_second(per_second).unwrap())
        .clock(clock.clone())
        .build();
    (k, clock)
}

fn ok<L: RateLimiter>(l: &L) -> bool {
    l.check(1).unwrap().allowed
}

fn ok_n<L: RateLimiter>(l: &L, n: u64) -> bool {
    l.check(n).unwrap().allowed
}

fn peek_ok<L: RateLimiter>(l: &L, n: u64) -> bool {
    l.peek(n).unwrap().allowed
}

#[test]
fn accepts_first_cell() {
    let (l, _) = gcra(5);
    assert!(ok(&l));
}

#[test]
fn accepts_first_cell_check_only() {
    let (l, _) = gcra(1);
    assert!(peek_ok(&l, 1));
    assert!(peek_ok(&l, 1), "a peek consumes nothing");
}

#[test]
fn accepts_cells_check_n_only() {
    let (l, _) = gcra(3);
    assert!(peek_ok(&l, 3));
    assert!(peek_ok(&l, 3), "a peek consumes nothing");
}

/// governor's `rejects_too_many`, `all_1_identical_to_1` and their
/// `_check_only` variants: 2 per second, checked 1 ms apart.
#[test]
fn rejects_too_many() {
    for peek_when_denied in [false, true] {
        for weighted in [false, true] {
            let (l, clock) = gcra(2);
            let check = |l: &Gcra<ManualClock>| if weighted { ok_n(l, 1) } else { ok(l) };
            let denied = |l: &Gcra<ManualClock>| {
                if peek_when_denied {
                    !peek_ok(l, 1)
                } else {
                    !check(l)
                }
            };
            assert!(check(&l));
            clock.advance(MS);
            assert!(check(&l));
            clock.advance(MS);
            assert!(denied(&l));
            // ok again in 1 s
            clock.advance(MS * 1000);
            assert!(check(&l));
            clock.advance(MS);
            assert!(check(&l));
            clock.advance(MS);
            assert!(denied(&l), "{l:?}");
        }
    }
}

/// governor issues #107 and #249.
#[test]
fn does_not_allow_one_extra_cell_after_longer_interval() {
    let (l, clock) = gcra(5);
    for _ in 1..=5 {
        assert!(ok(&l));
    }
    assert!(!ok(&l));
    clock.advance(Duration::from_secs(2));
    for _ in 1..=5 {
        assert!(ok(&l));
    }
    assert!(!ok(&l), "{l:?}");
}

/// governor's `rejects_too_many_with_consume_and_check_only` and
/// `all_1_identical_to_1_consume_and_check_only`: look, then take.
#[test]
fn rejects_too_many_with_consume_and_check_only() {
    let (l, clock) = gcra(2);
    let take = |l: &Gcra<ManualClock>| {
        let r = l
            .reserve_within_at(1, l.clock().now(), Duration::MAX)
            .unwrap();
        assert_eq!(r.act_at(), l.clock().now(), "taken at once");
    };
    assert!(peek_ok(&l, 1));
    take(&l);
    clock.advance(MS);
    assert!(peek_ok(&l, 1));
    take(&l);
    clock.advance(MS);
    assert!(!peek_ok(&l, 1));
    clock.advance(MS * 1000);
    assert!(peek_ok(&l, 1));
    take(&l);
    clock.advance(MS);
    assert!(peek_ok(&l, 1));
    take(&l);
    clock.advance(MS);
    assert!(!peek_ok(&l, 1));
}

/// governor's `consume_n_borrow_from_future` and `consume_borrow_from_future`.
#[test]
fn consume_borrows_from_the_future() {
    for (rate, n) in [(2, 2), (1, 1)] {
        let (l, clock) = gcra(rate);
        assert!(peek_ok(&l, n));
        let _now = l
            .reserve_within_at(n, l.clock().now(), Duration::MAX)
            .unwrap();
        assert!(!peek_ok(&l, n), "consumed all cells");
        // Borrow from the future.
        let _later = l
            .reserve_within_at(n, l.clock().now(), Duration::MAX)
            .unwrap();
        assert!(!peek_ok(&l, n));
        clock.advance(MS * 1000);
        assert!(!peek_ok(&l, n), "borrowed cells not paid off");
        clock.advance(MS * 1000);
        assert!(peek_ok(&l, n), "paid off");
    }
}

/// governor's `never_allows_more_than_capacity_all` (and `_check_only`).
#[test]
fn never_allows_more_than_capacity_all() {
    let (l, clock) = gcra(4);
    assert!(ok_n(&l, 2));
    assert!(ok_n(&l, 2));
    clock.advance(MS);
    assert!(!ok_n(&l, 2));
    assert!(!peek_ok(&l, 2));
    clock.advance(MS * 1000);
    assert!(ok_n(&l, 2));
    clock.advance(MS);
    assert!(ok_n(&l, 2));
    clock.advance(MS);
    assert!(!ok_n(&l, 2), "{l:?}");
}

/// governor's `rejects_too_many_all`, `all_capacity_check_rejects_excess` and
/// their `_check_n_only` variants: more than the burst can never pass.
#[test]
fn all_capacity_check_rejects_excess() {
    let (l, clock) = gcra(5);
    for n in [15, 7, 6] {
        let e = Err(CheckError::ExceedsBurst {
            requested: n,
            burst: 5,
        });
        assert_eq!(l.check(n), e);
        assert_eq!(l.peek(n), e);
    }
    clock.advance(MS * 3000);
    assert!(l.check(15).is_err(), "not after 3 s either");
    assert!(ok_n(&l, 5));
}

/// governor's `correct_wait_time`: waiting what a denial says always works.
#[test]
fn correct_wait_time() {
    let (l, clock) = gcra(5);
    let mut conforming = 0;
    for _ in 0..20 {
        clock.advance(MS);
        let d = l.check(1).unwrap();
        if !d.allowed {
            clock.advance(d.retry_after.unwrap());
            assert!(ok(&l));
        }
        conforming += 1;
    }
    assert_eq!(conforming, 20);
}

/// governor's `actual_threadsafety`: 20 threads, 20 per second, frozen clock.
#[test]
fn actual_threadsafety() {
    let (l, clock) = gcra(20);
    let admitted = std::thread::scope(|s| {
        let hs: Vec<_> = (0..20).map(|_| s.spawn(|| ok(&l))).collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&a| a)
            .count()
    });
    assert_eq!(admitted, 20);
    clock.advance(MS * 2);
    assert!(!ok(&l));
    clock.advance(MS * 998);
    assert!(ok(&l));
}

// ---- keyed_hashmap.rs ----

const KEYS: [u32; 2] = [1, 2];

#[test]
fn keyed_accepts_first_cell() {
    let (k, _) = keyed(5);
    for key in KEYS {
        assert!(k.check(&key, 1).unwrap().allowed, "key {key}");
    }
}

#[test]
fn keyed_rejects_too_many() {
    let (k, clock) = keyed(2);
    for key in KEYS {
        let ok = || k.check(&key, 1).unwrap().allowed;
        assert!(ok());
        clock.advance(MS);
        assert!(ok());
        clock.advance(MS);
        assert!(!ok());
        clock.advance(MS * 1000);
        assert!(ok());
        clock.advance(MS);
        assert!(ok());
        clock.advance(MS);
        assert!(!ok());
    }
}

#[test]
fn keyed_peek_does_not_change_the_decision() {
    let (k, clock) = keyed(2);
    for key in KEYS {
        let ok = || k.check(&key, 1).unwrap().allowed;
        let peek = || k.peek(&key, 1).unwrap().allowed;
        let peeks = |expect: bool| {
            for _ in 0..10 {
                clock.advance(MS);
                assert_eq!(peek(), expect);
            }
        };
        peeks(true); // no key is always a positive outcome
        assert!(ok());
        peeks(true);
        clock.advance(MS);
        assert!(ok());
        peeks(false);
        clock.advance(MS);
        assert!(!ok());
        peeks(false);
        clock.advance(MS * 1000);
        assert!(ok());
        clock.advance(MS);
        peeks(true);
        assert!(ok());
        clock.advance(MS);
        assert!(!ok());
        peeks(false);
    }
}

#[test]
fn keyed_reset_does_work() {
    let (k, clock) = keyed(2);
    for key in KEYS {
        let ok = || k.check(&key, 1).unwrap().allowed;
        let peeks = |expect: bool| {
            for _ in 0..10 {
                clock.advance(MS);
                assert_eq!(k.peek(&key, 1).unwrap().allowed, expect);
            }
        };
        assert!(ok());
        clock.advance(MS);
        assert!(ok());
        peeks(false);
        clock.advance(MS);
        assert!(!ok());
        assert!(k.reset(&key));
        peeks(true);
        assert!(ok());
        clock.advance(MS);
        assert!(k.reset(&key));
        assert!(ok());
        clock.advance(MS);
        assert!(ok());
        peeks(false);
        clock.advance(MS);
        assert!(!ok());
    }
}

/// governor's `expiration`. governor's `retain_recent` keeps a key until a
/// criterion of its own; ratewise drops a key exactly when it is back at
/// full capacity, so that a re-created key gets what a kept one would have
/// (ARCHITECTURE.md invariant 13). Keys checked at 0, 200 and 800 ms on a
/// 1/s quota are full again at 1000, 1200 and 1800 ms.
#[test]
fn keyed_expiration() {
    let make = || {
        let clock = ManualClock::new();
        let k = KeyedLimiter::<&str>::builder(Quota::per_second(1).unwrap())
            .clock(clock.clone())
            .build();
        k.check(&"foo", 1).unwrap();
        clock.advance(MS * 200);
        k.check(&"bar", 1).unwrap();
        clock.advance(MS * 600);
        k.check(&"baz", 1).unwrap();
        (k, clock)
    };
    let retained = |at_ms: u32| {
        let (k, clock) = make();
        clock.advance(MS * (at_ms - 800));
        k.maintain(clock.now(), usize::MAX);
        let mut keys: Vec<&str> = ["bar", "baz", "foo"]
            .into_iter()
            .filter(|key| k.contains(key))
            .collect();
        keys.sort_unstable();
        keys
    };
    assert_eq!(retained(800), ["bar", "baz", "foo"]);
    assert_eq!(retained(999), ["bar", "baz", "foo"]);
    assert_eq!(retained(1000), ["bar", "baz"]);
    assert_eq!(retained(1200), ["baz"]);
    assert_eq!(retained(1800), Vec::<&str>::new());
}

#[test]
fn keyed_actual_threadsafety() {
    let (k, clock) = keyed(20);
    for key in KEYS {
        let admitted = std::thread::scope(|s| {
            let hs: Vec<_> = (0..20)
                .map(|_| s.spawn(|| k.check(&key, 1).unwrap().allowed))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&a| a)
                .count()
        });
        assert_eq!(admitted, 20);
        clock.advance(MS * 2);
        assert!(!k.check(&key, 1).unwrap().allowed);
        clock.advance(MS * 998);
        assert!(k.check(&key, 1).unwrap().allowed);
    }
}

#[test]
fn keyed_hashmap_length() {
    let k = KeyedLimiter::<&str>::builder(Quota::per_second(1).unwrap()).build();
    assert_eq!(k.len(), 0);
    assert!(k.is_empty());
    for (i, key) in ["foo", "bar", "baz"].into_iter().enumerate() {
        k.check(&key, 1).unwrap();
        assert_eq!(k.len(), i + 1);
        assert!(!k.is_empty());
    }
}

#[test]
fn keyed_hashmap_shrink_to_fit() {
    let clock = ManualClock::new();
    let k = KeyedLimiter::<String>::builder(Quota::per_second(20).unwrap())
        .clock(clock.clone())
        .build();
    assert!(k.check(&"long-lived".to_string(), 10).unwrap().allowed);
    assert!(k.check(&"short-lived".to_string(), 1).unwrap().allowed);
    // Far enough that the short-lived key is full again, not the other.
    clock.advance(MS * 300);
    k.maintain(clock.now(), usize::MAX);
    assert_eq!(k.len(), 1);
    assert!(k.contains(&"long-lived".to_string()));
}
