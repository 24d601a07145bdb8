//! Where the leases live: in this process ([`Allocator`]) or on Redis, where
//! every instance of the service divides the same quota. The Redis script
//! applies the allocator's rule ([`fair_share`](super::fair_share)) under
//! Redis's clock, atomically per bucket.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use ratewise::time::{Clock, MonotonicClock};
use ratewise_redis::Connection;
use redis::Script;

use super::allocator::Allocator;

const ASSIGN: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local client = ARGV[1]
local wants = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local all = redis.call('HGETALL', KEYS[1])
local ow, oh, n = 0, 0, 0
for i = 1, #all, 2 do
  if all[i] ~= client then
    local w, h, e = string.match(all[i + 1], '^(%S+) (%S+) (%S+)$')
    if w == nil or tonumber(e) <= now then
      redis.call('HDEL', KEYS[1], all[i])
    else
      ow = ow + tonumber(w)
      oh = oh + tonumber(h)
      n = n + 1
    end
  end
end
local total = wants + ow
local fair
if total <= cap then fair = wants + (cap - total) / (n + 1) else fair = cap * wants / total end
local gets = math.max(0, math.min(fair, cap - oh))
redis.call('HSET', KEYS[1], client, string.format('%.17g %.17g %d', wants, gets, now + ttl))
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return string.format('%.17g', gets)
";

fn assign_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(ASSIGN))
}

/// The leases of every bucket.
pub(crate) enum Leases {
    /// In this process.
    Memory {
        allocator: Mutex<Allocator>,
        clock: MonotonicClock,
    },
    /// On Redis, shared by every instance pointed at it.
    Redis {
        conn: Connection,
        deadline: Duration,
        /// What the leases' keys start with.
        prefix: Arc<str>,
    },
}

/// Why a lease could not be decided.
#[derive(Debug, thiserror::Error)]
#[error("the lease store cannot answer: {0}")]
pub(crate) struct LeaseUnavailable(String);

impl Leases {
    pub(crate) fn memory(clock: MonotonicClock) -> Leases {
        Leases::Memory {
            allocator: Mutex::new(Allocator::default()),
            clock,
        }
    }

    fn redis_key(prefix: &str, bucket: &str) -> String {
        // One hash per bucket, tagged so a Cluster keeps it in one slot.
        format!("{prefix}rlqs:{{{}}}", bucket.replace('}', "_"))
    }

    /// `client`'s part of `capacity` on `bucket` for `ttl`.
    pub(crate) async fn assign(
        &self,
        bucket: &str,
        client: &str,
        client_number: u64,
        wants: f64,
        capacity: f64,
        ttl: Duration,
    ) -> Result<f64, LeaseUnavailable> {
        match self {
            Leases::Memory { allocator, clock } => {
                let now = clock.now();
                let mut a = allocator.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(a.assign(bucket, client_number, wants, capacity, ttl, now))
            }
            Leases::Redis {
                conn,
                deadline,
                prefix,
            } => {
                let mut conn = conn.clone();
                let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
                let mut invocation = assign_script().prepare_invoke();
                invocation
                    .key(Self::redis_key(prefix, bucket))
                    .arg(client)
                    .arg(format!("{wants:.17e}"))
                    .arg(format!("{capacity:.17e}"))
                    .arg(ttl_ms);
                let call = invocation.invoke_async::<String>(&mut conn);
                let answer = tokio::time::timeout(*deadline, call)
                    .await
                    .map_err(|_| LeaseUnavailable(format!("no answer within {deadline:?}")))?
                    .map_err(|e| LeaseUnavailable(e.to_string()))?;
                answer
                    .parse::<f64>()
                    .map_err(|e| LeaseUnavailable(format!("the script answered {answer:?}: {e}")))
            }
        }
    }

    /// Ends `client`'s lease on `bucket`.
    pub(crate) async fn release(&self, bucket: &str, client: &str, client_number: u64) {
        match self {
            Leases::Memory { allocator, .. } => allocator
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .release(bucket, client_number),
            Leases::Redis {
                conn,
                deadline,
                prefix,
            } => {
                let mut conn = conn.clone();
                let mut command = redis::cmd("HDEL");
                command.arg(Self::redis_key(prefix, bucket)).arg(client);
                let call = command.query_async::<()>(&mut conn);
                // Best effort: an unreleased lease lapses after its time to live.
                let _ = tokio::time::timeout(*deadline, call).await;
            }
        }
    }
}
