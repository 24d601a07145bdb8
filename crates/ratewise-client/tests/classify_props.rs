//! Property tests for the response classifier and the rate-limit header
//! parsers: no input panics, nothing is invented, and well-formed values
//! round-trip exactly.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use ratewise_client::classify::{classify, Classifier};
use ratewise_client::headers::{
    parse_delta_seconds, parse_hints, parse_http_date, parse_rate_limit_field,
    parse_rate_limit_policy_field, parse_retry_after, parse_rfc3339, parse_unit_duration,
    RetryAfter,
};
use ratewise_client::{ServerHints, Signal};

/// Every header name the parsers and classifier read.
const KNOWN: [&str; 33] = [
    "retry-after",
    "retry-after-ms",
    "x-amz-retry-after",
    "grpc-retry-pushback-ms",
    "grpc-status",
    "x-amzn-errortype",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-used",
    "x-ratelimit-reset-after",
    "x-rate-limit-limit",
    "x-rate-limit-remaining",
    "x-rate-limit-reset",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "x-shopify-shop-api-call-limit",
];

/// Fragments that steer random bytes into the parsers' interesting paths.
const FRAGMENTS: [&str; 49] = [
    "\"",
    "\\",
    ":",
    ",",
    ";",
    "=",
    "{",
    "}",
    "[",
    " ",
    "-",
    ".",
    "0",
    "9",
    "18446744073709551616",
    "999999999999999",
    "r",
    "t",
    "q",
    "w",
    "reason",
    "rateLimitExceeded",
    "__type",
    "code",
    "#",
    "ThrottlingException",
    "<Code>",
    "</Code>",
    "type",
    "RATE_LIMITED",
    "secondary rate limit",
    "Sun",
    "Nov",
    "1994",
    "08:49:37",
    "GMT",
    "\"default\"",
    "limit",
    "remaining",
    "\u{1F600}",
    "/",
    "ms",
    "h",
    "m",
    "s",
    "\u{b5}s",
    "2026-11-24T22:31:05",
    "Z",
    "+01:00",
];

fn arbitrary_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..96),
        proptest::collection::vec(prop::sample::select(&FRAGMENTS[..]), 0..24)
            .prop_map(|parts| parts.concat().into_bytes()),
    ]
}

/// A known header name in random ASCII case.
fn known_name() -> impl Strategy<Value = Vec<u8>> {
    (prop::sample::select(&KNOWN[..]), any::<u64>()).prop_map(|(name, mask)| {
        name.bytes()
            .enumerate()
            .map(|(i, b)| {
                if mask >> (i % 64) & 1 == 1 {
                    b.to_ascii_uppercase()
                } else {
                    b
                }
            })
            .collect()
    })
}

fn headers() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
    let name = prop_oneof![known_name(), arbitrary_bytes()];
    proptest::collection::vec((name, arbitrary_bytes()), 0..8)
}

fn wall_clock() -> impl Strategy<Value = SystemTime> {
    prop_oneof![
        Just(UNIX_EPOCH),
        (0u64..=253_402_300_799).prop_map(|s| UNIX_EPOCH + Duration::from_secs(s)),
    ]
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// The three HTTP-date forms of `secs` after the epoch.
fn http_dates(secs: i64) -> [String; 3] {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, rem / 60 % 60, rem % 60);
    let wd = DAYS[usize::try_from((days + 4).rem_euclid(7)).unwrap()];
    let mon = MONTHS[usize::try_from(m - 1).unwrap()];
    [
        format!(
            "{}, {d:02} {mon} {y:04} {hh:02}:{mm:02}:{ss:02} GMT",
            &wd[..3]
        ),
        format!(
            "{wd}, {d:02}-{mon}-{:02} {hh:02}:{mm:02}:{ss:02} GMT",
            y % 100
        ),
        format!("{} {mon} {d:>2} {hh:02}:{mm:02}:{ss:02} {y}", &wd[..3]),
    ]
}

proptest! {
    // The no-panic property is the one fuzzing would check: give it many
    // more cases than the round trips need (still well under a second).
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// No header, body or status panics any parser or the classifier, and the
    /// hints are self-consistent.
    #[test]
    fn nothing_panics_and_hints_are_sane(
        status in any::<u16>(),
        hs in headers(),
        body in proptest::option::of(arbitrary_bytes()),
        now in wall_clock(),
    ) {
        let signal = classify(status, &hs, body.as_deref());
        let outcome = Classifier::new().outcome(status, &hs, body.as_deref(), now);
        prop_assert_eq!(outcome.signal, signal);
        let hints = outcome.hints;
        prop_assert_eq!(hints, parse_hints(&hs, now));
        if let (Some(r), Some(l)) = (hints.remaining, hints.limit) {
            prop_assert!(r <= l, "remaining {} > limit {}", r, l);
        }
        // 429 is always a throttle; 2xx without a body or gRPC status is
        // always a success; no recogniser turns a 5xx into a success.
        if status == 429 {
            prop_assert_eq!(signal, Signal::Throttled);
        }
        if (500..=599).contains(&status) {
            prop_assert!(signal != Signal::Success);
        }
        if (200..=299).contains(&status) && body.is_none()
            && !hs.iter().any(|(k, _)| k.eq_ignore_ascii_case(b"grpc-status"))
        {
            prop_assert_eq!(signal, Signal::Success);
        }
        for (_, v) in &hs {
            let _ = parse_retry_after(v);
            let _ = parse_http_date(v);
            let _ = parse_delta_seconds(v);
            let _ = parse_rate_limit_field(v);
            let _ = parse_rate_limit_policy_field(v);
        }
    }
}

proptest! {
    /// Headers the parsers do not read produce no hints at all.
    #[test]
    fn unknown_headers_invent_nothing(
        hs in proptest::collection::vec(
            ("[a-z-]{0,20}".prop_filter("not a rate-limit header", |n| {
                !KNOWN.contains(&n.as_str())
            }), arbitrary_bytes()),
            0..8,
        ),
        now in wall_clock(),
    ) {
        prop_assert_eq!(parse_hints(&hs, now), ServerHints::default());
    }

    /// Remaining and limit come straight from the header that carried them.
    #[test]
    fn counts_round_trip(limit in any::<u64>(), remaining in any::<u64>(), reset in 0u64..1_000_000_000) {
        for prefix in ["RateLimit-", "X-RateLimit-"] {
            let hs = [
                (format!("{prefix}Limit"), limit.to_string()),
                (format!("{prefix}Remaining"), remaining.to_string()),
                (format!("{prefix}Reset"), reset.to_string()),
            ];
            let hints = parse_hints(&hs, UNIX_EPOCH);
            prop_assert_eq!(hints.limit, Some(limit));
            prop_assert_eq!(hints.remaining, Some(remaining.min(limit)));
            prop_assert_eq!(hints.reset_after, Some(Duration::from_secs(reset)));
        }
    }

    /// The structured fields round-trip, and the tightest policy wins.
    #[test]
    fn structured_fields_round_trip(
        policies in proptest::collection::vec(
            ("[a-z]{1,8}", 0u64..1_000_000_000_000_000, 0u64..1_000_000_000_000_000,
             0u64..1_000_000_000_000_000, 0u64..1_000_000_000_000_000),
            1..4,
        ),
    ) {
        // Unique names, so each item pairs with its own policy.
        let mut policies = policies;
        policies.sort_by(|a, b| a.0.cmp(&b.0));
        policies.dedup_by(|a, b| a.0 == b.0);
        let rl = policies
            .iter()
            .map(|(n, r, t, _, _)| format!("\"{n}\";r={r};t={t}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rp = policies
            .iter()
            .map(|(n, _, _, q, w)| format!("\"{n}\";q={q};w={w}"))
            .collect::<Vec<_>>()
            .join(", ");
        let hs = [("RateLimit", rl), ("RateLimit-Policy", rp)];
        let hints = parse_hints(&hs, UNIX_EPOCH);
        let tightest = policies
            .iter()
            .min_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
            .unwrap();
        prop_assert_eq!(hints.limit, Some(tightest.3));
        prop_assert_eq!(hints.remaining, Some(tightest.1.min(tightest.3)));
        prop_assert_eq!(hints.reset_after, Some(Duration::from_secs(tightest.2)));
    }

    /// Every HTTP-date form of every second from 1970 to 9999 parses back to
    /// the same instant (RFC 850's two-digit years only within their pivot).
    #[test]
    fn http_dates_round_trip(secs in 0i64..=253_402_300_799) {
        let expected = UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap());
        let [imf, rfc850, asctime] = http_dates(secs);
        prop_assert_eq!(parse_http_date(imf.as_bytes()), Some(expected), "{}", imf);
        prop_assert_eq!(parse_http_date(asctime.as_bytes()), Some(expected), "{}", asctime);
        if secs < 3_155_760_000 { // before 2070
            prop_assert_eq!(parse_http_date(rfc850.as_bytes()), Some(expected), "{}", rfc850);
        }
        prop_assert_eq!(parse_retry_after(imf.as_bytes()), Some(RetryAfter::Date(expected)));
    }

    /// A Retry-After date is a wait measured from the wall clock, and a past
    /// one is no server wait at all.
    #[test]
    fn retry_after_dates_measure_from_now(at in 0i64..=4_000_000_000, now in 0u64..=4_000_000_000) {
        let [imf, _, _] = http_dates(at);
        let hs = [("Retry-After", imf)];
        let hints = parse_hints(&hs, UNIX_EPOCH + Duration::from_secs(now));
        let at = u64::try_from(at).unwrap();
        let expected = (at > now).then(|| Duration::from_secs(at - now));
        prop_assert_eq!(hints.retry_after, expected);
    }

    /// Numeric waits are read exactly, in their own units, and the longest
    /// one wins.
    #[test]
    fn numeric_waits_round_trip(secs in any::<u64>(), millis in any::<u64>()) {
        prop_assert_eq!(
            parse_retry_after(secs.to_string().as_bytes()),
            Some(RetryAfter::Delay(Duration::from_secs(secs)))
        );
        let hs = [("Retry-After", secs.to_string()), ("x-amz-retry-after", millis.to_string())];
        let hints = parse_hints(&hs, UNIX_EPOCH);
        prop_assert_eq!(
            hints.retry_after,
            Some(Duration::from_secs(secs).max(Duration::from_millis(millis)))
        );
    }

    /// Every second from 1970 to 9999, written as RFC 3339 in UTC and at an
    /// offset, with a fraction or not, parses back to the same instant.
    #[test]
    fn rfc3339_instants_round_trip(
        secs in 86_400i64..=253_402_214_399,
        millis in 0u32..1000,
        offset_min in -(23 * 60 + 59)..=(23i64 * 60 + 59),
    ) {
        let expected = UNIX_EPOCH
            + Duration::from_secs(u64::try_from(secs).unwrap())
            + Duration::from_millis(u64::from(millis));
        let civil = |s: i64| {
            let (y, m, d) = civil_from_days(s.div_euclid(86_400));
            let r = s.rem_euclid(86_400);
            format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", r / 3600, r / 60 % 60, r % 60)
        };
        let utc = format!("{}.{millis:03}Z", civil(secs));
        prop_assert_eq!(parse_rfc3339(utc.as_bytes()), Some(expected), "{}", utc);
        let local = civil(secs + offset_min * 60);
        let sign = if offset_min < 0 { '-' } else { '+' };
        let (oh, om) = (offset_min.abs() / 60, offset_min.abs() % 60);
        let shifted = format!("{local}.{millis:03}{sign}{oh:02}:{om:02}");
        prop_assert_eq!(parse_rfc3339(shifted.as_bytes()), Some(expected), "{}", shifted);
    }

    /// A duration written as Go prints one parses back exactly.
    #[test]
    fn unit_durations_round_trip(h in 0u64..10_000, m in 0u64..60, s in 0u64..60, ms in 0u64..1000) {
        let expected = Duration::from_secs(h * 3600 + m * 60 + s) + Duration::from_millis(ms);
        let text = format!("{h}h{m}m{s}.{ms:03}s");
        prop_assert_eq!(parse_unit_duration(text.as_bytes()), Some(expected), "{}", text);
        let text = format!("{}ms", h * 3_600_000 + m * 60_000 + s * 1000 + ms);
        prop_assert_eq!(parse_unit_duration(text.as_bytes()), Some(expected), "{}", text);
    }

    /// The single-value parsers of vendor forms never panic.
    #[test]
    fn vendor_parsers_never_panic(v in arbitrary_bytes()) {
        let _ = parse_rfc3339(&v);
        let _ = parse_unit_duration(&v);
    }
}

#[cfg(feature = "http")]
proptest! {
    /// An `http::HeaderMap` and a slice of pairs holding the same headers
    /// classify and parse identically.
    #[test]
    fn header_map_agrees_with_pairs(
        status in 100u16..1000,
        hs in proptest::collection::vec((known_name(), arbitrary_bytes()), 0..8),
        body in proptest::option::of(arbitrary_bytes()),
        now in wall_clock(),
    ) {
        let mut map = http::HeaderMap::new();
        let mut pairs = Vec::new();
        for (name, value) in hs {
            let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(&name),
                http::HeaderValue::from_bytes(&value),
            ) else {
                continue;
            };
            map.append(n, v);
            pairs.push((name, value));
        }
        let c = Classifier::new();
        prop_assert_eq!(
            c.outcome(status, &map, body.as_deref(), now),
            c.outcome(status, &pairs, body.as_deref(), now)
        );
        let mut builder = http::Response::builder().status(status);
        for (n, v) in &map {
            builder = builder.header(n, v);
        }
        let response = builder.body(body.clone().unwrap_or_default()).unwrap();
        prop_assert_eq!(
            c.outcome_response(&response, now),
            c.outcome(status, &pairs, Some(body.as_deref().unwrap_or_default()), now)
        );
    }
}
