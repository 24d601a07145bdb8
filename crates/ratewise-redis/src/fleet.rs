//! How many instances share the quotas: each beats a heartbeat into one
//! sorted set on Redis and reads back how many beat within the time to
//! live. While Redis is away the last count stands, which is what a local
//! share ([`LocalShare::set_instances`](crate::LocalShare::set_instances))
//! divides the quota by.
//!
//! ```no_run
//! # async fn f() -> Result<(), ratewise_redis::Error> {
//! use std::time::Duration;
//! use ratewise_redis::{connect, Fleet};
//!
//! let fleet = Fleet::new(connect("redis://127.0.0.1:6379").await?, "my-service:", Duration::from_secs(3));
//! let live = fleet.beat().await?; // call every second or so
//! assert!(live >= 1);
//! fleet.leave().await?; // on shutdown, so the others stop counting this one
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use redis::Script;

use crate::{Connection, Error};

/// Registers this instance (score: Redis's own clock in ms), drops those
/// not seen within the time to live, answers the count. Redis's clock, so
/// instances with skewed clocks agree.
const BEAT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
";

fn beat_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(BEAT))
}

/// This instance's membership in a fleet sharing quotas on Redis.
pub struct Fleet {
    conn: Connection,
    key: Vec<u8>,
    id: String,
    ttl: Duration,
    live: AtomicU32,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("id", &self.id)
            .field("ttl", &self.ttl)
            .field("live", &self.live())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// A member of the fleet whose set is `{prefix}fleet`; an instance not
    /// heard from within `ttl` no longer counts. Beat at a third of `ttl`
    /// or more often. The count is 1 (this instance) until a beat answers.
    pub fn new(conn: impl Into<Connection>, prefix: &str, ttl: Duration) -> Fleet {
        let started = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        Fleet {
            conn: conn.into(),
            key: format!("{prefix}fleet").into_bytes(),
            id: format!("{}-{started:x}", std::process::id()),
            ttl: ttl.max(Duration::from_millis(1)),
            live: AtomicU32::new(1),
        }
    }

    /// This instance's name in the set (process id and start time).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The count the last answered beat saw (1 before any).
    pub fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed)
    }

    /// Beats once: registers this instance and returns how many instances
    /// beat within the time to live, this one included.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis does not answer; [`Fleet::live`] keeps
    /// the last count.
    pub async fn beat(&self) -> Result<u32, Error> {
        let mut conn = self.conn.clone();
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let count: u64 = beat_script()
            .key(&self.key)
            .arg(&self.id)
            .arg(ttl_ms)
            .invoke_async(&mut conn)
            .await?;
        let count = u32::try_from(count).unwrap_or(u32::MAX).max(1);
        self.live.store(count, Ordering::Relaxed);
        Ok(count)
    }

    /// Leaves the fleet, so the others stop counting this instance at their
    /// next beat rather than after the time to live.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis does not answer (the entry then lapses
    /// after the time to live).
    pub async fn leave(&self) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        redis::cmd("ZREM")
            .arg(&self.key)
            .arg(&self.id)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }
}
