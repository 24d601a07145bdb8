//! The response future: records the call's result when it resolves.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use ratewise::breaker::{CallResult, Refused};
use tower::BoxError;

use super::layer::{Classify, Pending};

pin_project! {
    /// The response future of [`CircuitBreaker`](super::CircuitBreaker).
    pub struct ResponseFuture<F, C> {
        #[pin]
        state: Kind<F, C>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, C> {
        Called {
            #[pin]
            future: F,
            pending: Pending,
            classify: C,
        },
        Refused {
            refused: Refused,
        },
    }
}

impl<F, C> ResponseFuture<F, C> {
    pub(crate) fn called(future: F, pending: Pending, classify: C) -> Self {
        ResponseFuture {
            state: Kind::Called {
                future,
                pending,
                classify,
            },
        }
    }

    pub(crate) fn refused(refused: Refused) -> Self {
        ResponseFuture {
            state: Kind::Refused { refused },
        }
    }
}

impl<F, C, T, E> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    C: Classify<T>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            KindProj::Refused { refused } => Poll::Ready(Err(Box::new(*refused))),
            KindProj::Called {
                future,
                pending,
                classify,
            } => {
                let out = std::task::ready!(future.poll(cx));
                let result = match &out {
                    Ok(res) => classify.classify(res),
                    Err(_) => CallResult::Failure,
                };
                pending.finish(result);
                Poll::Ready(out.map_err(Into::into))
            }
        }
    }
}
