//! Injected messages (SPEC §5), delivered at a turn boundary after admission by the
//! interventions (BeforeInvocation for injected input), or rejected.

use rein_core::{
    Error, Message,
    audit::{DecisionAction, DecisionOutcome, DecisionRecord, EventKind},
    event::{BeforeInvocationEvent, InputVerdict},
    id::InjectionId,
    result::{HandoffRecord, InjectionOutcome, InjectionRecord},
};

use super::machine::StepReport;
use super::{Driver, listeners};
use crate::agent::ACTIVE_AGENT_KEY;
use crate::checkpoint::PendingHandoff;
use crate::handoff::{HANDOFF, HandoffTo, is_valid_history, transfer_tool_name};
use crate::stream::AgentEvent;

impl Driver<'_> {
    /// Delivers the injected messages queued so far, and the parked ones a human answered.
    pub(super) async fn drain_injections(&mut self) -> Result<StepReport, Error> {
        // A handoff the tools asked for happens first: what was queued for the agent that
        // had control is stale from here on.
        if let Some(handoff) = self.inv.handoff.take()
            && self.carry_out_handoff(handoff)
        {
            // The filtered history replaces the stored one at once.
            self.agent.session_sync().await?;
        }
        // Messages injected from other processes reach the run through its journal.
        if let Some(journal) = self.inv.journal.clone() {
            for (id, message) in journal.injections().await? {
                let interceptor = self.agent.interceptor.for_run(self.inv.run_version);
                if let Err(e) = interceptor.inject_with_id(id, message) {
                    tracing::warn!(%id, "an injected message was not queued: {e}");
                }
            }
        }
        let (answered, queued) = self.agent.interceptor.drain();
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
        // (`let … else`, not `while let`: layout rule 3.)
        #[allow(clippy::while_let_loop)]
        loop {
            let Some((item, answers, given)) = items.next() else {
                break;
            };
            if item.version != self.inv.run_version {
                self.reject_injection(&item.message, item.id, "stale");
                continue;
            }
            let mut messages = vec![item.message.clone()];
            // The interventions alone check injected input (plain hooks do not see it).
            let checks = (self.agent.core.settings.interventions.as_ref())
                .is_some_and(|i| i.checks_injected());
            if checks {
                let mut ev = BeforeInvocationEvent::new(
                    self.inv.cx.clone(),
                    messages,
                    self.agent.history.conv().snapshot(),
                )
                .as_injected(item.id)
                .with_answers(answers);
                let checked = match &self.agent.core.settings.interventions {
                    // Boxed (layout rule 1).
                    Some(interventions) => Box::pin(interventions.check_injected(&mut ev)).await,
                    None => Ok(()),
                };
                if let Err(e) = checked {
                    let reason = e.to_string();
                    self.reject_injection(&item.message, item.id, &reason);
                    for (rest, ..) in items {
                        self.reject_injection(&rest.message, rest.id, "run ended");
                    }
                    return Err(e);
                }
                self.record(ev.take_decisions());
                messages = match ev.into_verdict() {
                    InputVerdict::Admit(messages) => messages,
                    InputVerdict::Deny(text) => {
                        self.reject_injection(&item.message, item.id, &text);
                        continue;
                    }
                    // Parked: the run goes on; a human's answer through the interceptor lets
                    // it through at a later boundary (answers given so far are kept).
                    InputVerdict::Hold { interrupts, .. } => {
                        // An answer to a question asked again no longer applies (what it
                        // answered changed): the human is asked again.
                        let mut given = given;
                        given.retain(|id, _| !interrupts.iter().any(|i| i.id == *id));
                        self.sink.emit(|| AgentEvent::InjectionAwaitingApproval {
                            id: item.id,
                            interrupts: interrupts.clone(),
                        });
                        self.agent
                            .interceptor
                            .for_run(self.inv.run_version)
                            .park(item, interrupts, given);
                        continue;
                    }
                };
            }
            // (Dropped here: layout rule 3.)
            drop(given);
            let delivered = messages.first().cloned().unwrap_or(item.message);
            let to = listeners(&self.agent.core.settings.hooks, self.inv, self.sink);
            self.agent.history.add_all(messages, &to).await?;
            self.agent.interceptor.consumed(item.id, &delivered);
            crate::telemetry::injection(true, None);
            self.inv.injections.push(InjectionRecord::new(
                item.id,
                InjectionOutcome::Consumed,
                None,
            ));
            self.sink.emit(|| AgentEvent::InjectionConsumed {
                id: item.id,
                message: delivered,
            });
        }
        Ok(StepReport::Done)
    }

    /// Passes control to another agent of the team (SPEC §9.2); whether its input filter
    /// rewrote the history.
    fn carry_out_handoff(&mut self, handoff: PendingHandoff) -> bool {
        let Some(core) = self.agent.team_member(handoff.to.as_str()).cloned() else {
            // Unreachable: transfer tools exist only for the team's agents.
            tracing::error!(to = %handoff.to, "handoff to an agent not in the team");
            return false;
        };
        let mut filtered = false;
        let from = self.agent.core.name.to_string();
        let filter = self
            .agent
            .core
            .tools
            .get_built(&transfer_tool_name(&handoff.to))
            .and_then(|t| t.capability::<HandoffTo>())
            .and_then(|t| t.input_filter.clone());
        if let Some(filter) = filter {
            let messages = filter(self.agent.history.conv().messages());
            if is_valid_history(&messages) {
                self.agent.set_messages(messages, None);
                filtered = true;
            } else {
                tracing::warn!(from, to = %handoff.to, "a handoff's input filter returned an invalid history; not applied");
            }
        }
        self.agent.core = core;
        self.agent.state.set(ACTIVE_AGENT_KEY, handoff.to.as_str());
        self.inv.run_version = self.agent.interceptor.bump(self.inv.run_version);
        let text = format!("{from} -> {}", handoff.to);
        let record = DecisionRecord::new(
            HANDOFF,
            EventKind::BeforeToolCall,
            DecisionAction::Handoff,
            DecisionOutcome::Applied,
        )
        .with_text(text)
        .with_tool_use_id(Some(handoff.tool_use_id.clone()));
        self.record(vec![record]);
        crate::telemetry::handoff(&from, &handoff.to);
        self.sink.emit(|| AgentEvent::Handoff {
            from: from.clone(),
            to: handoff.to.clone(),
        });
        self.inv.handoffs.push(HandoffRecord::new(
            from,
            handoff.to,
            Some(handoff.tool_use_id),
        ));
        filtered
    }

    /// Rejects an injected message, exactly once: its sender is told, and the run records it.
    pub(super) fn reject_injection(&mut self, message: &Message, id: InjectionId, reason: &str) {
        self.agent.interceptor.rejected(id, message, reason);
        crate::telemetry::injection(false, Some(reason));
        self.inv.injections.push(InjectionRecord::new(
            id,
            InjectionOutcome::Rejected,
            Some(reason.to_owned()),
        ));
        self.sink.emit(|| AgentEvent::InjectionRejected {
            id,
            reason: reason.to_owned(),
        });
    }
}
