//! The client-side engine's responses on their way back, packed.
//!
//! A fleet's first wave puts every client's response in flight at once, so
//! the size of one held response is paid per client. A [`Response`] is 128
//! bytes, most of it `Option`s of the hints. A thread awaits at most one
//! response, so the table holds one 24-byte place per thread
//! ([`InFlightTable`]), read where the thread's index says (and so loaded
//! ahead with the thread). Plain hints (a throttled flag, counts below
//! 2³¹ and 2³², durations in nanoseconds) every model but the
//! header-writing ones sends pack there and unpack to the same value;
//! anything else (a wire response, a policy, `no_retry`, a value at the
//! packing's sentinels) is held whole on the side, its place pointing at
//! it.

use std::time::Duration;

use ratewise_client::ServerHints;

use crate::server::Response;

/// `None` of a packed duration.
const NONE: u64 = u64::MAX;
/// `None` of the packed remaining count (31 bits).
const NO_REMAINING: u64 = 0x7FFF_FFFF;
/// The remaining count of a place whose response is held whole; its
/// `retry_after_ns` is then the response's index on the side.
const HELD_WHOLE: u64 = 0x7FFF_FFFE;
/// `None` of the packed limit (32 bits).
const NO_LIMIT: u64 = 0xFFFF_FFFF;

/// One thread's place: bit 63 of `word` the throttled flag, bits 32–62 the
/// remaining count, bits 0–31 the limit.
#[derive(Clone, Copy, Debug)]
struct Place {
    word: u64,
    retry_after_ns: u64,
    reset_after_ns: u64,
}

const EMPTY: Place = Place {
    word: NO_REMAINING << 32 | NO_LIMIT,
    retry_after_ns: NONE,
    reset_after_ns: NONE,
};

/// A count as packed: `none` for `None`; `None` (does not pack) above
/// `max`.
fn count(x: Option<u64>, max: u64, none: u64) -> Option<u64> {
    match x {
        None => Some(none),
        Some(v) => (v <= max).then_some(v),
    }
}

fn nanos(d: Option<Duration>) -> Option<u64> {
    match d {
        None => Some(NONE),
        Some(d) => u64::try_from(d.as_nanos()).ok().filter(|&n| n != NONE),
    }
}

fn unpacked(x: u64, none: u64) -> Option<u64> {
    (x != none).then_some(x)
}

/// The responses in flight, one place per thread.
#[derive(Debug)]
pub(crate) struct InFlightTable {
    places: Vec<Place>,
    /// Responses that do not pack, by index; `free` lists empty indices.
    whole: Vec<Option<Box<Response>>>,
    free: Vec<u64>,
}

impl InFlightTable {
    /// A table for `threads` threads.
    pub(crate) fn new(threads: usize) -> Self {
        InFlightTable {
            places: vec![EMPTY; threads],
            whole: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Holds `r` for thread `t` in the least memory that gives it back
    /// unchanged (its `delay`, already spent on the way, is not kept).
    pub(crate) fn put(&mut self, t: usize, r: Response) {
        let h = &r.hints;
        if r.wire.is_none() && h.policy.is_none() && !h.no_retry {
            if let (Some(remaining), Some(limit), Some(retry_after_ns), Some(reset_after_ns)) = (
                count(h.remaining, HELD_WHOLE - 1, NO_REMAINING),
                count(h.limit, NO_LIMIT - 1, NO_LIMIT),
                nanos(h.retry_after),
                nanos(h.reset_after),
            ) {
                self.places[t] = Place {
                    word: u64::from(r.throttled) << 63 | remaining << 32 | limit,
                    retry_after_ns,
                    reset_after_ns,
                };
                return;
            }
        }
        let r = Box::new(Response {
            delay: Duration::ZERO,
            ..r
        });
        let i = match self.free.pop() {
            Some(i) => {
                self.whole[i as usize] = Some(r);
                i
            }
            None => {
                self.whole.push(Some(r));
                (self.whole.len() - 1) as u64
            }
        };
        self.places[t] = Place {
            word: HELD_WHOLE << 32,
            retry_after_ns: i,
            reset_after_ns: NONE,
        };
    }

    /// Thread `t`'s response, its `delay` zero; the place is emptied.
    pub(crate) fn take(&mut self, t: usize) -> Response {
        let p = std::mem::replace(&mut self.places[t], EMPTY);
        let remaining = p.word >> 32 & NO_REMAINING;
        if remaining == HELD_WHOLE {
            let i = p.retry_after_ns;
            self.free.push(i);
            // Every index a place points at holds its response.
            return self.whole[i as usize]
                .take()
                .map_or_else(Response::default, |r| *r);
        }
        Response {
            throttled: p.word >> 63 == 1,
            hints: ServerHints {
                remaining: unpacked(remaining, NO_REMAINING),
                limit: unpacked(p.word & NO_LIMIT, NO_LIMIT),
                retry_after: unpacked(p.retry_after_ns, NONE).map(Duration::from_nanos),
                reset_after: unpacked(p.reset_after_ns, NONE).map(Duration::from_nanos),
                ..ServerHints::default()
            },
            delay: Duration::ZERO,
            wire: None,
        }
    }

    /// Starts loading thread `t`'s place (see [`crate::prefetch`]).
    pub(crate) fn prefetch(&self, t: usize) {
        if let Some(p) = self.places.get(t) {
            crate::prefetch::prefetch(p);
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
            let mut table = InFlightTable::new(3);
            table.put(1, r.clone());
            // A plain response beside it, put and taken around it.
            table.put(2, Response { throttled: true, ..Response::default() });
            prop_assert_eq!(table.take(2), Response { throttled: true, ..Response::default() });
            let back = table.take(1);
            prop_assert_eq!(back, Response { delay: Duration::ZERO, ..r });
        }
    }

    #[test]
    fn plain_hints_pack_in_24_bytes() {
        assert_eq!(std::mem::size_of::<Place>(), 24);
        let r = Response {
            throttled: true,
            hints: ServerHints {
                remaining: Some(0),
                limit: Some(u64::from(u32::MAX) - 1),
                retry_after: Some(Duration::from_secs(2)),
                ..ServerHints::default()
            },
            ..Response::default()
        };
        let mut table = InFlightTable::new(1);
        table.put(0, r.clone());
        assert!(table.whole.is_empty(), "held whole");
        assert_eq!(table.take(0), r);
        // Past the packed range, held whole and given back the same.
        let big = Response {
            hints: ServerHints {
                remaining: Some(1 << 40),
                ..ServerHints::default()
            },
            ..Response::default()
        };
        table.put(0, big.clone());
        assert_eq!(table.whole.len(), 1);
        assert_eq!(table.take(0), big);
    }
}
