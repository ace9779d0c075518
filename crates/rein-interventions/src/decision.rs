//! The decision of one handler call, as the dispatch pass awaits it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use rein_core::tool::BoxFuture;

use crate::error::HandlerError;

/// The decision of one handler call: ready at once (sync closures and policy handlers, no
/// allocation) or a boxed future (async closures and every other handler). The dispatch pass
/// matches it; it is also a future, for a closure handler called through the handler trait.
pub(crate) enum PendingDecision<'a, A> {
    Ready(Option<Result<A, HandlerError>>),
    Boxed(BoxFuture<'a, Result<A, HandlerError>>),
}

impl<A> PendingDecision<'_, A> {
    /// A decision that is ready.
    #[inline]
    pub(crate) fn ready(result: Result<A, HandlerError>) -> Self {
        Self::Ready(Some(result))
    }
}

// Nothing is pinned structurally inside (`A` is moved out by value, the boxed future is pinned
// on the heap), so the decision may be moved freely.
impl<A> Unpin for PendingDecision<'_, A> {}

impl<A> Future for PendingDecision<'_, A> {
    type Output = Result<A, HandlerError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Ready(r) => Poll::Ready(
                r.take()
                    .unwrap_or_else(|| Err(HandlerError::new("decision polled after completion"))),
            ),
            Self::Boxed(f) => f.as_mut().poll(cx),
        }
    }
}
