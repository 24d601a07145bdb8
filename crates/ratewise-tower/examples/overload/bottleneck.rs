//! The server under test: an axum app whose `/work` requests queue for a
//! fixed pool of workers, each busy for the service time per request, and
//! `/admin/capacity`, which changes the worker count and the service time
//! while it runs. The queue is a thread pool's: work once queued is done
//! even if its caller has gone (it is counted as wasted), which is what
//! makes an unprotected server collapse under overload.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use ratewise::concurrency::Knee;
use ratewise_tower::concurrency::ConcurrencyLimitLayer;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tower::ServiceBuilder;

/// What stands between the requests and the worker pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Nothing: every request joins the queue.
    None,
    /// tower's `ConcurrencyLimit` of this many in flight, with `LoadShed`
    /// so that a request over it gets a `503` at once.
    Fixed(usize),
    /// ratewise's `ConcurrencyLimitLayer` driven by `Knee::default()`.
    Adaptive,
}

impl Guard {
    /// A short name for tables.
    pub fn name(self) -> String {
        match self {
            Guard::None => "no limit".to_string(),
            Guard::Fixed(n) => format!("tower fixed {n}"),
            Guard::Adaptive => "ratewise Knee".to_string(),
        }
    }
}

/// A pool of workers fed by one FIFO queue; cheap to clone.
#[derive(Clone)]
pub struct Pool {
    queue: mpsc::UnboundedSender<oneshot::Sender<()>>,
    workers: Arc<Semaphore>,
    shared: Arc<Shared>,
}

struct Shared {
    count: AtomicUsize,
    service_nanos: AtomicU64,
    /// Work finished for callers that had gone.
    wasted: AtomicU64,
    resize: tokio::sync::Mutex<()>,
}

impl Pool {
    /// `workers` workers busy for `service` per request; spawns the
    /// dispatcher on the current runtime.
    pub fn start(workers: usize, service: Duration) -> Pool {
        let (queue, mut jobs) = mpsc::unbounded_channel::<oneshot::Sender<()>>();
        let slots = Arc::new(Semaphore::new(workers));
        let shared = Arc::new(Shared {
            count: AtomicUsize::new(workers),
            service_nanos: AtomicU64::new(service.as_nanos() as u64),
            wasted: AtomicU64::new(0),
            resize: tokio::sync::Mutex::new(()),
        });
        let (dispatch_slots, dispatch_shared) = (Arc::clone(&slots), Arc::clone(&shared));
        tokio::spawn(async move {
            while let Some(reply) = jobs.recv().await {
                let Ok(worker) = Arc::clone(&dispatch_slots).acquire_owned().await else {
                    return;
                };
                let service =
                    Duration::from_nanos(dispatch_shared.service_nanos.load(Ordering::Relaxed));
                let shared = Arc::clone(&dispatch_shared);
                tokio::spawn(async move {
                    tokio::time::sleep(service).await;
                    if reply.send(()).is_err() {
                        shared.wasted.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(worker);
                });
            }
        });
        Pool {
            queue,
            workers: slots,
            shared,
        }
    }

    /// Queues one request and waits for a worker to finish it.
    async fn run(&self) -> Result<(), StatusCode> {
        let (reply, done) = oneshot::channel();
        self.queue
            .send(reply)
            .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
        done.await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// Sets the worker count (a shrink waits for the workers to finish
    /// their current request) and the service time of requests started
    /// from now on.
    pub async fn resize(&self, workers: usize, service: Duration) {
        let _one_at_a_time = self.shared.resize.lock().await;
        self.shared
            .service_nanos
            .store(service.as_nanos() as u64, Ordering::Relaxed);
        let now = self.shared.count.load(Ordering::Relaxed);
        if workers > now {
            self.workers.add_permits(workers - now);
        } else if workers < now {
            let gone = u32::try_from(now - workers).unwrap_or(u32::MAX);
            if let Ok(retired) = self.workers.acquire_many(gone).await {
                retired.forget();
            }
        }
        self.shared.count.store(workers, Ordering::Relaxed);
    }

    /// Requests worked on after their caller had gone.
    pub fn wasted(&self) -> u64 {
        self.shared.wasted.load(Ordering::Relaxed)
    }
}

#[derive(Deserialize)]
struct Capacity {
    workers: usize,
    service_ms: u64,
}

async fn work(State(pool): State<Pool>) -> Result<&'static str, StatusCode> {
    pool.run().await.map(|()| "done\n")
}

async fn admin(State(pool): State<Pool>, Query(c): Query<Capacity>) -> StatusCode {
    if c.workers == 0 {
        return StatusCode::BAD_REQUEST;
    }
    pool.resize(c.workers, Duration::from_millis(c.service_ms))
        .await;
    StatusCode::NO_CONTENT
}

/// The app: `GET /work` behind `guard`, `POST /admin/capacity?workers=N&service_ms=M`
/// outside it.
pub fn app(pool: Pool, guard: Guard) -> Router {
    let work = match guard {
        Guard::None => get(work),
        Guard::Fixed(limit) => get(work).route_layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
                    StatusCode::SERVICE_UNAVAILABLE
                }))
                .load_shed()
                .concurrency_limit(limit),
        ),
        Guard::Adaptive => get(work).route_layer(ConcurrencyLimitLayer::new(Knee::default())),
    };
    Router::new()
        .route("/work", work)
        .route("/admin/capacity", post(admin))
        .with_state(pool)
}

/// Serves `app` on a free loopback port; returns its address.
pub async fn serve(app: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}
