//! Injected messages (SPEC §5), delivered at a turn boundary after admission by the
//! interventions (BeforeInvocation for injected input), or rejected.

use rein_core::{
    Error, Message,
    audit::{DecisionAction, DecisionOutcome, DecisionRecord, EventKind},
    event::{BeforeInvocationEvent, InputVerdict},
    id::InjectionId,
    result::{HandoffRecord, InjectionOutcome, InjectionRecord},
};

use super::machine::Fed;
use super::{Invocation, listeners};
use crate::agent::Agent;
use crate::checkpoint::PendingHandoff;
use crate::handoff::{
    ACTIVE_AGENT_KEY, HANDOFF, TransferTool, is_valid_history, transfer_tool_name,
};
use crate::stream::{AgentEvent, Sink};

impl Agent {
    /// Delivers the injected messages queued so far, and the parked ones a human answered.
    pub(super) async fn drain_injections(
        &mut self,
        inv: &mut Invocation,
        sink: &Sink,
    ) -> Result<Fed, Error> {
        // A handoff the tools asked for happens first: what was queued for the agent that
        // had control is stale from here on.
        if let Some(handoff) = inv.handoff.take()
            && self.carry_out_handoff(inv, handoff, sink)
        {
            // The filtered history replaces the stored one at once.
            self.session_sync().await?;
        }
        // Messages injected from other processes reach the run through its journal.
        if let Some(journal) = inv.journal.clone() {
            for (id, message) in journal.injections().await? {
                let interceptor = self.interceptor.for_run(inv.run_version);
                if let Err(e) = interceptor.inject_with_id(id, message) {
                    tracing::warn!(%id, "an injected message was not queued: {e}");
                }
            }
        }
        let (answered, queued) = self.interceptor.drain();
        let mut items = answered
            .into_iter()
            .map(|p| {
                let answers = p.answers();
                (p.item, answers, p.answers)
            })
            .chain(
                queued
                    .into_iter()
                    .map(|item| (item, Default::default(), Default::default())),
            );
        // (`let … else`, not `while let`: the latter's scrutinee would live across the awaits
        // of the loop body.)
        #[allow(clippy::while_let_loop)]
        loop {
            let Some((item, answers, given)) = items.next() else {
                break;
            };
            if item.version != inv.run_version {
                self.reject_injection(inv, &item.message, item.id, "stale", sink);
                continue;
            }
            let mut messages = vec![item.message.clone()];
            // The interventions alone check injected input (plain hooks do not see it).
            let checks = (self.core.interventions.as_ref()).is_some_and(|i| i.checks_injected());
            if checks {
                let mut ev = BeforeInvocationEvent::new(
                    inv.cx.clone(),
                    messages,
                    self.history.conv().snapshot(),
                )
                .as_injected(item.id)
                .with_answers(answers);
                let checked = match &self.core.interventions {
                    // Boxed: a pass is large, and an injection is rare.
                    Some(interventions) => Box::pin(interventions.check_injected(&mut ev)).await,
                    None => Ok(()),
                };
                if let Err(e) = checked {
                    let reason = e.to_string();
                    self.reject_injection(inv, &item.message, item.id, &reason, sink);
                    for (rest, ..) in items {
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
                    // Parked: the run goes on; a human's answer through the interceptor lets
                    // it through at a later boundary (answers given so far are kept).
                    InputVerdict::Hold { interrupts, .. } => {
                        // An answer to a question asked again no longer applies (what it
                        // answered changed): the human is asked again.
                        let mut given = given;
                        given.retain(|id, _| !interrupts.iter().any(|i| i.id == *id));
                        sink.emit(|| AgentEvent::InjectionAwaitingApproval {
                            id: item.id,
                            interrupts: interrupts.clone(),
                        });
                        self.interceptor
                            .for_run(inv.run_version)
                            .park(item, interrupts, given);
                        continue;
                    }
                };
            }
            // (Dropped here: a local left unmoved on one path is carried across the awaits.)
            drop(given);
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

    /// Passes control to another agent of the team (SPEC §9.2); whether its input filter
    /// rewrote the history.
    fn carry_out_handoff(
        &mut self,
        inv: &mut Invocation,
        handoff: PendingHandoff,
        sink: &Sink,
    ) -> bool {
        let Some(core) = self.team_member(handoff.to.as_str()).cloned() else {
            // Unreachable: transfer tools exist only for the team's agents.
            tracing::error!(to = %handoff.to, "handoff to an agent not in the team");
            return false;
        };
        let mut filtered = false;
        let from = self.core.name.to_string();
        let filter = self
            .core
            .tools
            .get(&transfer_tool_name(&handoff.to))
            .and_then(|t| t.downcast_ref::<TransferTool>())
            .and_then(|t| t.input_filter.clone());
        if let Some(filter) = filter {
            let messages = filter(self.history.conv().messages());
            if is_valid_history(&messages) {
                self.set_messages(messages, None);
                filtered = true;
            } else {
                tracing::warn!(from, to = %handoff.to, "a handoff's input filter returned an invalid history; not applied");
            }
        }
        self.core = core;
        self.state.set(ACTIVE_AGENT_KEY, handoff.to.as_str());
        inv.run_version = self.interceptor.bump(inv.run_version);
        let text = format!("{from} -> {}", handoff.to);
        let record = DecisionRecord::new(
            HANDOFF,
            EventKind::BeforeToolCall,
            DecisionAction::Handoff,
            DecisionOutcome::Applied,
        )
        .with_text(text)
        .with_tool_use_id(Some(handoff.tool_use_id.clone()));
        inv.record(vec![record], sink);
        crate::telemetry::handoff(&from, &handoff.to);
        sink.emit(|| AgentEvent::Handoff {
            from: from.clone(),
            to: handoff.to.clone(),
        });
        inv.handoffs.push(HandoffRecord::new(
            from,
            handoff.to,
            Some(handoff.tool_use_id),
        ));
        filtered
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
