//! The middleware on the Redis backend: the same layer, one builder call
//! different, against a private `redis-server` (the Redis crate's test
//! harness). Two layers (two "replicas") share one quota through Redis.

#[path = "common/mod.rs"]
mod http_common;

#[path = "../../ratewise-redis/tests/common/mod.rs"]
mod common;

use axum::routing::get;
use axum::Router;
use http::{HeaderName, StatusCode};
use http_common::{serve, HttpClient};
use ratewise::Quota;
use ratewise_client::headers::parse_rate_limit_field;
use ratewise_redis::RedisLimiter;
use ratewise_tower::{KeySource, RateLimitLayer};

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

#[test]
#[cfg_attr(
    ratewise_no_redis_server,
    ignore = "needs redis-server (apt-get install redis-server redis-tools)"
)]
fn two_replicas_share_one_quota_through_redis() {
    let server = common::RedisServer::start();
    let rt = common::multi_thread_runtime();
    rt.block_on(async {
        // 3 per minute per API key, held in Redis.
        let quota = Quota::per_minute(3).unwrap();
        let replica = |conn| {
            let limiter = RedisLimiter::new(conn, quota).unwrap();
            RateLimitLayer::builder()
                .key(KeySource::header(HeaderName::from_static("x-api-key")))
                .backend_bytes("per-key", quota, limiter)
                .build()
                .unwrap()
        };
        let conn = ratewise_redis::connect(&server.url()).await.unwrap();
        let a = HttpClient::new(serve(app(replica(conn.clone()))).await);
        let b = HttpClient::new(serve(app(replica(conn))).await);
        let key = [("x-api-key", "k-1")];
        let mut statuses = Vec::new();
        for client in [&a, &b, &a, &b] {
            statuses.push(client.get("/", &key).await);
        }
        let codes: Vec<StatusCode> = statuses.iter().map(|r| r.status).collect();
        // Three admitted across both replicas, the fourth refused: one
        // quota, not one per replica.
        assert_eq!(
            codes,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS
            ]
        );
        let refused = &statuses[3];
        let items = parse_rate_limit_field(refused.header("ratelimit").unwrap().as_bytes());
        assert_eq!(items[0].policy.as_deref(), Some("per-key"));
        assert_eq!(items[0].remaining, Some(0));
        // One unit comes back every 20 s: Retry-After is 20, rounded up.
        let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((19..=20).contains(&retry), "{retry}");
        // Another key has its own quota.
        let other = a.get("/", &[("x-api-key", "k-2")]).await;
        assert_eq!(other.status, StatusCode::OK);
    });
}
