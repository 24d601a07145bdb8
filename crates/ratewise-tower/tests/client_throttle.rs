//! The client `ThrottleLayer` against real servers on 127.0.0.1:
//!
//! - an axum service limited by ratewise's own middleware (50/s, burst 5),
//!   called by 8 tasks through one hyper-util client wrapped in the layer:
//!   every call succeeds, the server never sees more than its rate, each 429
//!   is retried after its `Retry-After`, and the `ratewise_client_*` metrics
//!   say exactly what the server saw;
//! - a body the layer cannot replay is sent once and the refusal says so;
//! - a tonic client whose server answers `RESOURCE_EXHAUSTED` with
//!   `grpc-retry-pushback-ms`: the layer waits the pushback, then succeeds.
//!
//! Metrics go to a `DebuggingRecorder` installed for the test's thread
//! (`current_thread` runtimes, so every task records there).

mod common;

use std::future::{ready, Ready};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use common::grpc::Raw;
use http::uri::PathAndQuery;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use ratewise::Quota;
use ratewise_client::exchange::names;
use ratewise_client::{AsyncThrottle, ThrottleConfig};
use ratewise_tower::client_throttle::{authority_key, NoReplay, RefusalReason};
use ratewise_tower::{KeySource, Policy, RateLimitLayer, ThrottleLayer};
use tonic::Status;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// Every metric recorded so far (taking a snapshot resets the counters,
/// so each test takes one).
type Metrics = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

fn snapshot(snap: &Snapshotter) -> Metrics {
    snap.snapshot().into_vec()
}

/// A metric's value, by name and partition label.
fn metric<'m>(m: &'m Metrics, name: &str, partition: &str) -> Option<&'m DebugValue> {
    m.iter()
        .find(|(ck, _, _, _)| {
            let key = ck.key();
            key.name() == name
                && key
                    .labels()
                    .any(|l| l.key() == names::PARTITION && l.value() == partition)
        })
        .map(|(_, _, _, v)| v)
}

/// A counter's value; a counter never incremented is not registered, and
/// reads 0.
fn counter(snap: &Metrics, name: &str, partition: &str) -> u64 {
    match metric(snap, name, partition) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        other => panic!("{name}: {other:?}"),
    }
}

/// Counts the client loop's `tracing` events by level (for the test's
/// thread, `current_thread` runtimes).
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<tracing::Level>>>);

impl Events {
    fn count(&self, level: tracing::Level) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|l| **l == level)
            .count()
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        // Only the shared client loop's events (h2 and tonic have their own).
        if event.metadata().target() == "ratewise_client::exchange" {
            self.0.lock().unwrap().push(*event.metadata().level());
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

const RATE: u64 = 100;
const BURST: u64 = 10;
const TASKS: usize = 4;
const PER_TASK: usize = 8;

#[tokio::test]
async fn every_call_succeeds_at_the_servers_rate_and_429s_are_honoured() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let events = Events::default();
    let _events = tracing::subscriber::set_default(events.clone());

    let limits = RateLimitLayer::builder()
        .key(KeySource::Global)
        .policy(Policy::per_key(
            "api",
            Quota::per_second(RATE).unwrap().with_burst(BURST).unwrap(),
        ))
        .build()
        .unwrap();
    // Each request that reaches the handler: admitted by the limiter.
    let arrivals = Arc::new(AtomicU64::new(0));
    let a = Arc::clone(&arrivals);
    // Each 429 the limiter sent.
    let limited = Arc::new(AtomicU64::new(0));
    let l = Arc::clone(&limited);
    let app = Router::new()
        .route(
            "/item",
            get(move || {
                a.fetch_add(1, Ordering::SeqCst);
                async { "ok" }
            }),
        )
        .layer(limits)
        .layer(axum::middleware::map_response(
            move |r: axum::response::Response| {
                if r.status() == StatusCode::TOO_MANY_REQUESTS {
                    l.fetch_add(1, Ordering::SeqCst);
                }
                async { r }
            },
        ));
    let addr = common::serve(app).await;

    let throttle = AsyncThrottle::new(ThrottleConfig::default()).unwrap();
    let client = ServiceBuilder::new()
        .layer(ThrottleLayer::per_authority(throttle.clone()))
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let started = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..PER_TASK {
                    let req = Request::get(format!("http://{addr}/item"))
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    let resp = client.clone().oneshot(req).await.unwrap();
                    statuses.push(resp.status());
                }
                statuses
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += t
            .await
            .unwrap()
            .iter()
            .filter(|s| **s == StatusCode::OK)
            .count();
    }
    let elapsed = started.elapsed();
    let calls = (TASKS * PER_TASK) as u64;
    assert_eq!(ok as u64, calls, "every call succeeded");
    assert_eq!(arrivals.load(Ordering::SeqCst), calls);
    // Observed rate ≤ the limit: the server admits the burst at once, then
    // one request per 1/RATE s.
    let floor = Duration::from_secs_f64((calls - BURST) as f64 / RATE as f64);
    assert!(elapsed >= floor, "{calls} calls in {elapsed:?} < {floor:?}");

    let partition = format!("127.0.0.1:{}", addr.port());
    let snap = snapshot(&snap);
    let attempts = counter(&snap, names::ATTEMPTS, &partition);
    let throttled = counter(&snap, names::THROTTLED, &partition);
    let retries = counter(&snap, names::RETRIES, &partition);
    println!(
        "{calls} calls in {elapsed:?} ({:.2}x the {floor:?} the server allows): {attempts} attempts, {throttled} throttled ({:.1} %), final rate {:?}/s",
        elapsed.as_secs_f64() / floor.as_secs_f64(),
        100.0 * throttled as f64 / attempts as f64,
        throttle.rate_of(&partition),
    );
    // Every 429 was retried, and only 429s were: the attempts are the calls
    // plus one per 429, and the throttle counts the same.
    assert_eq!(retries, throttled);
    // One `debug` event per retry, no refusal.
    assert_eq!(events.count(tracing::Level::DEBUG) as u64, retries);
    assert_eq!(events.count(tracing::Level::WARN), 0);
    assert_eq!(attempts, calls + throttled);
    let m = throttle.metrics();
    assert_eq!((m.attempts, m.throttled), (attempts, throttled));
    // The client counted every 429 the server sent, and only those.
    assert_eq!(throttled, limited.load(Ordering::SeqCst));
    match metric(&snap, names::WAIT_SECONDS, &partition) {
        Some(DebugValue::Histogram(waits)) => {
            assert_eq!(waits.len() as u64, attempts);
            // The waits add up to most of the run: the client, not the
            // server, held the requests back.
            let total: f64 = waits.iter().map(|w| w.into_inner()).sum();
            assert!(total > 0.0);
        }
        other => panic!("wait histogram: {other:?}"),
    }
    match metric(&snap, names::RATE, &partition) {
        Some(DebugValue::Gauge(rate)) => {
            assert!(rate.into_inner() >= 0.0 && rate.into_inner() <= 2.0 * RATE as f64)
        }
        other => panic!("rate gauge: {other:?}"),
    }
}

#[tokio::test]
async fn a_body_that_cannot_be_replayed_is_sent_once_and_the_refusal_says_so() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let events = Events::default();
    let _events = tracing::subscriber::set_default(events.clone());

    let seen = Arc::new(AtomicU32::new(0));
    let s = Arc::clone(&seen);
    let app = Router::new().route(
        "/upload",
        post(move |body: Bytes| {
            s.fetch_add(1, Ordering::SeqCst);
            async move {
                assert_eq!(body, "payload");
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "1")],
                    "slow down",
                )
            }
        }),
    );
    let addr = common::serve(app).await;
    let throttle = AsyncThrottle::new(ThrottleConfig::default()).unwrap();
    let mut client = ServiceBuilder::new()
        .layer(ThrottleLayer::per_authority(throttle).replay_by(NoReplay))
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let req = Request::post(format!("http://{addr}/upload"))
        .body(Full::new(Bytes::from_static(b"payload")))
        .unwrap();
    let err = client.ready().await.unwrap().call(req).await.unwrap_err();
    assert!(err.is_client_side());
    let refused = err.refused().expect("a typed refusal");
    assert_eq!(refused.reason, RefusalReason::NotReplayable);
    assert_eq!(refused.attempts, 1);
    assert_eq!(refused.last_status, Some(StatusCode::TOO_MANY_REQUESTS));
    assert!(err.to_string().contains("cannot be replayed"), "{err}");
    assert_eq!(seen.load(Ordering::SeqCst), 1, "sent once, never retried");
    assert_eq!(
        events.count(tracing::Level::WARN),
        1,
        "the refusal is logged"
    );

    let partition = format!("127.0.0.1:{}", addr.port());
    let snap = snapshot(&snap);
    let refusals = snap.iter().find(|(ck, _, _, _)| {
        ck.key().name() == names::REFUSED
            && ck
                .key()
                .labels()
                .any(|l| l.key() == names::REASON && l.value() == "not_replayable")
            && ck.key().labels().any(|l| l.value() == partition)
    });
    assert!(
        matches!(refusals, Some((_, _, _, DebugValue::Counter(1)))),
        "{refusals:?}"
    );
    assert_eq!(counter(&snap, names::THROTTLED, &partition), 1);
    assert!(metric(&snap, names::RETRIES, &partition).is_none());
}

#[test]
fn the_default_partition_is_host_and_port() {
    let parts = |uri: &str| Request::get(uri).body(()).unwrap().into_parts().0;
    assert_eq!(authority_key(&parts("http://a.example/x")), "a.example:80");
    assert_eq!(
        authority_key(&parts("https://a.example/x")),
        "a.example:443"
    );
    assert_eq!(
        authority_key(&parts("http://127.0.0.1:8080/")),
        "127.0.0.1:8080"
    );
    let mut p = parts("/demo.Echo/Say");
    assert_eq!(authority_key(&p), "");
    p.headers
        .insert("host", "grpc.example:50051".parse().unwrap());
    assert_eq!(authority_key(&p), "grpc.example:50051");
}

/// Answers the first call `RESOURCE_EXHAUSTED` with a pushback, then
/// echoes; notes when each call arrived (tokio's clock).
#[derive(Clone)]
struct Exhausted {
    arrivals: Arc<Mutex<Vec<tokio::time::Instant>>>,
}
const PUSHBACK: Duration = Duration::from_millis(700);
impl tonic::server::UnaryService<Bytes> for Exhausted {
    type Response = Bytes;
    type Future = Ready<Result<tonic::Response<Bytes>, Status>>;
    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        let mut arrivals = self.arrivals.lock().unwrap();
        arrivals.push(tokio::time::Instant::now());
        ready(if arrivals.len() == 1 {
            let mut status = Status::resource_exhausted("quota");
            status.metadata_mut().insert(
                "grpc-retry-pushback-ms",
                PUSHBACK.as_millis().to_string().parse().unwrap(),
            );
            Err(status)
        } else {
            Ok(tonic::Response::new(req.into_inner()))
        })
    }
}

/// A gRPC server answering `/demo.Echo/Say` with [`Exhausted`]; returns a
/// connected channel and the arrival log.
async fn grpc_server() -> (
    std::net::SocketAddr,
    tonic::transport::Channel,
    Arc<Mutex<Vec<tokio::time::Instant>>>,
) {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let svc = Exhausted {
        arrivals: Arc::clone(&arrivals),
    };
    let echo = tower::service_fn(move |req: http::Request<axum::body::Body>| {
        let svc = svc.clone();
        async move {
            let mut grpc = tonic::server::Grpc::new(Raw);
            Ok::<_, std::convert::Infallible>(grpc.unary(svc, req).await)
        }
    });
    let addr = common::serve(Router::new().route_service("/demo.Echo/Say", echo)).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (addr, channel, arrivals)
}

#[tokio::test(start_paused = true)]
async fn a_grpc_resource_exhausted_waits_the_pushback_then_succeeds() {
    let (addr, channel, arrivals) = grpc_server().await;

    // tonic's request body is a stream, not `Clone`: buffer it (a unary
    // call is one small message), throttle the buffered request, and hand
    // the channel a tonic body again.
    let throttle = AsyncThrottle::new(ThrottleConfig::default()).unwrap();
    let throttled = ServiceBuilder::new()
        .layer(ThrottleLayer::per_authority(throttle.clone()))
        .map_request(|r: Request<Full<Bytes>>| r.map(tonic::body::Body::new))
        .service(channel);
    let buffered = tower::service_fn(move |req: Request<tonic::body::Body>| {
        let throttled = throttled.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let resp = throttled
                .oneshot(Request::from_parts(parts, Full::new(bytes)))
                .await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(resp)
        }
    });
    let origin: http::Uri = format!("http://{addr}").parse().unwrap();
    let mut client = tonic::client::Grpc::with_origin(buffered, origin);
    client.ready().await.unwrap();
    let reply = client
        .unary(
            tonic::Request::new(Bytes::from_static(b"hello")),
            PathAndQuery::from_static("/demo.Echo/Say"),
            Raw,
        )
        .await
        .unwrap();
    assert_eq!(reply.into_inner(), "hello");

    let arrivals = arrivals.lock().unwrap();
    assert_eq!(arrivals.len(), 2, "refused once, retried once");
    let gap = arrivals[1] - arrivals[0];
    // The pause is the pushback plus up to `pause_jitter` (0.1 by default)
    // of it, on tokio's paused clock: nothing else moves time. The refusal
    // also starts the partition's pace, from an empty pacer: a lone call has
    // no measured send rate, so the pace is the controller's fallback rate
    // times its decrease, and the retry goes at the later of the pause's end
    // and that pace's first slot.
    let jitter = ThrottleConfig::default().pause_jitter;
    let c = ratewise_client::adaptive::AdaptiveConfig::default();
    let first_slot = Duration::from_secs_f64(1.0 / (c.fallback_rate * c.decrease_factor));
    assert!(
        gap >= PUSHBACK.max(first_slot) && gap <= PUSHBACK.mul_f64(1.0 + jitter).max(first_slot),
        "retried after {gap:?}, pushback {PUSHBACK:?}, first paced slot {first_slot:?}"
    );
    let m = throttle.metrics();
    assert_eq!((m.attempts, m.throttled, m.retries), (2, 1, 1));
    println!("gRPC retry after {gap:?} (pushback {PUSHBACK:?})");
}

#[tokio::test(start_paused = true)]
async fn a_negative_pushback_forbids_the_retry_and_returns_the_status() {
    // Without a network: a stand-in channel answering trailers-only
    // RESOURCE_EXHAUSTED with a negative pushback (gRFC A6: do not retry).
    let sent = Arc::new(AtomicU32::new(0));
    let s = Arc::clone(&sent);
    let channel = tower::service_fn(move |_req: Request<Full<Bytes>>| {
        s.fetch_add(1, Ordering::SeqCst);
        async {
            http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "8")
                .header("grpc-retry-pushback-ms", "-1")
                .body(())
        }
    });
    let throttle = AsyncThrottle::new(ThrottleConfig::default()).unwrap();
    let client = ThrottleLayer::per_authority(throttle.clone()).layer(channel);
    let resp = client
        .oneshot(
            Request::post("http://grpc.example/s/M")
                .body(Full::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.headers()["grpc-status"], "8", "the server's answer");
    assert_eq!(sent.load(Ordering::SeqCst), 1, "not retried");
    let m = throttle.metrics();
    assert_eq!((m.attempts, m.throttled, m.retries), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_tonic_channel_under_the_layer_without_replay_is_refused_not_retried() {
    let (addr, channel, arrivals) = grpc_server().await;
    let throttle = AsyncThrottle::new(ThrottleConfig::default()).unwrap();
    let layered = ServiceBuilder::new()
        .layer(ThrottleLayer::per_authority(throttle).replay_by(NoReplay))
        .service(channel);
    let origin: http::Uri = format!("http://{addr}").parse().unwrap();
    let mut client = tonic::client::Grpc::with_origin(layered, origin);
    client.ready().await.unwrap();
    let status = client
        .unary(
            tonic::Request::new(Bytes::from_static(b"hello")),
            PathAndQuery::from_static("/demo.Echo/Say"),
            Raw,
        )
        .await
        .unwrap_err();
    // tonic turns the layer's error into a status carrying its message.
    assert!(
        status.message().contains("cannot be replayed"),
        "{status:?}"
    );
    assert_eq!(arrivals.lock().unwrap().len(), 1, "sent once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clones_on_many_threads_share_one_pace() {
    // A fixed pace of 200/s, strictly even (burst 1), shared by 8 tasks on 4
    // threads, each with its own clone of the layered service: if the clones
    // shared nothing, 80 calls would take a tenth of a second; sharing one
    // pacer they take at least 79 intervals of 5 ms.
    const PACE: f64 = 200.0;
    const CALLS: u32 = 80;
    let sent = Arc::new(AtomicU32::new(0));
    let s = Arc::clone(&sent);
    let api = tower::service_fn(move |_req: Request<String>| {
        s.fetch_add(1, Ordering::SeqCst);
        async { http::Response::builder().status(200).body(()) }
    });
    let throttle = AsyncThrottle::new(ThrottleConfig {
        adaptation: ratewise_client::Adaptation::Fixed(PACE),
        burst: Some(1),
        ..ThrottleConfig::default()
    })
    .unwrap();
    let client = ThrottleLayer::per_authority(throttle.clone()).layer(api);
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..CALLS / 8 {
                    let req = Request::get("http://api.example/").body(String::new());
                    let resp = client.clone().oneshot(req.unwrap()).await.unwrap();
                    assert_eq!(resp.status(), 200);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(sent.load(Ordering::SeqCst), CALLS);
    assert_eq!(throttle.metrics().attempts, u64::from(CALLS));
    assert_eq!(throttle.partitions(), 1, "one partition: api.example:80");
    let floor = Duration::from_secs_f64(f64::from(CALLS - 1) / PACE);
    assert!(elapsed >= floor, "{CALLS} calls in {elapsed:?} < {floor:?}");
}
