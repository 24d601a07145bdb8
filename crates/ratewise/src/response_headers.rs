//! Server-side rate-limit response headers, written without allocating.
//!
//! One writer for every form a server may need: the IETF draft's
//! `RateLimit-Policy` and `RateLimit` structured-field lists (draft-08 on,
//! `"burst";q=100;w=10` and `"burst";r=41;t=6`); the older
//! `RateLimit-Limit`/`-Remaining`/`-Reset` trio and its `X-RateLimit-*` twin;
//! and `Retry-After` in whole seconds, rounded **up** and at least 1.
//! Values are formatted into a [`HeaderBuf`] on the stack.
//! [`reset_param`] is the one rule for `t`: time to full capacity when
//! admitted, the retry-after when refused, so `Retry-After` is never earlier
//! than `t`.
//!
//! ```
//! use std::time::Duration;
//! use ratewise::response_headers::{HeaderBuf, HeaderStyle, PolicyInfo};
//! use ratewise::{Gcra, ManualClock, Quota, RateLimiter, Timestamp};
//!
//! let quota = Quota::per(10, Duration::from_secs(60))?;
//! let limiter = Gcra::with_clock(quota, ManualClock::new());
//! let policy = PolicyInfo::from_quota("minute", &quota);
//! let d = limiter.check_at(10, Timestamp::ZERO)?;
//! let denied = limiter.check_at(1, Timestamp::ZERO)?;
//!
//! let mut lines = Vec::new();
//! denied.write_headers(&policy, HeaderStyle::DRAFT, |name, value| {
//!     lines.push(format!("{name}: {}", std::str::from_utf8(value).unwrap()));
//! })?;
//! assert_eq!(lines, [
//!     r#"ratelimit-policy: "minute";q=10;w=60"#,
//!     r#"ratelimit: "minute";r=0;t=6"#,
//!     "retry-after: 6",
//! ]);
//!
//! // Several policies in one field, on the stack.
//! let mut field = HeaderBuf::<128>::new();
//! field.push_limit("minute", d.remaining, Duration::from_secs(60))?;
//! field.push_limit("day", 990, Duration::from_secs(3600))?;
//! assert_eq!(field.as_str(), r#""minute";r=0;t=60, "day";r=990;t=3600"#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

use crate::decision::Decision;
use crate::quota::Quota;

/// `RateLimit-Policy` (lower case, as HTTP/2 and `http::HeaderName` want it).
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// `RateLimit`.
pub const RATELIMIT: &str = "ratelimit";
/// `Retry-After`.
pub const RETRY_AFTER: &str = "retry-after";
/// `RateLimit-Limit` (drafts up to -06).
pub const RATELIMIT_LIMIT: &str = "ratelimit-limit";
/// `RateLimit-Remaining` (drafts up to -06).
pub const RATELIMIT_REMAINING: &str = "ratelimit-remaining";
/// `RateLimit-Reset` (drafts up to -06), delay-seconds.
pub const RATELIMIT_RESET: &str = "ratelimit-reset";
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: &str = "x-ratelimit-limit";
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
/// `X-RateLimit-Reset`, delay-seconds.
pub const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";

/// The draft's problem type for a refusal (`429`) because a quota is spent.
pub const QUOTA_EXCEEDED_TYPE: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// Whole seconds in `d`, rounded up.
pub const fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add((d.subsec_nanos() > 0) as u64)
}

/// The `Retry-After` value for a wait of `d`: whole seconds rounded up, and
/// at least 1 (a refusal never says "retry now").
pub const fn retry_after_secs(d: Duration) -> u64 {
    let s = ceil_secs(d);
    if s == 0 {
        1
    } else {
        s
    }
}

/// The draft's `t` for a decision, in whole seconds: on refusal the
/// retry-after (rounded up, at least 1), otherwise the time until full
/// capacity (rounded up). See the [module docs](self).
pub const fn reset_param(d: &Decision) -> u64 {
    match (d.allowed, d.retry_after) {
        (false, Some(retry)) => retry_after_secs(retry),
        _ => ceil_secs(d.reset_after),
    }
}

/// What `RateLimit-Policy` says about one policy: its name, its quota `q`
/// and its window `w`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyInfo<'a> {
    /// The policy's name, written as a structured-field String.
    pub name: &'a str,
    /// `q`: the units the policy allows per window.
    pub quota: u64,
    /// `w`: the window; written in whole seconds, rounded up.
    pub window: Duration,
}

impl<'a> PolicyInfo<'a> {
    /// A policy named `name` describing `quota`: `q` is the burst, `w` the
    /// time that burst takes to refill ([`Quota::window`]).
    ///
    /// `w` is written in whole seconds, so a window that is not a whole
    /// number of seconds is widened to the next one and `q` scaled with it,
    /// rounded down: `q / w` stays the quota's rate (never above it, but
    /// for the nanoseconds by which the quota's own interval was rounded), where
    /// widening `w` alone would understate it — a 100/s bucket with a burst
    /// of 10 refills its burst in 0.1 s and is written `q=100;w=1`, not
    /// `q=10;w=1`. A client reading `q / w` as the sustained rate then paces
    /// at the real rate.
    ///
    /// ```
    /// use ratewise::response_headers::PolicyInfo;
    /// use ratewise::Quota;
    /// use std::time::Duration;
    ///
    /// let q = Quota::per_second(100)?.with_burst(10)?;
    /// let p = PolicyInfo::from_quota("default", &q);
    /// assert_eq!((p.quota, p.window), (100, Duration::from_secs(1)));
    /// let q = Quota::per(10, Duration::from_secs(60))?;
    /// let p = PolicyInfo::from_quota("minute", &q);
    /// assert_eq!((p.quota, p.window), (10, Duration::from_secs(60)));
    /// // 333 333 334 ns per unit: the window is 1 s and 2 ns.
    /// let q = Quota::per(3, Duration::from_secs(1))?;
    /// let p = PolicyInfo::from_quota("second", &q);
    /// assert_eq!((p.quota, p.window), (3, Duration::from_secs(1)));
    /// # Ok::<(), ratewise::QuotaError>(())
    /// ```
    pub const fn from_quota(name: &'a str, quota: &Quota) -> Self {
        let window = quota.window();
        let burst = quota.burst();
        // A quota keeps its interval in whole nanoseconds, so "3 per
        // second" has a window of 1 s + 2 ns (3 × 333 333 334 ns): within
        // one nanosecond per unit of the burst, a window is the whole
        // seconds it was made from, not the next second up (which would
        // state 5 per 2 s).
        let over = window.subsec_nanos() as u64;
        let whole = if window.as_secs() > 0 && over <= burst {
            window.as_secs()
        } else {
            ceil_secs(window)
        };
        let nanos = quota.window_nanos() as u128;
        let q = if nanos == 0 || window.subsec_nanos() == 0 {
            burst
        } else {
            // burst × w / window, rounded down; at least the burst itself.
            let scaled = (burst as u128)
                .saturating_mul(whole as u128)
                .saturating_mul(1_000_000_000)
                / nanos;
            if scaled > u64::MAX as u128 {
                u64::MAX
            } else if (scaled as u64) < burst {
                burst
            } else {
                scaled as u64
            }
        };
        PolicyInfo {
            name,
            quota: q,
            window: Duration::from_secs(whole),
        }
    }
}

/// Why a header could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderWriteError {
    /// The value does not fit the buffer; use a larger `HeaderBuf<N>`.
    #[error("header value longer than the {capacity}-byte buffer: use a larger HeaderBuf")]
    Overflow {
        /// The buffer's capacity in bytes.
        capacity: usize,
    },
    /// A policy name must be printable ASCII (0x20..=0x7E) to be a
    /// structured-field String.
    #[error("policy name {byte:#04x} at byte {at} is not printable ASCII; rename the policy")]
    InvalidName {
        /// The offending byte.
        byte: u8,
        /// Its position in the name.
        at: usize,
    },
}

/// A header value being written, held in `N` bytes on the stack.
///
/// Everything pushed is ASCII, so [`HeaderBuf::as_str`] never fails. A push
/// that does not fit leaves the buffer as it was and returns
/// [`HeaderWriteError::Overflow`].
#[derive(Clone)]
pub struct HeaderBuf<const N: usize = 256> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Default for HeaderBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> std::fmt::Debug for HeaderBuf<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HeaderBuf").field(&self.as_str()).finish()
    }
}

impl<const N: usize> HeaderBuf<N> {
    /// An empty buffer.
    pub const fn new() -> Self {
        HeaderBuf {
            bytes: [0; N],
            len: 0,
        }
    }

    /// Empties the buffer.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// `true` if nothing was written.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The value written so far (always ASCII).
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever pushed; the fallback is unreachable.
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The value as an `http::HeaderValue` (one copy, made by `http`).
    #[cfg(feature = "http")]
    pub fn to_header_value(&self) -> http::HeaderValue {
        // Every byte pushed is printable ASCII, which is always a valid
        // header value; the fallback is unreachable.
        http::HeaderValue::from_bytes(self.as_bytes())
            .unwrap_or_else(|_| http::HeaderValue::from_static(""))
    }

    fn room(&self, extra: usize) -> Result<(), HeaderWriteError> {
        if self.len + extra > N {
            Err(HeaderWriteError::Overflow { capacity: N })
        } else {
            Ok(())
        }
    }

    fn put(&mut self, s: &[u8]) {
        self.bytes[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }

    /// Appends raw ASCII text (a separator, a parameter name).
    ///
    /// # Errors
    /// [`HeaderWriteError::Overflow`]; [`HeaderWriteError::InvalidName`] if
    /// `s` is not printable ASCII.
    pub fn push_str(&mut self, s: &str) -> Result<(), HeaderWriteError> {
        check_printable(s)?;
        self.room(s.len())?;
        self.put(s.as_bytes());
        Ok(())
    }

    /// Appends `v` in decimal, written in place two digits at a time (the
    /// `itoa` method: a 200-byte digit-pair table, no division per digit).
    ///
    /// # Errors
    /// [`HeaderWriteError::Overflow`].
    pub fn push_u64(&mut self, v: u64) -> Result<(), HeaderWriteError> {
        let n = v.checked_ilog10().map_or(1, |l| l as usize + 1);
        self.room(n)?;
        self.put_digits(v, n);
        Ok(())
    }

    /// Writes the `n` digits of `v` (room already checked).
    #[inline]
    fn put_digits(&mut self, mut v: u64, n: usize) {
        const PAIRS: &[u8; 200] = b"\
            0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let out = &mut self.bytes[self.len..self.len + n];
        let mut i = n;
        while v >= 100 {
            let p = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            out[i..i + 2].copy_from_slice(&PAIRS[p..p + 2]);
        }
        if v >= 10 {
            let p = v as usize * 2;
            out[..2].copy_from_slice(&PAIRS[p..p + 2]);
        } else {
            out[0] = b'0' + v as u8;
        }
        self.len += n;
    }

    /// Appends a literal of known length (copied inline, no `memcpy` call).
    #[inline]
    fn put_lit<const M: usize>(&mut self, s: &[u8; M]) {
        self.bytes[self.len..self.len + M].copy_from_slice(s);
        self.len += M;
    }

    /// Appends `s` as a structured-field String: quoted, with `"` and `\`
    /// escaped.
    ///
    /// # Errors
    /// [`HeaderWriteError::InvalidName`] if `s` is not printable ASCII;
    /// [`HeaderWriteError::Overflow`].
    pub fn push_sf_string(&mut self, s: &str) -> Result<(), HeaderWriteError> {
        check_printable(s)?;
        let escapes = s.bytes().filter(|b| matches!(b, b'"' | b'\\')).count();
        self.room(s.len() + escapes + 2)?;
        self.put_lit(b"\"");
        if escapes == 0 {
            self.put(s.as_bytes());
        } else {
            for b in s.bytes() {
                if matches!(b, b'"' | b'\\') {
                    self.put(b"\\");
                }
                self.put(&[b]);
            }
        }
        self.put_lit(b"\"");
        Ok(())
    }

    /// Appends a structured-field parameter: `key` is the literal `;q=`
    /// (with its separator), `value` its integer.
    #[inline]
    fn push_param(&mut self, key: &[u8; 3], value: u64) -> Result<(), HeaderWriteError> {
        let n = value.checked_ilog10().map_or(1, |l| l as usize + 1);
        self.room(3 + n)?;
        self.put_lit(key);
        self.put_digits(value, n);
        Ok(())
    }

    /// Runs `write` as one list member: a `", "` separator first unless the
    /// buffer is empty; on error the buffer is restored.
    fn member(
        &mut self,
        write: impl FnOnce(&mut Self) -> Result<(), HeaderWriteError>,
    ) -> Result<(), HeaderWriteError> {
        let start = self.len;
        let result = (|| {
            if start > 0 {
                self.room(2)?;
                self.put_lit(b", ");
            }
            write(self)
        })();
        if result.is_err() {
            self.len = start;
        }
        result
    }

    /// Appends one `RateLimit-Policy` member: `"name";q=Q;w=W` (`w` in
    /// whole seconds, rounded up).
    ///
    /// # Errors
    /// As [`HeaderBuf::push_sf_string`]; the buffer is left as it was.
    pub fn push_policy(&mut self, policy: &PolicyInfo<'_>) -> Result<(), HeaderWriteError> {
        self.member(|b| {
            b.push_sf_string(policy.name)?;
            b.push_param(b";q=", policy.quota)?;
            b.push_param(b";w=", ceil_secs(policy.window))
        })
    }

    /// Appends one `RateLimit` member: `"name";r=R;t=T` (`t` in whole
    /// seconds, rounded up).
    ///
    /// # Errors
    /// As [`HeaderBuf::push_sf_string`]; the buffer is left as it was.
    pub fn push_limit(
        &mut self,
        name: &str,
        remaining: u64,
        reset: Duration,
    ) -> Result<(), HeaderWriteError> {
        self.member(|b| {
            b.push_sf_string(name)?;
            b.push_param(b";r=", remaining)?;
            b.push_param(b";t=", ceil_secs(reset))
        })
    }

    /// Appends the `RateLimit` member for `decision` under `name`, with
    /// `t` from [`reset_param`].
    ///
    /// # Errors
    /// As [`HeaderBuf::push_limit`].
    pub fn push_decision(
        &mut self,
        name: &str,
        decision: &Decision,
    ) -> Result<(), HeaderWriteError> {
        let t = Duration::from_secs(reset_param(decision));
        self.push_limit(name, decision.remaining, t)
    }
}

fn check_printable(s: &str) -> Result<(), HeaderWriteError> {
    match s.bytes().position(|b| !(0x20..=0x7e).contains(&b)) {
        Some(at) => Err(HeaderWriteError::InvalidName {
            byte: s.as_bytes()[at],
            at,
        }),
        None => Ok(()),
    }
}

/// Which header families [`Decision::write_headers`] writes. `Retry-After` is
/// always written on a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeaderStyle {
    /// `RateLimit-Policy` and `RateLimit` (the draft's current form).
    pub draft: bool,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    pub legacy: bool,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    pub x_prefixed: bool,
}

impl HeaderStyle {
    /// The draft's current form only (the default).
    pub const DRAFT: HeaderStyle = HeaderStyle {
        draft: true,
        legacy: false,
        x_prefixed: false,
    };
    /// The draft's current form plus the `X-RateLimit-*` trio.
    pub const DRAFT_AND_X: HeaderStyle = HeaderStyle {
        draft: true,
        legacy: false,
        x_prefixed: true,
    };
    /// Every form.
    pub const ALL: HeaderStyle = HeaderStyle {
        draft: true,
        legacy: true,
        x_prefixed: true,
    };
}

impl Default for HeaderStyle {
    fn default() -> Self {
        HeaderStyle::DRAFT
    }
}

/// Writes the three-field form (`RateLimit-*` or `X-RateLimit-*`) for one
/// decision: limit, remaining, and reset as delay-seconds rounded up.
pub fn write_trio(
    names: [&'static str; 3],
    decision: &Decision,
    mut emit: impl FnMut(&'static str, &[u8]),
) {
    let mut b = HeaderBuf::<24>::new();
    for (name, v) in names.into_iter().zip([
        decision.limit,
        decision.remaining,
        ceil_secs(decision.reset_after),
    ]) {
        b.clear();
        // 20 digits always fit in 24 bytes.
        if b.push_u64(v).is_ok() {
            emit(name, b.as_bytes());
        }
    }
}

/// The names of the `RateLimit-*` trio, in [`write_trio`]'s order.
pub const LEGACY_NAMES: [&str; 3] = [RATELIMIT_LIMIT, RATELIMIT_REMAINING, RATELIMIT_RESET];
/// The names of the `X-RateLimit-*` trio, in [`write_trio`]'s order.
pub const X_NAMES: [&str; 3] = [X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET];

/// Writes `Retry-After` for a wait of `d` (whole seconds, rounded up, at
/// least 1).
pub fn write_retry_after(d: Duration, mut emit: impl FnMut(&'static str, &[u8])) {
    let mut b = HeaderBuf::<24>::new();
    if b.push_u64(retry_after_secs(d)).is_ok() {
        emit(RETRY_AFTER, b.as_bytes());
    }
}

impl Decision {
    /// The legacy three-field headers this decision implies, values in
    /// whole seconds rounded up (a client that waits the advertised time is
    /// never early): `RateLimit-Limit`, `RateLimit-Remaining`,
    /// `RateLimit-Reset`, and on denial `Retry-After` (at least 1).
    ///
    /// This is the drafts' form up to -06 and allocates a `String` per
    /// header. For the current form (`RateLimit-Policy` / `RateLimit`) and
    /// an allocation-free path, use [`Decision::write_headers`].
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, String)> {
        let mut out = vec![
            ("RateLimit-Limit", self.limit.to_string()),
            ("RateLimit-Remaining", self.remaining.to_string()),
            ("RateLimit-Reset", ceil_secs(self.reset_after).to_string()),
        ];
        if let (false, Some(retry)) = (self.allowed, self.retry_after) {
            out.push(("Retry-After", retry_after_secs(retry).to_string()));
        }
        out.into_iter()
    }

    /// Writes the response headers for this decision of the one policy
    /// `policy`, in the forms `style` selects, plus `Retry-After` on a
    /// refusal. Each header is handed to `emit` as a lower-case name and
    /// its value's bytes; nothing is allocated. See [`crate::response_headers`].
    ///
    /// # Errors
    /// [`HeaderWriteError::InvalidName`] if the policy name is not
    /// printable ASCII, or [`HeaderWriteError::Overflow`] if it is longer
    /// than about 200 bytes; nothing is emitted then.
    pub fn write_headers(
        &self,
        policy: &PolicyInfo<'_>,
        style: HeaderStyle,
        mut emit: impl FnMut(&'static str, &[u8]),
    ) -> Result<(), HeaderWriteError> {
        if style.draft {
            // One buffer, reused: each value is handed over before the next
            // is written.
            let mut field = HeaderBuf::<256>::new();
            field.push_policy(policy)?;
            emit(RATELIMIT_POLICY, field.as_bytes());
            field.clear();
            field.push_decision(policy.name, self)?;
            emit(RATELIMIT, field.as_bytes());
        }
        if style.legacy {
            write_trio(LEGACY_NAMES, self, &mut emit);
        }
        if style.x_prefixed {
            write_trio(X_NAMES, self, &mut emit);
        }
        if let (false, Some(retry)) = (self.allowed, self.retry_after) {
            write_retry_after(retry, &mut emit);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(
        allowed: bool,
        remaining: u64,
        reset: Duration,
        retry: Option<Duration>,
    ) -> Decision {
        Decision {
            allowed,
            limit: 10,
            remaining,
            reset_after: reset,
            retry_after: retry,
            delay: Duration::ZERO,
        }
    }

    fn collect(d: &Decision, style: HeaderStyle) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let p = PolicyInfo {
            name: "p",
            quota: 10,
            window: Duration::from_millis(1500),
        };
        d.write_headers(&p, style, |n, v| {
            out.push((n.to_string(), String::from_utf8(v.to_vec()).unwrap()))
        })
        .unwrap();
        out
    }

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_nanos(2_000_000_001)), 3);
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn all_forms_on_a_refusal() {
        let d = decision(
            false,
            0,
            Duration::from_millis(4100),
            Some(Duration::from_millis(100)),
        );
        let h = collect(&d, HeaderStyle::ALL);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get(RATELIMIT_POLICY), Some(r#""p";q=10;w=2"#));
        assert_eq!(get(RATELIMIT), Some(r#""p";r=0;t=1"#));
        assert_eq!(get(RETRY_AFTER), Some("1"));
        assert_eq!(get(RATELIMIT_LIMIT), Some("10"));
        assert_eq!(get(RATELIMIT_REMAINING), Some("0"));
        assert_eq!(get(RATELIMIT_RESET), Some("5"));
        assert_eq!(get(X_RATELIMIT_RESET), Some("5"));
        assert_eq!(h.len(), 9);
    }

    #[test]
    fn admitted_has_no_retry_after_and_t_is_the_reset() {
        let d = decision(true, 7, Duration::from_millis(2001), None);
        let h = collect(&d, HeaderStyle::DRAFT);
        assert_eq!(
            h,
            [
                (RATELIMIT_POLICY.into(), r#""p";q=10;w=2"#.into()),
                (RATELIMIT.into(), r#""p";r=7;t=3"#.into()),
            ]
        );
    }

    #[test]
    fn digits_match_the_standard_formatter() {
        let mut cases = vec![0, 1, 9, 10, 99, 100, 101, 999, 1000, u64::MAX, u64::MAX - 1];
        let mut x = 1u64;
        while let Some(next) = x.checked_mul(10) {
            cases.extend([x - 1, x, x + 1, next / 2]);
            x = next;
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            cases.push(seed >> (seed % 64));
        }
        for v in cases {
            let mut b = HeaderBuf::<24>::new();
            b.push_u64(v).unwrap();
            assert_eq!(b.as_str(), v.to_string());
        }
        let mut tight = HeaderBuf::<3>::new();
        assert!(tight.push_u64(1000).is_err());
        assert!(tight.is_empty());
        tight.push_u64(999).unwrap();
        assert_eq!(tight.as_str(), "999");
    }

    #[test]
    fn names_are_escaped_or_refused() {
        let mut b = HeaderBuf::<64>::new();
        b.push_sf_string(r#"a"b\c"#).unwrap();
        assert_eq!(b.as_str(), r#""a\"b\\c""#);
        assert_eq!(
            b.push_sf_string("é"),
            Err(HeaderWriteError::InvalidName { byte: 0xc3, at: 0 })
        );
        assert_eq!(b.as_str(), r#""a\"b\\c""#);
    }

    #[test]
    fn overflow_leaves_the_buffer_unchanged() {
        let mut b = HeaderBuf::<24>::new();
        b.push_limit("a", 1, Duration::from_secs(2)).unwrap();
        let before = b.as_str().to_owned();
        assert_eq!(
            b.push_limit("bbbbbbbbbbbbbbbb", u64::MAX, Duration::from_secs(9)),
            Err(HeaderWriteError::Overflow { capacity: 24 })
        );
        assert_eq!(b.as_str(), before);
        b.clear();
        b.push_u64(u64::MAX).unwrap();
        assert_eq!(b.as_str(), u64::MAX.to_string());
    }
}
