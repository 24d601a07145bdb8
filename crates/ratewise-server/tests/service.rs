//! The binary, end to end on 127.0.0.1: gRPC and HTTP answers, reloads,
//! errors at start, shutdown on SIGTERM, and malformed input.

mod common;
mod support;

use std::process::Command;
use std::time::Duration;

use common::{desc, req};
use ratewise_server::rls::{Code, RateLimitClient};
use support::*;

const CONFIG: &str = "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3, name: per_user }
";

async fn client(server: &Server) -> RateLimitClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .expect("connect to the gRPC port");
    RateLimitClient::new(channel)
}

#[tokio::test]
async fn grpc_answers_with_statuses_and_headers() {
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &[]);
    let mut c = client(&server).await;
    let call = req("edge", vec![desc(&[("user", "alice")])]);
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let r = c.should_rate_limit(call.clone()).await.unwrap();
        assert_eq!(r.overall_code(), Code::Ok);
        remaining.push(r.statuses[0].limit_remaining);
    }
    assert_eq!(remaining, vec![2, 1, 0]);
    let refused = c.should_rate_limit(call).await.unwrap();
    assert_eq!(refused.overall_code(), Code::OverLimit);
    let keys: Vec<&str> = refused
        .response_headers_to_add
        .iter()
        .map(|h| h.key.as_str())
        .collect();
    assert_eq!(keys, vec!["RateLimit-Policy", "RateLimit", "Retry-After"]);
    // A bad request is a gRPC error with a message, never UNKNOWN.
    let err = c
        .should_rate_limit(req("", vec![desc(&[("user", "a")])]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("domain is empty"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn invalid_utf8_is_refused_and_the_server_keeps_serving() {
    #[derive(Clone, PartialEq, prost::Message)]
    struct RawRequest {
        #[prost(bytes = "vec", tag = "1")]
        domain: Vec<u8>,
    }
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &[]);
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static(ratewise_server::rls::SHOULD_RATE_LIMIT_PATH);
    let codec: tonic_prost::ProstCodec<RawRequest, ratewise_server::rls::RateLimitResponse> =
        tonic_prost::ProstCodec::default();
    let err = grpc
        .unary(
            tonic::Request::new(RawRequest {
                domain: vec![0xff, 0xfe],
            }),
            path,
            codec,
        )
        .await
        .unwrap_err();
    assert_ne!(err.code(), tonic::Code::Ok);
    assert!(
        err.message().contains("UTF-8") || err.message().contains("utf"),
        "{}",
        err.message()
    );
    let mut c = client(&server).await;
    let r = c
        .should_rate_limit(req("edge", vec![desc(&[("user", "a")])]))
        .await
        .unwrap();
    assert_eq!(r.overall_code(), Code::Ok);
}

#[test]
fn http_serves_json_health_metrics_status_and_rules() {
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &[]);
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}"#;
    let codes: Vec<u16> = (0..4)
        .map(|_| http_post(server.http, "/json", body).0)
        .collect();
    assert_eq!(codes, vec![200, 200, 200, 429]);
    let (_, text) = http_post(server.http, "/json", body);
    assert!(text.contains(r#""overallCode":"OVER_LIMIT""#), "{text}");
    assert!(text.contains(r#""unit":"MINUTE""#), "{text}");
    let (status, text) = http_post(server.http, "/json", "{not json");
    assert_eq!(status, 400);
    assert!(text.contains("invalid request"), "{text}");
    let (status, _, text) = http_get(server.http, "/healthcheck", &[]);
    assert_eq!((status, text.trim()), (200, "OK"));
    let (status, _, metrics) = http_get(server.http, "/metrics", &[]);
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"ratewise_server_decisions_total{domain="edge",rule="per_user",outcome="over_limit"} 2"#),
        "{metrics}"
    );
    // A histogram (its buckets add up across instances), not a summary.
    assert!(
        metrics.contains(r#"ratewise_server_decision_seconds_bucket{le="0.02"}"#)
            && metrics.contains("ratewise_server_decision_seconds_count "),
        "{metrics}"
    );
    let (_, _, status_json) = http_get(server.http, "/status", &[]);
    assert!(
        status_json.contains(r#""name":"per_user""#) && status_json.contains(r#""over_limit":2"#),
        "{status_json}"
    );
    let (status, _, page) = http_get(server.http, "/", &[]);
    assert_eq!(status, 200);
    assert!(page.contains("<title>ratewise-server</title>"), "{page}");
    let (_, _, rules) = http_get(server.http, "/rules", &[]);
    assert!(rules.contains("edge.user"), "{rules}");
    // A bounded sample of live keys: the first call of a rule is sampled.
    assert!(rules.contains("    user=bob (live)"), "{rules}");
}

#[test]
fn hot_reload_swaps_rules_and_a_bad_file_keeps_the_old_ones() {
    let dir = config_dir(CONFIG);
    let server = Server::start(&dir, &[]);
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"carol"}]}]}"#;
    let admitted = |n: usize| {
        (0..n)
            .filter(|_| http_post(server.http, "/json", body).0 == 200)
            .count()
    };
    assert_eq!(admitted(5), 3);
    let loads = || {
        let (_, _, s) = http_get(server.http, "/status", &[]);
        let ok = s
            .split(r#""loads_ok":"#)
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|n| n.parse::<u64>().ok());
        let failed = s
            .split(r#""reloads_failed":"#)
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|n| n.parse::<u64>().ok());
        (ok.unwrap_or(0), failed.unwrap_or(0))
    };
    // A new rule for another user, the per-user rule unchanged: its spent
    // counter survives the reload.
    let next = format!(
        "{CONFIG}  - key: team\n    rate_limit: {{ unit: second, requests_per_unit: 1 }}\n"
    );
    replace_file(&dir.join("edge.yaml"), &next);
    wait_until(Duration::from_secs(10), "the reload", || loads().0 == 2);
    assert_eq!(admitted(2), 0, "the unchanged rule kept its state");
    // A bad file: logged once, counted, the rules in force stay.
    replace_file(
        &dir.join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limt: {}\n",
    );
    wait_until(Duration::from_secs(10), "the failed reload", || {
        loads().1 >= 1
    });
    let team = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"team","value":"t"}]}]}"#;
    assert_eq!(http_post(server.http, "/json", team).0, 200);
    assert_eq!(
        http_post(server.http, "/json", team).0,
        429,
        "the reloaded rule still holds"
    );
    let (_, _, s) = http_get(server.http, "/status", &[]);
    assert!(
        s.contains("rate_limt"),
        "the status page shows the error: {s}"
    );
    assert_eq!(
        server.log().matches("configuration not reloaded").count(),
        1,
        "{}",
        server.log()
    );
}

#[test]
fn start_errors_are_one_clear_line() {
    let exe = env!("CARGO_BIN_EXE_ratewise-server");
    let bad_flag = Command::new(exe)
        .args(["--config", "x", "--grpc", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(bad_flag.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_flag.stderr).contains("--grpc"));

    let missing = Command::new(exe)
        .args(["--config", "/nonexistent/ratewise.yaml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let text = String::from_utf8_lossy(&missing.stderr);
    assert!(
        text.contains("cannot read /nonexistent/ratewise.yaml"),
        "{text}"
    );

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let dir = config_dir(CONFIG);
    let (code, text) = refused_start(&dir, &["--grpc", &addr, "--http", "127.0.0.1:0"]);
    assert_eq!(code, Some(1));
    assert!(
        text.contains(&format!("cannot listen for gRPC on {addr}")),
        "{text}"
    );

    // A certificate that cannot be read stops the start, named with its
    // flag; a client certificate without its key is refused by the parser.
    let (code, text) = refused_start(
        &dir,
        &[
            "--redis",
            "rediss://127.0.0.1:1",
            "--redis-ca-cert",
            "/nonexistent/ca.pem",
        ],
    );
    assert_eq!(code, Some(1));
    assert!(
        text.contains("--redis-ca-cert /nonexistent/ca.pem"),
        "{text}"
    );
    let (code, text) = refused_start(&dir, &["--redis-client-cert", "/c.pem"]);
    assert_eq!(code, Some(2));
    assert!(text.contains("--redis-client-key"), "{text}");
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let dir = config_dir(CONFIG);
    let mut server = Server::start(&dir, &[]);
    let status = server.terminate(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{}", server.log());
}

#[test]
fn envoyproxy_ratelimits_environment_configures_it() {
    // The Go service's layout: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
    let root = tempdir("runtime");
    let dir = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge.yaml"), CONFIG).unwrap();
    // A second file of the same domain, merged as MERGE_DOMAIN_CONFIG says.
    std::fs::write(
        dir.join("edge-routes.yaml"),
        "domain: edge\ndescriptors:\n  - key: route\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n",
    )
    .unwrap();
    let root = root.display().to_string();
    let server = Server::start_from_ratelimit_env(&[
        ("RUNTIME_ROOT", root.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("MERGE_DOMAIN_CONFIG", "true"),
        ("USE_STATSD", "true"),
    ]);
    let route = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"route","value":"/a"}]}]}"#;
    let codes: Vec<u16> = (0..2)
        .map(|_| http_post(server.http, "/json", route).0)
        .collect();
    assert_eq!(codes, vec![200, 429], "{}", server.log());
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}"#;
    let codes: Vec<u16> = (0..4)
        .map(|_| http_post(server.http, "/json", body).0)
        .collect();
    assert_eq!(codes, vec![200, 200, 200, 429], "{}", server.log());
    // The Go service's headers when LIMIT_RESPONSE_HEADERS_ENABLED is set.
    let (_, text) = http_post(server.http, "/json", body);
    assert!(text.contains("RateLimit-Limit"), "{text}");
    // What it does not act on is said, not dropped.
    assert!(server.log().contains("USE_STATSD=true"), "{}", server.log());
}

#[test]
fn an_unsupported_ratelimit_setting_stops_the_start_with_its_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_ratewise-server"))
        .arg("--ratelimit-env")
        .env("BACKEND_TYPE", "memcache")
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("BACKEND_TYPE=memcache"), "{text}");
}

#[test]
fn check_validates_the_configuration_and_serves_nothing() {
    let exe = env!("CARGO_BIN_EXE_ratewise-server");
    let dir = config_dir(CONFIG);
    // `--grpc` on a port in use: a check never listens, so it does not care.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let ok = Command::new(exe)
        .arg("--check")
        .arg("--config")
        .arg(&*dir)
        .args(["--grpc", &addr])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{text}");
    assert!(
        text.contains("valid: 1 file(s), 1 domain(s), 1 rule(s)"),
        "{text}"
    );
    assert!(text.contains("edge.user: 0.05/s, burst 3 (gcra)"), "{text}");

    // A second file of the domain: refused, unless merged.
    std::fs::write(
        dir.join("more.yaml"),
        "domain: edge\ndescriptors:\n  - key: route\n    rate_limit: { unit: second, requests_per_unit: 5 }\n",
    )
    .unwrap();
    let twice = Command::new(exe)
        .arg("--check")
        .arg("--config")
        .arg(&*dir)
        .output()
        .unwrap();
    assert_eq!(twice.status.code(), Some(1));
    let text = String::from_utf8_lossy(&twice.stderr);
    assert!(
        text.contains("defined twice") && text.contains("--merge-domains"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    let merged = Command::new(exe)
        .args(["--check", "--merge-domains", "--config"])
        .arg(&*dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&merged.stdout);
    assert_eq!(merged.status.code(), Some(0), "{text}");
    assert!(text.contains("2 file(s), 1 domain(s), 2 rule(s)"), "{text}");
    assert!(text.contains("edge.route: 5/s, burst 5 (gcra)"), "{text}");
}
