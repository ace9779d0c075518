// TEMP until http::body_model_stream: a private copy of the Ollama stream driver (NdjsonState)
// running the event-stream decoder; deleted when the generic driver lands.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rein_core::{ModelError, ModelErrorKind, StreamEvent, StreamMetrics};

use super::PROVIDER;
use super::stream::EventStreamDecoder;
use crate::http::Flow;
use crate::model::ModelStream;

struct DriverState {
    response: Option<reqwest::Response>,
    decoder: EventStreamDecoder,
    pending: VecDeque<StreamEvent>,
    idle: Duration,
    started: Instant,
    first_byte: Option<Duration>,
    finished: bool,
}

pub(super) fn event_stream(
    response: reqwest::Response,
    idle: Duration,
    started: Instant,
) -> ModelStream {
    let state = DriverState {
        response: Some(response),
        decoder: EventStreamDecoder::default(),
        pending: VecDeque::new(),
        idle,
        started,
        first_byte: None,
        finished: false,
    };
    Box::pin(futures_util::stream::unfold(state, |mut st| async move {
        let item = st.next_item().await?;
        Some((item, st))
    }))
}

impl DriverState {
    async fn next_item(&mut self) -> Option<Result<StreamEvent, ModelError>> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(Ok(ev));
            }
            if self.finished {
                return None;
            }
            let Some(resp) = self.response.as_mut() else {
                return self.end();
            };
            match tokio::time::timeout(self.idle, resp.chunk()).await {
                Err(_) => {
                    let e = ModelError::timeout(format!(
                        "{PROVIDER}: no stream data for {} ms",
                        self.idle.as_millis()
                    ));
                    let e = if self.first_byte.is_some() {
                        e
                    } else {
                        e.before_first_byte()
                    };
                    self.fail();
                    return Some(Err(e));
                }
                Ok(Err(t)) => {
                    let kind = if t.is_timeout() {
                        ModelErrorKind::Timeout
                    } else {
                        ModelErrorKind::Transport
                    };
                    let mut e = ModelError::new(
                        kind,
                        format!("{PROVIDER}: connection dropped mid-stream: {t}"),
                    )
                    .with_source(t);
                    if self.first_byte.is_none() {
                        e = e.before_first_byte();
                    }
                    self.fail();
                    return Some(Err(e));
                }
                Ok(Ok(None)) => {
                    self.response = None;
                    return self.end();
                }
                Ok(Ok(Some(bytes))) => {
                    if self.first_byte.is_none() {
                        self.first_byte = Some(self.started.elapsed());
                    }
                    match self.decoder.feed(&bytes, &mut self.pending) {
                        Ok(Flow::Continue) => {}
                        Ok(Flow::Done) => {
                            self.response = None;
                            if let Some(e) = self.end_into_pending() {
                                return Some(Err(e));
                            }
                        }
                        Err(e) => {
                            self.fail();
                            return Some(Err(e));
                        }
                    }
                }
            }
        }
    }

    fn fail(&mut self) {
        self.finished = true;
        self.response = None;
        self.pending.clear();
    }

    fn end_into_pending(&mut self) -> Option<ModelError> {
        match self.decoder.finish(&mut self.pending) {
            Ok(()) => {
                self.pending.push_back(StreamEvent::Metadata {
                    usage: self.decoder.usage(),
                    metrics: StreamMetrics {
                        latency: Some(self.started.elapsed()),
                        time_to_first_byte: self.first_byte,
                    },
                });
                self.finished = true;
                None
            }
            Err(e) => {
                self.fail();
                Some(e)
            }
        }
    }

    fn end(&mut self) -> Option<Result<StreamEvent, ModelError>> {
        if let Some(e) = self.end_into_pending() {
            return Some(Err(e));
        }
        self.pending.pop_front().map(Ok)
    }
}
