//! Injected messages (SPEC §5), delivered at a turn boundary after admission by the
//! interventions (BeforeInvocation for injected input), or rejected.

use rein_core::{
    Error, Message,
    event::{BeforeInvocationEvent, InputVerdict},
    id::InjectionId,
    result::{InjectionOutcome, InjectionRecord},
};

use super::machine::Fed;
use super::{Invocation, listeners};
use crate::agent::Agent;
use crate::stream::{AgentEvent, Sink};

impl Agent {
    /// Delivers the injected messages queued so far.
    pub(super) async fn drain_injections(
        &mut self,
        inv: &mut Invocation,
        sink: &Sink,
    ) -> Result<Fed, Error> {
        let mut items = self.interceptor.drain().into_iter();
        while let Some(item) = items.next() {
            if item.version != inv.run_version {
                self.reject_injection(inv, &item.message, item.id, "stale", sink);
                continue;
            }
            let mut messages = vec![item.message.clone()];
            if self.core.hooks.has_injected() {
                let mut ev = BeforeInvocationEvent::new(
                    inv.cx.clone(),
                    messages,
                    self.history.conv().snapshot(),
                )
                .as_injected();
                if let Err(e) = self.core.hooks.dispatch_injected(&mut ev).await {
                    let reason = e.to_string();
                    self.reject_injection(inv, &item.message, item.id, &reason, sink);
                    for rest in items {
                        self.reject_injection(inv, &rest.message, rest.id, "run ended", sink);
                    }
                    return Err(e);
                }
                inv.record(ev.take_decisions(), sink);
                messages = match ev.into_verdict() {
                    InputVerdict::Admit(messages) => messages,
                    InputVerdict::Deny(text) => {
                        self.reject_injection(inv, &item.message, item.id, &text, sink);
                        continue;
                    }
                };
            }
            let delivered = messages.first().cloned().unwrap_or(item.message);
            let to = listeners(&self.core.hooks, inv, sink);
            self.history.add_all(messages, &to).await?;
            self.interceptor.consumed(item.id, &delivered);
            crate::telemetry::injection(true, None);
            inv.injections.push(InjectionRecord::new(
                item.id,
                InjectionOutcome::Consumed,
                None,
            ));
            sink.emit(|| AgentEvent::InjectionConsumed {
                id: item.id,
                message: delivered,
            });
        }
        Ok(Fed::Done)
    }

    /// Rejects an injected message, exactly once: its sender is told, and the run records it.
    pub(super) fn reject_injection(
        &self,
        inv: &mut Invocation,
        message: &Message,
        id: InjectionId,
        reason: &str,
        sink: &Sink,
    ) {
        self.interceptor.rejected(id, message, reason);
        crate::telemetry::injection(false, Some(reason));
        inv.injections.push(InjectionRecord::new(
            id,
            InjectionOutcome::Rejected,
            Some(reason.to_owned()),
        ));
        sink.emit(|| AgentEvent::InjectionRejected {
            id,
            reason: reason.to_owned(),
        });
    }
}
