//! The interface between the engine and a simulated server: the
//! [`ServerModel`] trait and the [`Response`] it answers with.

use std::time::Duration;

use ratewise::Timestamp;
use ratewise_client::ServerHints;

/// A response as written on the wire: status, header lines and body. A
/// server that sends one (the `stack` server) is read by the client with
/// ratewise's own classifier and header parser, as a real client would.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawResponse {
    /// HTTP status.
    pub status: u16,
    /// Header lines, in order.
    pub headers: Vec<(&'static str, String)>,
    /// Body, if any.
    pub body: Option<String>,
}

/// One response as the client sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    /// `true` for a 429 (or the API's equivalent).
    pub throttled: bool,
    /// The headers the server sends (`RateLimit-Remaining`,
    /// `RateLimit-Limit`, `Retry-After`, `RateLimit-Reset`), already in the
    /// form the strategies read them.
    pub hints: ServerHints,
    /// Extra time the server holds an admitted request before answering
    /// (a leaky-bucket queue's scheduled departure); added to the latency.
    pub delay: Duration,
    /// The response as written on the wire, when the server writes one;
    /// then the client's outcome is read from it and `hints` is unused.
    pub wire: Option<Box<RawResponse>>,
}

/// A simulated API's admission logic.
pub trait ServerModel {
    /// Handles one request arriving at `now`.
    fn handle(&mut self, now: Timestamp) -> Response;
    /// Handles one request arriving at `now` whose response, if admitted,
    /// takes `service` to leave (plus the response's own `delay`): what a
    /// server that caps concurrent requests needs. Defaults to
    /// [`ServerModel::handle`].
    fn handle_for(&mut self, now: Timestamp, service: Duration) -> Response {
        let _ = service;
        self.handle(now)
    }
    /// Capacity left at `now` (for charts); does not consume anything.
    fn remaining(&mut self, now: Timestamp) -> f64;
    /// Successes the server could have granted from its first request (or
    /// the start of the run) up to `end`.
    fn offered(&mut self, end: Timestamp) -> f64;
}
