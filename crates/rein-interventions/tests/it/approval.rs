//! The human-in-the-loop handler: selectors, durable confirm and resume, trust for the session,
//! inline callbacks, risk classification, the policy kind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_interventions::approval::{ApprovalAnswer, HumanApproval, Risk, ToolSelector};
use rein_interventions::testing::{self, ToolCall};
use rein_interventions::*;

fn asked(out: &testing::Outcome<BeforeToolCallEvent>) -> bool {
    !out.event.interrupts().is_empty()
}

#[test]
fn each_selector_form() {
    for (selectors, tool, ask) in [
        (vec!["*"], "anything", true),
        (vec!["delete_file"], "delete_file", true),
        (vec!["delete_file"], "read_file", false),
        (vec!["*", "!read_file"], "read_file", false),
        (vec!["*", "!read_file"], "shell", true),
        (vec!["!read_file"], "shell", true),
        (vec!["shell", "!shell"], "shell", false),
        (vec![], "shell", false),
    ] {
        assert_eq!(
            ToolSelector::new(&selectors).matches(tool),
            ask,
            "{selectors:?} {tool}"
        );
        let h = HumanApproval::new("approval").tools(&selectors);
        let out = testing::run([h], ToolCall::new(tool, json!({})).event());
        assert_eq!(asked(&out), ask, "{selectors:?} {tool}");
    }
}

#[test]
fn a_readable_prompt_and_a_durable_confirm() {
    let h = HumanApproval::new("approval");
    let call = ToolCall::new(
        "delete_file",
        json!({"path": "report.txt", "force": true, "opts": {"depth": 2}}),
    );
    let out = testing::run([h.clone()], call.clone().event());
    let interrupt = &out.event.interrupts()[0];
    assert_eq!(interrupt.name, "approval");
    assert_eq!(
        interrupt.reason["prompt"],
        "Allow delete_file?\n  force: true\n  opts: {\"depth\":2}\n  path: report.txt"
    );
    assert_eq!(interrupt.reason["answers"], json!(["yes", "no", "always"]));
    assert_eq!(interrupt.reason["input"]["path"], "report.txt");
    // On resume the answer decides, through the pass (audit source: resume).
    let out = testing::run([h.clone()], call.clone().answer("approval", "yes").event());
    assert_eq!(out.event.cancel_tool, Cancel::No);
    assert_eq!(
        out.decisions[0].confirmation.as_ref().map(|c| c.source),
        Some(Some(AnswerSource::Resume))
    );
    let out = testing::run([h], call.answer("approval", "no").event());
    assert_eq!(
        out.event.cancel_tool,
        Cancel::Message(
            "CONFIRMATION_FAILED: Allow delete_file?\n  force: true\n  opts: {\"depth\":2}\n  path: report.txt"
                .into()
        )
    );
}

#[test]
fn trust_for_the_session() {
    let h = HumanApproval::new("approval");
    let session = AgentState::new();
    let call = |id: &str, tool: &str| ToolCall::new(tool, json!({"id": id})).agent_state(&session);
    // "always" approves this call and trusts the tool for the session.
    let out = testing::run(
        [h.clone()],
        call("1", "shell").answer("approval", "always").event(),
    );
    assert_eq!(out.event.cancel_tool, Cancel::No);
    assert_eq!(session.get("approval:trusted"), Some(json!(["shell"])));
    let out = testing::run([h.clone()], call("2", "shell").event());
    assert!(!asked(&out) && out.decisions.is_empty());
    // Other tools are still asked about; the object form trusts too.
    let out = testing::run([h.clone()], call("3", "rm").event());
    assert!(asked(&out));
    let out = testing::run(
        [h.clone()],
        call("3", "rm")
            .answer("approval", json!({"approved": true, "trust": true}))
            .event(),
    );
    assert_eq!(out.event.cancel_tool, Cancel::No);
    assert_eq!(
        session.get("approval:trusted"),
        Some(json!(["shell", "rm"]))
    );
    // Another session trusts nothing; with trust off, "always" rejects.
    let out = testing::run([h], ToolCall::new("shell", json!({})).event());
    assert!(asked(&out));
    let strict = HumanApproval::new("approval").trust(false);
    let out = testing::run(
        [strict],
        ToolCall::new("x", json!({}))
            .answer("approval", "always")
            .event(),
    );
    assert!(matches!(out.event.cancel_tool, Cancel::Message(_)));
}

#[tokio::test]
async fn an_inline_callback_answers_at_once() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let h = HumanApproval::new("approval").ask_with(move |req| {
        let _ = tx.send(req.prompt.clone());
        async move {
            if req.tool == "rm" {
                ApprovalAnswer::Reject
            } else {
                ApprovalAnswer::Trust
            }
        }
    });
    let session = AgentState::new();
    let reg = InterventionRegistry::new([SharedHandler::new(h)])
        .unwrap()
        .to_hooks();
    let mut ev = ToolCall::new("rm", json!({"path": "/"}))
        .agent_state(&session)
        .event();
    reg.dispatch(&mut ev).await.unwrap();
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("CONFIRMATION_FAILED: Allow rm?\n  path: /".into())
    );
    assert!(ev.interrupts().is_empty());
    assert_eq!(rx.recv().await.as_deref(), Some("Allow rm?\n  path: /"));
    let mut ev = ToolCall::new("ls", json!({})).agent_state(&session).event();
    reg.dispatch(&mut ev).await.unwrap();
    assert_eq!(ev.cancel_tool, Cancel::No);
    assert_eq!(
        ev.decisions()[0].confirmation.as_ref().map(|c| c.source),
        Some(Some(AnswerSource::Preemptive))
    );
    assert_eq!(session.get("approval:trusted"), Some(json!(["ls"])));
}

#[tokio::test]
async fn an_inline_trust_with_trust_off_approves_this_call_only() {
    let h = HumanApproval::new("approval")
        .trust(false)
        .ask_with(|_| async { ApprovalAnswer::Trust });
    let session = AgentState::new();
    let reg = InterventionRegistry::new([SharedHandler::new(h)])
        .unwrap()
        .to_hooks();
    for id in ["1", "2"] {
        let mut ev = ToolCall::new("shell", json!({"id": id}))
            .agent_state(&session)
            .event();
        reg.dispatch(&mut ev).await.unwrap();
        assert_eq!(ev.cancel_tool, Cancel::No);
        // Asked each time: nothing was trusted.
        assert_eq!(ev.decisions()[0].action, DecisionAction::Confirm);
    }
    assert_eq!(session.get("approval:trusted"), None);
}

#[tokio::test]
async fn low_risk_calls_pass_without_asking() {
    let h = HumanApproval::new("approval").risk(|call: &ToolUse| {
        if call.name.starts_with("read") {
            Risk::Low
        } else {
            Risk::High
        }
    });
    let reg = InterventionRegistry::new([SharedHandler::new(h)])
        .unwrap()
        .to_hooks();
    let mut ev = ToolCall::new("read_file", json!({})).event();
    reg.dispatch(&mut ev).await.unwrap();
    assert!(ev.interrupts().is_empty() && ev.decisions().is_empty());
    let mut ev = ToolCall::new("write_file", json!({})).event();
    reg.dispatch(&mut ev).await.unwrap();
    assert_eq!(ev.interrupts().len(), 1);
}

#[cfg(feature = "policy")]
#[test]
fn policy_kind_human_approval() {
    use rein_interventions::policy::Policy;
    let policy = Policy::from_toml_str(
        r#"
        [[policy]]
        name = "approval"
        kind = "human_approval"
        tools = ["*", "!search"]
        "#,
    )
    .unwrap();
    let h = SharedHandler::new(policy.into_handlers().remove(0));
    let out = testing::run([h.clone()], ToolCall::new("search", json!({})).event());
    assert!(!asked(&out));
    let out = testing::run([h], ToolCall::new("shell", json!({"cmd": "ls"})).event());
    assert_eq!(
        out.event.interrupts()[0].reason["prompt"],
        "Allow shell?\n  cmd: ls"
    );
}
