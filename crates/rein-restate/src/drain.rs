//! A worker's graceful shutdown: the runs in flight finish before the connections close.
//!
//! Restate drops the invocations of a connection that closes — an HTTP/2 GOAWAY included — and
//! runs them again elsewhere from their journal: closing the connections at once, as a plain
//! graceful shutdown does, cuts every run in flight short (issue #37: the worker exited in
//! under 2 s, its run unfinished). So the worker counts the `ReinAgent` invocations it serves;
//! on shutdown it stops accepting connections, answers new `ReinAgent` invocations 503
//! (Restate retries them on another worker), keeps serving the inbox's short calls that runs
//! in flight make, and closes the connections only once no run is in flight (or the grace
//! period is over).

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::{Request, Response, service::Service};
use restate_sdk::endpoint::ResponseBody;
use restate_sdk::hyper::HyperEndpoint;
use tokio::sync::Notify;

/// The runs a worker serves, and whether it is draining.
#[derive(Clone, Default)]
pub(crate) struct InFlight(Arc<State>);

#[derive(Default)]
struct State {
    runs: AtomicUsize,
    draining: AtomicBool,
    idle: Notify,
}

impl InFlight {
    /// From now on, new runs are refused (503).
    pub(crate) fn drain(&self) {
        self.0.draining.store(true, Ordering::SeqCst);
    }

    /// Completes once no run is in flight.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.0.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.0.runs.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    fn enter(&self) -> Option<Run> {
        self.0.runs.fetch_add(1, Ordering::SeqCst);
        let run = Run(self.clone());
        // Checked after counting: a drain that started meanwhile either sees this run or
        // this run sees the drain.
        (!self.0.draining.load(Ordering::SeqCst)).then_some(run)
    }
}

/// One run in flight, until its response ends.
struct Run(InFlight);

impl Drop for Run {
    fn drop(&mut self) {
        if self.0.0.runs.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.0.idle.notify_waiters();
        }
    }
}

/// The worker's HTTP service: Restate's endpoint, with its runs counted.
#[derive(Clone)]
pub(crate) struct Tracked {
    pub(crate) endpoint: HyperEndpoint,
    pub(crate) in_flight: InFlight,
}

impl Service<Request<Incoming>> for Tracked {
    type Response = Response<Served>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        // A session's run: `/invoke/ReinAgent/{handler}`. The inbox's calls are short, and the
        // runs in flight need them to finish.
        let run = req.uri().path().contains("/invoke/ReinAgent/");
        let guard = if run {
            match self.in_flight.enter() {
                Some(guard) => Some(guard),
                None => {
                    let mut refused = Response::new(Served {
                        body: None,
                        _run: None,
                    });
                    *refused.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
                    return ready(Ok(refused));
                }
            }
        } else {
            None
        };
        let Ok(response) = self.endpoint.call(req).into_inner();
        ready(Ok(response.map(|body| Served {
            body: Some(Box::pin(body)),
            _run: guard,
        })))
    }
}

/// A response body: the endpoint's (holding its run until it ends), or none (a refusal).
pub(crate) struct Served {
    body: Option<Pin<Box<ResponseBody>>>,
    _run: Option<Run>,
}

impl Body for Served {
    type Data = Bytes;
    type Error = <ResponseBody as Body>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut().body.as_mut() {
            Some(body) => body.as_mut().poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}
