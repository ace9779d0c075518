//! Each action on each event where it is valid, guide accumulation, short-circuit, transforms
//! staged and discarded, shadow mode, skipping, subscriptions and registry construction, all
//! driven through `HookRegistry::dispatch`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_hooks::{HookOrder, HookRegistry};
use rein_interventions::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, Cancel, ContentBlock, DecisionAction, DecisionOutcome, Error, EventKind,
    EventSet, HandlerError, Intervention, InterventionContext, InterventionHandler,
    InterventionRegistry, Message, Mode, SharedHandler, ToolResultStatus, json,
};

fn h(i: Intervention) -> SharedHandler {
    i.into()
}

// ---- before_invocation ----

#[test]
fn before_invocation_deny_cancels_with_denied_text() {
    let mut ev = before_invocation();
    run(
        vec![h(Intervention::named("policy").before_invocation(
            |_, _| BeforeInvocationAction::deny("prompt injection"),
        ))],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel,
        Cancel::Message("DENIED: prompt injection".into())
    );
    let d = ev.decisions();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].handler, "policy");
    assert_eq!(d[0].event, EventKind::BeforeInvocation);
    assert_eq!(d[0].action, DecisionAction::Deny);
    assert_eq!(d[0].outcome, DecisionOutcome::Applied);
    assert_eq!(d[0].text.as_deref(), Some("prompt injection"));
    assert_eq!(d[0].tool_use_id, None);
}

#[test]
fn before_invocation_guide_cancels_with_guidance() {
    let mut ev = before_invocation();
    run(
        vec![h(Intervention::named("style").before_invocation(|_, _| {
            BeforeInvocationAction::guide("ask politely")
        }))],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel,
        Cancel::Message("GUIDANCE: [style] ask politely".into())
    );
}

#[test]
fn before_invocation_transform_rewrites_input() {
    let mut ev = before_invocation();
    run(
        vec![h(Intervention::named("redact").before_invocation(
            |_, _| {
                BeforeInvocationAction::transform(|messages| {
                    messages[0] = Message::user("[redacted]");
                })
            },
        ))],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.messages, vec![Message::user("[redacted]")]);
    assert!(!ev.cancel.is_cancelled());
    assert_eq!(ev.decisions()[0].action, DecisionAction::Transform);
    assert_eq!(ev.decisions()[0].outcome, DecisionOutcome::Applied);
}

#[test]
fn injected_input_runs_the_interventions_but_not_plain_hooks() {
    let registry =
        InterventionRegistry::new([Intervention::named("gate").before_invocation(|ev, _| {
            if ev.is_injected() {
                BeforeInvocationAction::deny("no injection")
            } else {
                BeforeInvocationAction::Proceed
            }
        })])
        .unwrap();
    let plain = Counter::default();
    let mut hooks = HookRegistry::new();
    let p = plain.clone();
    hooks.add(move |_: &mut rein_interventions::BeforeInvocationEvent| p.hit());
    registry.install(&mut hooks);
    assert!(registry.checks_injected());
    let mut ev = before_invocation().as_injected(rein_core::id::InjectionId::new());
    futures_executor::block_on(registry.check_injected(&mut ev)).unwrap();
    assert_eq!(ev.cancel, Cancel::Message("DENIED: no injection".into()));
    assert_eq!(plain.get(), 0);
    let none = InterventionRegistry::new([Intervention::named("tools")
        .before_tool_call(|_, _| rein_interventions::BeforeToolCallAction::Proceed)])
    .unwrap();
    assert!(!none.checks_injected(), "no before_invocation handler");
}

// ---- before_model_call ----

#[test]
fn before_model_call_deny_cancels() {
    let mut ev = before_model();
    run(
        vec![h(Intervention::named("budget").before_model_call(
            |_, _| BeforeModelCallAction::deny("over budget"),
        ))],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.cancel, Cancel::Message("DENIED: over budget".into()));
}

#[test]
fn before_model_call_guides_are_injected_not_cancelled() {
    let mut ev = before_model();
    run(
        vec![
            h(Intervention::named("a")
                .before_model_call(|_, _| BeforeModelCallAction::guide("one"))),
            h(Intervention::named("b")
                .before_model_call(|_, _| BeforeModelCallAction::guide("two"))),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(!ev.cancel.is_cancelled());
    assert_eq!(ev.guidance(), ["[a] one\n[b] two".to_owned()]);
}

#[test]
fn before_model_call_transform_edits_the_overlay_and_survives_guidance() {
    let mut ev = before_model();
    run(
        vec![
            h(Intervention::named("sys").before_model_call(|_, _| {
                BeforeModelCallAction::transform(|req| {
                    req.system_prompt = Some("be terse".into());
                })
            })),
            h(Intervention::named("g").before_model_call(|ev, _| {
                // Later handlers see the transform at once.
                assert_eq!(ev.request.system_prompt.as_deref(), Some("be terse"));
                BeforeModelCallAction::guide("cite sources")
            })),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.request.system_prompt.as_deref(), Some("be terse"));
    assert_eq!(ev.guidance(), ["[g] cite sources".to_owned()]);
    let outcomes: Vec<_> = ev.decisions().iter().map(|d| d.outcome).collect();
    assert_eq!(
        outcomes,
        [DecisionOutcome::Applied, DecisionOutcome::Applied]
    );
}

// ---- after_model_call ----

#[test]
fn after_model_call_guide_injects_and_retries() {
    let mut ev = after_model();
    run(
        vec![h(Intervention::named("checker").after_model_call(
            |_, _| AfterModelCallAction::guide("answer in French"),
        ))],
        &mut ev,
    )
    .unwrap();
    assert!(ev.retry);
    assert_eq!(ev.guidance(), ["[checker] answer in French".to_owned()]);
}

#[test]
fn after_model_call_transform_rewrites_the_response() {
    let mut ev = after_model();
    run(
        vec![h(Intervention::named("fmt").after_model_call(|_, _| {
            AfterModelCallAction::transform(|m| m.content = vec![ContentBlock::text("42")])
        }))],
        &mut ev,
    )
    .unwrap();
    assert!(ev.is_edited());
    assert_eq!(ev.response().unwrap().message, Message::assistant("42"));
    assert!(!ev.retry);
}

#[test]
fn after_model_call_guide_discards_the_transform_of_the_pass() {
    let mut ev = after_model();
    run(
        vec![
            h(Intervention::named("fmt").after_model_call(|_, _| {
                AfterModelCallAction::transform(|m| m.content = vec![ContentBlock::text("42")])
            })),
            h(Intervention::named("g").after_model_call(|_, _| AfterModelCallAction::guide("no"))),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(ev.retry);
    assert_eq!(
        ev.response().unwrap().message,
        Message::assistant("the answer")
    );
    assert_eq!(ev.decisions()[0].outcome, DecisionOutcome::Overridden);
    assert_eq!(ev.decisions()[1].outcome, DecisionOutcome::Applied);
}

#[test]
fn after_model_call_handlers_are_not_called_for_model_errors() {
    let calls = Counter::default();
    let c = calls.clone();
    let mut ev = rein_interventions::AfterModelCallEvent::new(
        Default::default(),
        Err(rein_core::ModelError::server("boom")),
    );
    run(
        vec![h(Intervention::named("x").after_model_call(move |_, _| {
            c.hit();
            AfterModelCallAction::guide("never")
        }))],
        &mut ev,
    )
    .unwrap();
    assert_eq!(calls.get(), 0);
    assert!(!ev.retry);
    assert!(ev.decisions().is_empty());
}

// ---- before_tool_call ----

#[test]
fn before_tool_call_deny_cancels_the_tool() {
    let mut ev = before_tool();
    run(
        vec![h(Intervention::named("no-delete").before_tool_call(
            |_, _| BeforeToolCallAction::deny("deleting is off"),
        ))],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("DENIED: deleting is off".into())
    );
    assert_eq!(ev.decisions()[0].tool_use_id.as_deref(), Some("t1"));
}

#[test]
fn before_tool_call_guides_accumulate_into_one_cancel() {
    let mut ev = before_tool();
    run(
        vec![
            h(Intervention::named("a")
                .before_tool_call(|_, _| BeforeToolCallAction::guide("use trash"))),
            h(Intervention::named("p").before_tool_call(|_, _| BeforeToolCallAction::Proceed)),
            h(Intervention::named("b")
                .before_tool_call(|_, _| BeforeToolCallAction::guide("ask first"))),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("GUIDANCE: [a] use trash\n[b] ask first".into())
    );
    assert_eq!(ev.decisions().len(), 2);
}

#[test]
fn before_tool_call_transform_rewrites_name_and_input() {
    let mut ev = before_tool();
    run(
        vec![h(Intervention::named("safe").before_tool_call(|_, _| {
            BeforeToolCallAction::transform(|t| {
                t.name = "trash_file".into();
                t.input["dry_run"] = json!(true);
            })
        }))],
        &mut ev,
    )
    .unwrap();
    assert!(ev.is_edited());
    assert_eq!(ev.tool_use().name, "trash_file");
    assert_eq!(
        ev.tool_use().input,
        json!({"path": "/tmp/a", "dry_run": true})
    );
    assert_eq!(ev.tool_use().tool_use_id, "t1");
    assert!(!ev.cancel_tool.is_cancelled());
}

// ---- after_tool_call ----

#[test]
fn after_tool_call_transform_rewrites_the_result() {
    let mut ev = after_tool();
    run(
        vec![h(Intervention::named("redact").after_tool_call(|_, _| {
            AfterToolCallAction::transform(|r| {
                r.status = ToolResultStatus::Error;
                r.set_text("hidden");
            })
        }))],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.result,
        rein_interventions::ToolResult::error("t1", "hidden")
    );
}

// ---- short-circuit, staging, precedence ----

#[test]
fn deny_short_circuits_later_handlers() {
    let later = Counter::default();
    let l = later.clone();
    let mut ev = before_tool();
    run(
        vec![
            h(Intervention::named("deny")
                .before_tool_call(|_, _| BeforeToolCallAction::deny("no"))),
            h(Intervention::named("later").before_tool_call(move |_, _| {
                l.hit();
                BeforeToolCallAction::Proceed
            })),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(later.get(), 0);
    assert_eq!(ev.cancel_tool, Cancel::Message("DENIED: no".into()));
}

#[test]
fn deny_beats_earlier_guides_which_are_overridden() {
    let mut ev = before_tool();
    run(
        vec![
            h(
                Intervention::named("g")
                    .before_tool_call(|_, _| BeforeToolCallAction::guide("hmm")),
            ),
            h(Intervention::named("d").before_tool_call(|_, _| BeforeToolCallAction::deny("no"))),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.cancel_tool, Cancel::Message("DENIED: no".into()));
    let d = ev.decisions();
    assert_eq!(
        (d[0].action, d[0].outcome),
        (DecisionAction::Guide, DecisionOutcome::Overridden)
    );
    assert_eq!(
        (d[1].action, d[1].outcome),
        (DecisionAction::Deny, DecisionOutcome::Applied)
    );
}

#[test]
fn transform_before_deny_leaves_no_trace() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let s = seen.clone();
    let mut ev = before_tool();
    let original = ev.tool_use().clone();
    run(
        vec![
            h(Intervention::named("t").before_tool_call(|_, _| {
                BeforeToolCallAction::transform(|t| t.input = json!({"path": "/"}))
            })),
            h(Intervention::named("d").before_tool_call(move |ev, _| {
                *s.lock().unwrap() = Some(ev.tool_use().input.clone());
                BeforeToolCallAction::deny("no")
            })),
        ],
        &mut ev,
    )
    .unwrap();
    // The denying handler saw the transform ...
    assert_eq!(*seen.lock().unwrap(), Some(json!({"path": "/"})));
    // ... but it was discarded: the content equals the original.
    assert_eq!(ev.tool_use(), &original);
    assert_eq!(ev.cancel_tool, Cancel::Message("DENIED: no".into()));
    assert_eq!(ev.decisions()[0].outcome, DecisionOutcome::Overridden);
}

#[test]
fn transform_before_guide_cancel_is_discarded_on_before_invocation() {
    let mut ev = before_invocation();
    run(
        vec![
            h(Intervention::named("t").before_invocation(|_, _| {
                BeforeInvocationAction::transform(|m| m.push(Message::user("more")))
            })),
            h(Intervention::named("g")
                .before_invocation(|_, _| BeforeInvocationAction::guide("rephrase"))),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.messages, vec![Message::user("hello")]);
    assert_eq!(ev.cancel, Cancel::Message("GUIDANCE: [g] rephrase".into()));
    assert_eq!(ev.decisions()[0].outcome, DecisionOutcome::Overridden);
}

#[test]
fn transforms_chain_in_registration_order() {
    let mut ev = after_tool();
    run(
        vec![
            h(Intervention::named("a")
                .after_tool_call(|_, _| AfterToolCallAction::transform(|r| r.set_text("a")))),
            h(Intervention::named("b").after_tool_call(|ev, _| {
                let prev = ev.result.text();
                AfterToolCallAction::transform(move |r| r.set_text(format!("{prev}b")))
            })),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.result.text(), "ab");
}

// ---- shadow mode ----

#[test]
fn shadow_mode_records_but_changes_nothing() {
    let mut ev = before_tool();
    let original = ev.tool_use().clone();
    run(
        vec![
            h(Intervention::named("s-transform")
                .mode(Mode::Shadow)
                .before_tool_call(|_, _| BeforeToolCallAction::transform(|t| t.name = "x".into()))),
            h(Intervention::named("s-guide")
                .mode(Mode::Shadow)
                .before_tool_call(|_, _| BeforeToolCallAction::guide("g"))),
            h(Intervention::named("s-confirm")
                .mode(Mode::Shadow)
                .before_tool_call(|_, _| BeforeToolCallAction::confirm("ok?"))),
            h(Intervention::named("s-deny")
                .mode(Mode::Shadow)
                .before_tool_call(|_, _| BeforeToolCallAction::deny("d"))),
            h(Intervention::named("s-error")
                .mode(Mode::Shadow)
                .before_tool_call(|_, _| Err::<BeforeToolCallAction, _>(HandlerError::new("bad")))),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.tool_use(), &original);
    assert!(!ev.is_edited());
    assert!(!ev.cancel_tool.is_cancelled());
    assert!(ev.interrupts().is_empty());
    let outcomes: Vec<_> = ev
        .decisions()
        .iter()
        .map(|d| (d.action, d.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            (DecisionAction::Transform, DecisionOutcome::Shadowed),
            (DecisionAction::Guide, DecisionOutcome::Shadowed),
            (DecisionAction::Confirm, DecisionOutcome::Shadowed),
            (DecisionAction::Deny, DecisionOutcome::Shadowed),
            (DecisionAction::Error, DecisionOutcome::Error),
        ]
    );
}

// ---- skipping and subscriptions ----

#[test]
fn skipped_entirely_when_an_earlier_hook_cancelled() {
    let calls = Counter::default();
    let c = calls.clone();
    let registry =
        InterventionRegistry::new([Intervention::named("ask").before_tool_call(move |_, _| {
            c.hit();
            BeforeToolCallAction::confirm("sure?")
        })])
        .unwrap();
    let mut hooks = HookRegistry::new();
    registry.install(&mut hooks);
    hooks.add_with(
        HookOrder::DEFAULT,
        |ev: &mut rein_interventions::BeforeToolCallEvent| {
            ev.cancel_tool = Cancel::Yes;
        },
    );
    let mut ev = before_tool();
    dispatch(&hooks, &mut ev).unwrap();
    assert_eq!(calls.get(), 0);
    assert!(ev.interrupts().is_empty());
    assert!(ev.decisions().is_empty());
    assert_eq!(ev.cancel_tool, Cancel::Yes);
}

struct OnlyTools(Counter);

impl InterventionHandler for OnlyTools {
    fn name(&self) -> &str {
        "only-tools"
    }
    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL
    }
    async fn before_model_call(
        &self,
        _: &rein_interventions::BeforeModelCallEvent,
        _: &InterventionContext,
    ) -> Result<BeforeModelCallAction, HandlerError> {
        self.0.hit();
        Ok(BeforeModelCallAction::deny("not subscribed, never called"))
    }
}

#[test]
fn handlers_are_called_only_on_their_subscriptions() {
    let calls = Counter::default();
    let registry = InterventionRegistry::new([OnlyTools(calls.clone())]).unwrap();
    assert_eq!(registry.subscribers(EventKind::BeforeToolCall), 1);
    assert_eq!(registry.subscribers(EventKind::BeforeModelCall), 0);
    let hooks = registry.to_hooks();
    assert_eq!(hooks.count::<rein_interventions::BeforeToolCallEvent>(), 1);
    assert_eq!(hooks.count::<rein_interventions::BeforeModelCallEvent>(), 0);
    let mut ev = before_model();
    dispatch(&hooks, &mut ev).unwrap();
    assert_eq!(calls.get(), 0);
    assert!(!ev.cancel.is_cancelled());
}

#[test]
fn closure_handlers_subscribe_exactly() {
    let i = Intervention::named("x").before_tool_call(|_, _| BeforeToolCallAction::Proceed);
    assert_eq!(i.events(), EventSet::BEFORE_TOOL_CALL);
    let registry = InterventionRegistry::new([i]).unwrap();
    let hooks = registry.to_hooks();
    assert_eq!(hooks.count::<rein_interventions::BeforeToolCallEvent>(), 1);
    assert_eq!(hooks.count::<rein_interventions::AfterToolCallEvent>(), 0);
    assert_eq!(
        hooks.count::<rein_interventions::BeforeInvocationEvent>(),
        0
    );
}

// ---- registry ----

#[test]
fn duplicate_names_are_rejected() {
    let err = InterventionRegistry::new([Intervention::named("dup"), Intervention::named("dup")])
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Build(rein_interventions::BuildError::DuplicateHandler(ref n)) if n == "dup"
    ));
    assert_eq!(
        err.to_string(),
        "duplicate intervention handler name: 'dup'"
    );
}

#[test]
fn audit_timing_fills_durations() {
    let registry = InterventionRegistry::builder()
        .handler(Intervention::named("d").before_tool_call(|_, _| BeforeToolCallAction::deny("x")))
        .audit_timing(true)
        .build()
        .unwrap();
    let mut ev = before_tool();
    dispatch(&registry.to_hooks(), &mut ev).unwrap();
    assert!(ev.decisions()[0].duration.is_some());

    let mut ev = before_tool();
    run(
        vec![h(
            Intervention::named("d").before_tool_call(|_, _| BeforeToolCallAction::deny("x"))
        )],
        &mut ev,
    )
    .unwrap();
    assert!(ev.decisions()[0].duration.is_none());
}

#[test]
fn proceeding_handlers_record_nothing() {
    let mut ev = before_tool();
    run(
        vec![
            h(Intervention::named("a").before_tool_call(|_, _| BeforeToolCallAction::Proceed)),
            h(Intervention::named("b").before_tool_call(|_, _| BeforeToolCallAction::Proceed)),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(ev.decisions().is_empty());
    assert!(!ev.is_edited());
    assert!(!ev.cancel_tool.is_cancelled());
}

#[test]
fn interventions_decide_after_plain_hooks_before_and_act_before_them_after() {
    use std::sync::{Arc, Mutex};
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let registry = InterventionRegistry::new([Intervention::named("iv")
        .before_tool_call({
            let log = log.clone();
            move |ev, _| {
                log.lock()
                    .unwrap()
                    .push(format!("iv-before sees {}", ev.tool_use().name));
                BeforeToolCallAction::Proceed
            }
        })
        .after_tool_call({
            let log = log.clone();
            move |_, _| {
                log.lock().unwrap().push("iv-after".into());
                AfterToolCallAction::transform(|r| r.set_text("redacted"))
            }
        })])
    .unwrap();
    let mut hooks = HookRegistry::new();
    {
        let log = log.clone();
        hooks.add(move |ev: &mut rein_interventions::BeforeToolCallEvent| {
            log.lock().unwrap().push("plain-before".into());
            ev.tool_use_mut().name = "renamed".into();
        });
    }
    {
        let log = log.clone();
        hooks.add(move |ev: &mut rein_interventions::AfterToolCallEvent| {
            log.lock()
                .unwrap()
                .push(format!("plain-after sees {}", ev.result.text()));
        });
    }
    registry.install(&mut hooks);
    dispatch(&hooks, &mut before_tool()).unwrap();
    dispatch(&hooks, &mut after_tool()).unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        [
            "plain-before",
            "iv-before sees renamed",
            "iv-after",
            "plain-after sees redacted"
        ]
    );
}
