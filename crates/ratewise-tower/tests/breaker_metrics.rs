//! The circuit breaker layer's metrics through the global recorder (the
//! only test in this binary): results by kind, refusals, openings and the
//! state gauge, labelled by the dependency's name.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::recorded;
use http::{Request, Response, StatusCode};
use metrics_util::debugging::DebugValue;
use ratewise::breaker::BreakerConfig;
use ratewise::ManualClock;
use ratewise_tower::breaker::{CircuitBreakerLayer, Refused};
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// The value of the breaker metric `name` (with `result = r` if given).
fn find<'a>(m: &'a [recorded::Sample], name: &str, result: Option<&str>) -> &'a DebugValue {
    let labels: Vec<(&str, &str)> = result.map(|r| ("result", r)).into_iter().collect();
    recorded::value(m, name, &labels).unwrap_or_else(|| panic!("no {name} {result:?} in {m:?}"))
}

fn gauge(v: f64) -> DebugValue {
    DebugValue::Gauge(v.into())
}

#[tokio::test(flavor = "current_thread")]
async fn results_refusals_openings_and_the_state_are_counted() {
    recorded::recorder();

    let clock = ManualClock::new();
    let failing = Arc::new(AtomicBool::new(true));
    let f = Arc::clone(&failing);
    let layer = CircuitBreakerLayer::new(
        BreakerConfig::default()
            .consecutive_failures(2)
            .open_for(Duration::from_secs(1))
            .probes(1),
    )
    .unwrap()
    .clock(clock.clone())
    .dependency("payments");
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service_fn(move |_req: Request<()>| {
            let fail = f.load(Ordering::SeqCst);
            async move {
                let mut res = Response::new(());
                if fail {
                    *res.status_mut() = StatusCode::BAD_GATEWAY;
                }
                Ok::<_, BoxError>(res)
            }
        });

    // Two failures open it; three calls are refused while open.
    for _ in 0..2 {
        let res = svc.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    }
    for _ in 0..3 {
        let err = svc.clone().oneshot(Request::new(())).await.unwrap_err();
        assert!(err.downcast_ref::<Refused>().is_some());
    }
    let m = recorded::of_dependency("payments");
    assert_eq!(
        find(&m, "ratewise_breaker_calls_total", Some("failure")),
        &DebugValue::Counter(2)
    );
    assert_eq!(
        find(&m, "ratewise_breaker_refused_total", None),
        &DebugValue::Counter(3)
    );
    assert_eq!(
        find(&m, "ratewise_breaker_opened_total", None),
        &DebugValue::Counter(1)
    );
    assert_eq!(find(&m, "ratewise_breaker_state", None), &gauge(2.0));

    // After the pause a probe succeeds: closed again.
    failing.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_secs(1));
    let res = svc.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // (A snapshot resets the counters it read.)
    let m = recorded::of_dependency("payments");
    assert_eq!(
        find(&m, "ratewise_breaker_calls_total", Some("success")),
        &DebugValue::Counter(1)
    );
    assert_eq!(
        find(&m, "ratewise_breaker_refused_total", None),
        &DebugValue::Counter(0)
    );
    assert_eq!(find(&m, "ratewise_breaker_state", None), &gauge(0.0));
}
