//! Many tasks calling one primitive at once lose no final value and no item.
#![cfg(feature = "tokio")]

use std::collections::HashMap;
use std::future::ready;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ratewise_debounce::{
    CoalesceConfig, Coalescer, DebounceConfig, Debouncer, FlushOutcome, StopMode, StopOutcome,
};
use tokio::time::{sleep_until, Instant};

const TASKS: u32 = 8;

/// A key and its batch of `(task, i)` items.
type KeyedBatch = (u32, Vec<(u32, u32)>);
const CALLS: u32 = 2_000;

/// A runtime on four worker threads: real threads, real contention.
fn threaded_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .expect("runtime")
}

/// Runs `call(task, i)` for every `i` below `CALLS` on each of `TASKS`
/// spawned tasks (yielding now and then), and waits for them all.
async fn on_every_task(call: impl Fn(u32, u32) + Clone + Send + 'static) {
    let handles: Vec<_> = (0..TASKS)
        .map(|task| {
            let call = call.clone();
            tokio::spawn(async move {
                for i in 0..CALLS {
                    call(task, i);
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("caller task");
    }
}

/// Real threads, real contention. The wait is an hour, so no timer fires
/// during the test and nothing sleeps: the flush delivers the value.
#[test]
fn concurrent_callers_lose_no_final_value() {
    threaded_runtime().block_on(async {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = Arc::clone(&got);
        let d = Debouncer::new(
            DebounceConfig::new(Duration::from_secs(3600)),
            move |v: (u32, u32)| {
                g.lock().unwrap_or_else(PoisonError::into_inner).push(v);
                ready(())
            },
        )
        .expect("inside a runtime");
        let caller = d.clone();
        on_every_task(move |task, i| caller.call((task, i)).expect("not stopped")).await;
        assert!(d.is_pending());
        assert_eq!(d.flush().await, FlushOutcome::Delivered);
        let got = got.lock().unwrap_or_else(PoisonError::into_inner).clone();
        // Exactly one delivery, and it is the last call of some task (the
        // last call overall is some task's last call).
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, CALLS - 1, "delivered {:?}", got[0]);
        assert_eq!(
            d.stop(StopMode::Drain, Duration::from_secs(1)).await,
            Ok(StopOutcome::Completed)
        );
    });
}

/// Interleaved tasks on the paused clock: task `k` calls at `k + 10 i` ms,
/// so the last call overall is task 7's last, at 497 ms, and the burst ends
/// at 597 ms.
#[tokio::test(start_paused = true)]
async fn interleaved_tasks_deliver_the_last_value_at_the_exact_time() {
    let start = Instant::now();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    let d = Debouncer::new(
        DebounceConfig::new(Duration::from_millis(100)),
        move |v: (u64, u64)| {
            g.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((v, start.elapsed().as_millis()));
            ready(())
        },
    )
    .expect("inside a runtime");
    let handles: Vec<_> = (0..8u64)
        .map(|k| {
            let d = d.clone();
            tokio::spawn(async move {
                for i in 0..50u64 {
                    sleep_until(start + Duration::from_millis(k + 10 * i)).await;
                    d.call((k, i)).expect("not stopped");
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("caller task");
    }
    sleep_until(start + Duration::from_secs(2)).await;
    let got = got.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(got, vec![((7, 49), 597)]);
}

/// Every item pushed by many threads is delivered exactly once, and each
/// task's items stay in order within their key.
#[test]
fn concurrent_pushes_lose_no_item() {
    threaded_runtime().block_on(async {
        let got: Arc<Mutex<Vec<KeyedBatch>>> = Arc::new(Mutex::new(Vec::new()));
        let g = Arc::clone(&got);
        let c = Coalescer::new(
            CoalesceConfig::new(Duration::from_secs(3600), 37).expect("valid"),
            move |k: u32, items: Vec<(u32, u32)>| {
                g.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((k, items));
                ready(())
            },
        )
        .expect("inside a runtime");
        let pusher = c.clone();
        on_every_task(move |task, i| pusher.push(i % 5, (task, i)).expect("not stopped")).await;
        assert_eq!(
            c.stop(StopMode::Drain, Duration::from_secs(10)).await,
            Ok(StopOutcome::Completed)
        );
        let got = got.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut total = 0;
        let mut last_seen: HashMap<(u32, u32), u32> = HashMap::new();
        for (k, items) in &got {
            assert!((1..=37).contains(&items.len()));
            for &(task, i) in items {
                assert_eq!(i % 5, *k);
                if let Some(prev) = last_seen.insert((*k, task), i) {
                    assert!(prev < i, "out of order within a key");
                }
                total += 1;
            }
        }
        assert_eq!(total, TASKS * CALLS);
    });
}
