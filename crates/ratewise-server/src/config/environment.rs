//! envoyproxy/ratelimit's environment settings read as ratewise-server's
//! flags (`ratewise-server --ratelimit-env`), so a deployment that set up
//! that service through its environment swaps the image and keeps it.
//!
//! ```
//! use ratewise_server::config::flags_from_ratelimit_env;
//!
//! let env = [
//!     ("RUNTIME_ROOT", "/data"),
//!     ("RUNTIME_SUBDIRECTORY", "ratelimit"),
//!     ("REDIS_SOCKET_TYPE", "tcp"),
//!     ("REDIS_URL", "redis:6379"),
//! ];
//! let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
//! let flags = flags_from_ratelimit_env(get).unwrap();
//! assert_eq!(flags.args[..2], ["--config", "/data/ratelimit/config"]);
//! assert!(flags.args.contains(&"redis://redis:6379".to_string()));
//! ```

use std::path::PathBuf;

/// The flags read from the environment, and the settings it holds that
/// ratewise-server does not act on (to be reported, not silently dropped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvFlags {
    /// Command-line arguments, flag and value in turn.
    pub args: Vec<String>,
    /// `NAME=value` of each setting that is set but has no effect here.
    pub ignored: Vec<String>,
}

/// A setting ratewise-server cannot honour: starting as if it were not set
/// would change what the service decides.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{name}={value}: {reason}")]
pub struct EnvError {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// Why it cannot be honoured, and what to do instead.
    pub reason: &'static str,
}

/// Settings read for information only: statistics go to `/metrics`
/// (Prometheus), not to statsd; the rest tune the Go service itself, or
/// name what ratewise-server always does (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`:
/// a refused request charges no descriptor), or has its own setting
/// (`REDIS_TIMEOUT`: `--store-deadline`, 10 ms by default).
const IGNORED: &[&str] = &[
    "USE_STATSD",
    "STATSD_HOST",
    "STATSD_PORT",
    "USE_DOG_STATSD",
    "USE_DOG_STATSD_MOGRIFIERS",
    "EXTRA_TAGS",
    "STATS_FLUSH_INTERVAL",
    "DISABLE_STATS",
    "USE_PROMETHEUS",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_PATH",
    "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "LOG_FORMAT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "GRPC_MAX_CONNECTION_AGE",
    "GRPC_MAX_CONNECTION_AGE_GRACE",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "RUNTIME_WATCH_ROOT",
    "RUNTIME_IGNOREDOTFILES",
    "REDIS_POOL_SIZE",
    "REDIS_PIPELINE_WINDOW",
    "REDIS_PIPELINE_LIMIT",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_TIMEOUT",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_STARTUP_INITIAL_INTERVAL",
    "REDIS_STARTUP_MAX_INTERVAL",
    "REDIS_STARTUP_MAX_ELAPSED_TIME",
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "NEAR_LIMIT_RATIO",
    "EXPIRATION_JITTER_MAX_SECONDS",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "TRACING_ENABLED",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
];

/// Reads envoyproxy/ratelimit's settings through `get` (the process
/// environment in the binary) and returns the equivalent flags:
///
/// | variable | flag |
/// |---|---|
/// | `RUNTIME_ROOT` (`/srv/runtime_data/current`), `RUNTIME_SUBDIRECTORY`, `RUNTIME_APPDIRECTORY` (`config`) | `--config ROOT/SUB/APP` |
/// | `GRPC_HOST` (`0.0.0.0`), `GRPC_PORT` (`8081`) | `--grpc` |
/// | `HOST` (`0.0.0.0`), `PORT` (`8080`) | `--http` |
/// | `REDIS_URL`, `REDIS_SOCKET_TYPE` (`unix`), `REDIS_TYPE` (`SINGLE`), `REDIS_AUTH`, `REDIS_TLS` | `--redis` or `--redis-cluster` (none: in memory) |
/// | `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT` with `REDIS_TLS_CLIENT_KEY` | `--redis-ca-cert`, `--redis-client-cert`, `--redis-client-key` |
/// | `LIMIT_RESPONSE_HEADERS_ENABLED` (`false`) | `--headers legacy` or `--headers off` |
/// | `LOG_LEVEL` (`WARN`) | `--log` |
/// | `CACHE_KEY_PREFIX` | `--redis-prefix` |
/// | `MERGE_DOMAIN_CONFIG` (`false`) | `--merge-domains` |
/// | `RESPONSE_DYNAMIC_METADATA` (`false`) | `--dynamic-metadata` |
///
/// The settings that only tune the Go service (statsd, pools, tracing, …)
/// are returned in [`EnvFlags::ignored`], to be reported.
/// # Errors
/// [`EnvError`] for a setting that would change decisions or how the
/// service is reached and is not supported (`BACKEND_TYPE=memcache`,
/// `REDIS_TYPE=SENTINEL`, a global `SHADOW_MODE` or `QUOTA_MODE`,
/// `REDIS_PERSECOND`, renamed limit headers, an xDS
/// `CONFIG_TYPE`, gRPC on a Unix socket or over TLS, skipping Redis's
/// certificate check), a client certificate without its key (or the
/// reverse), or a value that does not parse.
pub fn flags_from_ratelimit_env(
    get: impl Fn(&str) -> Option<String>,
) -> Result<EnvFlags, EnvError> {
    let var = |name: &'static str| get(name).filter(|v| !v.trim().is_empty());
    let mut out = EnvFlags::default();
    let push = |out: &mut EnvFlags, flag: &str, value: String| {
        out.args.push(flag.to_string());
        out.args.push(value);
    };

    let mut dir =
        PathBuf::from(var("RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".into()));
    if let Some(sub) = var("RUNTIME_SUBDIRECTORY") {
        dir.push(sub);
    }
    dir.push(var("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into()));
    push(&mut out, "--config", dir.display().to_string());

    let addr =
        |host: &'static str, port: &'static str, default: &str| -> Result<String, EnvError> {
            let h = var(host).unwrap_or_else(|| "0.0.0.0".into());
            let p = var(port).unwrap_or_else(|| default.into());
            p.parse::<u16>().map_err(|_| EnvError {
                name: port,
                value: p.clone(),
                reason: "not a port number",
            })?;
            Ok(if h.contains(':') {
                format!("[{h}]:{p}")
            } else {
                format!("{h}:{p}")
            })
        };
    push(&mut out, "--grpc", addr("GRPC_HOST", "GRPC_PORT", "8081")?);
    push(&mut out, "--http", addr("HOST", "PORT", "8080")?);

    let flag = |name: &'static str| -> Result<bool, EnvError> {
        match var(name).map(|v| v.to_ascii_lowercase()) {
            None => Ok(false),
            Some(v) if matches!(v.as_str(), "true" | "1" | "t") => Ok(true),
            Some(v) if matches!(v.as_str(), "false" | "0" | "f") => Ok(false),
            Some(v) => Err(EnvError {
                name,
                value: v,
                reason: "not true or false",
            }),
        }
    };
    let unsupported = |name: &'static str, reason: &'static str| -> Result<(), EnvError> {
        match var(name) {
            Some(value) => Err(EnvError {
                name,
                value,
                reason,
            }),
            None => Ok(()),
        }
    };

    if let Some(b) = var("BACKEND_TYPE").filter(|b| !b.eq_ignore_ascii_case("redis")) {
        return Err(EnvError {
            name: "BACKEND_TYPE",
            value: b,
            reason: "only redis is supported (or no REDIS_URL: counters in memory)",
        });
    }
    for (name, reason) in [
        (
            "SHADOW_MODE",
            "a global shadow mode is not supported; set `shadow_mode: true` on the rules",
        ),
        (
            "REDIS_PERSECOND",
            "a second Redis for per-second limits is not supported; one Redis (or cluster) holds every counter",
        ),
        (
            "QUOTA_MODE",
            "a global quota mode is not supported; set `quota_mode: true` on the rules",
        ),
        (
            "GRPC_SERVER_USE_TLS",
            "serving gRPC over TLS is not supported; terminate TLS in front of the service (e.g. in Envoy)",
        ),
        (
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            "skipping Redis's certificate check is not supported",
        ),
    ] {
        if flag(name)? {
            return Err(EnvError {
                name,
                value: "true".into(),
                reason,
            });
        }
    }
    for name in [
        "LIMIT_LIMIT_HEADER",
        "LIMIT_REMAINING_HEADER",
        "LIMIT_RESET_HEADER",
    ] {
        unsupported(
            name,
            "renamed limit headers are not supported (RateLimit-Limit, -Remaining and -Reset are sent)",
        )?;
    }
    unsupported(
        "GRPC_UDS",
        "serving gRPC on a Unix socket is not supported; use GRPC_HOST and GRPC_PORT",
    )?;
    if let Some(ca) = var("REDIS_TLS_CACERT") {
        push(&mut out, "--redis-ca-cert", ca);
    }
    match (var("REDIS_TLS_CLIENT_CERT"), var("REDIS_TLS_CLIENT_KEY")) {
        (Some(cert), Some(key)) => {
            push(&mut out, "--redis-client-cert", cert);
            push(&mut out, "--redis-client-key", key);
        }
        (None, None) => {}
        (Some(cert), None) => {
            return Err(EnvError {
                name: "REDIS_TLS_CLIENT_CERT",
                value: cert,
                reason: "a client certificate needs its key: set REDIS_TLS_CLIENT_KEY too",
            })
        }
        (None, Some(key)) => {
            return Err(EnvError {
                name: "REDIS_TLS_CLIENT_KEY",
                value: key,
                reason: "a client key needs its certificate: set REDIS_TLS_CLIENT_CERT too",
            })
        }
    }
    if let Some(kind) = var("CONFIG_TYPE").filter(|k| !k.eq_ignore_ascii_case("file")) {
        return Err(EnvError {
            name: "CONFIG_TYPE",
            value: kind,
            reason: "only FILE is supported (configuration from an xDS server is not)",
        });
    }

    if let Some(url) = var("REDIS_URL") {
        let socket = var("REDIS_SOCKET_TYPE").unwrap_or_else(|| "unix".into());
        let tls = flag("REDIS_TLS")?;
        // `user:password` or a password alone, as the Go service reads it.
        let auth = var("REDIS_AUTH");
        let (user, pass) = match auth.as_deref().map(|a| a.split_once(':')) {
            Some(Some((u, p))) => (u, Some(p)),
            Some(None) => ("", auth.as_deref()),
            None => ("", None),
        };
        let bad_url = |value: String| EnvError {
            name: "REDIS_URL",
            value,
            reason: "not a host:port (tcp) or a socket path (unix)",
        };
        let one = |addr: &str| -> Result<String, EnvError> {
            let addr = addr.trim();
            let u = match socket.to_ascii_lowercase().as_str() {
                "tcp" => {
                    let scheme = if tls { "rediss" } else { "redis" };
                    let mut u = url::Url::parse(&format!("{scheme}://{addr}"))
                        .map_err(|_| bad_url(addr.to_string()))?;
                    let ok = u.set_username(user).is_ok() && u.set_password(pass).is_ok();
                    if !ok {
                        return Err(bad_url(addr.to_string()));
                    }
                    u
                }
                "unix" => {
                    let mut u = url::Url::parse(&format!("redis+unix://{addr}"))
                        .map_err(|_| bad_url(addr.to_string()))?;
                    if !user.is_empty() {
                        u.query_pairs_mut().append_pair("user", user);
                    }
                    if let Some(p) = pass {
                        u.query_pairs_mut().append_pair("pass", p);
                    }
                    u
                }
                _ => {
                    return Err(EnvError {
                        name: "REDIS_SOCKET_TYPE",
                        value: socket.clone(),
                        reason: "not tcp or unix",
                    })
                }
            };
            Ok(u.to_string())
        };
        match var("REDIS_TYPE")
            .unwrap_or_else(|| "SINGLE".into())
            .to_ascii_uppercase()
            .as_str()
        {
            "SINGLE" => push(&mut out, "--redis", one(&url)?),
            "CLUSTER" => {
                let nodes: Result<Vec<_>, _> = url.split(',').map(one).collect();
                push(&mut out, "--redis-cluster", nodes?.join(","));
            }
            other => {
                return Err(EnvError {
                    name: "REDIS_TYPE",
                    value: other.to_string(),
                    reason: "only SINGLE and CLUSTER are supported",
                })
            }
        }
    }

    let headers = if flag("LIMIT_RESPONSE_HEADERS_ENABLED")? {
        "legacy"
    } else {
        "off"
    };
    push(&mut out, "--headers", headers.into());
    if let Some(level) = var("LOG_LEVEL") {
        let level = level.to_ascii_lowercase();
        let level = if level == "warning" {
            "warn".into()
        } else {
            level
        };
        push(&mut out, "--log", level);
    }

    if let Some(prefix) = var("CACHE_KEY_PREFIX") {
        push(&mut out, "--redis-prefix", prefix);
    }
    if flag("MERGE_DOMAIN_CONFIG")? {
        out.args.push("--merge-domains".into());
    }
    if flag("RESPONSE_DYNAMIC_METADATA")? {
        out.args.push("--dynamic-metadata".into());
    }

    for name in IGNORED {
        if let Some(v) = var(name) {
            out.ignored.push(format!("{name}={v}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn args(pairs: &[(&str, &str)]) -> Vec<String> {
        flags_from_ratelimit_env(env(pairs)).unwrap().args
    }

    #[test]
    fn nothing_set_is_the_go_services_defaults_in_memory() {
        assert_eq!(
            args(&[]),
            [
                "--config",
                "/srv/runtime_data/current/config",
                "--grpc",
                "0.0.0.0:8081",
                "--http",
                "0.0.0.0:8080",
                "--headers",
                "off"
            ]
        );
    }

    #[test]
    fn a_typical_deployment_maps_to_flags() {
        let a = args(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_APPDIRECTORY", "rules"),
            ("GRPC_PORT", "9081"),
            ("HOST", "127.0.0.1"),
            ("PORT", "9080"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("REDIS_AUTH", "secret"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LOG_LEVEL", "DEBUG"),
        ]);
        assert_eq!(
            a,
            [
                "--config",
                "/data/ratelimit/rules",
                "--grpc",
                "0.0.0.0:9081",
                "--http",
                "127.0.0.1:9080",
                "--redis",
                "redis://:secret@redis:6379",
                "--headers",
                "legacy",
                "--log",
                "debug"
            ]
        );
    }

    #[test]
    fn a_cluster_names_every_node_and_tls_uses_rediss() {
        let a = args(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TYPE", "cluster"),
            ("REDIS_TLS", "true"),
            ("REDIS_URL", "a:7000, b:7001"),
        ]);
        let i = a.iter().position(|x| x == "--redis-cluster").unwrap();
        assert_eq!(a[i + 1], "rediss://a:7000,rediss://b:7001");
        // The Go service's default socket type is a unix socket; its
        // credentials go in the query, percent-encoded as in the userinfo.
        let a = args(&[("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")]);
        assert!(a.contains(&"redis+unix:///var/run/nutcracker/ratelimit.sock".to_string()));
        let a = args(&[("REDIS_URL", "/r.sock"), ("REDIS_AUTH", "me:p@ss/w&rd")]);
        assert!(
            a.contains(&"redis+unix:///r.sock?user=me&pass=p%40ss%2Fw%26rd".to_string()),
            "{a:?}"
        );
        let a = args(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("REDIS_AUTH", "p@ss/w#rd"),
        ]);
        let i = a.iter().position(|x| x == "--redis").unwrap();
        assert_eq!(a[i + 1], "redis://:p%40ss%2Fw%23rd@redis:6379");
        // A private authority and a client certificate go to their flags.
        let a = args(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TLS", "true"),
            ("REDIS_URL", "redis:6380"),
            ("REDIS_TLS_CACERT", "/ca.pem"),
            ("REDIS_TLS_CLIENT_CERT", "/c.pem"),
            ("REDIS_TLS_CLIENT_KEY", "/k.pem"),
        ]);
        for (flag, value) in [
            ("--redis", "rediss://redis:6380"),
            ("--redis-ca-cert", "/ca.pem"),
            ("--redis-client-cert", "/c.pem"),
            ("--redis-client-key", "/k.pem"),
        ] {
            let i = a.iter().position(|x| x == flag).expect(flag);
            assert_eq!(a[i + 1], value, "{a:?}");
        }
    }

    #[test]
    fn settings_that_would_change_decisions_are_errors_naming_them() {
        for (pairs, name) in [
            (&[("BACKEND_TYPE", "memcache")][..], "BACKEND_TYPE"),
            (&[("SHADOW_MODE", "true")][..], "SHADOW_MODE"),
            (&[("REDIS_PERSECOND", "true")][..], "REDIS_PERSECOND"),
            (
                &[("REDIS_URL", "x:1"), ("REDIS_TYPE", "SENTINEL")][..],
                "REDIS_TYPE",
            ),
            (
                &[("REDIS_URL", "x:1"), ("REDIS_SOCKET_TYPE", "udp")][..],
                "REDIS_SOCKET_TYPE",
            ),
            (
                &[("LIMIT_RESET_HEADER", "X-Reset")][..],
                "LIMIT_RESET_HEADER",
            ),
            (&[("GRPC_PORT", "http")][..], "GRPC_PORT"),
            (
                &[("REDIS_URL", "x:1"), ("REDIS_TLS", "maybe")][..],
                "REDIS_TLS",
            ),
            (&[("QUOTA_MODE", "true")][..], "QUOTA_MODE"),
            (&[("CONFIG_TYPE", "GRPC_XDS_SOTW")][..], "CONFIG_TYPE"),
            (&[("GRPC_UDS", "/run/rl.sock")][..], "GRPC_UDS"),
            (
                &[("GRPC_SERVER_USE_TLS", "true")][..],
                "GRPC_SERVER_USE_TLS",
            ),
            (
                &[("REDIS_TLS_CLIENT_CERT", "/c.pem")][..],
                "REDIS_TLS_CLIENT_CERT",
            ),
            (
                &[("REDIS_TLS_CLIENT_KEY", "/k.pem")][..],
                "REDIS_TLS_CLIENT_KEY",
            ),
            (&[("MERGE_DOMAIN_CONFIG", "yes")][..], "MERGE_DOMAIN_CONFIG"),
        ] {
            let e = flags_from_ratelimit_env(env(pairs)).unwrap_err();
            assert_eq!(e.name, name, "{e}");
            assert!(e.to_string().starts_with(&format!("{name}=")), "{e}");
        }
        // Off is no change, and so is the file configuration named.
        for pairs in [
            &[("SHADOW_MODE", "false")][..],
            &[("QUOTA_MODE", "false")][..],
            &[("CONFIG_TYPE", "FILE")][..],
        ] {
            assert!(flags_from_ratelimit_env(env(pairs)).is_ok(), "{pairs:?}");
        }
    }

    #[test]
    fn merged_domains_dynamic_metadata_and_the_key_prefix_map_to_their_flags() {
        let a = args(&[
            ("MERGE_DOMAIN_CONFIG", "true"),
            ("RESPONSE_DYNAMIC_METADATA", "true"),
        ]);
        assert!(a.contains(&"--merge-domains".to_string()), "{a:?}");
        assert!(a.contains(&"--dynamic-metadata".to_string()), "{a:?}");
        let a = args(&[("CACHE_KEY_PREFIX", "team-a:")]);
        let i = a.iter().position(|x| x == "--redis-prefix").unwrap();
        assert_eq!(a[i + 1], "team-a:");
        let a = args(&[("MERGE_DOMAIN_CONFIG", "false")]);
        assert!(!a.contains(&"--merge-domains".to_string()), "{a:?}");
    }

    #[test]
    fn settings_of_the_go_service_itself_are_reported_as_ignored() {
        let f =
            flags_from_ratelimit_env(env(&[("USE_STATSD", "true"), ("STATSD_HOST", "s")])).unwrap();
        assert_eq!(f.ignored, ["USE_STATSD=true", "STATSD_HOST=s"]);
        let f = flags_from_ratelimit_env(env(&[
            ("REDIS_TIMEOUT", "10s"),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
            ("TRACING_ENABLED", "true"),
        ]))
        .unwrap();
        assert_eq!(f.ignored.len(), 3, "{:?}", f.ignored);
    }
}
