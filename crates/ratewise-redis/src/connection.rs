//! [`Connection`]: a single Redis server (through the reconnecting
//! [`ConnectionManager`]) or a Redis Cluster (through the `redis` crate's
//! async cluster client, which follows `MOVED`/`ASK` redirections and
//! refreshes its slot map by itself).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::Error;

/// Where a limiter's keys live. Built by [`connect`], [`connect_lazy`] or
/// [`connect_cluster`], or from your own `ConnectionManager` /
/// `ClusterConnection` (`.into()`).
#[derive(Clone)]
pub enum Connection {
    /// One Redis server.
    Single(ConnectionManager),
    /// A Redis Cluster. The keys of one script call must share a slot (a
    /// single-key limiter always does; see [`MultiLimiter`](crate::MultiLimiter)).
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connection::Single(_) => "Connection::Single",
            Connection::Cluster(_) => "Connection::Cluster",
        })
    }
}

impl From<ConnectionManager> for Connection {
    fn from(c: ConnectionManager) -> Self {
        Connection::Single(c)
    }
}

impl From<ClusterConnection> for Connection {
    fn from(c: ClusterConnection) -> Self {
        Connection::Cluster(c)
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

/// Connects to `url` with a [`ConnectionManager`] tuned for rate limiting:
/// connection attempts time out after 100 ms and reconnection backs off
/// from 10 ms to at most 200 ms, so a limiter finds a restarted Redis
/// within a fraction of a second. Fails if Redis is unreachable now.
pub async fn connect(url: &str) -> Result<ConnectionManager, Error> {
    Ok(ConnectionManager::new_with_config(client(url, None)?, manager_config()).await?)
}

/// Like [`connect`], but connects on first use: never fails because Redis
/// is down (the first decisions then come from the failure policy). Needs a
/// tokio runtime.
pub fn connect_lazy(url: &str) -> Result<ConnectionManager, Error> {
    connect_lazy_with(url, None)
}

/// Like [`connect_lazy`], with certificates for a `rediss://` URL.
pub fn connect_lazy_with(url: &str, tls: Option<&TlsCerts>) -> Result<ConnectionManager, Error> {
    Ok(ConnectionManager::new_lazy_with_config(
        client(url, tls)?,
        manager_config(),
    )?)
}

/// A [`redis::Client`] for `url` that, when `tls` is given, trusts its
/// authority and presents its client certificate (a `rediss://` URL).
///
/// # Errors
/// A malformed URL or certificate; [`Error::TlsNotEnabled`] for
/// certificates without the `tls` feature.
pub fn client(url: &str, tls: Option<&TlsCerts>) -> Result<redis::Client, Error> {
    match tls {
        None => Ok(redis::Client::open(url)?),
        #[cfg(feature = "tls")]
        Some(t) => Ok(redis::Client::build_with_tls(url, t.to_redis())?),
        #[cfg(not(feature = "tls"))]
        Some(_) => Err(Error::TlsNotEnabled),
    }
}

/// Certificates for Redis over TLS beyond the system's roots: a private
/// certificate authority to trust, and a client certificate for mutual TLS
/// (both PEM). Taking effect needs the `tls` feature.
#[derive(Clone, Default)]
pub struct TlsCerts {
    /// The authority (or authorities) that signed the servers'
    /// certificates, in place of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// The client's certificate and private key, when the servers ask for
    /// one.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCerts")
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .field(
                "client",
                &self.client.as_ref().map(|_| "<certificate and key>"),
            )
            .finish()
    }
}

#[cfg(feature = "tls")]
impl TlsCerts {
    fn to_redis(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        }
    }
}

/// The [`ConnectionManagerConfig`](redis::aio::ConnectionManagerConfig)
/// [`connect`] uses.
pub fn manager_config() -> redis::aio::ConnectionManagerConfig {
    redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(100)))
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(200))
        .set_number_of_retries(3)
}

/// Connects to a Redis Cluster through any of its `nodes` (URLs), with
/// short connection timeouts and few retries: the limiter's own timeout and
/// breaker, not the client's retries, bound how long a decision waits.
pub async fn connect_cluster(nodes: &[&str]) -> Result<ClusterConnection, Error> {
    connect_cluster_with(nodes, None).await
}

/// Like [`connect_cluster`], with certificates for `rediss://` nodes.
///
/// # Errors
/// As [`connect_cluster`]; [`Error::TlsNotEnabled`] for certificates
/// without the `tls` feature.
pub async fn connect_cluster_with(
    nodes: &[&str],
    tls: Option<&TlsCerts>,
) -> Result<ClusterConnection, Error> {
    let builder = redis::cluster::ClusterClient::builder(nodes.to_vec())
        .connection_timeout(Duration::from_millis(100))
        .response_timeout(Duration::from_millis(500))
        .retries(2)
        .min_retry_wait(10)
        .max_retry_wait(100);
    let builder = match tls {
        None => builder,
        #[cfg(feature = "tls")]
        Some(t) => builder.certs(t.to_redis()),
        #[cfg(not(feature = "tls"))]
        Some(_) => return Err(Error::TlsNotEnabled),
    };
    Ok(builder.build()?.get_async_connection().await?)
}
