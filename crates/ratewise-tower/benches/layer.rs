//! The middleware's own cost, without sockets: one request through
//! `ratewise-tower` and through `tower_governor` (same keyed GCRA quota,
//! headers on, 10 000 keys from a header), around a service that answers at
//! once (on one thread, then on two at once); then both inside axum's
//! `Router`, as a server runs them; then the same with every key spent, so
//! that every request is refused (the cost under attack; one thread, then
//! two). The HTTP-level comparison is
//! `examples/load.rs` (wrk).
//!
//! Interleaved trials timed by on-CPU time (robust on a busy machine):
//!
//! ```text
//! cargo bench -p ratewise-tower --bench layer -- 9    # 9 trials (default 7)
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt};

#[path = "common/peers.rs"]
mod peers;
use peers::{governor_layer_with, ratewise_layer_with, KEYS};
use ratewise::Quota;

/// Polls a future that is ready at once (both services here are).
fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the service was not ready at once"),
    }
}

fn requests() -> Vec<Request<String>> {
    (0..KEYS)
        .map(|i| {
            let mut r = Request::new(String::new());
            r.headers_mut().insert(
                "x-api-key",
                HeaderValue::from_str(&format!("k{i}")).expect("ascii"),
            );
            r
        })
        .collect()
}

/// This thread's on-CPU nanoseconds as the scheduler accounts them (Linux),
/// so time spent preempted by other processes is left out.
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
}

/// Nanoseconds (on-CPU, else wall) per request over `n` requests, each of
/// which must be answered with `expect` (a phase that claims to time
/// admissions must not time refusals, and the reverse).
fn trial<S, RB>(svc: &mut S, reqs: &[Request<String>], n: usize, expect: StatusCode) -> f64
where
    S: Service<Request<String>, Response = Response<RB>>,
{
    trial_with(svc, reqs, n, expect, |b| b)
}

/// [`trial`] for a service over another request body (made from the
/// string one as each request is sent, at the same cost for every server).
fn trial_with<S, B, RB>(
    svc: &mut S,
    reqs: &[Request<String>],
    n: usize,
    expect: StatusCode,
    body: impl Fn(String) -> B,
) -> f64
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    let c0 = cpu_ns();
    let w0 = Instant::now();
    let mut as_expected = 0usize;
    for i in 0..n {
        let req = reqs[i % reqs.len()].clone().map(&body);
        let ready = now(svc.ready()).ok().expect("ready");
        let status = now(ready.call(req)).ok().map(|r| r.status());
        as_expected += usize::from(status == Some(expect));
    }
    black_box(as_expected);
    let wall = w0.elapsed().as_nanos() as u64;
    assert_eq!(
        as_expected,
        n,
        "{} of {n} requests were not answered {expect}: the trial would time the wrong path",
        n - as_expected
    );
    let ns = match (c0, cpu_ns()) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => wall,
    };
    ns as f64 / n as f64
}

/// [`trial`] on two threads at once, each with its own clone of `svc` (all
/// clones share one limiter, as a server's worker threads do): the mean of
/// the two threads' on-CPU nanoseconds per request. What the limiter's
/// shared state costs when two cores use it together (a cache line that
/// every request writes moves between them) shows here and not above.
fn trial_two_threads<S, RB>(svc: &S, reqs: &[Request<String>], n: usize, expect: StatusCode) -> f64
where
    S: Service<Request<String>, Response = Response<RB>> + Clone + Send,
{
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let mut svc = svc.clone();
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    trial(&mut svc, reqs, n, expect)
                })
            })
            .collect();
        let ns: Vec<f64> = threads
            .into_iter()
            .map(|t| t.join().expect("a trial thread"))
            .collect();
        ns.iter().sum::<f64>() / ns.len() as f64
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One phase's trials: each server's on-CPU nanoseconds per request.
#[derive(Default)]
struct Phase {
    floor: Vec<f64>,
    governor: Vec<f64>,
    ratewise: Vec<f64>,
}

impl Phase {
    fn report(self, title: &str) {
        let ratio: Vec<f64> = self
            .ratewise
            .iter()
            .zip(&self.governor)
            .map(|(r, g)| r / g)
            .collect();
        let (lo, hi) = ratio
            .iter()
            .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        println!("{title}:");
        if !self.floor.is_empty() {
            println!("no limiter      {:>8.0}", median(self.floor));
        }
        println!("tower_governor  {:>8.0}", median(self.governor));
        println!("ratewise-tower  {:>8.0}", median(self.ratewise));
        println!(
            "ratewise-tower / tower_governor cost: median {:.2}× (min {lo:.2}×, max {hi:.2}×)",
            median(ratio)
        );
    }
}

fn main() {
    let trials: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(7);
    let inner = tower::service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(axum::body::Body::from("ok")))
    });
    // In-process, a trial sends each key ~150 requests a second, three
    // times the load example's 50/s quota: the admitted phases give each
    // key a quota they cannot spend (the check costs the same whatever the
    // quota), and every trial checks that it timed the path it names.
    let roomy = || {
        (
            governor_layer_with(Duration::from_micros(100), 10_000),
            ratewise_layer_with(Quota::per(10_000, Duration::from_secs(1)).expect("quota")),
        )
    };
    let (governor_roomy, ratewise_roomy) = roomy();
    let mut governor = governor_roomy.layer(inner);
    let mut ratewise = ratewise_roomy.layer(inner);
    let mut none = inner;
    let reqs = requests();
    // On-CPU time is accounted in ticks of a few milliseconds here: 400 000
    // requests a trial keep that below 10 ns a request.
    let n = 400_000;
    println!(
        "{trials} trials × {n} requests, {} keys, on-CPU ns per request (median)",
        reqs.len()
    );
    // Warm-up: every key seen by each limiter.
    trial(&mut governor, &reqs, reqs.len(), StatusCode::OK);
    trial(&mut ratewise, &reqs, reqs.len(), StatusCode::OK);
    let mut phase = Phase::default();
    // `LAYER_ONLY=ratewise` or `=governor` runs one side only (for a
    // profiler).
    let only = std::env::var("LAYER_ONLY").unwrap_or_default();
    for _ in 0..trials {
        phase.floor.push(trial(&mut none, &reqs, n, StatusCode::OK));
        phase.governor.push(if only == "ratewise" {
            f64::NAN
        } else {
            trial(&mut governor, &reqs, n, StatusCode::OK)
        });
        phase.ratewise.push(if only == "governor" {
            f64::NAN
        } else {
            trial(&mut ratewise, &reqs, n, StatusCode::OK)
        });
    }
    phase.report("admitted, around a bare service");

    // The same, on two threads at once.
    let mut phase = Phase::default();
    for _ in 0..trials {
        phase
            .floor
            .push(trial_two_threads(&none, &reqs, n, StatusCode::OK));
        phase
            .governor
            .push(trial_two_threads(&governor, &reqs, n, StatusCode::OK));
        phase
            .ratewise
            .push(trial_two_threads(&ratewise, &reqs, n, StatusCode::OK));
    }
    phase.report("admitted, around a bare service, two threads at once");

    // Through axum's `Router`, as a server runs the layer: axum turns
    // every response into its own body type, boxing any body it does not
    // know, so what the layer answers in costs here and not above.
    let app = || Router::new().route("/", get(|| async { "ok" }));
    let mut none = app();
    let (governor_roomy, ratewise_roomy) = roomy();
    let mut governor = app().layer(governor_roomy);
    let mut ratewise = app().layer(ratewise_roomy);
    let to_axum = |s: String| axum::body::Body::from(s);
    trial_with(&mut governor, &reqs, reqs.len(), StatusCode::OK, to_axum);
    trial_with(&mut ratewise, &reqs, reqs.len(), StatusCode::OK, to_axum);
    let mut phase = Phase::default();
    for _ in 0..trials {
        phase
            .floor
            .push(trial_with(&mut none, &reqs, n, StatusCode::OK, to_axum));
        phase
            .governor
            .push(trial_with(&mut governor, &reqs, n, StatusCode::OK, to_axum));
        phase
            .ratewise
            .push(trial_with(&mut ratewise, &reqs, n, StatusCode::OK, to_axum));
    }
    phase.report("admitted, through axum's Router");

    // Under attack: every key has spent its one request per hour, so every
    // request is refused (a 429 with its headers and body). Refusing must
    // cost no more than admitting.
    let mut governor = governor_layer_with(Duration::from_secs(3600), 1).layer(inner);
    let mut ratewise =
        ratewise_layer_with(Quota::per(1, Duration::from_secs(3600)).expect("quota")).layer(inner);
    trial(&mut governor, &reqs, reqs.len(), StatusCode::OK);
    trial(&mut ratewise, &reqs, reqs.len(), StatusCode::OK);
    let mut phase = Phase::default();
    for _ in 0..trials {
        phase.governor.push(trial(
            &mut governor,
            &reqs,
            n,
            StatusCode::TOO_MANY_REQUESTS,
        ));
        phase.ratewise.push(trial(
            &mut ratewise,
            &reqs,
            n,
            StatusCode::TOO_MANY_REQUESTS,
        ));
    }
    phase.report("every request refused");

    // The same flood on two threads at once.
    let mut phase = Phase::default();
    for _ in 0..trials {
        let refused = StatusCode::TOO_MANY_REQUESTS;
        phase
            .governor
            .push(trial_two_threads(&governor, &reqs, n, refused));
        phase
            .ratewise
            .push(trial_two_threads(&ratewise, &reqs, n, refused));
    }
    phase.report("every request refused, two threads at once");
}
