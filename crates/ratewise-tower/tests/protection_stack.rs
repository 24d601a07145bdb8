//! The protection stack of reference 003 (Appendix C) against a dependency
//! that fails and hangs on command, on tokio's paused clock: rate limit →
//! circuit breaker → bulkhead (concurrency limit) → timeout. Each layer
//! refuses what it is there for, the breaker opens on timeouts but not on
//! the bulkhead's own refusals, refuses at once while open, probes after
//! its pause, and every layer reports its refusal ratio.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Request, Response, StatusCode};
use ratewise::breaker::BreakerConfig;
use ratewise::concurrency::Fixed;
use ratewise::{Quota, TokioClock};
use ratewise_tower::breaker::{CircuitBreakerLayer, Refused, State};
use ratewise_tower::concurrency::ConcurrencyLimitLayer;
use ratewise_tower::{KeySource, LocalRefusal, Policy, RateLimitLayer};
use tokio::time::Instant;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

const HEALTHY: u8 = 0;
const FAILING: u8 = 1;
const HANGING: u8 = 2;
const SLOW: u8 = 3;

/// A dependency that answers in 10 ms, fails with a 500, hangs, or takes
/// 2 s, as `mode` says.
fn dependency(
    mode: Arc<AtomicU8>,
) -> impl Service<Request<String>, Response = Response<String>, Error = BoxError, Future: Send> + Clone
{
    tower::service_fn(move |_req: Request<String>| {
        let mode = mode.load(Ordering::SeqCst);
        async move {
            let mut res = Response::new(String::new());
            match mode {
                HEALTHY => tokio::time::sleep(Duration::from_millis(10)).await,
                FAILING => *res.status_mut() = StatusCode::INTERNAL_SERVER_ERROR,
                HANGING => std::future::pending::<()>().await,
                _ => tokio::time::sleep(Duration::from_secs(2)).await,
            }
            Ok::<_, BoxError>(res)
        }
    })
}

fn request() -> Request<String> {
    Request::builder()
        .header("x-tenant", "ada")
        .body(String::new())
        .expect("a request")
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_stack_protects_against_a_failing_and_hanging_dependency() -> Result<(), BoxError> {
    let mode = Arc::new(AtomicU8::new(HEALTHY));
    let rate = RateLimitLayer::builder()
        .key(KeySource::header(HeaderName::from_static("x-tenant")))
        .policy(Policy::per_key(
            "tenant",
            Quota::per(20, Duration::from_secs(1))?,
        ))
        .refusal_alert(0.2)
        .clock(TokioClock::new())
        .build()?;
    let status = rate.handle();
    let breaker = CircuitBreakerLayer::new(
        BreakerConfig::default()
            .consecutive_failures(3)
            .open_for(Duration::from_secs(5)),
    )?
    .clock(TokioClock::new());
    let bulkhead = ConcurrencyLimitLayer::new(Fixed(2)).clock(TokioClock::new());
    let svc = ServiceBuilder::new()
        .layer(rate)
        .layer(breaker.clone())
        .layer(bulkhead.clone())
        .timeout(Duration::from_millis(500))
        .service(dependency(Arc::clone(&mode)));

    // Healthy: answers pass.
    for _ in 0..3 {
        assert_eq!(
            svc.clone().oneshot(request()).await?.status(),
            StatusCode::OK
        );
    }

    // Slow: the bulkhead holds two in flight and sheds the third with its
    // own 503, which the breaker does not count as the dependency failing.
    mode.store(SLOW, Ordering::SeqCst);
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(svc.clone().oneshot(request())))
        .collect();
    tokio::task::yield_now().await;
    let shed = svc.clone().oneshot(request()).await?;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(shed.extensions().get::<LocalRefusal>().is_some());
    // ...and the timeout cuts the slow calls at 500 ms: two failures.
    for h in held {
        let err = h.await?.unwrap_err();
        assert!(err.is::<tower::timeout::error::Elapsed>(), "{err}");
    }
    assert_eq!(breaker.state(), State::Closed, "two failures, three needed");

    // Hanging: the third timeout in a row opens the breaker...
    mode.store(HANGING, Ordering::SeqCst);
    let err = svc.clone().oneshot(request()).await.unwrap_err();
    assert!(err.is::<tower::timeout::error::Elapsed>(), "{err}");
    assert_eq!(breaker.state(), State::Open);
    // ...which then refuses at once, saying when it will probe.
    let t = Instant::now();
    let err = svc.clone().oneshot(request()).await.unwrap_err();
    assert_eq!(t.elapsed(), Duration::ZERO, "refused without waiting");
    let refused = err.downcast_ref::<Refused>().expect("the breaker refused");
    assert_eq!(refused.retry_in(), Duration::from_secs(5));
    assert!(err.to_string().contains("probe"), "{err}");

    // After the pause, a probe finds the dependency failing: open again.
    tokio::time::advance(Duration::from_secs(5)).await;
    mode.store(FAILING, Ordering::SeqCst);
    let probe = svc.clone().oneshot(request()).await?;
    assert_eq!(probe.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(breaker.state(), State::Open);

    // Healed: the next probe closes it and calls pass again.
    tokio::time::advance(Duration::from_secs(5)).await;
    mode.store(HEALTHY, Ordering::SeqCst);
    for _ in 0..3 {
        assert_eq!(
            svc.clone().oneshot(request()).await?.status(),
            StatusCode::OK
        );
    }
    assert_eq!(breaker.state(), State::Closed);

    // A burst over the tenant's quota: the rate limit answers 429 before
    // the breaker or the dependency sees it.
    let before = breaker.health();
    let mut limited = 0;
    for _ in 0..60 {
        if svc.clone().oneshot(request()).await?.status() == StatusCode::TOO_MANY_REQUESTS {
            limited += 1;
        }
    }
    assert!(limited > 0, "{:?}", status.status());
    let after = breaker.health();
    let burst = after.since(&before);
    assert_eq!(burst.admitted, 60 - limited);
    assert_eq!((burst.refused, burst.alert), (0, false), "{burst:?}");

    // Health: each layer's refusal ratio, flagged above its threshold.
    let b = breaker.health();
    assert_eq!(b.layer, "circuit_breaker");
    assert_eq!(b.refused, 1);
    assert!(!b.alert, "{b:?}");
    let c = bulkhead.health();
    assert_eq!((c.layer, c.refused), ("concurrency_limit", 1));
    let policy = &status.status().sets[0].policies[0];
    assert_eq!(policy.refused, limited);
    let ratio = limited as f64 / (policy.admitted + limited) as f64;
    assert!((policy.refusal_ratio - ratio).abs() < 1e-12);
    assert_eq!(policy.alert, ratio > 0.2, "{policy:?}");
    Ok(())
}
