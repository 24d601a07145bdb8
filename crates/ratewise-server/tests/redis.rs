//! Quotas on a real `redis-server` shared by two service instances, and the
//! faults: Redis absent at start, killed mid-load, paused; and a three-node
//! Redis Cluster that loses a master. Each test starts its own Redis on free
//! ports.

mod common;
mod support;

use std::time::{Duration, Instant};

use common::{desc, req};
use ratewise_server::rls::{Code, RateLimitClient, RateLimitRequest};
use support::*;

const CONFIG: &str = "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10, name: per_user }
  - key: route
    rate_limit: { unit: hour, requests_per_unit: 1000, name: per_route }
  - key: window
    rate_limit: { unit: minute, requests_per_unit: 1000, algorithm: fixed_window }
";

fn config() -> TempDir {
    config_dir(CONFIG)
}

async fn client(server: &Server) -> RateLimitClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    RateLimitClient::new(channel)
}

async fn ok(c: &mut RateLimitClient<tonic::transport::Channel>, r: &RateLimitRequest) -> bool {
    c.should_rate_limit(r.clone()).await.unwrap().overall_code() == Code::Ok
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_quota() {
    let redis = Redis::start();
    let dir = config();
    // A generous deadline: this test is about sharing, not about a slow
    // Redis (which the default policy would answer by admitting).
    let a = Server::start(&dir, &["--redis", &redis.url(), "--store-deadline", "2s"]);
    let b = Server::start(&dir, &["--redis", &redis.url(), "--store-deadline", "2s"]);
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    let r = req("edge", vec![desc(&[("user", "shared")])]);
    let admitted = alternately(&mut ca, &mut cb, &r, 10).await;
    assert_eq!(admitted, 10, "one quota across both instances");
    assert_eq!(degraded(&a) + degraded(&b), 0, "Redis decided every call");
    let status = cb.should_rate_limit(r).await.unwrap().statuses[0].clone();
    assert_eq!(status.limit_remaining, 0);
    assert!(
        status.duration_until_reset.is_some_and(|d| d.seconds > 50),
        "{status:?}"
    );
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_with_other_prefixes_share_nothing_on_one_redis() {
    let redis = Redis::start();
    let dir = config();
    let start = |prefix: &str| {
        Server::start(
            &dir,
            &[
                "--redis",
                &redis.url(),
                "--store-deadline",
                "2s",
                "--redis-prefix",
                prefix,
            ],
        )
    };
    let (staging, production) = (start("staging:"), start("production:"));
    let (mut cs, mut cp) = (client(&staging).await, client(&production).await);
    let r = req("edge", vec![desc(&[("user", "shared")])]);
    let (mut s, mut p) = (0, 0);
    for _ in 0..15 {
        s += usize::from(ok(&mut cs, &r).await);
        p += usize::from(ok(&mut cp, &r).await);
    }
    // The limit is 10 (one quota shared by both would admit 10 in all).
    assert_eq!((s, p), (10, 10), "each deployment has its own quota");
    assert_eq!(degraded(&staging) + degraded(&production), 0);
    // Their keys and heartbeats are under their prefixes, and nothing else.
    let reply = redis.command(&["KEYS", "*"]).expect("KEYS answers");
    let keys: Vec<&str> = reply
        .lines()
        .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
        .collect();
    assert!(!keys.is_empty());
    assert!(
        keys.iter()
            .all(|k| k.starts_with("staging:") || k.starts_with("production:")),
        "{keys:?}"
    );
    assert!(keys.iter().any(|k| k.starts_with("staging:")), "{keys:?}");
    assert!(
        keys.iter().any(|k| k.starts_with("production:")),
        "{keys:?}"
    );
    // A prefix with a hash tag's braces is refused at start.
    let (code, text) = refused_start(&dir, &["--redis-prefix", "{team}:"]);
    assert_eq!(code, Some(2));
    assert!(text.contains("--redis-prefix"), "{text}");
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_refused_request_charges_no_other_descriptor() {
    let redis = Redis::start();
    let server = Server::start_owning(
        config(),
        &["--redis", &redis.url(), "--store-deadline", "2s"],
    );
    let mut c = client(&server).await;
    let both = req(
        "edge",
        vec![desc(&[("route", "/x")]), desc(&[("user", "u")])],
    );
    let mut admitted = 0;
    for _ in 0..15 {
        admitted += usize::from(ok(&mut c, &both).await);
    }
    assert_eq!(admitted, 10);
    let route = req("edge", vec![desc(&[("route", "/x")])]);
    let left = c.should_rate_limit(route).await.unwrap().statuses[0].limit_remaining;
    assert_eq!(
        left,
        1000 - 10 - 1,
        "the five refusals did not charge the route"
    );
    // Mixed algorithms take the look-then-charge path; still no charge on
    // a refusal.
    let mixed = req(
        "edge",
        vec![desc(&[("window", "w")]), desc(&[("user", "u")])],
    );
    assert!(!ok(&mut c, &mixed).await);
    let window = req("edge", vec![desc(&[("window", "w")])]);
    let left = c.should_rate_limit(window).await.unwrap().statuses[0].limit_remaining;
    assert_eq!(left, 999);
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_quota_mode_refuses_only_when_every_quota_mode_descriptor_is_over() {
    let redis = Redis::start();
    let dir = config_dir(
        "domain: q
descriptors:
  - key: service
    value: one
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: service
    value: two
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
",
    );
    let server = Server::start(&dir, &["--redis", &redis.url(), "--store-deadline", "2s"]);
    let mut c = client(&server).await;
    let one = req("q", vec![desc(&[("service", "one")])]);
    let both = req(
        "q",
        vec![desc(&[("service", "one")]), desc(&[("service", "two")])],
    );
    assert!(ok(&mut c, &one).await);
    assert!(!ok(&mut c, &one).await, "alone, over its quota");
    let codes = |r: &ratewise_server::rls::RateLimitResponse| {
        r.statuses.iter().map(|s| s.code()).collect::<Vec<_>>()
    };
    for left in [1, 0] {
        let r = c.should_rate_limit(both.clone()).await.unwrap();
        assert_eq!(r.overall_code(), Code::Ok, "`two` has room");
        assert_eq!(codes(&r), [Code::OverLimit, Code::Ok]);
        assert_eq!(r.statuses[1].limit_remaining, left);
    }
    let r = c.should_rate_limit(both).await.unwrap();
    assert_eq!(r.overall_code(), Code::OverLimit, "every quota is over");
    assert_eq!(degraded(&server), 0, "Redis decided every call");
}

/// Calls `r` every few milliseconds on one connection until `until`, and
/// returns each call's latency with whether it was admitted.
async fn drive(
    grpc: std::net::SocketAddr,
    r: RateLimitRequest,
    until: Instant,
) -> Vec<(Duration, bool)> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = RateLimitClient::new(channel);
    let mut out = Vec::new();
    while Instant::now() < until {
        let start = Instant::now();
        let answer = c.should_rate_limit(r.clone()).await.unwrap();
        out.push((start.elapsed(), answer.overall_code() == Code::Ok));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out
}

fn degraded(server: &Server) -> u64 {
    let (_, _, metrics) = http_get(server.http, "/metrics", &[]);
    metrics
        .lines()
        .filter(|l| l.starts_with("ratewise_server_degraded_decisions_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The deadline given to the service, and the margin a call may take
/// beyond it on a busy two-core machine.
const DEADLINE: Duration = Duration::from_millis(10);
const MARGIN: Duration = Duration::from_millis(90);

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_starts_before_redis_and_uses_it_within_a_second() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let server = Server::start_owning(config(), &["--redis", &url, "--store-deadline", "10ms"]);
    let mut c = client(&server).await;
    let r = req("edge", vec![desc(&[("user", "early")])]);
    // No Redis: the default policy (open) admits, and says so.
    for _ in 0..12 {
        assert!(ok(&mut c, &r).await);
    }
    assert!(
        degraded(&server) >= 12,
        "every degraded decision is counted"
    );
    let _redis = Redis::start_on(port);
    let back = Instant::now();
    // Redis answers: the eleventh call on one key is refused once Redis
    // decides. Each probe uses a fresh key and spends its quota.
    let mut n = 0;
    loop {
        n += 1;
        let probe = req("edge", vec![desc(&[("user", &format!("probe-{n}"))])]);
        let mut admitted = 0;
        for _ in 0..11 {
            admitted += usize::from(ok(&mut c, &probe).await);
        }
        if admitted == 10 {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "Redis not used 5 s after it came up"
        );
    }
    let took = back.elapsed();
    eprintln!("Redis used again {took:?} after it answered PING");
    assert!(took <= Duration::from_secs(1), "{took:?}");
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_load_the_policy_holds_within_the_deadline_and_redis_comes_back() {
    let mut redis = Redis::start();
    let port = redis.port;
    let server = Server::start_owning(
        config(),
        &[
            "--redis",
            &redis.url(),
            "--store-deadline",
            "10ms",
            "--store-failure",
            "closed",
        ],
    );
    let before = degraded(&server);
    let r = req("edge", vec![desc(&[("route", "/load")])]);
    let until = Instant::now() + Duration::from_millis(1_500);
    let load = tokio::spawn(drive(server.grpc, r.clone(), until));
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.kill();
    let calls = load.await.unwrap();
    let after_kill: Vec<_> = calls.iter().skip(5).collect();
    let slowest = after_kill.iter().map(|c| c.0).max().unwrap_or_default();
    eprintln!("{} calls; slowest {slowest:?}", calls.len());
    assert!(slowest <= DEADLINE + MARGIN, "a call waited {slowest:?}");
    let refused = calls.iter().filter(|c| !c.1).count();
    assert!(refused > 0, "fail closed refused while Redis was down");
    assert!(degraded(&server) > before, "and counted it");
    // Redis back on the same port: used again within a second.
    let _again = Redis::start_on(port);
    let back = Instant::now();
    let mut c = client(&server).await;
    while !ok(&mut c, &r).await {
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "Redis not used 5 s after it came back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = back.elapsed();
    eprintln!("Redis used again {took:?} after restart");
    assert!(took <= Duration::from_secs(1), "{took:?}");
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_costs_no_call_more_than_the_deadline() {
    let redis = Redis::start();
    let server = Server::start_owning(
        config(),
        &["--redis", &redis.url(), "--store-deadline", "10ms"],
    );
    let r = req("edge", vec![desc(&[("route", "/paused")])]);
    let mut c = client(&server).await;
    assert!(ok(&mut c, &r).await);
    let before = degraded(&server);
    assert!(redis
        .command(&["CLIENT", "PAUSE", "800", "ALL"])
        .is_some_and(|s| s.contains("OK")));
    let calls = drive(
        server.grpc,
        r.clone(),
        Instant::now() + Duration::from_millis(600),
    )
    .await;
    let slowest = calls.iter().map(|c| c.0).max().unwrap_or_default();
    eprintln!(
        "{} calls during the pause; slowest {slowest:?}",
        calls.len()
    );
    assert!(slowest <= DEADLINE + MARGIN, "a call waited {slowest:?}");
    assert!(calls.iter().all(|c| c.1), "fail open admitted");
    assert!(degraded(&server) > before, "and counted it");
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_error_policy_answers_unavailable_and_local_holds_a_share() {
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    // `error`: a gRPC UNAVAILABLE, so Envoy's failure_mode_deny decides.
    let error = Server::start_owning(config(), &["--redis", &nowhere, "--store-failure", "error"]);
    let mut c = client(&error).await;
    let r = req("edge", vec![desc(&[("user", "x")])]);
    let status = c.should_rate_limit(r.clone()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("shared store"),
        "{}",
        status.message()
    );
    let (code, body) = http_post(
        error.http,
        "/json",
        r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"x"}]}]}"#,
    );
    assert_eq!(code, 503, "{body}");
    // `local`: each of 2 instances holds half of the 10 per minute, and a
    // key's share starts spent (the fleet may have spent the limit just
    // before): refused, and full again only a whole minute later.
    let local = Server::start_owning(
        config(),
        &[
            "--redis",
            &nowhere,
            "--store-failure",
            "local",
            "--instances",
            "2",
        ],
    );
    let mut c = client(&local).await;
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += usize::from(ok(&mut c, &r).await);
    }
    assert_eq!(admitted, 0, "the share starts spent");
    let refused = c.should_rate_limit(r.clone()).await.unwrap();
    let reset = refused.statuses[0].duration_until_reset.unwrap();
    assert!(
        (55..=60).contains(&reset.seconds),
        "a spent 5-per-minute share: {reset:?}"
    );
    assert!(degraded(&local) >= 11, "every decision counted as degraded");
}

/// How many of `rounds` × 2 calls of `r`, one to each instance in turn, are
/// admitted.
async fn alternately(
    a: &mut RateLimitClient<tonic::transport::Channel>,
    b: &mut RateLimitClient<tonic::transport::Channel>,
    r: &RateLimitRequest,
    rounds: usize,
) -> usize {
    let mut admitted = 0;
    for _ in 0..rounds {
        admitted += usize::from(ok(a, r).await);
        admitted += usize::from(ok(b, r).await);
    }
    admitted
}

/// The nodes of `cluster` holding a key of `domain` (the service's keys
/// carry their domain as the hash tag `{domain}`).
fn holders(cluster: &RedisCluster, domain: &str) -> Vec<usize> {
    let tag = format!("{{{domain}}}");
    (0..cluster.nodes.len())
        .filter(|&i| {
            cluster.nodes[i]
                .command(&["KEYS", &format!("*{tag}*")])
                .is_some_and(|reply| reply.contains(&tag))
        })
        .collect()
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_two_instances_share_quotas_and_a_lost_master_costs_only_its_domains() {
    const DOMAINS: usize = 8;
    let cluster = RedisCluster::start(3);
    let dir = tempdir("cluster-config");
    for d in 0..DOMAINS {
        std::fs::write(
            dir.join(format!("d{d}.yaml")),
            format!(
                "domain: d{d}\ndescriptors:\n  - key: user\n    rate_limit: {{ unit: minute, requests_per_unit: 10 }}\n"
            ),
        )
        .unwrap();
    }
    let nodes = cluster.urls().join(",");
    let args = ["--redis-cluster", &nodes, "--store-deadline", "500ms"];
    let a = Server::start(&dir, &args);
    let b = Server::start(&dir, &args);
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    let user = |d: usize, u: &str| req(&format!("d{d}"), vec![desc(&[("user", u)])]);
    for d in 0..DOMAINS {
        let admitted = alternately(&mut ca, &mut cb, &user(d, "first"), 10).await;
        assert_eq!(admitted, 10, "d{d}: one quota across both instances");
    }
    assert_eq!(
        degraded(&a) + degraded(&b),
        0,
        "the cluster decided every call"
    );
    // Each domain's keys live on one node, and the domains spread over the
    // nodes.
    let home: Vec<usize> = (0..DOMAINS)
        .map(|d| match holders(&cluster, &format!("d{d}"))[..] {
            [node] => node,
            ref other => panic!("d{d}'s keys are on nodes {other:?}"),
        })
        .collect();
    let mut used = home.clone();
    used.sort_unstable();
    used.dedup();
    assert!(used.len() >= 2, "every domain on one node: {home:?}");

    // Lose the node of d0, with no replica to take over.
    let lost = home[0];
    let mut cluster = cluster;
    cluster.nodes[lost].kill();
    let before = degraded(&a) + degraded(&b);
    // Domains elsewhere keep their exact shared limit.
    for d in (0..DOMAINS).filter(|&d| home[d] != lost) {
        let admitted = alternately(&mut ca, &mut cb, &user(d, "second"), 10).await;
        assert_eq!(admitted, 10, "d{d}, on a live node");
    }
    // The lost node's domains are answered by the failure policy, within
    // the deadline and counted, never with an error.
    for d in (0..DOMAINS).filter(|&d| home[d] == lost) {
        let r = user(d, "second");
        for c in [&mut ca, &mut cb] {
            let start = Instant::now();
            let answer = c.should_rate_limit(r.clone()).await;
            assert!(answer.is_ok(), "d{d}: {answer:?}");
            assert!(
                start.elapsed() < Duration::from_millis(500) + MARGIN,
                "d{d}: {:?}",
                start.elapsed()
            );
        }
    }
    assert!(
        degraded(&a) + degraded(&b) > before,
        "the failure policy's answers are counted"
    );
}

#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
#[cfg_attr(
    ratewise_no_openssl,
    ignore = "needs openssl (apt-get install openssl)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_two_instances_share_one_quota_and_an_unproven_side_decides_nothing() {
    let tls = TlsRedis::start();
    let dir = config();
    let url = format!("rediss://127.0.0.1:{}", tls.redis.port);
    let (ca, cert, key) = (
        tls.file("ca.pem"),
        tls.file("client.pem"),
        tls.file("client.key"),
    );
    let full = [
        "--redis",
        &url,
        "--store-deadline",
        "2s",
        "--redis-ca-cert",
        &ca,
        "--redis-client-cert",
        &cert,
        "--redis-client-key",
        &key,
    ];
    let a = Server::start(&dir, &full);
    let b = Server::start(&dir, &full);
    let (mut ca_client, mut cb) = (client(&a).await, client(&b).await);
    let r = req("edge", vec![desc(&[("user", "over-tls")])]);
    assert_eq!(
        alternately(&mut ca_client, &mut cb, &r, 10).await,
        10,
        "one quota across both instances, over TLS"
    );
    assert_eq!(degraded(&a) + degraded(&b), 0, "Redis decided every call");
    // Without the client certificate Redis refuses the handshake; without
    // the private authority the server's certificate is not trusted. Either
    // way no decision comes from that Redis: each is the failure policy's,
    // answered and counted.
    for args in [
        &["--redis", &url, "--redis-ca-cert", &ca][..],
        &[
            "--redis",
            &url,
            "--redis-client-cert",
            &cert,
            "--redis-client-key",
            &key,
        ][..],
    ] {
        let strict = Server::start(&dir, &[args, &["--store-deadline", "200ms"][..]].concat());
        let mut cs = client(&strict).await;
        let answer = cs.should_rate_limit(r.clone()).await;
        assert!(answer.is_ok(), "{args:?}: {answer:?}");
        assert!(degraded(&strict) > 0, "{args:?}: that Redis decided a call");
    }
}
