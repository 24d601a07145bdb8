//! The gRPC glue for `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`
//! (one bidirectional stream, `StreamRateLimitQuotas`): a tower service a
//! tonic server routes to, and a client. Written by hand in the shape
//! tonic's code generator emits, as for the rate-limit service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::tokio_stream::Stream;
use tonic::codegen::{Body, BoxFuture, Service, StdError};

use super::messages::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};

/// The gRPC service's full name.
pub const QUOTA_SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";
/// The path of `StreamRateLimitQuotas`.
pub const STREAM_QUOTAS_PATH: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// The server's half of a stream: assignments as they are decided.
pub type AssignmentStream =
    Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, tonic::Status>> + Send + 'static>>;

/// What answers `StreamRateLimitQuotas`.
pub trait RateLimitQuotaService: Send + Sync + 'static {
    /// Takes a data plane's usage reports, answers with assignments.
    fn stream_rate_limit_quotas(
        &self,
        request: tonic::Request<tonic::Streaming<RateLimitQuotaUsageReports>>,
    ) -> impl Future<Output = Result<tonic::Response<AssignmentStream>, tonic::Status>> + Send;
}

/// A tower service that serves a [`RateLimitQuotaService`] over gRPC.
#[derive(Debug)]
pub struct RateLimitQuotaServiceServer<T> {
    inner: Arc<T>,
}

impl<T> Clone for RateLimitQuotaServiceServer<T> {
    fn clone(&self) -> Self {
        RateLimitQuotaServiceServer {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T: RateLimitQuotaService> RateLimitQuotaServiceServer<T> {
    /// Serves `inner`.
    pub fn from_arc(inner: Arc<T>) -> Self {
        RateLimitQuotaServiceServer { inner }
    }
}

struct StreamQuotas<T>(Arc<T>);

impl<T: RateLimitQuotaService> tonic::server::StreamingService<RateLimitQuotaUsageReports>
    for StreamQuotas<T>
{
    type Response = RateLimitQuotaResponse;
    type ResponseStream = AssignmentStream;
    type Future = BoxFuture<tonic::Response<AssignmentStream>, tonic::Status>;

    fn call(
        &mut self,
        request: tonic::Request<tonic::Streaming<RateLimitQuotaUsageReports>>,
    ) -> Self::Future {
        let inner = Arc::clone(&self.0);
        Box::pin(async move { inner.stream_rate_limit_quotas(request).await })
    }
}

impl<T, B> Service<http::Request<B>> for RateLimitQuotaServiceServer<T>
where
    T: RateLimitQuotaService,
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
        if req.uri().path() != STREAM_QUOTAS_PATH {
            let status = tonic::Status::unimplemented(format!(
                "{} is not a method of this service; it serves {STREAM_QUOTAS_PATH}",
                req.uri().path()
            ));
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let method = StreamQuotas(Arc::clone(&self.inner));
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.streaming(method, req).await)
        })
    }
}

impl<T> tonic::server::NamedService for RateLimitQuotaServiceServer<T> {
    const NAME: &'static str = QUOTA_SERVICE_NAME;
}

/// A client for `StreamRateLimitQuotas` over any tonic channel: what a data
/// plane does, for tests and tools.
#[derive(Clone, Debug)]
pub struct RateLimitQuotaClient<C> {
    grpc: tonic::client::Grpc<C>,
}

impl<C> RateLimitQuotaClient<C>
where
    C: tonic::client::GrpcService<tonic::body::Body>,
    C::Error: Into<StdError>,
    C::ResponseBody: Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <C::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    /// A client over `channel` (e.g. a `tonic::transport::Channel`).
    pub fn new(channel: C) -> Self {
        RateLimitQuotaClient {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    /// Opens the stream: `reports` go out, assignments come back.
    ///
    /// # Errors
    /// The gRPC status of a stream that could not be opened.
    pub async fn stream_rate_limit_quotas(
        &mut self,
        reports: impl Stream<Item = RateLimitQuotaUsageReports> + Send + 'static,
    ) -> Result<tonic::Streaming<RateLimitQuotaResponse>, tonic::Status> {
        self.grpc
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("channel not ready: {}", e.into())))?;
        let path = http::uri::PathAndQuery::from_static(STREAM_QUOTAS_PATH);
        let codec = tonic_prost::ProstCodec::default();
        let answer = self
            .grpc
            .streaming(tonic::Request::new(reports), path, codec)
            .await?;
        Ok(answer.into_inner())
    }
}
