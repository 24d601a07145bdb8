//! "N requests per W seconds" in fixed windows aligned to time zero.

use ratewise::{FixedWindow, ManualClock, Quota, Timestamp};

use crate::server::limiter::LimiterServer;
use crate::server::model::{Response, ServerModel};

/// "`limit` per `window_s`" counted in fixed windows aligned to time zero:
/// the core [`FixedWindow`] limiter answering through [`LimiterServer`]. Only
/// the capacity offered differs from a `limiter` server: here it counts
/// whole windows (every window that has begun grants its full limit), not
/// `burst + rate × time`.
pub struct FixedWindowServer {
    server: LimiterServer,
    quota: Quota,
}

impl FixedWindowServer {
    /// A quota of `quota.burst()` requests per window of `quota.window()`.
    pub fn new(quota: Quota) -> Self {
        let limiter = FixedWindow::with_clock(quota, ManualClock::new());
        FixedWindowServer {
            server: LimiterServer::new(Box::new(limiter), true),
            quota,
        }
    }
}

impl ServerModel for FixedWindowServer {
    fn handle(&mut self, now: Timestamp) -> Response {
        self.server.handle(now)
    }

    fn remaining(&mut self, now: Timestamp) -> f64 {
        self.server.remaining(now)
    }

    fn offered(&mut self, end: Timestamp) -> f64 {
        let windows = end.as_nanos() / self.quota.window_nanos() + 1;
        windows as f64 * self.quota.burst() as f64
    }
}
