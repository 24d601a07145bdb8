//! What starting a server takes: a free port, a scratch directory, a
//! bounded wait for readiness, and the child killed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// Why a server did not start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// A free port on 127.0.0.1 (bound and released; another process could
/// take it in between, which shows as the server failing to start).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// A fresh directory under the system's temporary directory.
pub(crate) fn scratch_dir(name: &str) -> Result<PathBuf, StartError> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "ratewise-test-servers-{}-{name}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| StartError(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The status of one `GET path` over a fresh connection, or `None` if
/// nothing answers within a second.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head[..n]);
    text.split_whitespace().nth(1)?.parse().ok()
}

/// A running server process, killed and reaped on drop; its directory is
/// removed then too.
pub(crate) struct Running {
    pub(crate) child: Child,
    pub(crate) dir: PathBuf,
    pub(crate) log: PathBuf,
}

impl Running {
    /// Waits (at most `limit`) until `ready()` holds; fails with the log if
    /// the process exits first or the time runs out.
    pub(crate) fn wait_ready(
        &mut self,
        what: &str,
        limit: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), StartError> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(StartError(format!(
                    "{what} exited with {status} before it was ready; its log:\n{}",
                    read_log(&self.log)
                )));
            }
            if ready() {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(StartError(format!(
                    "{what} was not ready within {limit:?}; its log:\n{}",
                    read_log(&self.log)
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the server logged so far.
    pub(crate) fn log(&self) -> String {
        read_log(&self.log)
    }
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
