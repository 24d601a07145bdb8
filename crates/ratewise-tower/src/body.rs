//! The bodies the layers answer in: [`ReplyBody`], the body types a layer
//! can write its own responses (a 429, a 503) in, and [`RateLimitBody`],
//! which makes any other body one of them.
//!
//! Why the layers answer in the inner service's own body type rather than
//! always in a wrapper: a server turns every response into *its* body type,
//! and for a body it does not know that costs an allocation and an indirect
//! call per response. axum, for one, boxes any body that is not
//! `axum::body::Body`. Answering in the inner body leaves an admitted
//! response exactly as the service made it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Full};
use pin_project_lite::pin_project;

/// A response body a layer of this crate can write its own answers in
/// (the refusal's problem+json, a shed request's text).
///
/// [`RateLimit`](crate::RateLimit) and
/// [`ConcurrencyLimit`](crate::concurrency::ConcurrencyLimit) answer in the
/// inner service's body type, so that body must be one of these:
/// `axum::body::Body` (feature `axum`, on by default), `tonic::body::Body`
/// (feature `tonic`), `String`, `http_body_util::Full<Bytes>`, `BoxBody`
/// and `UnsyncBoxBody` over `Bytes`, and [`RateLimitBody`]. For any other
/// body (a proxy's `hyper::body::Incoming`, say), wrap the inner service's
/// responses in [`RateLimitBody`]:
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response, StatusCode};
/// use http_body_util::Empty;
/// use bytes::Bytes;
/// use ratewise::Quota;
/// use ratewise_tower::{KeySource, Policy, RateLimitBody, RateLimitLayer};
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = RateLimitLayer::builder()
///     .key(KeySource::Global)
///     .policy(Policy::per_key("all", Quota::per_second(1)?))
///     .build()?;
/// let mut svc = ServiceBuilder::new()
///     .layer(layer)
///     // `Empty` is not a `ReplyBody`: wrapped, it is.
///     .map_response(|res: Response<Empty<Bytes>>| res.map(RateLimitBody::new))
///     .service_fn(|_req: Request<()>| async {
///         Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
///     });
/// let first = svc.ready().await?.call(Request::new(())).await?;
/// assert_eq!(first.status(), StatusCode::OK);
/// let second = svc.ready().await?.call(Request::new(())).await?;
/// assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
/// # Ok(())
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "a ratewise-tower layer cannot write its own responses in a `{Self}` body",
    label = "the inner service's response body",
    note = "the layer answers in the inner service's body type; enable the `tonic` feature for tonic's body, or wrap the inner service's responses: `.map_response(|res| res.map(ratewise_tower::RateLimitBody::new))`"
)]
pub trait ReplyBody: Sized {
    /// The body holding `bytes` (a whole response body, known up front).
    fn from_bytes(bytes: Bytes) -> Self;
}

impl ReplyBody for String {
    /// The layers' own bodies are UTF-8 (JSON or text).
    fn from_bytes(bytes: Bytes) -> Self {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl ReplyBody for Full<Bytes> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
    }
}

impl<E: 'static> ReplyBody for BoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        BoxBody::new(Full::new(bytes).map_err(|never| match never {}))
    }
}

impl<E: 'static> ReplyBody for UnsyncBoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        UnsyncBoxBody::new(Full::new(bytes).map_err(|never| match never {}))
    }
}

#[cfg(feature = "axum")]
impl ReplyBody for axum::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        axum::body::Body::from(bytes)
    }
}

#[cfg(feature = "tonic")]
impl ReplyBody for tonic::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        tonic::body::Body::new(Full::new(bytes))
    }
}

impl<B> ReplyBody for RateLimitBody<B> {
    fn from_bytes(bytes: Bytes) -> Self {
        RateLimitBody::full(bytes)
    }
}

pin_project! {
    /// Any body, made a [`ReplyBody`]: the inner service's body, or a
    /// layer's own (a problem+json refusal). Wrap the inner service's
    /// responses in it (`res.map(RateLimitBody::new)`) when their body is
    /// not a `ReplyBody` itself.
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

impl<B> RateLimitBody<B> {
    /// Wraps the inner service's body.
    pub fn new(body: B) -> Self {
        RateLimitBody {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        RateLimitBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B> std::fmt::Debug for RateLimitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("RateLimitBody::Inner"),
            Kind::Full { data } => f.debug_tuple("RateLimitBody::Full").field(data).finish(),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RateLimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    /// Reads a body that is ready at once to its end.
    fn read<B>(body: B) -> Bytes
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Debug,
    {
        let mut collect = std::pin::pin!(body.collect());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match collect.as_mut().poll(&mut cx) {
            Poll::Ready(r) => r.unwrap().to_bytes(),
            Poll::Pending => panic!("the body was not ready at once"),
        }
    }

    #[test]
    fn every_reply_body_holds_the_bytes_it_was_made_of() {
        let json = Bytes::from_static(br#"{"title":"quota exceeded"}"#);
        assert_eq!(read(String::from_bytes(json.clone())), json);
        assert_eq!(read(Full::from_bytes(json.clone())), json);
        assert_eq!(
            read(BoxBody::<Bytes, std::io::Error>::from_bytes(json.clone())),
            json
        );
        assert_eq!(
            read(UnsyncBoxBody::<Bytes, std::io::Error>::from_bytes(
                json.clone()
            )),
            json
        );
        assert_eq!(
            read(RateLimitBody::<Full<Bytes>>::from_bytes(json.clone())),
            json
        );
        assert_eq!(read(RateLimitBody::new(Full::new(json.clone()))), json);
        #[cfg(feature = "axum")]
        assert_eq!(read(axum::body::Body::from_bytes(json.clone())), json);
        #[cfg(feature = "tonic")]
        assert_eq!(read(tonic::body::Body::from_bytes(json.clone())), json);
        // An empty body ends at once.
        assert!(RateLimitBody::<Full<Bytes>>::from_bytes(Bytes::new()).is_end_stream());
    }
}
