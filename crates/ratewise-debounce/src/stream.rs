//! `Stream` adapters over the same state machines: [`debounce`],
//! [`throttle`] and [`chunks`].
//!
//! Each adapter polls its upstream, feeds every item to the core at tokio's
//! now ([`TokioClock`]), and keeps one `tokio::time::Sleep` armed for the
//! core's deadline. When the upstream ends:
//! * [`debounce`] delivers the pending value at once, then ends (RxJS
//!   `debounceTime` on completion);
//! * [`throttle`] waits out the current window and delivers the held
//!   trailing value then, so the spacing guarantee still holds (RxJS
//!   `throttle` on completion);
//! * [`chunks`] delivers the partial chunk at once.
//!
//! ```
//! use std::time::Duration;
//! use futures_core::Stream;
//! use ratewise_debounce::{stream, DebounceConfig};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let items = tokio_stream_like::iter(vec![1, 2, 3]);
//! let mut last = stream::debounce(items, DebounceConfig::new(Duration::from_millis(50)));
//! assert_eq!(next(&mut last).await, Some(3)); // the burst's last value
//! assert_eq!(next(&mut last).await, None);
//! # }
//! # async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
//! #     std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await
//! # }
//! # mod tokio_stream_like {
//! #     pub struct Iter<I>(I);
//! #     pub fn iter<I: IntoIterator>(i: I) -> Iter<I::IntoIter> { Iter(i.into_iter()) }
//! #     impl<I: Iterator + Unpin> futures_core::Stream for Iter<I> {
//! #         type Item = I::Item;
//! #         fn poll_next(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>)
//! #             -> std::task::Poll<Option<I::Item>> { std::task::Poll::Ready(self.0.next()) }
//! #     }
//! # }
//! ```

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::time::{Instant, Sleep};

use super::core::{
    Batch, CoalesceConfig, CoalesceCore, DebounceConfig, DebounceCore, EventThrottleConfig,
    EventThrottleCore,
};
use super::DebounceError;
use ratewise::time::{Clock, Timestamp};
use ratewise::wait::TokioClock;

/// Inputs taken from the upstream before the adapter yields to the runtime,
/// so an always-ready upstream cannot starve other tasks.
const BUDGET: u32 = 64;

/// Where a deadline that does not fit in an `Instant` is parked.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

trait StreamCore {
    type In;
    type Out;
    fn input(&mut self, now: Timestamp, v: Self::In, out: &mut VecDeque<Self::Out>);
    fn on_timer(&mut self, now: Timestamp, out: &mut VecDeque<Self::Out>);
    fn deadline(&self) -> Option<Timestamp>;
    fn finish(&mut self, now: Timestamp, out: &mut VecDeque<Self::Out>);
}

impl<T> StreamCore for DebounceCore<T> {
    type In = T;
    type Out = T;
    fn input(&mut self, now: Timestamp, v: T, out: &mut VecDeque<T>) {
        out.extend(self.settle(now));
        out.extend(self.call(now, v));
    }
    fn on_timer(&mut self, now: Timestamp, out: &mut VecDeque<T>) {
        out.extend(DebounceCore::on_timer(self, now));
    }
    fn deadline(&self) -> Option<Timestamp> {
        DebounceCore::deadline(self)
    }
    fn finish(&mut self, now: Timestamp, out: &mut VecDeque<T>) {
        out.extend(self.flush(now));
        self.cancel();
    }
}

impl<T> StreamCore for EventThrottleCore<T> {
    type In = T;
    type Out = T;
    fn input(&mut self, now: Timestamp, v: T, out: &mut VecDeque<T>) {
        out.extend(self.call(now, v));
    }
    fn on_timer(&mut self, now: Timestamp, out: &mut VecDeque<T>) {
        out.extend(EventThrottleCore::on_timer(self, now));
    }
    fn deadline(&self) -> Option<Timestamp> {
        EventThrottleCore::deadline(self)
    }
    fn finish(&mut self, _now: Timestamp, _out: &mut VecDeque<T>) {}
}

impl<V> StreamCore for CoalesceCore<(), V> {
    type In = V;
    type Out = Batch<(), V>;
    fn input(&mut self, now: Timestamp, v: V, out: &mut VecDeque<Batch<(), V>>) {
        self.settle(now, out);
        self.push(now, (), v, out);
    }
    fn on_timer(&mut self, now: Timestamp, out: &mut VecDeque<Batch<(), V>>) {
        CoalesceCore::on_timer(self, now, out);
    }
    fn deadline(&self) -> Option<Timestamp> {
        CoalesceCore::deadline(self)
    }
    fn finish(&mut self, _now: Timestamp, out: &mut VecDeque<Batch<(), V>>) {
        self.drain(out);
    }
}

struct Adapter<S, M: StreamCore> {
    upstream: Pin<Box<S>>,
    core: M,
    out: VecDeque<M::Out>,
    sleep: Pin<Box<Sleep>>,
    clock: TokioClock,
    done: bool,
}

// Nothing is pinned in place: the upstream and the timer live in boxes.
impl<S, M: StreamCore> Unpin for Adapter<S, M> {}

impl<S: Stream<Item = M::In>, M: StreamCore> Adapter<S, M> {
    fn new(upstream: S, core: M) -> Self {
        Adapter {
            upstream: Box::pin(upstream),
            core,
            out: VecDeque::new(),
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            clock: TokioClock::new(),
            done: false,
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<M::Out>> {
        let mut budget = BUDGET;
        loop {
            if let Some(o) = self.out.pop_front() {
                return Poll::Ready(Some(o));
            }
            let now = self.clock.now();
            if !self.done {
                match self.upstream.as_mut().poll_next(cx) {
                    Poll::Ready(Some(v)) => {
                        self.core.input(now, v, &mut self.out);
                        budget -= 1;
                        if budget == 0 && self.out.is_empty() {
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        continue;
                    }
                    Poll::Ready(None) => {
                        self.done = true;
                        self.core.finish(now, &mut self.out);
                        continue;
                    }
                    Poll::Pending => {}
                }
            }
            match self.core.deadline() {
                Some(d) if d <= now => self.core.on_timer(now, &mut self.out),
                Some(d) => {
                    // The timer is armed at `d` itself (not `now` plus a
                    // wait), so it never ends before `d` however long
                    // polling the upstream took.
                    let at = self
                        .clock
                        .instant_at(d)
                        .unwrap_or_else(|| Instant::now() + FAR_FUTURE);
                    self.sleep.as_mut().reset(at);
                    if self.sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                None if self.done => return Poll::Ready(None),
                None => return Poll::Pending,
            }
        }
    }
}

/// The stream returned by [`debounce`].
pub struct Debounced<S: Stream>(Adapter<S, DebounceCore<S::Item>>);

/// The stream returned by [`throttle`].
pub struct Throttled<S: Stream>(Adapter<S, EventThrottleCore<S::Item>>);

/// The stream returned by [`chunks`].
pub struct Chunks<S: Stream>(Adapter<S, CoalesceCore<(), S::Item>>);

impl<S: Stream> Stream for Debounced<S> {
    type Item = S::Item;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.get_mut().0.poll(cx)
    }
}

impl<S: Stream> Stream for Throttled<S> {
    type Item = S::Item;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.get_mut().0.poll(cx)
    }
}

impl<S: Stream> Stream for Chunks<S> {
    type Item = Vec<S::Item>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Vec<S::Item>>> {
        self.get_mut().0.poll(cx).map(|b| b.map(|b| b.items))
    }
}

/// Debounces `upstream`: see [`DebounceCore`] for the semantics. When the
/// upstream ends, a pending trailing value is yielded at once.
pub fn debounce<S: Stream>(upstream: S, config: DebounceConfig) -> Debounced<S> {
    Debounced(Adapter::new(upstream, DebounceCore::new(config)))
}

/// Throttles `upstream` with guaranteed spacing: see [`EventThrottleCore`].
/// When the upstream ends, a held trailing value is yielded at the end of
/// its window.
pub fn throttle<S: Stream>(upstream: S, config: EventThrottleConfig) -> Throttled<S> {
    Throttled(Adapter::new(upstream, EventThrottleCore::new(config)))
}

/// Groups `upstream` into chunks of at most `max_size` items, each yielded
/// `max_wait` after its first item at the latest (at once when full). Never
/// yields an empty chunk. Fails if `max_size` is zero.
pub fn chunks<S: Stream>(
    upstream: S,
    max_size: usize,
    max_wait: Duration,
) -> Result<Chunks<S>, DebounceError> {
    let max = u64::try_from(max_size).unwrap_or(u64::MAX);
    let config = CoalesceConfig::new(max_wait, max)?;
    Ok(Chunks(Adapter::new(upstream, CoalesceCore::new(config))))
}
