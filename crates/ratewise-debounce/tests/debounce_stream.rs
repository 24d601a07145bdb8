//! The `Stream` adapters on tokio's paused clock, with exact timestamps.
#![cfg(feature = "stream")]

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use ratewise_debounce::{stream, DebounceConfig, EventThrottleConfig};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

/// A receiver as a stream (the tests need no stream combinator crate).
struct Rx<T>(mpsc::UnboundedReceiver<T>);

impl<T> Stream for Rx<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// Sends each `(ms, value)` at its virtual time, then ends the stream at
/// `end` ms.
fn source<T: Send + 'static>(start: Instant, script: Vec<(u64, T)>, end: u64) -> Rx<T> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        for (t, v) in script {
            sleep_until(start + Duration::from_millis(t)).await;
            if tx.send(v).is_err() {
                return;
            }
        }
        sleep_until(start + Duration::from_millis(end)).await;
    });
    Rx(rx)
}

/// Collects `(item, ms)` until the stream ends, plus the end time.
async fn collect<S: Stream + Unpin>(start: Instant, mut s: S) -> (Vec<(S::Item, u64)>, u64) {
    let ms = || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut out = Vec::new();
    while let Some(v) = std::future::poll_fn(|cx| Pin::new(&mut s).poll_next(cx)).await {
        out.push((v, ms()));
    }
    (out, ms())
}

#[tokio::test(start_paused = true)]
async fn debounce_stream_fires_last_of_burst_and_drains_at_end() {
    let start = Instant::now();
    let src = source(start, vec![(0, 1), (30, 2), (60, 3), (300, 10)], 320);
    let s = stream::debounce(src, DebounceConfig::new(Duration::from_millis(100)));
    let (out, end) = collect(start, s).await;
    assert_eq!(out, vec![(3, 160), (10, 320)]);
    assert_eq!(end, 320);
}

#[tokio::test(start_paused = true)]
async fn throttle_stream_keeps_spacing_even_at_the_end() {
    let start = Instant::now();
    let src = source(start, vec![(0, 1), (30, 2), (60, 3), (130, 4)], 140);
    let s = stream::throttle(src, EventThrottleConfig::new(Duration::from_millis(100)));
    let (out, end) = collect(start, s).await;
    assert_eq!(out, vec![(1, 0), (3, 100), (4, 200)]);
    assert_eq!(end, 200);
}

#[tokio::test(start_paused = true)]
async fn chunks_close_on_size_or_first_item_age_and_never_empty() {
    let start = Instant::now();
    let src = source(
        start,
        vec![(0, 1), (10, 2), (20, 3), (30, 4), (200, 5)],
        210,
    );
    let s = stream::chunks(src, 3, Duration::from_millis(100)).expect("valid");
    let (out, end) = collect(start, s).await;
    assert_eq!(
        out,
        vec![(vec![1, 2, 3], 20), (vec![4], 130), (vec![5], 210)]
    );
    assert_eq!(end, 210);
    assert!(stream::chunks(source(start, Vec::<(u64, u8)>::new(), 0), 0, Duration::ZERO).is_err());
}
