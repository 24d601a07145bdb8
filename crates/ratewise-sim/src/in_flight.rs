//! The client-side engine's responses on their way back, packed.
//!
//! A fleet's first wave puts every client's response in flight at once, so
//! the size of one held response is paid per client. A [`Response`] is 128
//! bytes, most of it `Option`s of the hints; a response whose hints are the
//! plain counts and durations every model but the header-writing ones sends
//! is held in 40 bytes ([`InFlight::Packed`]) and unpacked to the same
//! value ([`InFlight::unpack`]). Anything else (a wire response, a policy,
//! `no_retry`, a value at the packing's sentinel) is held whole.

use std::time::Duration;

use ratewise_client::ServerHints;

use crate::server::Response;

/// `None` of a packed count or duration.
const NONE: u64 = u64::MAX;

/// A response in flight; `unpack(pack(r)) == r` for every `r`
/// (its `delay`, already spent on the way, is not kept).
#[derive(Debug)]
pub(crate) enum InFlight {
    /// The plain hints, `NONE` for absent; durations in nanoseconds.
    Packed {
        throttled: bool,
        remaining: u64,
        limit: u64,
        retry_after_ns: u64,
        reset_after_ns: u64,
    },
    /// Whatever does not pack.
    Whole(Box<Response>),
}

fn count(x: Option<u64>) -> Option<u64> {
    match x {
        None => Some(NONE),
        Some(NONE) => None,
        Some(v) => Some(v),
    }
}

fn nanos(d: Option<Duration>) -> Option<u64> {
    match d {
        None => Some(NONE),
        Some(d) => u64::try_from(d.as_nanos()).ok().filter(|&n| n != NONE),
    }
}

fn unpacked(x: u64) -> Option<u64> {
    (x != NONE).then_some(x)
}

impl InFlight {
    /// A slot's filler once its response is taken.
    pub(crate) const EMPTY: InFlight = InFlight::Packed {
        throttled: false,
        remaining: NONE,
        limit: NONE,
        retry_after_ns: NONE,
        reset_after_ns: NONE,
    };

    /// Holds `r` in the least memory that gives it back unchanged.
    pub(crate) fn pack(r: Response) -> InFlight {
        let h = &r.hints;
        if r.wire.is_none() && h.policy.is_none() && !h.no_retry {
            if let (Some(remaining), Some(limit), Some(retry_after_ns), Some(reset_after_ns)) = (
                count(h.remaining),
                count(h.limit),
                nanos(h.retry_after),
                nanos(h.reset_after),
            ) {
                return InFlight::Packed {
                    throttled: r.throttled,
                    remaining,
                    limit,
                    retry_after_ns,
                    reset_after_ns,
                };
            }
        }
        InFlight::Whole(Box::new(Response {
            delay: Duration::ZERO,
            ..r
        }))
    }

    /// The response held, its `delay` zero.
    pub(crate) fn unpack(self) -> Response {
        match self {
            InFlight::Packed {
                throttled,
                remaining,
                limit,
                retry_after_ns,
                reset_after_ns,
            } => Response {
                throttled,
                hints: ServerHints {
                    remaining: unpacked(remaining),
                    limit: unpacked(limit),
                    retry_after: unpacked(retry_after_ns).map(Duration::from_nanos),
                    reset_after: unpacked(reset_after_ns).map(Duration::from_nanos),
                    ..ServerHints::default()
                },
                delay: Duration::ZERO,
                wire: None,
            },
            InFlight::Whole(r) => *r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::RawResponse;
    use proptest::prelude::*;

    fn duration() -> impl Strategy<Value = Option<Duration>> {
        prop_oneof![
            Just(None),
            Just(Some(Duration::MAX)),
            Just(Some(Duration::from_nanos(u64::MAX))),
            Just(Some(Duration::from_nanos(u64::MAX - 1))),
            (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Some(Duration::new(s, n))),
            (0u64..10_000_000_000).prop_map(|n| Some(Duration::from_nanos(n))),
        ]
    }

    fn count() -> impl Strategy<Value = Option<u64>> {
        prop_oneof![
            Just(None),
            Just(Some(u64::MAX)),
            Just(Some(u64::MAX - 1)),
            any::<u64>().prop_map(Some)
        ]
    }

    proptest! {
        /// Every response comes back as it went, but for its delay.
        #[test]
        fn a_response_comes_back_unchanged(
            throttled in any::<bool>(),
            remaining in count(),
            limit in count(),
            retry_after in duration(),
            reset_after in duration(),
            no_retry in any::<bool>(),
            policy in prop_oneof![Just(None), (any::<u64>(), duration()).prop_map(|(q, w)| w.map(|w| (q, w)))],
            wire in any::<bool>(),
            delay_ns in any::<u64>(),
        ) {
            let r = Response {
                throttled,
                hints: ServerHints { retry_after, remaining, limit, reset_after, no_retry, policy },
                delay: Duration::from_nanos(delay_ns),
                wire: wire.then(|| Box::new(RawResponse { status: 429, headers: vec![("retry-after", "1".into())], body: None })),
            };
            let back = InFlight::pack(r.clone()).unpack();
            prop_assert_eq!(back, Response { delay: Duration::ZERO, ..r });
        }
    }

    #[test]
    fn plain_hints_pack_in_forty_bytes() {
        assert!(std::mem::size_of::<InFlight>() <= 40);
        let r = Response {
            throttled: true,
            hints: ServerHints {
                remaining: Some(0),
                retry_after: Some(Duration::from_secs(2)),
                ..ServerHints::default()
            },
            ..Response::default()
        };
        assert!(matches!(InFlight::pack(r), InFlight::Packed { .. }));
    }
}
