//! The stream guard (SPEC §3.9): the text of a streamed response passes the `ModelOutput`
//! hooks (and so the `model_output` interventions) before any of it reaches the caller or the
//! assembled response.

use rein_core::{
    Error,
    audit::{DecisionAction, DecisionOutcome, DecisionRecord, OnError},
    event::{InvocationContext, ModelOutputEvent},
    stream::{BlockDelta, BlockStart, StreamAssembler, StreamEvent},
};
use rein_hooks::HookRegistry;

use super::Invocation;
use crate::stream::{AgentEvent, Sink};

/// What the guard made of a model event.
pub(super) enum Guarded {
    /// Go on with the stream; the event, if any, is the caller's to handle as usual.
    Go(Option<StreamEvent>),
    /// A handler (or a hook) withheld the response: stop consuming the stream.
    Withheld {
        /// The text stored in its place.
        text: String,
        /// The handler whose deny withheld it (none for a plain hook).
        handler: Option<String>,
    },
}

/// The guard of one model call: the event of the text block streaming, if any.
pub(super) struct OutputGuard<'a> {
    hooks: &'a HookRegistry,
    cx: InvocationContext,
    index: u32,
    hold_back: usize,
    open: Option<ModelOutputEvent>,
    /// All the text released in this call, in order (what the caller saw).
    released: String,
}

impl<'a> OutputGuard<'a> {
    pub(super) fn new(
        hooks: &'a HookRegistry,
        cx: InvocationContext,
        index: u32,
        hold_back: usize,
    ) -> Self {
        Self {
            hooks,
            cx,
            index,
            hold_back,
            open: None,
            released: String::new(),
        }
    }

    /// All the text released in this call.
    pub(super) fn into_released(self) -> String {
        self.released
    }

    /// Feeds one model event: a text delta goes through a pass and only what it releases
    /// reaches `asm` and the caller; any other event first closes the open text block (its
    /// final pass) and is given back.
    pub(super) async fn feed(
        &mut self,
        ev: StreamEvent,
        inv: &mut Invocation,
        asm: &mut StreamAssembler,
        sink: &Sink,
    ) -> Result<Guarded, Error> {
        if let (Some(open), StreamEvent::BlockDelta(BlockDelta::Text(text))) = (&mut self.open, &ev)
        {
            open.push_text(text);
            return self.pass(inv, asm, sink).await;
        }
        // Whatever else comes ends the text block (a provider may omit the stop).
        if let withheld @ Guarded::Withheld { .. } = self.close(inv, asm, sink).await? {
            return Ok(withheld);
        }
        if let StreamEvent::BlockStart(BlockStart::Text) = ev {
            self.open =
                Some(ModelOutputEvent::new(self.cx.clone()).with_model_call_index(self.index));
        }
        Ok(Guarded::Go(Some(ev)))
    }

    /// Ends the open text block, if any: its final pass releases the rest.
    pub(super) async fn close(
        &mut self,
        inv: &mut Invocation,
        asm: &mut StreamAssembler,
        sink: &Sink,
    ) -> Result<Guarded, Error> {
        let Some(open) = self.open.as_mut() else {
            return Ok(Guarded::Go(None));
        };
        open.set_final();
        let guarded = self.pass(inv, asm, sink).await;
        self.open = None;
        guarded
    }

    /// One pass over the pending text, then the release of all but the hold-back window.
    async fn pass(
        &mut self,
        inv: &mut Invocation,
        asm: &mut StreamAssembler,
        sink: &Sink,
    ) -> Result<Guarded, Error> {
        let Some(ev) = self.open.as_mut() else {
            return Ok(Guarded::Go(None));
        };
        let dispatched = self.hooks.dispatch(ev).await;
        let decisions = ev.take_decisions();
        let handler = ev.withheld().and_then(|_| withholding_handler(&decisions));
        inv.record(decisions, sink);
        // A failed pass (`OnError::Throw`, a failing hook) releases nothing more.
        dispatched?;
        if let Some(text) = ev.withheld() {
            return Ok(Guarded::Withheld {
                text: text.to_owned(),
                handler,
            });
        }
        if let Some(out) = ev.release(self.hold_back) {
            self.released.push_str(&out);
            if sink.is_enabled() {
                sink.delta(AgentEvent::TextDelta(out.clone()));
            }
            asm.push(StreamEvent::BlockDelta(BlockDelta::Text(out)))?;
            sink.flush().await;
        }
        Ok(Guarded::Go(None))
    }
}

/// The handler whose deny (or fail-closed error) withheld the response.
fn withholding_handler(decisions: &[DecisionRecord]) -> Option<String> {
    decisions
        .iter()
        .rev()
        .find(|d| {
            (d.action == DecisionAction::Deny && d.outcome == DecisionOutcome::Applied)
                || (d.action == DecisionAction::Error && d.on_error == Some(OnError::Deny))
        })
        .map(|d| d.handler.clone())
}
