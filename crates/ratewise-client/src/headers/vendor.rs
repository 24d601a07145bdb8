//! The rate-limit headers of particular APIs: the same three numbers
//! (limit, remaining, reset) under names and formats of their own.
//!
//! | API | headers | read as |
//! |---|---|---|
//! | OpenAI (and Groq, Azure OpenAI) | `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests` (a duration such as `6m0s`); the same with `-tokens` | the request counts; an exhausted token budget holds the rate |
//! | Anthropic | `anthropic-ratelimit-requests-limit`, `-remaining`, `-reset` (an RFC 3339 instant); the same for `tokens`, `input-tokens`, `output-tokens` | as OpenAI's |
//! | Shopify REST | `x-shopify-shop-api-call-limit: 32/40` (calls in the bucket / its size) | limit 40, remaining 8 |
//! | Reddit | `x-ratelimit-used` beside `x-ratelimit-remaining` | the limit is their sum |
//!
//! (Twitter/X's `x-rate-limit-*` trio is read with the standard trios in
//! the [parent module](super): it differs from `X-RateLimit-*` by a hyphen.)
//!
//! Every one is read only where no standard header (see the [parent
//! module](super)) said the same, with one exception that only makes the
//! hints more cautious: a token budget reported exhausted sets `remaining`
//! to 0 and the reset to the later of the two, whatever the request counts
//! say, because the next request will be refused either way.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{days_from_civil, days_in_month, parse_count, parse_u64, trim, HeaderSource};
use crate::ServerHints;

/// Fills what `hints` lacks from the vendor forms in `headers`.
pub(super) fn fill<H: HeaderSource + ?Sized>(
    headers: &H,
    now: SystemTime,
    hints: &mut ServerHints,
) {
    let mut fill_in = |limit: Option<u64>, remaining: Option<u64>, reset: Option<Duration>| {
        hints.limit = hints.limit.or(limit);
        hints.remaining = hints.remaining.or(remaining);
        hints.reset_after = hints.reset_after.or(reset);
    };
    // OpenAI: requests, with the reset as a duration.
    fill_in(
        headers
            .header("x-ratelimit-limit-requests")
            .and_then(parse_u64),
        headers
            .header("x-ratelimit-remaining-requests")
            .and_then(parse_count),
        headers
            .header("x-ratelimit-reset-requests")
            .and_then(parse_unit_duration),
    );
    // Anthropic: requests, with the reset as an instant.
    let anthropic_reset = |name: &str| {
        headers
            .header(name)
            .and_then(parse_rfc3339)
            .map(|at| at.duration_since(now).unwrap_or(Duration::ZERO))
    };
    fill_in(
        headers
            .header("anthropic-ratelimit-requests-limit")
            .and_then(parse_u64),
        headers
            .header("anthropic-ratelimit-requests-remaining")
            .and_then(parse_count),
        anthropic_reset("anthropic-ratelimit-requests-reset"),
    );
    // Shopify REST: `used/size` of the store's leaky bucket.
    if let Some((used, size)) = headers
        .header("x-shopify-shop-api-call-limit")
        .and_then(parse_fraction)
    {
        fill_in(Some(size), Some(size.saturating_sub(used)), None);
    }
    // Reddit: `used` and `remaining` (the limit is not sent).
    if hints.limit.is_none() {
        if let (Some(used), Some(remaining)) = (
            headers.header("x-ratelimit-used").and_then(parse_u64),
            headers
                .header("x-ratelimit-remaining")
                .and_then(parse_count),
        ) {
            hints.limit = Some(used.saturating_add(remaining));
        }
    }
    // Token budgets: only an exhausted one says anything about requests.
    let budgets = [
        (
            headers
                .header("x-ratelimit-remaining-tokens")
                .and_then(parse_count),
            headers
                .header("x-ratelimit-reset-tokens")
                .and_then(parse_unit_duration),
        ),
        (
            headers
                .header("anthropic-ratelimit-tokens-remaining")
                .and_then(parse_count),
            anthropic_reset("anthropic-ratelimit-tokens-reset"),
        ),
        (
            headers
                .header("anthropic-ratelimit-input-tokens-remaining")
                .and_then(parse_count),
            anthropic_reset("anthropic-ratelimit-input-tokens-reset"),
        ),
        (
            headers
                .header("anthropic-ratelimit-output-tokens-remaining")
                .and_then(parse_count),
            anthropic_reset("anthropic-ratelimit-output-tokens-reset"),
        ),
    ];
    for (remaining, reset) in budgets {
        if remaining == Some(0) {
            hints.remaining = Some(0);
            hints.reset_after = hints.reset_after.max(reset);
        }
    }
}

/// `used/size`, as Shopify's call-limit header sends it.
fn parse_fraction(v: &[u8]) -> Option<(u64, u64)> {
    let v = trim(v);
    let slash = v.iter().position(|&b| b == b'/')?;
    Some((parse_u64(v.get(..slash)?)?, parse_u64(v.get(slash + 1..)?)?))
}

/// A duration written as numbers with units, as Go prints one and OpenAI's
/// reset headers send it: `"1s"`, `"6m0s"`, `"20ms"`, `"1h2m3.5s"`; units
/// `h`, `m`, `s`, `ms`, `us` (or `µs`) and `ns`, each number optionally
/// with a fraction. A bare number is seconds. Anything else is `None`;
/// sums saturate.
///
/// ```
/// use std::time::Duration;
/// use ratewise_client::headers::parse_unit_duration;
///
/// assert_eq!(parse_unit_duration(b"6m0s"), Some(Duration::from_secs(360)));
/// assert_eq!(parse_unit_duration(b"20ms"), Some(Duration::from_millis(20)));
/// assert_eq!(parse_unit_duration(b"6 minutes"), None);
/// ```
pub fn parse_unit_duration(value: &[u8]) -> Option<Duration> {
    let v = trim(value);
    if v.is_empty() {
        return None;
    }
    if v.iter().all(|b| b.is_ascii_digit() || *b == b'.') {
        return super::parse_decimal_seconds(v);
    }
    let mut rest = v;
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let digits = rest
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail
            .iter()
            .position(|b| b.is_ascii_digit() || *b == b'.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let per_unit: u128 = match unit {
            b"h" => 3_600_000_000_000,
            b"m" => 60_000_000_000,
            b"s" => 1_000_000_000,
            b"ms" => 1_000_000,
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ns" => 1,
            _ => return None,
        };
        if number.is_empty() {
            return None;
        }
        // The number read as seconds gives it in billionths of a unit.
        let amount = super::parse_decimal_seconds(number)?.as_nanos();
        nanos = nanos.saturating_add(amount.saturating_mul(per_unit) / 1_000_000_000);
        rest = next;
    }
    let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
    Some(Duration::from_nanos(nanos))
}

/// An RFC 3339 instant (`2026-11-24T22:31:05Z`, with an optional fraction
/// of a second and a `Z` or `±HH:MM` offset), as Anthropic's reset headers
/// send it. Years before 1970 or after 9999 are `None`.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use ratewise_client::headers::parse_rfc3339;
///
/// let at = UNIX_EPOCH + Duration::from_secs(1_795_559_465);
/// assert_eq!(parse_rfc3339(b"2026-11-24T22:31:05Z"), Some(at));
/// assert_eq!(parse_rfc3339(b"2026-11-24T23:31:05+01:00"), Some(at));
/// assert_eq!(parse_rfc3339(b"24 Nov 2026"), None);
/// ```
pub fn parse_rfc3339(value: &[u8]) -> Option<SystemTime> {
    let v = trim(value);
    let num = |range: std::ops::Range<usize>| v.get(range).and_then(parse_u64);
    let sep = |i: usize, c: &[u8]| v.get(i).is_some_and(|b| c.contains(b));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = v.get(19..)?;
    let mut nanos = 0u64;
    if let Some(frac) = rest.strip_prefix(b".") {
        let len = frac.iter().take_while(|b| b.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        let mut scale = 100_000_000u64;
        for &d in frac.iter().take(len.min(9)) {
            nanos += u64::from(d - b'0') * scale;
            scale /= 10;
        }
        rest = frac.get(len..)?;
    }
    let offset_secs: i64 = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hh = parse_u64(&[*h1, *h2])?;
            let mm = parse_u64(&[*m1, *m2])?;
            if hh > 23 || mm > 59 {
                return None;
            }
            let s = i64::try_from(hh * 3_600 + mm * 60).ok()?;
            if *sign == b'+' {
                s
            } else {
                -s
            }
        }
        _ => return None,
    };
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    // An offset east of UTC means the instant is earlier in UTC.
    let utc = i64::try_from(local).ok()?.checked_sub(offset_secs)?;
    let utc = u64::try_from(utc).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(utc) + Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::parse_hints;
    use crate::headers::tests::at;

    #[test]
    fn unit_durations_as_go_prints_them() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("1s", ms(1_000)),
            ("6m0s", ms(360_000)),
            ("20ms", ms(20)),
            ("1h2m3.5s", ms(3_723_500)),
            ("17.28s", ms(17_280)),
            ("1.5m", ms(90_000)),
            ("250us", Duration::from_micros(250)),
            ("250µs", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            (" 2 ", ms(2_000)),
            ("0.5", ms(500)),
        ] {
            assert_eq!(parse_unit_duration(text.as_bytes()), Some(want), "{text}");
        }
        for bad in [
            "", "s", "1", "1x", "1.s", "m1", "1s2", "-1s", "1 s", "1..5s",
        ] {
            let got = parse_unit_duration(bad.as_bytes());
            // A bare number is seconds; everything else here is malformed.
            if bad == "1" {
                assert_eq!(got, Some(ms(1_000)));
            } else {
                assert_eq!(got, None, "{bad:?}");
            }
        }
        assert_eq!(
            parse_unit_duration(b"99999999999999999999h"),
            Some(Duration::from_nanos(u64::MAX)),
            "saturates"
        );
    }

    #[test]
    fn rfc3339_instants() {
        // 2026-11-24T22:31:05Z
        let base = 1_795_559_465;
        assert_eq!(parse_rfc3339(b"2026-11-24T22:31:05Z"), Some(at(base)));
        assert_eq!(
            parse_rfc3339(b"2026-11-24T22:31:05.250Z"),
            Some(at(base) + Duration::from_millis(250))
        );
        assert_eq!(
            parse_rfc3339(b"2026-11-24T23:31:05+01:00"),
            Some(at(base)),
            "east of UTC is earlier"
        );
        assert_eq!(parse_rfc3339(b"2026-11-24T21:01:05-01:30"), Some(at(base)));
        assert_eq!(parse_rfc3339(b"1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
        for bad in [
            &b""[..],
            b"2026-11-24",
            b"2026-11-24T22:31:05",
            b"2026-13-01T00:00:00Z",
            b"2026-02-29T00:00:00Z",
            b"2026-11-24T24:00:00Z",
            b"2026-11-24T22:31:05.Z",
            b"2026-11-24T22:31:05+1:00",
            b"1969-12-31T23:59:59Z",
            b"1970-01-01T00:00:00+00:01",
        ] {
            assert_eq!(
                parse_rfc3339(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn openai_request_counts_and_an_exhausted_token_budget() {
        let now = at(1_000);
        let headers = [
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ];
        let h = parse_hints(&headers[..], now);
        assert_eq!(h.limit, Some(60));
        assert_eq!(h.remaining, Some(59));
        assert_eq!(h.reset_after, Some(Duration::from_secs(1)));
        // Out of tokens: the next request is refused whatever the request
        // count says, until the token budget's reset.
        let spent = [
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ];
        let h = parse_hints(&spent[..], now);
        assert_eq!((h.limit, h.remaining), (Some(60), Some(0)));
        assert_eq!(h.reset_after, Some(Duration::from_secs(360)));
    }

    #[test]
    fn anthropic_counts_with_instants() {
        let now = at(1_795_559_465); // 2026-11-24T22:31:05Z
        let headers = [
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-requests-reset", "2026-11-24T22:31:06Z"),
            ("anthropic-ratelimit-tokens-remaining", "30000"),
        ];
        let h = parse_hints(&headers[..], now);
        assert_eq!((h.limit, h.remaining), (Some(50), Some(49)));
        assert_eq!(h.reset_after, Some(Duration::from_secs(1)));
        let spent = [
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-output-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2026-11-24T22:31:35Z",
            ),
        ];
        let h = parse_hints(&spent[..], now);
        assert_eq!(h.remaining, Some(0));
        assert_eq!(h.reset_after, Some(Duration::from_secs(30)));
        // A reset instant already past is no wait.
        let past = [("anthropic-ratelimit-requests-reset", "2026-11-24T22:30:00Z")];
        assert_eq!(
            parse_hints(&past[..], now).reset_after,
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn shopify_call_limit_twitter_and_reddit() {
        let now = at(1_000);
        let h = parse_hints(&[("X-Shopify-Shop-Api-Call-Limit", "32/40")][..], now);
        assert_eq!(
            (h.limit, h.remaining, h.reset_after),
            (Some(40), Some(8), None)
        );
        // A bucket reported over-full leaves nothing, never a wrap-around.
        let h = parse_hints(&[("X-Shopify-Shop-Api-Call-Limit", "41/40")][..], now);
        assert_eq!(h.remaining, Some(0));
        for bad in ["32", "/40", "32/", "a/40", "32/40/1"] {
            let h = parse_hints(&[("X-Shopify-Shop-Api-Call-Limit", bad)][..], now);
            assert_eq!(h, ServerHints::default(), "{bad:?}");
        }
        // Twitter/X: the reset is an epoch instant.
        let twitter = [
            ("x-rate-limit-limit", "900"),
            ("x-rate-limit-remaining", "847"),
            ("x-rate-limit-reset", "1764000900"),
        ];
        let h = parse_hints(&twitter[..], at(1_764_000_000));
        assert_eq!((h.limit, h.remaining), (Some(900), Some(847)));
        assert_eq!(h.reset_after, Some(Duration::from_secs(900)));
        // Reddit: a fractional remaining count, the limit from `used`.
        let reddit = [
            ("x-ratelimit-used", "2"),
            ("x-ratelimit-remaining", "598.0"),
            ("x-ratelimit-reset", "540"),
        ];
        let h = parse_hints(&reddit[..], now);
        assert_eq!((h.limit, h.remaining), (Some(600), Some(598)));
        assert_eq!(h.reset_after, Some(Duration::from_secs(540)));
    }

    #[test]
    fn discord_reset_after_and_fractional_epochs() {
        let now = UNIX_EPOCH + Duration::from_millis(1_470_173_022_500);
        // Both sent: the delta wins (it does not depend on the clocks).
        let discord = [
            ("X-RateLimit-Limit", "5"),
            ("X-RateLimit-Remaining", "1"),
            ("X-RateLimit-Reset", "1470173023.123"),
            ("X-RateLimit-Reset-After", "1.234"),
        ];
        let h = parse_hints(&discord[..], now);
        assert_eq!((h.limit, h.remaining), (Some(5), Some(1)));
        assert_eq!(h.reset_after, Some(Duration::from_millis(1_234)));
        // The epoch with a fraction alone.
        let epoch_only = [("X-RateLimit-Reset", "1470173023.123")];
        let h = parse_hints(&epoch_only[..], now);
        assert_eq!(h.reset_after, Some(Duration::from_millis(623)));
        // A fractional delta.
        let delta = [("RateLimit-Reset", "2.5")];
        let h = parse_hints(&delta[..], now);
        assert_eq!(h.reset_after, Some(Duration::from_millis(2_500)));
        for bad in ["1.", ".5", "1.2.3", "-1", "1e3"] {
            let h = parse_hints(&[("X-RateLimit-Reset", bad)][..], now);
            assert_eq!(h.reset_after, None, "{bad:?}");
        }
    }

    #[test]
    fn a_standard_header_wins_over_a_vendor_form() {
        let headers = [
            ("RateLimit-Limit", "10"),
            ("RateLimit-Remaining", "3"),
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("X-Shopify-Shop-Api-Call-Limit", "1/40"),
        ];
        let h = parse_hints(&headers[..], at(0));
        assert_eq!((h.limit, h.remaining), (Some(10), Some(3)));
    }
}
