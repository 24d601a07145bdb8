//! The gRPC glue for `envoy.service.ratelimit.v3.RateLimitService`: a tower
//! service a tonic server routes to, and a client call, both with tonic's
//! prost codec. Written by hand in the shape tonic's code generator emits, so
//! no `.proto` file and no `protoc` take part in the build.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::{Body, BoxFuture, Service, StdError};

use super::messages::{RateLimitRequest, RateLimitResponse};

/// The gRPC service's full name.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// The path of `ShouldRateLimit`.
pub const SHOULD_RATE_LIMIT_PATH: &str =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// What answers `ShouldRateLimit`.
pub trait RateLimitService: Send + Sync + 'static {
    /// Decides one request.
    fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> impl Future<Output = Result<tonic::Response<RateLimitResponse>, tonic::Status>> + Send;
}

/// A tower service that serves a [`RateLimitService`] over gRPC; add it to
/// a `tonic::transport::Server` (it is a [`tonic::server::NamedService`]).
#[derive(Debug)]
pub struct RateLimitServiceServer<T> {
    inner: Arc<T>,
    max_decoding_message_size: Option<usize>,
}

impl<T> Clone for RateLimitServiceServer<T> {
    fn clone(&self) -> Self {
        RateLimitServiceServer {
            inner: Arc::clone(&self.inner),
            max_decoding_message_size: self.max_decoding_message_size,
        }
    }
}

impl<T: RateLimitService> RateLimitServiceServer<T> {
    /// Serves `inner`.
    pub fn from_arc(inner: Arc<T>) -> Self {
        RateLimitServiceServer {
            inner,
            max_decoding_message_size: None,
        }
    }

    /// Refuses requests larger than `limit` bytes (tonic's default is 4 MiB).
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.max_decoding_message_size = Some(limit);
        self
    }
}

struct ShouldRateLimit<T>(Arc<T>);

impl<T: RateLimitService> tonic::server::UnaryService<RateLimitRequest> for ShouldRateLimit<T> {
    type Response = RateLimitResponse;
    type Future = BoxFuture<tonic::Response<RateLimitResponse>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<RateLimitRequest>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        Box::pin(async move { inner.should_rate_limit(request).await })
    }
}

impl<T, B> Service<http::Request<B>> for RateLimitServiceServer<T>
where
    T: RateLimitService,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != SHOULD_RATE_LIMIT_PATH {
            let status = tonic::Status::unimplemented(format!(
                "{} is not a method of this service; it serves {SHOULD_RATE_LIMIT_PATH}",
                req.uri().path()
            ));
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let method = ShouldRateLimit(Arc::clone(&self.inner));
        let max = self.max_decoding_message_size;
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                .apply_max_message_size_config(max, None);
            Ok(grpc.unary(method, req).await)
        })
    }
}

impl<T> tonic::server::NamedService for RateLimitServiceServer<T> {
    const NAME: &'static str = SERVICE_NAME;
}

/// A client for `ShouldRateLimit` over any tonic channel.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use ratewise_server::rls::{Entry, RateLimitClient, RateLimitDescriptor, RateLimitRequest};
///
/// let channel = tonic::transport::Channel::from_static("http://127.0.0.1:8081")
///     .connect()
///     .await?;
/// let mut client = RateLimitClient::new(channel);
/// let answer = client
///     .should_rate_limit(RateLimitRequest {
///         domain: "edge".into(),
///         descriptors: vec![RateLimitDescriptor {
///             entries: vec![Entry { key: "user".into(), value: "alice".into() }],
///             ..Default::default()
///         }],
///         hits_addend: 0,
///     })
///     .await?;
/// println!("{:?}", answer.overall_code());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RateLimitClient<C> {
    grpc: tonic::client::Grpc<C>,
}

impl<C> RateLimitClient<C>
where
    C: tonic::client::GrpcService<tonic::body::Body>,
    C::Error: Into<StdError>,
    C::ResponseBody: Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <C::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    /// A client over `channel` (e.g. a `tonic::transport::Channel`).
    pub fn new(channel: C) -> Self {
        RateLimitClient {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    /// Calls `ShouldRateLimit`.
    ///
    /// # Errors
    /// The gRPC status of a failed call (the service's own errors, or the
    /// transport's).
    pub async fn should_rate_limit(
        &mut self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.grpc
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("channel not ready: {}", e.into())))?;
        let path = http::uri::PathAndQuery::from_static(SHOULD_RATE_LIMIT_PATH);
        let codec = tonic_prost::ProstCodec::default();
        let answer = self
            .grpc
            .unary(tonic::Request::new(request), path, codec)
            .await?;
        Ok(answer.into_inner())
    }
}
