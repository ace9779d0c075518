//! Rein interrupts as AG-UI interrupts, and AG-UI resume entries as Rein answers, with the
//! protocol's rules: unknown ids rejected, every open interrupt answered, answers validated
//! against the interrupt's response schema.

use std::collections::HashSet;

use axum::http::StatusCode;
use rein_core::{interrupt::Interrupt, message::InterruptResponse};
use serde_json::{Value, json};

use crate::error::ProtocolError;
use crate::wire::{ResumeEntry, ResumeStatus, WireInterrupt};

/// The lifecycle points whose interrupts are intervention `Confirm`s (ids `v1:<point>:...`).
const CONFIRM_POINTS: [&str; 6] = [
    "before_invocation",
    "before_model_call",
    "after_model_call",
    "before_tool_call",
    "after_tool_call",
    "model_output",
];

/// The point of a Confirm interrupt, from its id; `None` for other interrupts (a hook's own).
fn confirm_point(id: &str) -> Option<&str> {
    let mut parts = id.split(':');
    (parts.next() == Some("v1"))
        .then(|| parts.next())
        .flatten()
        .filter(|p| CONFIRM_POINTS.contains(p))
}

/// The response schema of a Confirm: an approval `{approved, edit?, note?}` (SPEC §3.10).
pub(crate) fn approval_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "edit": {"description": "approve with an edit: a tool call's new input (object), or a result's, response's or input's new text"},
            "note": {"type": "string"}
        },
        "required": ["approved"],
        "additionalProperties": false
    })
}

/// A Rein interrupt as an AG-UI interrupt. A Confirm's reason is `confirm` and its response
/// schema the approval; any other interrupt keeps its name as the reason and takes any JSON.
pub(crate) fn to_wire(i: &Interrupt) -> WireInterrupt {
    let point = confirm_point(&i.id);
    WireInterrupt {
        id: i.id.clone(),
        reason: if point.is_some() {
            "confirm".to_owned()
        } else {
            i.name.clone()
        },
        message: Some(i.prompt_text()),
        tool_call_id: i.tool_use_id.clone(),
        response_schema: if point.is_some() {
            approval_schema()
        } else {
            json!({})
        },
        metadata: json!({"rein": {"name": i.name, "point": point, "reason": i.reason}}),
    }
}

/// Checks a resume against the pending interrupts and turns it into Rein answers: every id
/// known and pending, each answered once, every pending one answered, each payload valid
/// against its response schema. A `cancelled` entry is a rejection (`{"approved": false}` for a
/// Confirm, `false` otherwise).
pub(crate) fn answers(
    pending: &[Interrupt],
    resume: &[ResumeEntry],
) -> Result<Vec<InterruptResponse>, ProtocolError> {
    let open: HashSet<&str> = pending.iter().map(|i| i.id.as_str()).collect();
    let unknown: Vec<&str> = resume
        .iter()
        .map(|r| r.interrupt_id.as_str())
        .filter(|id| !open.contains(id))
        .collect();
    if !unknown.is_empty() {
        return Err(ProtocolError::new(
            StatusCode::NOT_FOUND,
            "UNKNOWN_INTERRUPT",
            format!("no pending interrupt with id {}", unknown.join(", ")),
        )
        .with_details(json!({"unknownInterruptIds": unknown})));
    }
    let mut seen = HashSet::new();
    for r in resume {
        if !seen.insert(r.interrupt_id.as_str()) {
            return Err(ProtocolError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "DUPLICATE_RESUME_ENTRY",
                format!("interrupt {} is answered twice", r.interrupt_id),
            ));
        }
    }
    let missing: Vec<&str> = pending
        .iter()
        .map(|i| i.id.as_str())
        .filter(|id| !seen.contains(id))
        .collect();
    if !missing.is_empty() {
        return Err(ProtocolError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "INTERRUPTS_UNANSWERED",
            format!(
                "every open interrupt must be answered; missing: {}",
                missing.join(", ")
            ),
        )
        .with_details(json!({"missingInterruptIds": missing})));
    }
    let mut out = Vec::with_capacity(resume.len());
    for i in pending {
        let Some(r) = resume.iter().find(|r| r.interrupt_id == i.id) else {
            continue;
        };
        let confirm = confirm_point(&i.id).is_some();
        let answer = match r.status {
            ResumeStatus::Cancelled => {
                if confirm {
                    json!({"approved": false})
                } else {
                    Value::Bool(false)
                }
            }
            ResumeStatus::Resolved => {
                let payload = r.payload.clone().unwrap_or(Value::Null);
                let schema = to_wire(i).response_schema;
                check(&schema, &payload).map_err(|why| {
                    ProtocolError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "INVALID_RESUME_PAYLOAD",
                        format!(
                            "the answer to interrupt {} does not match its response schema: {why}",
                            i.id
                        ),
                    )
                    .with_details(json!({"interruptId": i.id, "responseSchema": schema}))
                })?;
                payload
            }
        };
        out.push(InterruptResponse::new(i.id.clone(), answer));
    }
    Ok(out)
}

/// Validates `value` against a JSON schema; the first error's text when it fails.
fn check(schema: &Value, value: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(e) => Err(format!("{e} (at `{}`)", e.instance_path())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(id: &str, status: ResumeStatus, payload: Option<Value>) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: id.into(),
            status,
            payload,
            metadata: None,
        }
    }

    fn confirm(id: &str) -> Interrupt {
        Interrupt::new(format!("v1:before_tool_call:{id}:x"), "guard", "Delete?")
    }

    #[test]
    fn a_confirm_gets_the_approval_schema_and_a_hook_interrupt_takes_anything() {
        let w = to_wire(&confirm("t1").with_tool_use_id("t1"));
        assert_eq!(w.reason, "confirm");
        assert_eq!(w.tool_call_id.as_deref(), Some("t1"));
        assert_eq!(w.response_schema["required"], json!(["approved"]));
        let w = to_wire(&Interrupt::new(
            "v1:tool_call:t1:y",
            "approval",
            json!({"prompt": "Go?"}),
        ));
        assert_eq!(w.reason, "approval");
        assert_eq!(w.message.as_deref(), Some("Go?"));
        assert_eq!(w.response_schema, json!({}));
    }

    #[test]
    fn resume_rules() {
        let p = vec![confirm("t1"), confirm("t2")];
        let (a, b) = (p[0].id.clone(), p[1].id.clone());
        let ok = json!({"approved": true});
        // unknown id
        let e = answers(
            &p,
            &[entry("nope", ResumeStatus::Resolved, Some(ok.clone()))],
        )
        .unwrap_err();
        assert_eq!(e.code, "UNKNOWN_INTERRUPT");
        // one left open
        let e = answers(&p, &[entry(&a, ResumeStatus::Resolved, Some(ok.clone()))]).unwrap_err();
        assert_eq!(e.code, "INTERRUPTS_UNANSWERED");
        // twice
        let e = answers(
            &p,
            &[
                entry(&a, ResumeStatus::Resolved, Some(ok.clone())),
                entry(&a, ResumeStatus::Cancelled, None),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code, "DUPLICATE_RESUME_ENTRY");
        // schema
        let e = answers(
            &p,
            &[
                entry(&a, ResumeStatus::Resolved, Some(json!({"approved": "yes"}))),
                entry(&b, ResumeStatus::Cancelled, None),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code, "INVALID_RESUME_PAYLOAD");
        let e = answers(
            &p,
            &[
                entry(&a, ResumeStatus::Resolved, None),
                entry(&b, ResumeStatus::Cancelled, None),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code, "INVALID_RESUME_PAYLOAD");
        // good, in pending order
        let r = answers(
            &p,
            &[
                entry(&b, ResumeStatus::Cancelled, None),
                entry(
                    &a,
                    ResumeStatus::Resolved,
                    Some(json!({"approved": true, "edit": {"path": "x"}})),
                ),
            ],
        )
        .unwrap();
        assert_eq!(r[0].interrupt_id, a);
        assert_eq!(r[0].response["edit"]["path"], "x");
        assert_eq!(r[1].response, json!({"approved": false}));
    }
}
