//! The examples of the IETF `RateLimit` header drafts
//! (draft-ietf-httpapi-ratelimit-headers, and draft-polli before it), read
//! by ratewise's client-side parser. Each test names the draft generation
//! its example comes from.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratewise_client::headers::{
    parse_hints, parse_rate_limit_field, parse_rate_limit_policy_field, QuotaUnit,
};

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_750_000_000)
}

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

/// draft-08 to draft-10, "RateLimit-Policy Field" example.
#[test]
fn current_draft_single_policy() {
    let h = [
        ("RateLimit-Policy", r#""default";q=100;w=10"#),
        ("RateLimit", r#""default";r=50;t=30"#),
    ];
    let hints = parse_hints(&h[..], now());
    assert_eq!(hints.limit, Some(100));
    assert_eq!(hints.remaining, Some(50));
    assert_eq!(hints.reset_after, secs(30));
    assert_eq!(hints.retry_after, None);
}

/// draft-08 to draft-10: several policies in one field.
#[test]
fn current_draft_several_policies() {
    let p = parse_rate_limit_policy_field(br#""burst";q=100;w=60,"daily";q=1000;w=86400"#);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].policy.as_deref(), Some("burst"));
    assert_eq!((p[0].quota, p[0].window), (Some(100), secs(60)));
    assert_eq!(p[1].policy.as_deref(), Some("daily"));
    assert_eq!((p[1].quota, p[1].window), (Some(1000), secs(86400)));
    assert!(p.iter().all(|p| p.unit == QuotaUnit::Requests));
}

/// draft-09/10, a 429 whose `Retry-After` matches the policy's `t` ("should
/// not point earlier than t").
#[test]
fn current_draft_throttled_response() {
    let h = [
        ("Retry-After", "20"),
        ("RateLimit-Policy", r#""problemPolicy";q=100;w=60"#),
        ("RateLimit", r#""problemPolicy";r=0;t=20"#),
    ];
    let hints = parse_hints(&h[..], now());
    assert_eq!(hints.retry_after, secs(20));
    assert_eq!(hints.remaining, Some(0));
    assert_eq!(hints.limit, Some(100));
    assert_eq!(hints.reset_after, secs(20));
}

/// draft-08 to draft-10: the partition key `pk` and quota unit `qu`
/// parameters. A byte quota is kept as bytes and never read as requests.
#[test]
fn current_draft_partition_key_and_quota_unit() {
    let items = parse_rate_limit_field(br#""peak";r=40;t=5;pk=:cHsxMjM0NTY=:"#);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].remaining, Some(40));
    assert_eq!(items[0].reset, secs(5));
    let p = parse_rate_limit_policy_field(br#""bytes";q=65535;qu="content-bytes";w=10"#);
    assert_eq!(p[0].unit, QuotaUnit::ContentBytes);
    assert_eq!(p[0].quota, Some(65535));
    let h = [
        (
            "RateLimit-Policy",
            r#""bytes";q=65535;qu="content-bytes";w=10"#,
        ),
        ("RateLimit", r#""bytes";r=100;t=10"#),
    ];
    let hints = parse_hints(&h[..], now());
    assert_eq!(hints.limit, None, "a byte quota is not a request limit");
    assert_eq!(hints.remaining, None, "remaining bytes are not requests");
    let p = parse_rate_limit_policy_field(br#""inflight";q=10;qu="concurrent-requests""#);
    assert_eq!(p[0].unit, QuotaUnit::ConcurrentRequests);
}

/// draft-08 to draft-10: the fields may be split across several lines.
#[test]
fn current_draft_split_field_lines() {
    let h = [
        ("RateLimit-Policy", r#""burst";q=100;w=60"#),
        ("RateLimit-Policy", r#""daily";q=1000;w=86400"#),
        ("RateLimit", r#""burst";r=99;t=1"#),
        ("RateLimit", r#""daily";r=5;t=4000"#),
    ];
    let hints = parse_hints(&h[..], now());
    // The tighter policy (fewest remaining) decides.
    assert_eq!(hints.remaining, Some(5));
    assert_eq!(hints.limit, Some(1000));
    assert_eq!(hints.reset_after, secs(4000));
}

/// draft-07: one Dictionary field and an unnamed policy list.
#[test]
fn draft_07_dictionary() {
    let h = [
        ("RateLimit", "limit=100, remaining=50, reset=5"),
        ("RateLimit-Policy", "10;w=1, 50;w=60"),
    ];
    let hints = parse_hints(&h[..], now());
    assert_eq!(hints.limit, Some(100));
    assert_eq!(hints.remaining, Some(50));
    assert_eq!(hints.reset_after, secs(5));
    let p = parse_rate_limit_policy_field(b"10;w=1, 50;w=60");
    assert_eq!((p[0].quota, p[0].window), (Some(10), secs(1)));
    assert_eq!((p[1].quota, p[1].window), (Some(50), secs(60)));
    // A server lowering the limit below its policy (to slow a client down).
    let h = [("RateLimit", "limit=10, remaining=0, reset=10")];
    let hints = parse_hints(&h[..], now());
    assert_eq!(hints.limit, Some(10));
    assert_eq!(hints.remaining, Some(0));
}

/// draft-06: three fields plus `RateLimit-Policy`; the policy is
/// informative and the limit is the one in force.
#[test]
fn draft_06_three_fields_and_policy() {
    let h = [
        ("RateLimit-Limit", "10"),
        ("RateLimit-Remaining", "1"),
        ("RateLimit-Reset", "7"),
        ("RateLimit-Policy", "10;w=1"),
    ];
    let hints = parse_hints(&h[..], now());
    assert_eq!(hints.limit, Some(10));
    assert_eq!(hints.remaining, Some(1));
    assert_eq!(hints.reset_after, secs(7));
    // A lowered limit wins over a larger nominal policy.
    let h = [("RateLimit-Limit", "10"), ("RateLimit-Policy", "100;w=60")];
    assert_eq!(parse_hints(&h[..], now()).limit, Some(10));
}

/// draft-00 to draft-05 (and draft-polli): the limit followed by its
/// policies, `RateLimit-Limit: 10, 10;w=1, 50;w=60`.
#[test]
fn early_drafts_limit_with_policies() {
    let h = [
        ("RateLimit-Limit", "10, 10;w=1, 50;w=60"),
        ("RateLimit-Remaining", "9"),
        ("RateLimit-Reset", "1"),
    ];
    let hints = parse_hints(&h[..], now());
    assert_eq!(hints.limit, Some(10));
    assert_eq!(hints.remaining, Some(9));
    assert_eq!(hints.reset_after, secs(1));
}

/// The pre-standard `X-RateLimit-*` trio the drafts grew out of, with the
/// epoch reset GitHub sends.
#[test]
fn legacy_x_ratelimit_with_epoch_reset() {
    let reset = now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 42;
    let reset = reset.to_string();
    let h = [
        ("X-RateLimit-Limit", "5000"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", reset.as_str()),
    ];
    let hints = parse_hints(&h[..], now());
    assert_eq!(hints.limit, Some(5000));
    assert_eq!(hints.remaining, Some(0));
    assert_eq!(hints.reset_after, secs(42));
}
