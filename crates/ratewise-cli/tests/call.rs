//! `ratewise call` end to end against a small rate-limited server on
//! 127.0.0.1 (axum, with a token bucket of the test's own, so nothing of
//! ratewise sits on the server side): the JSON fields, the retry bound,
//! Ctrl-C, and arguments refused before any request.

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::any;
use axum::Router;

/// A token bucket: `rate` tokens a second, at most `burst`, full at first.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let dt = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Limited {
    bucket: Mutex<Bucket>,
    /// The header every request must carry (`--header`), if any.
    required: Option<(&'static str, &'static str)>,
    /// Answer with `x-ratelimit-limit` (the bucket's rate a second).
    headers: bool,
    requests: AtomicU64,
    refused: AtomicU64,
    /// Told of every request, for a test that waits until some arrived.
    arrived: (Mutex<u64>, std::sync::Condvar),
}

impl Limited {
    /// Blocks until `n` requests arrived (at most `limit`): whether they did.
    fn wait_for_requests(&self, n: u64, limit: Duration) -> bool {
        let (count, cv) = &self.arrived;
        let count = count.lock().expect("not poisoned");
        let (count, _) = cv
            .wait_timeout_while(count, limit, |c| *c < n)
            .expect("not poisoned");
        *count >= n
    }
}

async fn handle(State(s): State<Arc<Limited>>, request: HeaderMap) -> (StatusCode, HeaderMap) {
    s.requests.fetch_add(1, Ordering::SeqCst);
    *s.arrived.0.lock().expect("not poisoned") += 1;
    s.arrived.1.notify_all();
    let mut h = HeaderMap::new();
    if let Some((name, value)) = s.required {
        if request.get(name).and_then(|v| v.to_str().ok()) != Some(value) {
            return (StatusCode::BAD_REQUEST, h);
        }
    }
    let admitted = s.bucket.lock().expect("not poisoned").take();
    if s.headers {
        let rate = s.bucket.lock().expect("not poisoned").rate;
        h.insert(
            "x-ratelimit-limit",
            HeaderValue::from_str(&format!("{rate}")).expect("ascii"),
        );
    }
    if admitted {
        (StatusCode::OK, h)
    } else {
        s.refused.fetch_add(1, Ordering::SeqCst);
        (StatusCode::TOO_MANY_REQUESTS, h)
    }
}

/// Starts a server on its own thread and runtime; it runs until the test
/// process ends.
fn serve(
    rate: f64,
    burst: f64,
    required: Option<(&'static str, &'static str)>,
    headers: bool,
) -> (SocketAddr, Arc<Limited>) {
    let state = Arc::new(Limited {
        bucket: Mutex::new(Bucket {
            rate,
            burst,
            tokens: burst,
            at: Instant::now(),
        }),
        required,
        headers,
        requests: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        arrived: (Mutex::new(0), std::sync::Condvar::new()),
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    listener.set_nonblocking(true).expect("non-blocking");
    let addr = listener.local_addr().expect("bound");
    let app = Router::new()
        .route("/", any(handle))
        .with_state(Arc::clone(&state));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            axum::serve(listener, app).await
        })
    });
    (addr, state)
}

fn ratewise(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args(args)
        .env_remove("CI")
        .output()
        .unwrap_or_else(|e| panic!("running ratewise: {e}"))
}

fn json_of(o: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "not one JSON object ({e}):\n{text}\nstderr:\n{}",
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn u(v: &serde_json::Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("`{field}` is not a count: {v}"))
}

#[test]
fn json_reports_every_call_and_what_the_server_refused() {
    // 40 requests a second after a burst of 5; 60 calls need 55 / 40 s.
    let (addr, server) = serve(40.0, 5.0, Some(("x-api-key", "k1")), true);
    let url = format!("http://{addr}/");
    let o = ratewise(&[
        "call",
        &url,
        "--calls",
        "60",
        "--concurrency",
        "4",
        "--header",
        "x-api-key: k1",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v = json_of(&o);
    assert_eq!(u(&v, "calls"), 60, "{v}");
    assert_eq!(u(&v, "ok"), 60, "{v}");
    assert_eq!(u(&v, "failed"), 0, "{v}");
    // What the command counted is what the server saw.
    let requests = server.requests.load(Ordering::SeqCst);
    let refused = server.refused.load(Ordering::SeqCst);
    assert_eq!(u(&v, "attempts"), requests, "{v}");
    assert_eq!(u(&v, "refused"), refused, "{v}");
    assert_eq!(requests, 60 + refused, "every refusal retried once more");
    if refused > 0 {
        assert_eq!(v["refused_by_status"]["429"].as_u64(), Some(refused), "{v}");
    }
    let elapsed = v["elapsed_s"].as_f64().expect("elapsed_s");
    assert!(
        elapsed >= 55.0 / 40.0 * 0.95,
        "faster than the bucket allows: {v}"
    );
    // A refusal makes the throttle pace: it then has a rate to report.
    if refused > 0 {
        let learned = v["learned_rate_per_s"].as_f64().expect("a learned rate");
        assert!(learned.is_finite() && learned > 0.0, "{v}");
    }
    assert_eq!(v["server_headers"]["x-ratelimit-limit"], "40", "{v}");
    assert_eq!(v["interrupted"], false);
}

#[test]
fn the_summary_names_refusals_time_and_the_learned_rate() {
    let (addr, _server) = serve(50.0, 2.0, None, false);
    let url = format!("http://{addr}/");
    let o = ratewise(&["call", &url, "--calls", "30", "--concurrency", "4"]);
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    for part in [
        "30 calls to",
        "30 done: 30 ok, 0 failed",
        "requests",
        "time",
        "learned",
        "server",
    ] {
        assert!(text.contains(part), "`{part}` missing:\n{text}");
    }
}

#[test]
fn retries_are_bounded_by_max_attempts() {
    // Never admits: every call is refused at each of its 3 attempts.
    let (addr, server) = serve(1e-9, 0.0, None, false);
    let url = format!("http://{addr}/");
    let o = ratewise(&[
        "call",
        &url,
        "--calls",
        "4",
        "--concurrency",
        "2",
        "--max-attempts",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v = json_of(&o);
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        12,
        "4 calls × 3 attempts, no more"
    );
    assert_eq!(u(&v, "attempts"), 12, "{v}");
    assert_eq!(u(&v, "refused"), 12, "{v}");
    assert_eq!(u(&v, "ok"), 0, "{v}");
    assert_eq!(u(&v, "failed"), 4, "{v}");
    assert_eq!(v["failures"]["status 429"].as_u64(), Some(4), "{v}");
}

#[test]
fn ctrl_c_stops_with_the_summary_so_far() {
    // One request a second: 1 000 calls would take many minutes.
    let (addr, server) = serve(1.0, 1.0, None, false);
    let url = format!("http://{addr}/");
    let child = Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args(["call", &url, "--calls", "1000", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ratewise starts");
    // Interrupt once at least two requests reached the server.
    assert!(
        server.wait_for_requests(2, Duration::from_secs(20)),
        "no request reached the server"
    );
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let o = child.wait_with_output().expect("ratewise ends");
    assert_eq!(o.status.code(), Some(130), "{o:?}");
    let v = json_of(&o);
    assert_eq!(v["interrupted"], true, "{v}");
    assert!(u(&v, "calls") < 1000, "{v}");
    assert!(
        u(&v, "attempts") <= server.requests.load(Ordering::SeqCst),
        "{v}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("interrupted"));
}

#[test]
fn nonsense_arguments_fail_in_one_line_before_any_request() {
    let (addr, server) = serve(100.0, 10.0, None, false);
    let url = format!("http://{addr}/");
    let cases: [(&[&str], &str); 9] = [
        (&["--calls", "0"], "--calls 0"),
        (&["--concurrency", "0"], "--concurrency 0"),
        (&["--max-attempts", "0"], "--max-attempts 0"),
        (&["--header", "no colon here"], "'name: value'"),
        (&["--header", "bad name: x"], "not a header name"),
        (&["--method", "FETCH"], "--method FETCH"),
        (&["--timeout", "0"], "--timeout 0"),
        (&["--throttle-status", "200"], "4xx or 5xx"),
        (&["--calls", "-3"], "-3"),
    ];
    for (extra, says) in cases {
        let mut args = vec!["call", url.as_str()];
        args.extend_from_slice(extra);
        let o = ratewise(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra:?} accepted");
        assert!(err.contains(says), "{extra:?}: `{says}` not in:\n{err}");
        assert!(o.stdout.is_empty(), "{extra:?}: printed {:?}", o.stdout);
    }
    for (bad_url, says) in [
        ("ftp://127.0.0.1/", "scheme `ftp`"),
        ("127.0.0.1:8080", "http://"),
        ("mailto:someone@example.com", "scheme `mailto`"),
        ("http://", "not a URL"),
        ("not a url", "not a URL"),
    ] {
        let o = ratewise(&["call", bad_url]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{bad_url} accepted");
        assert!(err.contains(says), "{bad_url}: `{says}` not in:\n{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        0,
        "no request was sent"
    );
}
