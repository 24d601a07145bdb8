//! The client-side concurrency layer around a real HTTP client (hyper-util)
//! calling a real axum server on 127.0.0.1: calls above the limit fail
//! locally without reaching the server; 5xx, 429 and connection errors
//! shrink the limit; successes report their latency on tokio's paused
//! clock. No sleeps: the server's handler waits on a semaphore the test
//! opens, and the test waits for the server to report each arrival.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::recorded;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use metrics_util::debugging::DebugValue;
use ratewise::concurrency::{Aimd, Fixed, LimitAlgorithm, Sample};
use ratewise::TokioClock;
use ratewise_tower::client_concurrency::ClientError;
use ratewise_tower::ClientConcurrencyLayer;
use std::sync::Mutex;
use tokio::sync::{mpsc, Semaphore};
use tower::{Service, ServiceBuilder, ServiceExt};

type Body = Full<Bytes>;

/// A limit of 2 that keeps every sample it is shown.
struct Recording(Arc<Mutex<Vec<Sample>>>);

impl LimitAlgorithm for Recording {
    fn limit(&self) -> usize {
        2
    }
    fn on_sample(&mut self, sample: Sample) {
        self.0.lock().unwrap().push(sample);
    }
}

/// A server whose `/slow` handler reports its arrival and then waits for a
/// permit of `gate`; `/status/{code}` answers with that status.
async fn server(
    gate: Arc<Semaphore>,
    arrived: mpsc::UnboundedSender<()>,
    hits: Arc<AtomicUsize>,
) -> std::net::SocketAddr {
    let slow_hits = Arc::clone(&hits);
    let app = Router::new()
        .route(
            "/slow",
            get(move || {
                let (gate, arrived, hits) =
                    (Arc::clone(&gate), arrived.clone(), Arc::clone(&slow_hits));
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    arrived.send(()).unwrap();
                    gate.acquire().await.unwrap().forget();
                    "done"
                }
            }),
        )
        .route(
            "/status/{code}",
            get(move |Path(code): Path<u16>| {
                let hits = Arc::clone(&hits);
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    StatusCode::from_u16(code).unwrap()
                }
            }),
        );
    common::serve(app).await
}

fn get_req(addr: std::net::SocketAddr, path: &str) -> Request<Body> {
    Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn calls_above_the_limit_fail_locally_and_never_reach_the_server() {
    recorded::recorder();
    let gate = Arc::new(Semaphore::new(0));
    let (tx, mut arrived) = mpsc::unbounded_channel();
    let hits = Arc::new(AtomicUsize::new(0));
    let addr = server(Arc::clone(&gate), tx, Arc::clone(&hits)).await;

    let samples = Arc::new(Mutex::new(Vec::new()));
    let layer = ClientConcurrencyLayer::with_algorithm("slow-dep", Recording(samples.clone()))
        .clock(TokioClock::new());
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Body>());

    // Two calls in flight, held by the server.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let mut c = client.clone();
            let req = get_req(addr, "/slow");
            tokio::spawn(async move { c.ready().await.unwrap().call(req).await })
        })
        .collect();
    arrived.recv().await.unwrap();
    arrived.recv().await.unwrap();
    assert_eq!(layer.inflight(), 2);

    // The third is refused at once, with its evidence, and sent nowhere.
    let third = client.clone().oneshot(get_req(addr, "/slow")).await;
    match third {
        Err(ClientError::Refused(r)) => {
            assert_eq!((&*r.dependency, r.limit, r.inflight), ("slow-dep", 2, 2));
            assert!(r.to_string().contains("concurrency limit of 2"), "{r}");
        }
        other => panic!("expected a local refusal, got {other:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // The server answers after 30 ms of (paused) time: both succeed and
    // their slots come back.
    tokio::time::advance(Duration::from_millis(30)).await;
    gate.add_permits(2);
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    assert_eq!(layer.inflight(), 0);
    // Each success reported its latency (at least the 30 ms it was held).
    {
        let samples = samples.lock().unwrap();
        assert_eq!(samples.len(), 2);
        for s in samples.iter() {
            assert!(!s.dropped && s.rtt >= Duration::from_millis(30), "{s:?}");
        }
    }
    assert!(client
        .clone()
        .oneshot(get_req(addr, "/status/200"))
        .await
        .is_ok());
    let m = recorded::of_dependency("slow-dep");
    assert_eq!(
        recorded::value(&m, "ratewise_client_refused_total", &[]),
        Some(&DebugValue::Counter(1))
    );
    assert_eq!(
        recorded::value(&m, "ratewise_client_admitted_total", &[]),
        Some(&DebugValue::Counter(3))
    );
    assert_eq!(
        recorded::value(&m, "ratewise_client_limit", &[]),
        Some(&DebugValue::Gauge(2.0.into()))
    );
}

#[tokio::test(start_paused = true)]
async fn overload_answers_and_errors_shrink_the_limit_client_errors_do_not() {
    recorded::recorder();
    let gate = Arc::new(Semaphore::new(0));
    let (tx, _arrived) = mpsc::unbounded_channel();
    let addr = server(gate, tx, Arc::new(AtomicUsize::new(0))).await;
    // AIMD from 10 (floor 1): ×0.9 on each drop, +1 on a success that
    // found the limit at least half used.
    let layer = ClientConcurrencyLayer::with_algorithm("flaky-dep", Aimd::new(10, 1, 100))
        .clock(TokioClock::new());
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Body>());
    let call = |path: &str| client.clone().oneshot(get_req(addr, path));

    assert_eq!(
        call("/status/503").await.unwrap().status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(layer.limit(), 9);
    assert_eq!(
        call("/status/429").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(layer.limit(), 8);
    // A 404 is the caller's mistake: no signal.
    assert_eq!(
        call("/status/404").await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(layer.limit(), 8);

    // A connection error (nothing listens on the port any more) is a drop
    // too, and surfaces as the inner error.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let err = client
        .clone()
        .oneshot(get_req(closed, "/"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Inner(_)), "{err:?}");
    assert_eq!(layer.limit(), 7);
    assert_eq!(layer.inflight(), 0);
    let m = recorded::of_dependency("flaky-dep");
    assert_eq!(
        recorded::value(&m, "ratewise_client_dropped_total", &[]),
        Some(&DebugValue::Counter(3))
    );
    assert_eq!(
        recorded::value(&m, "ratewise_client_limit", &[]),
        Some(&DebugValue::Gauge(7.0.into()))
    );
}

#[tokio::test(start_paused = true)]
async fn a_success_slower_than_the_timeout_is_a_drop() {
    let gate = Arc::new(Semaphore::new(0));
    let (tx, mut arrived) = mpsc::unbounded_channel();
    let addr = server(Arc::clone(&gate), tx, Arc::new(AtomicUsize::new(0))).await;
    let layer = ClientConcurrencyLayer::with_algorithm("late-dep", Aimd::new(10, 1, 100))
        .clock(TokioClock::new())
        .timeout(Duration::from_millis(100));
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Body>());
    let call = tokio::spawn(client.clone().oneshot(get_req(addr, "/slow")));
    arrived.recv().await.unwrap();
    tokio::time::advance(Duration::from_millis(150)).await;
    gate.add_permits(1);
    assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(layer.limit(), 9);
}

#[tokio::test(start_paused = true)]
async fn knee_is_the_default_controller() {
    let layer = ClientConcurrencyLayer::new("default-dep");
    assert_eq!(layer.limit(), 20);
    assert!(layer.limiter().with_algorithm(|k| k.baseline()).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_at_once_get_exactly_the_limit() {
    // 32 tasks on 4 threads call at once through one layer with a limit of
    // 4; the server holds every call it gets until the test opens the gate.
    let gate = Arc::new(Semaphore::new(0));
    let (tx, mut arrived) = mpsc::unbounded_channel();
    let hits = Arc::new(AtomicUsize::new(0));
    let addr = server(Arc::clone(&gate), tx, Arc::clone(&hits)).await;
    let layer = ClientConcurrencyLayer::with_algorithm("busy-dep", Fixed(4));
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Body>());
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    for _ in 0..32 {
        let (client, done_tx, barrier) = (client.clone(), done_tx.clone(), Arc::clone(&barrier));
        tokio::spawn(async move {
            barrier.wait().await;
            let out = client.oneshot(get_req(addr, "/slow")).await;
            done_tx.send(out.map(|r| r.status())).unwrap();
        });
    }
    // Exactly 4 reach the server; the other 28 are refused locally.
    for _ in 0..4 {
        arrived.recv().await.unwrap();
    }
    let mut refused = 0;
    while refused < 28 {
        match done.recv().await.unwrap() {
            Err(ClientError::Refused(r)) => {
                assert_eq!(r.limit, 4);
                refused += 1;
            }
            other => panic!("only refusals can finish before the gate opens: {other:?}"),
        }
    }
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    assert_eq!(layer.inflight(), 4);
    gate.add_permits(4);
    for _ in 0..4 {
        assert_eq!(done.recv().await.unwrap().unwrap(), StatusCode::OK);
    }
    assert_eq!(layer.inflight(), 0);
}
