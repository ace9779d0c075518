//! `Confirm`: pause, resume with answers, pre-emptive responses, evaluation, fingerprints, and
//! how confirms combine with deny, guide and transform in one pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_interventions::{
    BeforeToolCallAction, BeforeToolCallEvent, Cancel, Confirm, DecisionAction, DecisionOutcome,
    EventKind, HandlerError, Intervention, SharedHandler, ToolUse, Value, json,
};

fn confirm(name: &str, prompt: &'static str) -> SharedHandler {
    Intervention::named(name)
        .before_tool_call(move |_, _| BeforeToolCallAction::confirm(prompt))
        .into()
}

fn confirm_with(name: &str, make: fn() -> Confirm) -> SharedHandler {
    Intervention::named(name)
        .before_tool_call(move |_, _| BeforeToolCallAction::Confirm(make()))
        .into()
}

/// Runs one `ask` confirm with `answer` given on resume (bound to the untouched tool use).
fn resume_with(answer: Value) -> BeforeToolCallEvent {
    let id = EventKind::BeforeToolCall.interrupt_id("t1", "ask");
    let mut ev = before_tool_with(answers(&[(&id, answer, &tool_use())]));
    run(vec![confirm("ask", "Delete /tmp/a?")], &mut ev).unwrap();
    ev
}

#[test]
fn unanswered_confirm_pauses_with_a_bound_interrupt() {
    let mut ev = before_tool();
    run(vec![confirm("ask", "Delete /tmp/a?")], &mut ev).unwrap();
    assert!(!ev.cancel_tool.is_cancelled());
    let raised = ev.interrupts();
    assert_eq!(raised.len(), 1);
    let i = &raised[0];
    assert_eq!(i.id, EventKind::BeforeToolCall.interrupt_id("t1", "ask"));
    assert!(i.id.starts_with("v1:before_tool_call:t1:"));
    assert_eq!(i.name, "ask");
    assert_eq!(i.reason, json!("Delete /tmp/a?"));
    assert_eq!(i.tool_use_id.as_deref(), Some("t1"));
    let tu = tool_use();
    assert_eq!(i.fingerprint.as_deref(), Some(tu.fingerprint().as_str()));
    let d = &ev.decisions()[0];
    assert_eq!(
        (d.action, d.outcome),
        (DecisionAction::Confirm, DecisionOutcome::Applied)
    );
    assert_eq!(d.text.as_deref(), Some("Delete /tmp/a?"));
}

#[test]
fn approved_on_resume_runs_the_tool() {
    let ev = resume_with(json!("yes"));
    assert!(ev.interrupts().is_empty());
    assert!(!ev.cancel_tool.is_cancelled());
}

#[test]
fn rejected_on_resume_cancels_with_confirmation_failed() {
    let ev = resume_with(json!("no"));
    assert!(ev.interrupts().is_empty());
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("CONFIRMATION_FAILED: Delete /tmp/a?".into())
    );
}

#[test]
fn truthy_and_falsy_answers() {
    for yes in [
        json!(true),
        json!("Y"),
        json!("  yes  "),
        json!("YES"),
        json!("y"),
    ] {
        let ev = resume_with(yes.clone());
        assert!(!ev.cancel_tool.is_cancelled(), "{yes} should approve");
        assert!(ev.interrupts().is_empty());
    }
    for no in [
        json!("no"),
        json!(""),
        json!(1),
        json!(false),
        json!("yes please"),
        json!({"ok": true}),
        json!([true]),
    ] {
        let ev = resume_with(no.clone());
        assert_eq!(
            ev.cancel_tool,
            Cancel::Message("CONFIRMATION_FAILED: Delete /tmp/a?".into()),
            "{no} should reject"
        );
    }
}

#[test]
fn a_null_answer_asks_again() {
    let ev = resume_with(Value::Null);
    assert!(!ev.cancel_tool.is_cancelled());
    assert_eq!(ev.interrupts().len(), 1);
}

#[test]
fn preemptive_yes_false_and_null() {
    let mut ev = before_tool();
    run(
        vec![confirm_with("pre", || {
            Confirm::new("ok?").with_response("yes")
        })],
        &mut ev,
    )
    .unwrap();
    assert!(!ev.cancel_tool.is_cancelled());
    assert!(ev.interrupts().is_empty());

    let mut ev = before_tool();
    run(
        vec![confirm_with("pre", || {
            Confirm::new("ok?").with_response(false)
        })],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("CONFIRMATION_FAILED: ok?".into())
    );

    let mut ev = before_tool();
    run(
        vec![confirm_with("pre", || {
            Confirm::new("ok?").with_response(Value::Null)
        })],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.interrupts().len(), 1);
}

#[test]
fn custom_evaluate_decides() {
    let mut ev = before_tool();
    run(
        vec![confirm_with("pin", || {
            Confirm::new("enter the PIN")
                .with_response(1234)
                .with_evaluate(|v| v == &json!(1234))
        })],
        &mut ev,
    )
    .unwrap();
    assert!(!ev.cancel_tool.is_cancelled());

    let mut ev = before_tool();
    run(
        vec![confirm_with("pin", || {
            Confirm::new("enter the PIN")
                .with_response("yes")
                .with_evaluate(|v| v == &json!(1234))
        })],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("CONFIRMATION_FAILED: enter the PIN".into())
    );
}

#[test]
fn two_confirms_in_one_pass_are_raised_together() {
    let mut ev = before_tool();
    run(
        vec![confirm("legal", "Legal ok?"), confirm("owner", "Owner ok?")],
        &mut ev,
    )
    .unwrap();
    let names: Vec<_> = ev.interrupts().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["legal", "owner"]);
    assert!(!ev.cancel_tool.is_cancelled());

    // Resume: one answered, the other still pending → asked again alone.
    let id = EventKind::BeforeToolCall.interrupt_id("t1", "legal");
    let mut ev = before_tool_with(answers(&[(&id, json!("yes"), &tool_use())]));
    run(
        vec![confirm("legal", "Legal ok?"), confirm("owner", "Owner ok?")],
        &mut ev,
    )
    .unwrap();
    let names: Vec<_> = ev.interrupts().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["owner"]);
}

#[test]
fn a_confirm_after_a_deny_never_asks() {
    let asked = Counter::default();
    let a = asked.clone();
    let mut ev = before_tool();
    run(
        vec![
            Intervention::named("deny")
                .before_tool_call(|_, _| BeforeToolCallAction::deny("no"))
                .into(),
            Intervention::named("ask")
                .before_tool_call(move |_, _| {
                    a.hit();
                    BeforeToolCallAction::confirm("sure?")
                })
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(asked.get(), 0);
    assert!(ev.interrupts().is_empty());
    assert_eq!(ev.cancel_tool, Cancel::Message("DENIED: no".into()));
}

#[test]
fn a_deny_after_an_unanswered_confirm_cancels_without_asking() {
    let mut ev = before_tool();
    run(
        vec![
            confirm("ask", "sure?"),
            Intervention::named("deny")
                .before_tool_call(|_, _| BeforeToolCallAction::deny("no"))
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(ev.interrupts().is_empty());
    assert_eq!(ev.cancel_tool, Cancel::Message("DENIED: no".into()));
    let d = ev.decisions();
    assert_eq!(
        (d[0].action, d[0].outcome),
        (DecisionAction::Confirm, DecisionOutcome::Overridden)
    );
}

#[test]
fn a_guide_after_an_unanswered_confirm_cancels_without_asking() {
    let mut ev = before_tool();
    run(
        vec![
            confirm("ask", "sure?"),
            Intervention::named("g")
                .before_tool_call(|_, _| BeforeToolCallAction::guide("use trash"))
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(ev.interrupts().is_empty());
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("GUIDANCE: [g] use trash".into())
    );
}

#[test]
fn a_rejected_confirm_short_circuits() {
    let later = Counter::default();
    let l = later.clone();
    let mut ev = before_tool();
    run(
        vec![
            confirm_with("pre", || Confirm::new("ok?").with_response("no")),
            Intervention::named("later")
                .before_tool_call(move |_, _| {
                    l.hit();
                    BeforeToolCallAction::Proceed
                })
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(later.get(), 0);
}

fn redirect() -> SharedHandler {
    Intervention::named("sandbox")
        .before_tool_call(|_, _| {
            BeforeToolCallAction::transform(|t| t.input = json!({"path": "/sandbox/a"}))
        })
        .into()
}

#[test]
fn interrupt_discards_transforms_but_binds_the_transformed_call() {
    let mut ev = before_tool();
    run(vec![redirect(), confirm("ask", "ok?")], &mut ev).unwrap();
    // The pass ended in an interrupt: the staged transform is undone ...
    assert_eq!(ev.tool_use(), &tool_use());
    assert_eq!(ev.decisions()[0].outcome, DecisionOutcome::Overridden);
    // ... and the question is about the call as the confirming handler saw it.
    let transformed = ToolUse::new("t1", "delete_file", json!({"path": "/sandbox/a"}));
    let fp = transformed.fingerprint();
    assert_eq!(ev.interrupts()[0].fingerprint.as_deref(), Some(fp.as_str()));

    // On resume the pass runs again, re-applies the transform, and the answer applies.
    let id = EventKind::BeforeToolCall.interrupt_id("t1", "ask");
    let mut ev = before_tool_with(answers(&[(&id, json!("yes"), &transformed)]));
    run(vec![redirect(), confirm("ask", "ok?")], &mut ev).unwrap();
    assert!(ev.interrupts().is_empty());
    assert!(!ev.cancel_tool.is_cancelled());
    assert_eq!(ev.tool_use(), &transformed);
    let outcomes: Vec<_> = ev.decisions().iter().map(|d| d.outcome).collect();
    assert_eq!(
        outcomes,
        [DecisionOutcome::Applied, DecisionOutcome::Applied]
    );
}

#[test]
fn an_answer_for_other_arguments_is_ignored() {
    let id = EventKind::BeforeToolCall.interrupt_id("t1", "ask");
    let other = ToolUse::new("t1", "delete_file", json!({"path": "/etc"}));
    let mut ev = before_tool_with(answers(&[(&id, json!("yes"), &other)]));
    run(vec![confirm("ask", "ok?")], &mut ev).unwrap();
    assert_eq!(ev.interrupts().len(), 1, "asked again for the changed call");
    assert!(!ev.cancel_tool.is_cancelled());
}

#[test]
fn an_evaluate_error_is_a_handler_error() {
    let mut ev = before_tool();
    let err = run(
        vec![confirm_with("pin", || {
            Confirm::new("pin?")
                .with_response("x")
                .with_try_evaluate(|_| Err(HandlerError::new("vault down")))
        })],
        &mut ev,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "intervention handler 'pin' failed on before_tool_call: vault down"
    );
}

#[test]
fn default_evaluate_rule() {
    assert!(Confirm::default_evaluate(&json!(true)));
    assert!(Confirm::default_evaluate(&json!(" Y ")));
    assert!(!Confirm::default_evaluate(&json!(null)));
    assert!(!Confirm::default_evaluate(&json!(0)));
    assert!(!Confirm::default_evaluate(&json!("nope")));
}

#[test]
fn a_structured_prompt_is_the_interrupts_reason_unchanged() {
    use rein_interventions::testing::{self, ToolCall};
    let payload = json!({"prompt": "Delete report.txt?", "path": "report.txt", "risk": "high"});
    let asks = |payload: Value| {
        Intervention::named("ask").before_tool_call(move |_, _| {
            BeforeToolCallAction::Confirm(Confirm::new(payload.clone()))
        })
    };
    let call = ToolCall::new("delete_file", json!({"path": "report.txt"}));

    // Asked: the reason is the payload itself; the audit has its prompt text.
    let out = testing::run([asks(payload.clone())], call.clone().event());
    let interrupts = out.event.interrupts();
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0].reason, payload);
    assert_eq!(
        interrupts[0].id,
        EventKind::BeforeToolCall.interrupt_id("t1", "ask")
    );
    assert_eq!(
        interrupts[0].fingerprint.as_deref(),
        Some(call.clone().event().tool_use().fingerprint().as_str())
    );
    assert_eq!(out.decisions[0].text.as_deref(), Some("Delete report.txt?"));

    // Rejected on resume: the cancel text carries the prompt's text, not JSON.
    let out = testing::run(
        [asks(payload.clone())],
        call.clone().answer("ask", "no").event(),
    );
    assert_eq!(
        out.event.cancel_tool,
        Cancel::Message("CONFIRMATION_FAILED: Delete report.txt?".into())
    );

    // A payload with a `message` and no `prompt`; one with neither: compact JSON.
    let out = testing::run(
        [asks(json!({"message": "Send it?", "to": "ann"}))],
        call.clone().answer("ask", false).event(),
    );
    assert_eq!(
        out.event.cancel_tool,
        Cancel::Message("CONFIRMATION_FAILED: Send it?".into())
    );
    let out = testing::run(
        [asks(json!({"amount": 5}))],
        call.answer("ask", false).event(),
    );
    assert_eq!(
        out.event.cancel_tool,
        Cancel::Message(r#"CONFIRMATION_FAILED: {"amount":5}"#.into())
    );
}

/// The audit says what the human decided: asked, approved or rejected, with the answer and
/// whether it was given on resume or pre-emptively.
#[test]
fn the_audit_records_asked_approved_and_rejected_with_the_answer_and_its_source() {
    use rein_interventions::{AnswerSource, ConfirmationStatus};
    let status = |ev: &BeforeToolCallEvent| {
        let c = ev.decisions()[0]
            .confirmation
            .clone()
            .expect("a confirmation");
        (c.status, c.answer, c.source)
    };

    let mut asked = before_tool();
    run(vec![confirm("ask", "Delete /tmp/a?")], &mut asked).unwrap();
    assert_eq!(status(&asked), (ConfirmationStatus::Asked, None, None));

    assert_eq!(
        status(&resume_with(json!("yes"))),
        (
            ConfirmationStatus::Approved,
            Some(json!("yes")),
            Some(AnswerSource::Resume)
        )
    );
    assert_eq!(
        status(&resume_with(json!("no"))),
        (
            ConfirmationStatus::Rejected,
            Some(json!("no")),
            Some(AnswerSource::Resume)
        )
    );

    let mut preemptive = before_tool();
    run(
        vec![confirm_with("ask", || {
            Confirm::new("Delete /tmp/a?").with_response(json!("n"))
        })],
        &mut preemptive,
    )
    .unwrap();
    assert_eq!(
        status(&preemptive),
        (
            ConfirmationStatus::Rejected,
            Some(json!("n")),
            Some(AnswerSource::Preemptive)
        )
    );
}

#[test]
fn confirm_on_after_tool_call_is_bound_to_the_result_it_asked_about() {
    use rein_interventions::AfterToolCallAction;
    use rein_interventions::testing::{self, ToolCall};
    let review = || {
        Intervention::named("review")
            .after_tool_call(|_, _| AfterToolCallAction::confirm("Send it?"))
    };
    // No answer: asked, with an id and a fingerprint of the result.
    let out = testing::run([review()], ToolCall::new("q", json!({})).returned("42"));
    let asked = &out.event.interrupts()[0];
    assert!(asked.id.starts_with("v1:after_tool_call:t1:"));
    let fingerprint = asked.fingerprint.clone().unwrap();
    // Answered for this very result: approved, nothing asked.
    let call = ToolCall::new("q", json!({})).answer("review", "yes");
    let out = testing::run([review()], call.clone().returned("42"));
    assert!(out.event.interrupts().is_empty());
    assert_eq!(out.event.result.text(), "42");
    // The answer given about "42", for another result (the output changed): asked again.
    let about_42 = call.returned("42").answers().clone();
    let changed = ToolCall::new("q", json!({}))
        .returned("43")
        .with_answers(about_42);
    let out = testing::run([review()], changed);
    assert_eq!(out.event.interrupts().len(), 1);
    assert_ne!(
        out.event.interrupts()[0].fingerprint.as_deref(),
        Some(&*fingerprint)
    );
    // Rejected: the result becomes the confirmation failure.
    let call = ToolCall::new("q", json!({})).answer("review", "no");
    let out = testing::run([review()], call.returned("42"));
    assert_eq!(out.event.result.text(), "CONFIRMATION_FAILED: Send it?");
    assert!(out.event.result.is_error());
}

#[cfg(feature = "policy")]
#[test]
fn confirm_tool_output_policy_asks_about_the_output_of_listed_tools() {
    use rein_interventions::policy::{ConfirmToolOutput, PolicyHandler};
    use rein_interventions::testing::{self, ToolCall};
    let policy = |response: Option<serde_json::Value>| {
        PolicyHandler::new(
            "review",
            ConfirmToolOutput {
                tools: vec!["query".into()],
                prompt: "Send '{output}' from {tool} ({table})?".into(),
                response,
            },
        )
        .unwrap()
    };
    let call = || ToolCall::new("query", json!({"table": "customers"}));
    let out = testing::run([policy(None)], call().returned("3 rows"));
    let asked = &out.event.interrupts()[0];
    assert_eq!(asked.reason, json!("Send '3 rows' from query (customers)?"));
    assert!(asked.id.starts_with("v1:after_tool_call:t1:"));
    // Other tools are not asked about.
    let out = testing::run(
        [policy(None)],
        ToolCall::new("ls", json!({})).returned("a b"),
    );
    assert!(out.event.interrupts().is_empty());
    // A pre-emptive answer decides at once.
    let out = testing::run([policy(Some(json!("yes")))], call().returned("3 rows"));
    assert!(out.event.interrupts().is_empty());
    assert_eq!(out.event.result.text(), "3 rows");
    let out = testing::run([policy(Some(json!(false)))], call().returned("3 rows"));
    assert_eq!(
        out.event.result.text(),
        "CONFIRMATION_FAILED: Send '3 rows' from query (customers)?"
    );
    // From a policy file too.
    let set = rein_interventions::policy::Policy::from_toml_str(
        r#"
        [[policy]]
        kind = "confirm_tool_output"
        name = "review"
        tools = ["*"]
        prompt = "Show {output}?"
        "#,
    )
    .unwrap();
    let out = testing::run(set.into_handlers(), call().returned("x"));
    assert_eq!(out.event.interrupts()[0].reason, json!("Show x?"));
}

/// The record of handler `ask` after `handlers` ran over `ev` (sequentially, or as one
/// parallel group), and whether the pass raised an interrupt.
fn ask_record<E: rein_interventions::testing::Event>(
    mut ev: E,
    handlers: Vec<Intervention>,
    parallel: bool,
    raised: fn(&E) -> bool,
) -> (rein_interventions::DecisionRecord, bool) {
    let handlers = handlers
        .into_iter()
        .map(|h| if parallel { h.parallel() } else { h })
        .map(SharedHandler::from)
        .collect();
    run(handlers, &mut ev).unwrap();
    let record = ev
        .decisions()
        .iter()
        .find(|d| d.handler == "ask")
        .cloned()
        .expect("a record of the confirm");
    (record, raised(&ev))
}

#[test]
fn a_confirm_a_deny_or_guide_cancelled_was_never_asked_and_records_no_confirmation() {
    // SPEC §3.6: `asked` means the interrupt was raised. A confirm that a deny or a guide of
    // the same pass cancelled was put to no one: outcome `overridden`, no `confirmation`.
    use rein_interventions::{
        AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
        OnError,
    };
    for parallel in [false, true] {
        let cases: Vec<(&str, (rein_interventions::DecisionRecord, bool))> = vec![
            (
                "before_invocation + deny",
                ask_record(
                    before_invocation(),
                    vec![
                        Intervention::named("ask")
                            .before_invocation(|_, _| BeforeInvocationAction::confirm("sure?")),
                        Intervention::named("no")
                            .before_invocation(|_, _| BeforeInvocationAction::deny("no")),
                    ],
                    parallel,
                    |ev| !ev.interrupts().is_empty(),
                ),
            ),
            (
                "before_invocation + guide",
                ask_record(
                    before_invocation(),
                    vec![
                        Intervention::named("ask")
                            .before_invocation(|_, _| BeforeInvocationAction::confirm("sure?")),
                        Intervention::named("g")
                            .before_invocation(|_, _| BeforeInvocationAction::guide("rephrase")),
                    ],
                    parallel,
                    |ev| !ev.interrupts().is_empty(),
                ),
            ),
            (
                "before_model_call + deny",
                ask_record(
                    before_model(),
                    vec![
                        Intervention::named("ask")
                            .before_model_call(|_, _| BeforeModelCallAction::confirm("send?")),
                        Intervention::named("no")
                            .before_model_call(|_, _| BeforeModelCallAction::deny("no")),
                    ],
                    parallel,
                    |ev| !ev.interrupts().is_empty(),
                ),
            ),
            (
                "after_model_call + guide",
                ask_record(
                    after_model(),
                    vec![
                        Intervention::named("ask")
                            .after_model_call(|_, _| AfterModelCallAction::confirm("keep?")),
                        Intervention::named("g")
                            .after_model_call(|_, _| AfterModelCallAction::guide("shorter")),
                    ],
                    parallel,
                    |ev| !ev.interrupts().is_empty(),
                ),
            ),
            (
                "before_tool_call + deny",
                ask_record(
                    before_tool(),
                    vec![
                        Intervention::named("ask")
                            .before_tool_call(|_, _| BeforeToolCallAction::confirm("run?")),
                        Intervention::named("no")
                            .before_tool_call(|_, _| BeforeToolCallAction::deny("no")),
                    ],
                    parallel,
                    |ev| !ev.interrupts().is_empty(),
                ),
            ),
            (
                "before_tool_call + guide",
                ask_record(
                    before_tool(),
                    vec![
                        Intervention::named("ask")
                            .before_tool_call(|_, _| BeforeToolCallAction::confirm("run?")),
                        Intervention::named("g")
                            .before_tool_call(|_, _| BeforeToolCallAction::guide("use trash")),
                    ],
                    parallel,
                    |ev| !ev.interrupts().is_empty(),
                ),
            ),
            (
                "after_tool_call + deny (on_error)",
                ask_record(
                    after_tool(),
                    vec![
                        Intervention::named("ask")
                            .after_tool_call(|_, _| AfterToolCallAction::confirm("show?")),
                        Intervention::named("no")
                            .on_error(OnError::Deny)
                            .after_tool_call(|_, _| {
                                Err::<AfterToolCallAction, _>(HandlerError::new("boom"))
                            }),
                    ],
                    parallel,
                    |ev| !ev.interrupts().is_empty(),
                ),
            ),
        ];
        for (case, (record, raised)) in cases {
            let case = format!("{case} (parallel: {parallel})");
            assert!(!raised, "{case}: nobody is asked");
            assert_eq!(record.action, DecisionAction::Confirm, "{case}");
            assert_eq!(record.outcome, DecisionOutcome::Overridden, "{case}");
            assert_eq!(record.confirmation, None, "{case}: never asked");
        }
    }
}

#[test]
fn an_approved_request_confirm_beside_a_guide_is_applied_not_overridden() {
    // At before_model_call a guide only injects: the approved request is sent, so the confirm
    // that let it through is `applied` (SPEC §3.3 item 7, §3.6).
    use rein_interventions::{BeforeModelCallAction, ConfirmationStatus, InterruptAnswer};
    let mut ev = before_model();
    let id = EventKind::BeforeModelCall.interrupt_id("m0", "ask");
    let answer = InterruptAnswer {
        response: json!("yes"),
        fingerprint: Some(ev.request_fingerprint()),
    };
    ev = ev.with_answers(rein_interventions::InterruptAnswers::new(
        [(id, answer)].into_iter().collect(),
    ));
    run(
        vec![
            Intervention::named("g")
                .before_model_call(|_, _| BeforeModelCallAction::guide("be brief"))
                .into(),
            Intervention::named("ask")
                .before_model_call(|_, _| BeforeModelCallAction::confirm("send?"))
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(!ev.cancel.is_cancelled(), "the request is sent");
    assert!(ev.interrupts().is_empty());
    assert_eq!(ev.guidance(), ["[g] be brief"]);
    let outcomes: Vec<_> = ev
        .decisions()
        .iter()
        .map(|d| (d.handler.as_str(), d.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("g", DecisionOutcome::Applied),
            ("ask", DecisionOutcome::Applied),
        ]
    );
    let c = ev.decisions()[1].confirmation.clone().unwrap();
    assert_eq!(c.status, ConfirmationStatus::Approved);
}

/// On resume the paused pass runs again, every handler of it: each is told that the pass
/// re-checks an answered pause, and what was answered; a limiter counting by tool-use id (the
/// documented way) counts the approved call once, where one counting passes counts it twice.
#[test]
fn a_recheck_tells_every_handler_what_was_answered_and_counts_by_id_count_once() {
    use rein_interventions::testing::{self, ToolCall};
    use rein_interventions::{Recheck, RunState};
    use std::sync::{Arc, Mutex};

    let seen: Arc<Mutex<Vec<Option<Recheck>>>> = Arc::default();
    let log = Arc::clone(&seen);
    let limiter = Intervention::named("limiter").before_tool_call(move |ev, cx| {
        log.lock().unwrap().push(cx.recheck().cloned());
        let by_id = cx
            .run_state()
            .count_once("limiter:ids", &ev.tool_use().tool_use_id)?;
        // The pitfall the docs warn about: one more per pass.
        cx.run_state()
            .update("limiter:passes", |n: &mut u64| *n += 1)?;
        Ok::<_, HandlerError>(if by_id > 1 {
            BeforeToolCallAction::deny("one call per run")
        } else {
            BeforeToolCallAction::Proceed
        })
    });
    let limiter: SharedHandler = limiter.into();
    let run_state = RunState::new();
    let call = ToolCall::new("delete_file", json!({"path": "a"})).run_state(&run_state);

    let first = testing::run(
        [limiter.clone(), confirm("approve", "Delete a?")],
        call.clone().event(),
    );
    assert_eq!(first.event.interrupts().len(), 1);
    let second = testing::run(
        [limiter, confirm("approve", "Delete a?")],
        call.answer("approve", "yes").event(),
    );
    assert!(second.event.interrupts().is_empty());
    assert_eq!(
        second.event.cancel_tool,
        Cancel::No,
        "approved, not rate-limited"
    );

    let seen = seen.lock().unwrap();
    assert_eq!(seen[0], None, "a first pass is no re-check");
    let recheck = seen[1].as_ref().expect("the resumed pass is a re-check");
    assert_eq!(recheck.answer_of("approve"), Some(&json!("yes")));
    assert_eq!(recheck.answers.len(), 1);
    assert_eq!(recheck.answers[0].handler, "approve");
    assert_eq!(run_state.load::<u64>("limiter:passes").unwrap(), Some(2));
}
