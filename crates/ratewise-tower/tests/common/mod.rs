//! A real axum server on 127.0.0.1 and a real HTTP client (hyper-util).

#![allow(dead_code)]

pub mod grpc;
pub mod recorded;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Serves `app` with peer addresses on a fresh port of `ip`; the listener
/// is bound before this returns, so the server is ready.
pub async fn serve_on(ip: &str, app: Router) -> SocketAddr {
    // Without the crate's `axum` feature the layer reads the peer from a
    // plain `SocketAddr` extension: put it there, as a non-axum server would.
    #[cfg(not(feature = "axum"))]
    let app = app.layer(axum::middleware::from_fn(
        |mut req: axum::extract::Request, next: axum::middleware::Next| async move {
            use axum::extract::ConnectInfo;
            if let Some(ConnectInfo(peer)) =
                req.extensions().get::<ConnectInfo<SocketAddr>>().copied()
            {
                req.extensions_mut().insert(peer);
            }
            next.run(req).await
        },
    ));
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

pub async fn serve(app: Router) -> SocketAddr {
    serve_on("127.0.0.1", app).await
}

#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
    base: String,
}

impl HttpClient {
    pub fn new(addr: SocketAddr) -> Self {
        HttpClient {
            inner: Client::builder(TokioExecutor::new()).build_http(),
            base: format!("http://{addr}"),
        }
    }

    /// GET `path` with `headers`; every request has a 10 s bound.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut req = Request::get(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::new())).unwrap();
        let res = tokio::time::timeout(Duration::from_secs(10), async {
            let res = self.inner.request(req).await.expect("request");
            let (parts, body) = res.into_parts();
            let body = body.collect().await.expect("body").to_bytes();
            Reply {
                status: parts.status,
                headers: parts.headers,
                body,
            }
        })
        .await
        .expect("the server answers within 10 s");
        res
    }

    pub fn raw(&self) -> &Client<HttpConnector, Full<Bytes>> {
        &self.inner
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}
