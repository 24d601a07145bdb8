//! A tonic client calling a gRPC service behind the layer (axum, HTTP/2 on
//! 127.0.0.1): a call over the limit gets `RESOURCE_EXHAUSTED` with the
//! retry delay in `grpc-retry-pushback-ms`, which ratewise's own client
//! classifier reads back.

mod common;

use std::future::{ready, Ready};
use std::time::{Duration, SystemTime};

use axum::Router;
use bytes::Bytes;
use common::grpc::Raw;
use http::uri::PathAndQuery;
use ratewise::{ManualClock, Quota};
use ratewise_client::classify::outcome;
use ratewise_client::Signal;
use ratewise_tower::{KeySource, Policy, RateLimitLayer};
use tonic::{Code, Status};

#[derive(Clone, Copy)]
struct Echo;
impl tonic::server::UnaryService<Bytes> for Echo {
    type Response = Bytes;
    type Future = Ready<Result<tonic::Response<Bytes>, Status>>;
    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        ready(Ok(tonic::Response::new(req.into_inner())))
    }
}

/// A tonic client of `/demo.Echo/Say` over 127.0.0.1.
struct EchoClient(tonic::client::Grpc<tonic::transport::Channel>);

impl EchoClient {
    async fn connect(addr: std::net::SocketAddr) -> Self {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .unwrap();
        EchoClient(tonic::client::Grpc::new(channel))
    }

    async fn say(&mut self, msg: &'static str) -> Result<tonic::Response<Bytes>, Status> {
        self.0.ready().await.unwrap();
        self.0
            .unary(
                tonic::Request::new(Bytes::from_static(msg.as_bytes())),
                PathAndQuery::from_static("/demo.Echo/Say"),
                Raw,
            )
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_over_the_limit_is_resource_exhausted_with_the_delay() {
    let layer = RateLimitLayer::builder()
        .key(KeySource::Global)
        .policy(Policy::per_key("calls", Quota::per_second(2).unwrap()))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let echo = tower::service_fn(|req: http::Request<axum::body::Body>| async move {
        let mut grpc = tonic::server::Grpc::new(Raw);
        Ok::<_, std::convert::Infallible>(grpc.unary(Echo, req).await)
    });
    let router = Router::new()
        .route_service("/demo.Echo/Say", echo)
        .layer(layer);
    let addr = common::serve(router).await;

    let mut client = EchoClient::connect(addr).await;
    let mut call = async |msg: &'static str| client.say(msg).await;
    assert_eq!(call("one").await.unwrap().into_inner(), "one");
    assert_eq!(call("two").await.unwrap().into_inner(), "two");
    let refused = call("three").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(refused.message().contains("calls"), "{}", refused.message());
    // 2 per second: the next call fits in 500 ms.
    let md = refused.metadata();
    assert_eq!(md.get("grpc-retry-pushback-ms").unwrap(), "500");
    assert_eq!(md.get("retry-after").unwrap(), "1");
    assert_eq!(md.get("ratelimit").unwrap(), r#""calls";r=0;t=1"#);
    // The client half of ratewise reads it as a throttle with that delay.
    let mut headers = md.clone().into_headers();
    headers.insert("grpc-status", http::HeaderValue::from_static("8"));
    let o = outcome(200, &headers, None, SystemTime::now());
    assert_eq!(o.signal, Signal::Throttled);
    assert_eq!(o.hints.retry_after, Some(Duration::from_secs(1)));
}

/// The echo service as tonic's own server takes it: a named tower service
/// over tonic's body.
#[derive(Clone, Copy)]
struct EchoServer;

impl tonic::server::NamedService for EchoServer {
    const NAME: &'static str = "demo.Echo";
}

impl tower::Service<http::Request<tonic::body::Body>> for EchoServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(Raw);
            Ok(grpc.unary(Echo, req).await)
        })
    }
}

/// With the `tonic` feature the layer goes straight on tonic's own server
/// (`Server::builder().layer(..)`), answering in `tonic::body::Body`: a
/// call over the limit is `RESOURCE_EXHAUSTED` with the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_goes_on_tonics_own_server() {
    let layer = RateLimitLayer::builder()
        .key(KeySource::Global)
        .policy(Policy::per_key("calls", Quota::per_second(1).unwrap()))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(EchoServer)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    // The listener is bound before the server starts: connecting waits on
    // the accept queue, not on time.
    let mut client = EchoClient::connect(addr).await;
    let mut call = async |msg: &'static str| client.say(msg).await;
    assert_eq!(call("one").await.unwrap().into_inner(), "one");
    let refused = call("two").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(
        refused.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1000"
    );
}
