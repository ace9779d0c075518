//! A scripted completion model for rig, the counterpart of Rein's `ScriptedModel`: canned turns
//! (text, or tool calls) in a cycle, optionally after a delay, or a stamped stream of text
//! deltas. It plugs into rig's Wire/Transport design the way rig's own `MockScript` does
//! (`rig-core/src/test_utils/completion.rs`), minus what only tests need: no recorded requests,
//! no serialized `raw` document per reply, no mutex-guarded queue.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rig_core::completion::options::{Mapping, OptionFields, OptionMap};
use rig_core::completion::{Accepts, CompletionRequest, ReplayTarget};
use rig_core::driver::{Exchange, Model, Opened, Opening, Transport};
use rig_core::error::{EncodeError, ProviderError};
use rig_core::message::{Api, CallId, ToolName};
use rig_core::operation::{Block, Completion, Finish};
use rig_core::wire::document::{Reassemble, Serves};
use rig_core::wire::{Capabilities, Decoder, Descriptor, Flow, Mode, Out, Wire, WireEvent};

/// One canned model turn.
pub enum Turn {
    Text(String),
    /// Tool calls: (call id, tool name, argument JSON).
    Calls(Vec<(String, ToolName, String)>),
}

/// One frame of a reply: a whole turn, or one streamed text delta, or the stream's end.
pub enum Frame {
    Turn(Arc<Turn>),
    Delta(String),
    End,
}

/// The scripted wire: the payload is the request as rig prepared it, dropped unread (Rein's
/// scripted model runs with `record_requests(false)`).
#[derive(Clone, Debug, PartialEq)]
pub struct Scripted;

const API: Api = Api::from_static("bench.scripted");

impl ReplayTarget for Scripted {
    fn api(&self) -> Api {
        API
    }

    fn map_options(&self, _request: &CompletionRequest, fields: OptionFields<'_>) -> OptionMap {
        let OptionFields {
            reasoning,
            cache,
            service_tier,
            verbosity,
            parallel_tool_calls,
            top_p,
            seed,
            stop,
        } = fields;
        let taken = |set: bool| match set {
            true => Mapping::Omit("a scripted reply ignores options"),
            false => Mapping::Nothing,
        };
        OptionMap {
            reasoning: taken(reasoning.is_some()),
            cache: taken(cache.is_some()),
            service_tier: taken(service_tier.is_some()),
            verbosity: taken(verbosity.is_some()),
            parallel_tool_calls: taken(parallel_tool_calls.is_some()),
            top_p: taken(top_p.is_some()),
            seed: taken(seed.is_some()),
            stop: taken(!stop.is_empty()),
        }
    }

    fn states_finish_reason(&self) -> bool {
        false
    }

    fn provider(&self) -> &str {
        "bench"
    }

    fn model(&self) -> &str {
        "scripted"
    }

    fn accepts(&self, _model: &str) -> Accepts {
        Accepts::ALL
    }
}

impl Wire for Scripted {
    type Op = Completion;
    type Payload = CompletionRequest;
    type Frame = Frame;
    type Decoder<'id> = Steps<'id>;
    type Reassembler = NoDocument;

    fn describe(&self) -> Descriptor<'_> {
        Descriptor::new("bench")
            .model(Some("scripted"))
            .capabilities(Capabilities::default())
            .replay(self)
    }

    fn encode(
        &self,
        request: CompletionRequest,
        _mode: Mode,
    ) -> Result<CompletionRequest, EncodeError> {
        Ok(request)
    }

    fn decoder<'id>(&self) -> Steps<'id> {
        Steps(std::marker::PhantomData)
    }
}

/// No provider document: a scripted reply has none to keep.
#[derive(Default)]
pub struct NoDocument;

impl Serves<Completion> for NoDocument {}

impl Reassemble<Frame> for NoDocument {
    fn absorb(&mut self, _frame: &Frame) {}

    fn finish(self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// Writes each frame through rig's completion writer, as a provider wire's decoder does.
pub struct Steps<'id>(std::marker::PhantomData<fn(&'id ()) -> &'id ()>);

impl<'id> Decoder<'id, Completion, Frame> for Steps<'id> {
    type Event = Frame;

    fn classify(&self, frame: Frame) -> WireEvent<Frame> {
        WireEvent::Known(frame)
    }

    fn decode(
        &mut self,
        frame: Frame,
        mut out: Out<'id, Completion>,
    ) -> Result<Flow, ProviderError> {
        match frame {
            Frame::Turn(turn) => {
                match &*turn {
                    Turn::Text(text) => {
                        let index = out.fresh_index();
                        out.whole(index, Block::Text, serde_json::Value::Null, text)?;
                    }
                    Turn::Calls(calls) => {
                        for (id, name, args) in calls {
                            let index = out.fresh_index();
                            let block = Block::Call {
                                id: CallId::from_wire(id.as_str()),
                                name: name.clone(),
                            };
                            out.whole(index, block, serde_json::Value::Null, args)?;
                        }
                    }
                }
                Ok(out.end(Finish::default()))
            }
            Frame::Delta(text) => {
                out.run(Block::Text, &text)?;
                Ok(Flow::More)
            }
            Frame::End => {
                out.end_run()?;
                Ok(out.end(Finish::default()))
            }
        }
    }
}

/// Streamed replies of `k` text deltas, each stamped when the model yields it.
#[derive(Clone, Default)]
pub struct Stamping {
    pub k: Arc<AtomicUsize>,
    pub stamps: Arc<Mutex<Vec<Instant>>>,
}

/// The transport: answers from the script, in a cycle.
#[derive(Clone)]
pub struct Script {
    turns: Arc<[Arc<Turn>]>,
    next: Arc<AtomicUsize>,
    delay: Option<Duration>,
    stamping: Option<Stamping>,
}

pub type ScriptedModel = Model<Scripted, Script>;

/// `turns` tool turns of `per_turn` calls of `noop` with `{"x": 1}`, then a text answer: the
/// script of Rein's bench (`model(turns, per_turn)`).
pub fn scripted(turns: usize, per_turn: usize) -> ScriptedModel {
    let mut script: Vec<Turn> = Vec::new();
    for t in 0..turns {
        let calls = (0..per_turn)
            .map(|k| {
                let name = ToolName::new("noop").unwrap_or_else(|e| panic!("{e}"));
                (format!("t{t}_{k}"), name, r#"{"x":1}"#.to_owned())
            })
            .collect();
        script.push(Turn::Calls(calls));
    }
    script.push(Turn::Text("Hello! How can I help you today?".into()));
    from_turns(script, None, None)
}

/// A model answering `text` to every call, after `delay` when there is one.
pub fn text(text: &str, delay: Option<Duration>) -> ScriptedModel {
    from_turns(vec![Turn::Text(text.into())], delay, None)
}

/// A model streaming `stamping.k` stamped deltas per call.
pub fn stamping(stamping: Stamping) -> ScriptedModel {
    from_turns(vec![Turn::Text(String::new())], None, Some(stamping))
}

fn from_turns(
    turns: Vec<Turn>,
    delay: Option<Duration>,
    stamping: Option<Stamping>,
) -> ScriptedModel {
    Model::new(
        Scripted,
        Script {
            turns: turns.into_iter().map(Arc::new).collect(),
            next: Arc::new(AtomicUsize::new(0)),
            delay,
            stamping,
        },
    )
}

impl Transport<Scripted> for Script {
    fn send(&self, _request: CompletionRequest, _exchange: Exchange) -> Opening<Frame> {
        if let Some(s) = &self.stamping {
            let k = s.k.load(Relaxed);
            let stamps = s.stamps.clone();
            stamps
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
            let frames = futures::stream::unfold(0usize, move |i| {
                let stamps = stamps.clone();
                async move {
                    let frame = match i {
                        _ if i > k => return None,
                        _ if i == k => Frame::End,
                        _ => {
                            stamps
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push(Instant::now());
                            Frame::Delta(i.to_string())
                        }
                    };
                    Some((Ok(frame), i + 1))
                }
            });
            return Opening::ready(Opened::new(frames));
        }
        let at = self.next.fetch_add(1, Relaxed) % self.turns.len();
        let turn = self.turns[at].clone();
        let frames = futures::stream::once(std::future::ready(Ok(Frame::Turn(turn))));
        match self.delay {
            None => Opening::ready(Opened::new(frames)),
            Some(d) => Opening::new(async move {
                tokio::time::sleep(d).await;
                Ok(Opened::new(frames))
            }),
        }
    }
}
