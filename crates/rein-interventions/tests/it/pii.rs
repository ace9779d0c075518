//! The PII detector against the labelled set in `tests/data/pii-labelled.jsonl`: per-kind and
//! overall precision and recall, asserted against thresholds (see `docs/ready-made-handlers.md`,
//! "How well it detects: the labelled set").
#![cfg(feature = "pii")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use rein_interventions::pii::{PiiDetector, PiiKind};
use serde_json::Value;

#[derive(Default, Debug, Clone, Copy)]
struct Score {
    tp: u32,
    fp: u32,
    fn_: u32,
}

impl Score {
    fn precision(self) -> f64 {
        f64::from(self.tp) / f64::from((self.tp + self.fp).max(1))
    }
    fn recall(self) -> f64 {
        f64::from(self.tp) / f64::from((self.tp + self.fn_).max(1))
    }
}

/// Strict scoring: a detection counts only when its kind and its exact text are labelled.
fn score() -> (BTreeMap<PiiKind, Score>, Score, Vec<String>) {
    let data = include_str!("../data/pii-labelled.jsonl");
    let detector = PiiDetector::new();
    let mut per_kind: BTreeMap<PiiKind, Score> = BTreeMap::new();
    let mut errors = Vec::new();
    for line in data.lines().filter(|l| !l.trim().is_empty()) {
        let row: Value = serde_json::from_str(line).unwrap();
        let text = row["text"].as_str().unwrap();
        let mut expected: Vec<(PiiKind, String)> = row["pii"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let kind = PiiKind::from_name(p["kind"].as_str().unwrap()).unwrap();
                (kind, p["value"].as_str().unwrap().to_owned())
            })
            .collect();
        for m in detector.find(text) {
            let found = (m.kind, text[m.start..m.end].to_owned());
            if let Some(i) = expected.iter().position(|e| *e == found) {
                expected.remove(i);
                per_kind.entry(m.kind).or_default().tp += 1;
            } else {
                per_kind.entry(m.kind).or_default().fp += 1;
                errors.push(format!(
                    "false positive {} {:?} in {text:?}",
                    found.0, found.1
                ));
            }
        }
        for (kind, value) in expected {
            per_kind.entry(kind).or_default().fn_ += 1;
            errors.push(format!("false negative {kind} {value:?} in {text:?}"));
        }
    }
    let total = per_kind.values().fold(Score::default(), |a, s| Score {
        tp: a.tp + s.tp,
        fp: a.fp + s.fp,
        fn_: a.fn_ + s.fn_,
    });
    (per_kind, total, errors)
}

#[test]
fn labelled_set_precision_and_recall() {
    let (per_kind, total, errors) = score();
    for (kind, s) in &per_kind {
        println!(
            "{kind:<11} tp {:>2} fp {:>2} fn {:>2}  precision {:.3} recall {:.3}",
            s.tp,
            s.fp,
            s.fn_,
            s.precision(),
            s.recall()
        );
    }
    println!(
        "overall     tp {:>2} fp {:>2} fn {:>2}  precision {:.3} recall {:.3}",
        total.tp,
        total.fp,
        total.fn_,
        total.precision(),
        total.recall()
    );
    for e in &errors {
        println!("{e}");
    }
    // Checksummed kinds: a card or an IBAN that passes its check is one, and the set's
    // near-misses (one digit off) fail the check — nothing but a perfect score is right.
    for kind in [PiiKind::CreditCard, PiiKind::Iban] {
        let s = per_kind[&kind];
        assert_eq!((s.fp, s.fn_), (0, 0), "{kind}: {s:?}");
    }
    // Overall (measured: precision 0.983, recall 0.922). Recall ≥ 0.90: the misses are shapes a
    // pattern cannot tell from other text without context (obfuscated addresses, undashed
    // SSNs, national phone formats without a country code, bare passwords), kept in the set on
    // purpose; a new miss beyond them fails. Precision ≥ 0.95: a false positive costs a
    // redacted version number, never a leak, yet a guard that redacts ordinary numbers gets
    // turned off.
    assert!(
        total.precision() >= 0.95,
        "precision {:.3}",
        total.precision()
    );
    assert!(total.recall() >= 0.90, "recall {:.3}", total.recall());
}

mod guard {
    use rein_interventions::pii::{PiiAction, PiiGuard, PiiKind, PiiTarget};
    use rein_interventions::testing::{self, ModelReply, Prompt, StreamedText, ToolCall};
    use rein_interventions::*;

    #[test]
    fn redacts_tool_input_at_any_depth() {
        let guard = PiiGuard::new("pii");
        let call = ToolCall::new(
            "send",
            json!({"to": ["ann@example.com"], "meta": {"card": "4111 1111 1111 1111"}, "n": 4}),
        );
        let out = testing::run([guard], call.event());
        let input = &out.event.tool_use().input;
        assert_eq!(
            *input,
            json!({"to": ["[EMAIL]"], "meta": {"card": "[CREDIT_CARD]"}, "n": 4})
        );
        assert_eq!(out.decisions[0].action, DecisionAction::Transform);
    }

    #[test]
    fn strongest_action_wins_and_names_the_kinds() {
        let guard = PiiGuard::new("pii")
            .action(PiiKind::Ssn, PiiAction::Guide)
            .action(PiiKind::ApiKey, PiiAction::Deny);
        let call = ToolCall::new("send", json!({"body": "ssn 123-45-6789"}));
        let out = testing::run([guard.clone()], call.event());
        assert_eq!(
            out.event.cancel_tool,
            Cancel::Message(
                "GUIDANCE: [pii] remove personal data from the tool input (ssn)".into()
            )
        );
        let call = ToolCall::new(
            "send",
            json!({"body": "ssn 123-45-6789 key AKIAIOSFODNN7EXAMPLE"}),
        );
        let out = testing::run([guard], call.event());
        assert_eq!(
            out.event.cancel_tool,
            Cancel::Message("DENIED: personal data in tool input: api_key".into())
        );
    }

    #[test]
    fn a_denied_result_becomes_an_error_result() {
        let guard = PiiGuard::new("pii").default_action(PiiAction::Deny);
        let out = testing::run(
            [guard],
            ToolCall::new("lookup", json!({})).returned("ip 10.0.0.1"),
        );
        assert_eq!(out.event.result.status, ToolResultStatus::Error);
        assert_eq!(
            out.event.result.text(),
            "DENIED: personal data in tool result: ip_address"
        );
    }

    #[test]
    fn prompt_and_model_output() {
        let guard = PiiGuard::new("pii");
        let out = testing::run([guard.clone()], Prompt::new("I am ann@example.com").event());
        assert_eq!(out.event.messages[0].text(), "I am [EMAIL]");
        let out = testing::run([guard], ModelReply::text("Her SSN is 123-45-6789.").event());
        assert_eq!(
            out.event.response().map(|r| r.message.text()),
            Some("Her SSN is [SSN].".to_owned())
        );
        let denying = PiiGuard::new("pii").default_action(PiiAction::Deny);
        let out = testing::run([denying], ModelReply::text("Mail ann@example.com").event());
        assert_eq!(
            out.event.response().map(|r| r.message.text()),
            Some("DENIED: personal data in model output: email".to_owned())
        );
    }

    #[test]
    fn tools_narrow_the_tool_targets() {
        let guard = PiiGuard::new("pii").tools(["send_email"]);
        let call = ToolCall::new("search", json!({"q": "ann@example.com"}));
        let out = testing::run([guard], call.event());
        assert_eq!(out.event.tool_use().input, json!({"q": "ann@example.com"}));
    }

    #[test]
    fn stream_waits_for_a_match_that_may_grow() {
        let guard = PiiGuard::new("pii").targets([PiiTarget::Stream]);
        assert_eq!(guard.subscriptions(), EventSet::MODEL_OUTPUT);
        // `ann@example.co` may still become `.com`: not decided while it touches the end.
        let out = testing::run(
            [guard.clone()],
            StreamedText::new("mail ann@example.co").event(),
        );
        assert_eq!(out.event.pending, "mail ann@example.co");
        let out = testing::run(
            [guard.clone()],
            StreamedText::new("mail ann@example.com now").event(),
        );
        assert_eq!(out.event.pending, "mail [EMAIL] now");
        let out = testing::run(
            [guard],
            StreamedText::new("mail ann@example.com").last().event(),
        );
        assert_eq!(out.event.pending, "mail [EMAIL]");
        let deny = PiiGuard::new("pii")
            .targets([PiiTarget::Stream])
            .default_action(PiiAction::Deny);
        let out = testing::run(
            [deny],
            StreamedText::new("key AKIAIOSFODNN7EXAMPLE.").event(),
        );
        assert_eq!(
            out.event.withheld(),
            Some("DENIED: personal data in model output: api_key")
        );
    }

    #[cfg(feature = "policy")]
    #[test]
    fn policy_kind_pii() {
        use rein_interventions::policy::Policy;
        let policy = Policy::from_toml_str(
            r#"
            [[policy]]
            name = "pii"
            kind = "pii"
            kinds = ["email", "credit_card"]
            actions = { credit_card = "deny" }
            targets = ["tool_input"]
            "#,
        )
        .unwrap();
        let h = policy.into_handlers().remove(0);
        assert_eq!(h.kind_name(), "pii");
        assert_eq!(h.subscriptions(), EventSet::BEFORE_TOOL_CALL);
        let out = testing::run(
            [SharedHandler::new(h)],
            ToolCall::new("pay", json!({"card": "4111111111111111", "ip": "10.0.0.1"})).event(),
        );
        assert_eq!(
            out.event.cancel_tool,
            Cancel::Message("DENIED: personal data in tool input: credit_card".into())
        );
        let err = Policy::from_json_str(r#"[{"name": "p", "kind": "pii", "kinds": ["dna"]}]"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("policy[0].kinds[0]: unknown variant `dna`"),
            "{err}"
        );
    }
}
