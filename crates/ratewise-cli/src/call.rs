//! `ratewise call`: the default throttle, through the reqwest middleware,
//! against any HTTP endpoint — how ratewise will treat an API, seen before
//! writing any code.
//!
//! ```text
//! ratewise call http://127.0.0.1:8080/items --calls 200 --concurrency 4 --header 'x-api-key: …'
//! ```
//!
//! `--calls` calls are shared by `--concurrency` tasks; each call is sent
//! and retried as the throttle says, at most `--max-attempts` times, so no
//! more than `calls × max_attempts` requests ever leave. A live line on
//! stderr (when it is a terminal) shows the progress; the summary (or one
//! JSON object with `--json`) says how many calls succeeded, which statuses
//! refused them, how long it took, the rate the throttle learned and what
//! the server's rate headers said. Ctrl-C stops at once with the summary of
//! the calls finished so far (exit status 130).

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ratewise_client::{AsyncThrottle, Classifier, Signal, ThrottleConfig};
use ratewise_reqwest::{host_key, Refused, ThrottleMiddleware};
use reqwest::Url;
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};

/// The arguments of `ratewise call`.
#[derive(Debug, Args)]
pub struct CallArgs {
    /// The endpoint to call, an `http://` or `https://` URL.
    url: String,
    /// Calls to make (retries not counted).
    #[arg(long, default_value_t = 100)]
    calls: u64,
    /// Calls in flight at once (tasks sharing the calls).
    #[arg(long, default_value_t = 1)]
    concurrency: u64,
    /// A request header, `'name: value'` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// The request method: GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Attempts per call at most, the first included: retries are bounded.
    #[arg(long, default_value_t = 10)]
    max_attempts: u32,
    /// A status this server refuses with, beyond 429 and a 503 that carries
    /// `Retry-After` (repeatable; nginx's `limit_req` answers a bare 503).
    #[arg(long = "throttle-status", value_name = "STATUS")]
    throttle_statuses: Vec<u16>,
    /// Seconds an attempt may take before it counts as failed.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    json: bool,
}

/// Why `ratewise call` failed.
#[derive(Debug)]
pub enum CallError {
    /// An argument that cannot work, found before any request.
    Usage(String),
    /// The runtime or the HTTP client could not be built.
    Setup(String),
    /// Writing the summary.
    Io(io::Error),
    /// Ctrl-C: the summary of the calls finished so far was printed.
    Interrupted,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Usage(m) | CallError::Setup(m) => f.write_str(m),
            CallError::Io(e) => write!(f, "writing to stdout: {e}"),
            CallError::Interrupted => {
                f.write_str("interrupted (Ctrl-C): the summary covers the calls finished before it")
            }
        }
    }
}

impl From<io::Error> for CallError {
    fn from(e: io::Error) -> Self {
        CallError::Io(e)
    }
}

/// The arguments, checked.
#[derive(Debug)]
struct Plan {
    url: Url,
    method: Method,
    headers: HeaderMap,
    calls: u64,
    concurrency: u64,
    max_attempts: u32,
    throttle_statuses: Vec<u16>,
    timeout: Duration,
    json: bool,
}

/// The methods `ratewise call` sends (CONNECT and TRACE are not API calls).
const METHODS: [Method; 7] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::OPTIONS,
];

/// The most calls one run makes: a typo of a few zeros should not send a
/// billion requests.
const MAX_CALLS: u64 = 10_000_000;

/// The most tasks: beyond this a run measures the machine, not the API.
const MAX_CONCURRENCY: u64 = 10_000;

/// The most attempts per call.
const MAX_ATTEMPTS: u32 = 100;

impl Plan {
    fn new(a: CallArgs) -> Result<Plan, CallError> {
        let usage = |m: String| Err(CallError::Usage(m));
        if a.calls == 0 || a.calls > MAX_CALLS {
            return usage(format!(
                "--calls {}: give a number of calls from 1 to {MAX_CALLS}",
                a.calls
            ));
        }
        if a.concurrency == 0 || a.concurrency > MAX_CONCURRENCY {
            return usage(format!(
                "--concurrency {}: give a number of tasks from 1 to {MAX_CONCURRENCY}",
                a.concurrency
            ));
        }
        if a.max_attempts == 0 || a.max_attempts > MAX_ATTEMPTS {
            return usage(format!(
                "--max-attempts {}: give a number of attempts per call from 1 to {MAX_ATTEMPTS}",
                a.max_attempts
            ));
        }
        if !(a.timeout.is_finite() && a.timeout > 0.0 && a.timeout <= 3600.0) {
            return usage(format!(
                "--timeout {}: give seconds, more than 0 and at most 3600",
                a.timeout
            ));
        }
        if let Some(s) = a
            .throttle_statuses
            .iter()
            .find(|s| !(400..=599).contains(*s))
        {
            return usage(format!(
                "--throttle-status {s}: a refusal is a 4xx or 5xx status"
            ));
        }
        let url = match Url::parse(&a.url) {
            Ok(u) => u,
            Err(e) => {
                return usage(format!(
                    "{}: not a URL ({e}); give one such as https://api.example.com/items or http://127.0.0.1:8080/",
                    a.url
                ))
            }
        };
        match url.scheme() {
            "http" | "https" => {}
            other => {
                return usage(format!(
                    "{}: scheme `{other}` is not HTTP; give an http:// or https:// URL",
                    a.url
                ))
            }
        }
        if url.host_str().is_none_or(str::is_empty) {
            return usage(format!("{}: the URL has no host", a.url));
        }
        let method = METHODS
            .iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(&a.method))
            .cloned();
        let Some(method) = method else {
            return usage(format!(
                "--method {}: not one of {}",
                a.method,
                METHODS.map(|m| m.to_string()).join(", ")
            ));
        };
        let mut headers = HeaderMap::new();
        for h in &a.headers {
            let (name, value) = parse_header(h).map_err(CallError::Usage)?;
            headers.append(name, value);
        }
        Ok(Plan {
            url,
            method,
            headers,
            calls: a.calls,
            concurrency: a.concurrency,
            max_attempts: a.max_attempts,
            throttle_statuses: a.throttle_statuses,
            timeout: Duration::from_secs_f64(a.timeout),
            json: a.json,
        })
    }

    /// The classifier: the default one, plus the statuses given with
    /// `--throttle-status`.
    fn classifier(&self) -> Classifier {
        let extra = self.throttle_statuses.clone();
        if extra.is_empty() {
            return Classifier::new();
        }
        Classifier::new().with_throttle_predicate(move |r| extra.contains(&r.status))
    }
}

/// `'name: value'` as a header, or a message saying what is wrong.
fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    let Some((name, value)) = text.split_once(':') else {
        return Err(format!(
            "--header {text:?}: write it as 'name: value' (a colon between them)"
        ));
    };
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("--header {text:?}: `{}` is not a header name", name.trim()))?;
    let value = HeaderValue::from_str(value.trim()).map_err(|_| {
        format!("--header {text:?}: the value holds a character a header cannot carry")
    })?;
    Ok((name, value))
}

/// What the run saw, shared by its tasks.
#[derive(Default)]
struct Tally {
    /// Requests sent, retries included.
    attempts: AtomicU64,
    /// Calls finished.
    calls: AtomicU64,
    /// Calls that ended in a 2xx or 3xx.
    ok: AtomicU64,
    /// Calls that did not.
    failed: AtomicU64,
    /// Answers the throttle took as refusals ("slow down").
    refused: AtomicU64,
    details: Mutex<Details>,
}

#[derive(Default)]
struct Details {
    /// Refusals by status.
    refused_by_status: BTreeMap<u16, u64>,
    /// Failed calls by what ended them.
    failures: BTreeMap<String, u64>,
    /// The latest value of each rate-limit header the server sent.
    server_headers: BTreeMap<String, String>,
}

impl Tally {
    fn details(&self) -> std::sync::MutexGuard<'_, Details> {
        self.details.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fail(&self, why: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        *self.details().failures.entry(why).or_default() += 1;
    }
}

/// Whether a response header speaks of the server's rate limit.
fn is_rate_header(name: &str) -> bool {
    name.contains("ratelimit")
        || name.contains("rate-limit")
        || name == "retry-after"
        || name == "x-shopify-shop-api-call-limit"
}

/// Below the throttle: sees every attempt, counts it and what its answer
/// said.
struct Observe {
    tally: Arc<Tally>,
    classifier: Classifier,
}

#[async_trait::async_trait]
impl Middleware for Observe {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.tally.attempts.fetch_add(1, Ordering::Relaxed);
        let result = next.run(req, extensions).await;
        if let Ok(r) = &result {
            let status = r.status().as_u16();
            let signal = self.classifier.classify(status, r.headers(), None);
            let mut d = self.tally.details();
            if signal == Signal::Throttled {
                self.tally.refused.fetch_add(1, Ordering::Relaxed);
                *d.refused_by_status.entry(status).or_default() += 1;
            }
            for (name, value) in r.headers() {
                if is_rate_header(name.as_str()) {
                    d.server_headers.insert(
                        name.as_str().to_owned(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    );
                }
            }
        }
        result
    }
}

/// What one run of `ratewise call` found.
struct Summary {
    url: String,
    concurrency: u64,
    planned: u64,
    calls: u64,
    ok: u64,
    failed: u64,
    attempts: u64,
    refused: u64,
    elapsed: Duration,
    learned_rate: Option<f64>,
    interrupted: bool,
    details: Details,
}

/// Runs `ratewise call`: checks the arguments, makes the calls, prints the
/// summary.
///
/// # Errors
/// [`CallError::Usage`] for an argument that cannot work (before any
/// request), [`CallError::Setup`] if the runtime or client cannot be built,
/// [`CallError::Io`] if stdout fails, [`CallError::Interrupted`] after
/// Ctrl-C (the summary so far is printed first).
pub fn run(args: CallArgs, out: &mut impl Write) -> Result<(), CallError> {
    let plan = Plan::new(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CallError::Setup(format!("cannot start the async runtime: {e}")))?;
    let summary = runtime.block_on(drive(&plan))?;
    if plan.json {
        writeln!(out, "{}", json(&summary))?;
    } else {
        write!(out, "{}", text(&summary))?;
    }
    out.flush()?;
    if summary.interrupted {
        return Err(CallError::Interrupted);
    }
    Ok(())
}

fn progress(calls: u64) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(calls), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{pos}/{len} calls  {msg}  ({elapsed})") {
        bar.set_style(style);
    }
    bar
}

async fn drive(plan: &Plan) -> Result<Summary, CallError> {
    let throttle = AsyncThrottle::new(ThrottleConfig {
        max_attempts: plan.max_attempts,
        ..ThrottleConfig::default()
    })
    .map_err(|e| CallError::Setup(format!("the throttle's configuration: {e}")))?;
    let tally = Arc::new(Tally::default());
    let inner = reqwest::Client::builder()
        .timeout(plan.timeout)
        .build()
        .map_err(|e| CallError::Setup(format!("cannot build the HTTP client: {e}")))?;
    let client: ClientWithMiddleware = reqwest_middleware::ClientBuilder::new(inner)
        .with(ThrottleMiddleware::per_host(throttle.clone()).with_classifier(plan.classifier()))
        .with(Observe {
            tally: Arc::clone(&tally),
            classifier: plan.classifier(),
        })
        .build();
    let key = host_key(&reqwest::Request::new(
        plan.method.clone(),
        plan.url.clone(),
    ));
    let bar = progress(plan.calls);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..plan.concurrency.min(plan.calls) {
        let client = client.clone();
        let tally = Arc::clone(&tally);
        let next = Arc::clone(&next);
        let bar = bar.clone();
        let throttle = throttle.clone();
        let key = key.clone();
        let (method, url, headers, calls) = (
            plan.method.clone(),
            plan.url.clone(),
            plan.headers.clone(),
            plan.calls,
        );
        tasks.spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < calls {
                let sent = client
                    .request(method.clone(), url.clone())
                    .headers(headers.clone())
                    .send()
                    .await;
                match sent {
                    Ok(r) => {
                        let status = r.status();
                        // Read the body so the connection is reused.
                        let body = r.bytes().await;
                        match body {
                            Ok(_) if status.is_success() || status.is_redirection() => {
                                tally.ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(_) => tally.fail(format!("status {}", status.as_u16())),
                            Err(e) => tally.fail(format!("reading the body: {e}")),
                        }
                    }
                    Err(e) => match Refused::from_error(&e) {
                        Some(refused) => tally.fail(format!("refused: {}", refused.label())),
                        None => tally.fail(format!("transport: {}", error_chain(&e))),
                    },
                }
                tally.calls.fetch_add(1, Ordering::Relaxed);
                bar.inc(1);
                bar.set_message(format!(
                    "ok {}  refused {}  failed {}  pace {}",
                    tally.ok.load(Ordering::Relaxed),
                    tally.refused.load(Ordering::Relaxed),
                    tally.failed.load(Ordering::Relaxed),
                    throttle
                        .rate_of(&key)
                        .map_or_else(|| "free".to_owned(), |r| format!("{r:.1}/s")),
                ));
            }
        });
    }
    let interrupted = tokio::select! {
        () = async { while tasks.join_next().await.is_some() {} } => false,
        signal = tokio::signal::ctrl_c() => signal.is_ok(),
    };
    // Ctrl-C: calls in flight are dropped, not counted.
    tasks.abort_all();
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    let details = std::mem::take(&mut *tally.details());
    Ok(Summary {
        url: plan.url.to_string(),
        concurrency: plan.concurrency,
        planned: plan.calls,
        calls: tally.calls.load(Ordering::Relaxed),
        ok: tally.ok.load(Ordering::Relaxed),
        failed: tally.failed.load(Ordering::Relaxed),
        attempts: tally.attempts.load(Ordering::Relaxed),
        refused: tally.refused.load(Ordering::Relaxed),
        elapsed,
        learned_rate: throttle.rate_of(&key),
        interrupted,
        details,
    })
}

/// An error and its sources, one line (`reqwest`'s own message is terse).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn json(s: &Summary) -> serde_json::Value {
    let by_status: serde_json::Map<String, serde_json::Value> = s
        .details
        .refused_by_status
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).into()))
        .collect();
    serde_json::json!({
        "url": s.url,
        "concurrency": s.concurrency,
        "planned_calls": s.planned,
        "calls": s.calls,
        "ok": s.ok,
        "failed": s.failed,
        "attempts": s.attempts,
        "refused": s.refused,
        "refused_by_status": by_status,
        "failures": s.details.failures,
        "elapsed_s": s.elapsed.as_secs_f64(),
        "learned_rate_per_s": s.learned_rate,
        "server_headers": s.details.server_headers,
        "interrupted": s.interrupted,
        "finished_at_unix_s": SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    })
}

fn text(s: &Summary) -> String {
    let mut t = String::new();
    let secs = s.elapsed.as_secs_f64();
    let mut line = |l: String| {
        t.push_str(&l);
        t.push('\n');
    };
    line(format!(
        "{} calls to {} ({} at a time){}",
        s.planned,
        s.url,
        s.concurrency,
        if s.interrupted { ", interrupted" } else { "" }
    ));
    line(format!(
        "  calls     {} done: {} ok, {} failed",
        s.calls, s.ok, s.failed
    ));
    for (why, n) in &s.details.failures {
        line(format!("            {n} × {why}"));
    }
    let by_status: Vec<String> = s
        .details
        .refused_by_status
        .iter()
        .map(|(status, n)| format!("{n} × {status}"))
        .collect();
    line(format!(
        "  requests  {} sent, {} refused ({:.1} %){}",
        s.attempts,
        s.refused,
        100.0 * s.refused as f64 / s.attempts.max(1) as f64,
        if by_status.is_empty() {
            String::new()
        } else {
            format!(": {}", by_status.join(", "))
        }
    ));
    line(format!(
        "  time      {secs:.2} s ({:.1} successful calls/s)",
        s.ok as f64 / secs.max(1e-9)
    ));
    line(match s.learned_rate {
        Some(r) => format!("  learned   {r:.1} requests/s"),
        None => "  learned   nothing to learn: the server neither refused nor stated a rate, so \
                 calls were not paced"
            .to_owned(),
    });
    if s.details.server_headers.is_empty() {
        line("  server    sent no rate-limit headers".to_owned());
    } else {
        line("  server    said (latest values):".to_owned());
        for (name, value) in &s.details.server_headers {
            line(format!("            {name}: {value}"));
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_or_say_why() {
        let (n, v) = parse_header("X-Api-Key:  abc ").unwrap();
        assert_eq!(n.as_str(), "x-api-key");
        assert_eq!(v, "abc");
        assert!(parse_header("no colon")
            .unwrap_err()
            .contains("'name: value'"));
        assert!(parse_header("bad name: x")
            .unwrap_err()
            .contains("not a header name"));
        assert!(parse_header("x: a\nb")
            .unwrap_err()
            .contains("cannot carry"));
    }

    #[test]
    fn rate_headers_are_recognised() {
        for n in [
            "ratelimit-policy",
            "x-ratelimit-remaining",
            "x-rate-limit-reset",
            "retry-after",
            "x-shopify-shop-api-call-limit",
        ] {
            assert!(is_rate_header(n), "{n}");
        }
        assert!(!is_rate_header("content-type"));
    }
}
