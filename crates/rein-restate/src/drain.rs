//! A worker's graceful shutdown: the runs in flight finish before the connections close.
//!
//! Restate drops the invocations of a connection that closes — an HTTP/2 GOAWAY included — and
//! runs them again elsewhere from their journal: closing the connections at once, as a plain
//! graceful shutdown does, cuts every run in flight short (issue #37: the worker exited in
//! under 2 s, its run unfinished). So the worker counts the `ReinAgent` invocations it serves;
//! on shutdown it stops accepting connections, answers new `ReinAgent` invocations 503
//! (Restate retries them on another worker), keeps serving the inbox's short calls that runs
//! in flight make (and `ReinAgent/current_run`, which the inbox asks), and closes the connections only once no run is in flight (or the grace
//! period is over).
//!
//! It also watches what the worker answers Restate for a journal mismatch (RT0016: the code
//! took another path than the journal of the run it replays, after a deploy changed it): the
//! SDK reports it only to Restate, which retries the run for ever. The worker logs it, with
//! the session and the invocation, and counts it (the metric
//! `rein.restate.journal_mismatches`).

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
        // runs in flight need them to finish — as the inbox needs `current_run` (a read) to
        // take their injections and cancels.
        let path = req.uri().path();
        let run = path.contains("/invoke/ReinAgent/") && !path.ends_with("/current_run");
        let handler = path.rsplit('/').take(2).collect::<Vec<_>>();
        let handler = format!("{}/{}", handler.get(1).unwrap_or(&""), handler[0]);
        let guard = if run {
            match self.in_flight.enter() {
                Some(guard) => Some(guard),
                None => {
                    let mut refused = Response::new(Served {
                        body: None,
                        _run: None,
                        watch: Watch::new(handler),
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
            watch: Watch::new(handler),
        })))
    }
}

/// A response body: the endpoint's (holding its run until it ends), or none (a refusal).
pub(crate) struct Served {
    body: Option<Pin<Box<ResponseBody>>>,
    _run: Option<Run>,
    watch: Watch,
}

impl Body for Served {
    type Data = Bytes;
    type Error = <ResponseBody as Body>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(body) = this.body.as_mut() else {
            return Poll::Ready(None);
        };
        // The handler runs inside this poll: it names its run here (`note_run`).
        let polled = SERVED.sync_scope(this.watch.run.clone(), || body.as_mut().poll_frame(cx));
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            this.watch.scan(data);
        }
        polled
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

tokio::task_local! {
    /// The session and invocation of the handler a response serves, as the handler names
    /// them.
    static SERVED: Arc<Mutex<Option<(String, String)>>>;
}

/// Names the session and invocation of the handler being served (for the worker's log of a
/// journal mismatch).
pub(crate) fn note_run(session: &str, invocation: &str) {
    let _ = SERVED.try_with(|slot| {
        if let Ok(mut slot) = slot.lock() {
            *slot = Some((session.to_owned(), invocation.to_owned()));
        }
    });
}

/// The SDK's code for a journal mismatch (Restate's RT0016).
const JOURNAL_MISMATCH: u64 = 570;
/// The service protocol's `ErrorMessage` type (a frame: 16 bits of type, 16 of flags, 32 of
/// length, then the protobuf message, whose field 1 is the code).
const ERROR_MESSAGE: u16 = 0x0002;

/// Reads the frames a response carries to Restate, for an error message with a journal
/// mismatch. Only the first bytes of an error message are kept; every other frame is skipped.
struct Watch {
    handler: String,
    run: Arc<Mutex<Option<(String, String)>>>,
    header: [u8; 8],
    have: usize,
    /// Bytes left of the frame being skipped or read.
    left: u64,
    /// The start of an error message being read.
    error: Option<Vec<u8>>,
}

impl Watch {
    fn new(handler: String) -> Self {
        Self {
            handler,
            run: Arc::default(),
            header: [0; 8],
            have: 0,
            left: 0,
            error: None,
        }
    }

    fn scan(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.left > 0 {
                let n = usize::try_from(self.left).map_or(data.len(), |l| l.min(data.len()));
                if let Some(error) = &mut self.error {
                    let room = 16usize.saturating_sub(error.len()).min(n);
                    error.extend_from_slice(&data[..room]);
                }
                data = &data[n..];
                self.left -= n as u64;
                if self.left == 0
                    && let Some(error) = self.error.take()
                {
                    self.reported(&error);
                }
                continue;
            }
            let n = (8 - self.have).min(data.len());
            self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == 8 {
                self.have = 0;
                let header = u64::from_be_bytes(self.header);
                self.left = header & 0xFFFF_FFFF;
                let error = (header >> 48) as u16 == ERROR_MESSAGE;
                self.error = error.then(Vec::new);
                if error && self.left == 0 {
                    self.error = None;
                }
            }
        }
    }

    /// An error message the SDK sent Restate: a journal mismatch is logged and counted.
    fn reported(&self, message: &[u8]) {
        // Field 1 (the code), a varint: tag 0x08.
        let Some((&0x08, mut rest)) = message.split_first() else {
            return;
        };
        let mut code = 0u64;
        for shift in (0..35).step_by(7) {
            let Some((&byte, tail)) = rest.split_first() else {
                return;
            };
            rest = tail;
            code |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        if code != JOURNAL_MISMATCH {
            return;
        }
        let run = self.run.lock().ok().and_then(|r| r.clone());
        let (session, invocation) = run.unwrap_or_default();
        tracing::error!(
            session,
            invocation,
            handler = %self.handler,
            "journal mismatch (RT0016): this worker's code takes another path than the journal \
             of the run it replays (a deploy changed its tools, interventions or model?). Restate \
             retries the run until it matches; deploy the run's code again, or end the run with \
             `abandon` (its finished steps are kept)"
        );
        tracing::event!(
            target: rein_agent::telemetry::METRICS_TARGET,
            tracing::Level::TRACE,
            monotonic_counter.rein.restate.journal_mismatches = 1u64,
            rpc.method = %self.handler,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ty: u16, payload: &[u8]) -> Vec<u8> {
        let header = (u64::from(ty) << 48) | payload.len() as u64;
        let mut out = header.to_be_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    /// Counts the mismatches the watch reports, through its log.
    fn mismatches(stream: &[u8], chunk: usize) -> usize {
        use std::sync::atomic::AtomicUsize;
        static SEEN: AtomicUsize = AtomicUsize::new(0);
        struct Count;
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
            fn on_event(
                &self,
                e: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                if e.metadata().level() == &tracing::Level::ERROR {
                    SEEN.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        use tracing_subscriber::layer::SubscriberExt as _;
        let subscriber = tracing_subscriber::registry().with(Count);
        let before = SEEN.load(Ordering::SeqCst);
        tracing::subscriber::with_default(subscriber, || {
            let mut watch = Watch::new("ReinAgent/run_input".into());
            for piece in stream.chunks(chunk) {
                watch.scan(piece);
            }
        });
        SEEN.load(Ordering::SeqCst) - before
    }

    #[test]
    fn a_journal_mismatch_is_found_in_the_frames_however_they_are_cut() {
        // Code 570 as a varint: 0xBA 0x04.
        let mut mismatch = vec![0x08, 0xBA, 0x04, 0x12, 0x03];
        mismatch.extend_from_slice(b"bad");
        let mut stream = frame(0x0403, b"some state value");
        stream.extend(frame(ERROR_MESSAGE, &mismatch));
        for chunk in [1, 3, 8, 11, 1000] {
            assert_eq!(mismatches(&stream, chunk), 1, "chunks of {chunk}");
        }
        // Another error (500), an empty error, a payload that looks like an error: none.
        let mut other = frame(ERROR_MESSAGE, &[0x08, 0xF4, 0x03]);
        other.extend(frame(ERROR_MESSAGE, &[]));
        other.extend(frame(0x0403, &frame(ERROR_MESSAGE, &mismatch)));
        assert_eq!(mismatches(&other, 5), 0);
    }
}
