//! Rein interrupts as AG-UI interrupts, and AG-UI resume entries as Rein answers, with the
//! protocol's rules: unknown ids rejected, every open interrupt answered, answers validated
//! against the interrupt's response schema — and approvals bound to the action they approve,
//! in the shape proposed in ag-ui-protocol/ag-ui#2278: the interrupt's
//! `metadata.governance.actionFingerprint` carries the action's fingerprint, the resume's
//! `payload.approvedActionFingerprint` echoes it, and Rein compares it with the pending
//! interrupt's before anything runs (the agent then binds the answer to it, so a call that
//! changed is asked about again).

use std::collections::HashSet;

use axum::http::StatusCode;
use rein_agent::{Agent, Pause, PausedRun, PendingInterrupt};
use rein_core::{
    id::InjectionId,
    interrupt::{Approval, Interrupt, InterruptEvent, InterruptPoint},
    message::{InterruptResponse, ToolUse},
};
use serde_json::{Value, json};

use crate::error::ProtocolError;
use crate::wire::{ResumeEntry, ResumeStatus, WireInterrupt};

/// The payload field of a resume entry that names the fingerprint of the action it approves
/// (ag-ui-protocol/ag-ui#2278).
const APPROVED_FINGERPRINT: &str = "approvedActionFingerprint";

/// The lifecycle point a Confirm asks at, as `metadata.rein.point` names it; `None` for an
/// interrupt a tool raised itself and for a sub-agent's (raised at its parent: answered by
/// the fingerprint it carries). A hook's own interrupt at one of these points is asked as a
/// Confirm is.
fn confirm_point(point: &InterruptPoint) -> Option<&'static str> {
    if point.parent.is_some() {
        return None;
    }
    match point.event {
        InterruptEvent::BeforeInvocation => Some("before_invocation"),
        InterruptEvent::BeforeModelCall => Some("before_model_call"),
        InterruptEvent::AfterModelCall => Some("after_model_call"),
        InterruptEvent::BeforeToolCall => Some("before_tool_call"),
        InterruptEvent::AfterToolCall => Some("after_tool_call"),
        _ => None,
    }
}

/// Whether the interrupt is answered with an approval: a Confirm, or any interrupt bound to an
/// action (a fingerprint: a sub-agent's Confirm raised at its parent, a hook's own binding).
pub(crate) fn takes_an_approval(p: &PendingInterrupt) -> bool {
    p.interrupt.fingerprint.is_some() || confirm_point(&p.point).is_some()
}

/// The interrupts of a message injected into a run and parked on a Confirm (SPEC §5): each
/// asked at before_invocation about the injection.
pub(crate) fn parked(injection: InjectionId, interrupts: &[Interrupt]) -> Vec<PendingInterrupt> {
    let subject = injection.to_string();
    interrupts
        .iter()
        .map(|i| {
            let point = InterruptPoint::new(InterruptEvent::BeforeInvocation, &subject, &i.name);
            PendingInterrupt::new(point, i.clone())
        })
        .collect()
}

/// The response schema of an approval `{approved, edit?, note?}` (SPEC §3.10); for an
/// interrupt bound to an action, with the fingerprint it approves, required. `edit` is the
/// tool's input schema when the interrupt holds a tool call (a client builds its edit form
/// from it, and the server checks the edit against it); `trust` is offered when the handler
/// takes "approve and trust the tool for the session" (human_approval's `always`).
pub(crate) fn approval_schema(bound: bool, edit: Option<&Value>, trust: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "edit": {"description": "approve with an edit: a tool call's new input (object), or a result's, response's or input's new text"},
            "note": {"type": "string"}
        },
        "required": ["approved"],
        "additionalProperties": false
    });
    if let Some(Value::Object(input)) = edit {
        let mut input = input.clone();
        input.remove("$schema");
        // A root `$id` would make the edit a resource of its own, where `#/$defs/...` no longer
        // reaches the definitions moved to the root: dropped, and references spelled with it
        // (`<id>#/...`) made local. Nothing is fetched: a reference to another document stays
        // unresolvable, and the schema refuses every answer rather than reach out.
        if let Some(Value::String(id)) = input.remove("$id") {
            let prefix = format!("{}#", id.trim_end_matches('#'));
            for v in input.values_mut() {
                localize_refs(v, &prefix);
            }
        }
        // The tool schema's own definitions move to the root, where its `#/$defs/...`
        // references resolve.
        for defs in ["$defs", "definitions"] {
            if let Some(d) = input.remove(defs) {
                schema[defs] = d;
            }
        }
        input
            .entry("description")
            .or_insert_with(|| json!("approve with an edit: the tool call's new input, whole"));
        schema["properties"]["edit"] = Value::Object(input);
    }
    if trust {
        schema["properties"]["trust"] = json!({
            "type": "boolean",
            "description": "with approved: true, trust this tool for the rest of the session"
        });
    }
    if bound {
        schema["properties"][APPROVED_FINGERPRINT] = json!({
            "type": "string",
            "description": "the interrupt's metadata.governance.actionFingerprint: what this answer approves"
        });
        schema["required"] = json!(["approved", APPROVED_FINGERPRINT]);
    }
    schema
}

/// What the wire shows of a pending interrupt beyond the interrupt itself: the tool call it
/// holds (from the paused run, so a client that saw none of the run shows it in full) and
/// that tool's input schema (from the agent). Without them (`Asking::default()`) an interrupt
/// goes out as it is.
#[derive(Default, Clone, Copy)]
pub(crate) struct Asking<'a> {
    paused: Option<&'a PausedRun>,
    agent: Option<&'a Agent>,
}

impl<'a> Asking<'a> {
    /// The interrupts of `paused`, the run of `agent`.
    pub(crate) fn new(paused: Option<&'a PausedRun>, agent: &'a Agent) -> Self {
        Self {
            paused,
            agent: Some(agent),
        }
    }

    /// The pending interrupts as they go out.
    pub(crate) fn pending(&self) -> Vec<WireInterrupt> {
        self.paused
            .map(|p| p.pending().iter().map(|i| self.wire(i)).collect())
            .unwrap_or_default()
    }

    /// The tool call this agent's interrupt holds (not a sub-agent's: that call is its own).
    fn call(&self, p: &PendingInterrupt) -> Option<&'a ToolUse> {
        let id = p.interrupt.tool_use_id.as_deref()?;
        if p.point.parent.is_some() {
            return None;
        }
        let message = match self.paused?.pause() {
            Pause::Tools(t) => &t.message,
            Pause::Response(r) => &r.message,
            _ => return None,
        };
        message.tool_uses().find(|u| u.tool_use_id == id)
    }

    /// `p` as an AG-UI interrupt: [`to_wire`], with the call it holds in
    /// `metadata.rein.toolCall` and, for a call held before it runs, the tool's input schema
    /// as the schema of the approval's `edit`.
    pub(crate) fn wire(&self, p: &PendingInterrupt) -> WireInterrupt {
        let mut w = to_wire(p);
        let Some(call) = self.call(p) else {
            return w;
        };
        w.metadata["rein"]["toolCall"] =
            json!({"id": call.tool_use_id, "name": call.name, "input": call.input});
        let input_schema = self
            .agent
            .filter(|_| p.point.event == InterruptEvent::BeforeToolCall)
            .and_then(|a| a.tool_spec(&call.name))
            .map(|s| &*s.input_schema);
        if takes_an_approval(p) && input_schema.is_some() {
            w.response_schema = approval_schema(
                p.interrupt.fingerprint.is_some(),
                input_schema,
                offers_trust(&p.interrupt),
            );
        }
        w
    }
}

/// Whether the handler takes "approve and trust the tool for the session": its question lists
/// `always` among its answers (human_approval with trust on).
fn offers_trust(i: &Interrupt) -> bool {
    i.reason
        .get("answers")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "always"))
}

/// A Rein interrupt as an AG-UI interrupt: its id is the one a resume names (with the pause's
/// nonce). A Confirm's reason is `confirm`; an interrupt answered with an approval has the
/// approval's response schema, and one bound to an action carries its fingerprint in
/// `metadata.governance.actionFingerprint`; any other interrupt keeps its name as the reason
/// and takes what its declared [`Interrupt::response_schema`] takes (an MCP server's form, a
/// tool's question), or any JSON.
pub(crate) fn to_wire(p: &PendingInterrupt) -> WireInterrupt {
    let i = &p.interrupt;
    let point = confirm_point(&p.point);
    let mut metadata = json!({"rein": {"name": i.name, "point": point, "reason": i.reason}});
    if let Some(f) = &i.fingerprint {
        metadata["governance"] = json!({"actionFingerprint": f});
    }
    WireInterrupt {
        id: i.resume_id(),
        reason: if point.is_some() {
            "confirm".to_owned()
        } else {
            i.name.clone()
        },
        message: Some(i.prompt_text()),
        tool_call_id: i.tool_use_id.clone(),
        response_schema: if takes_an_approval(p) {
            approval_schema(i.fingerprint.is_some(), None, offers_trust(i))
        } else {
            i.response_schema.clone().unwrap_or_else(|| json!({}))
        },
        metadata,
    }
}

/// Checks a resume against the pending interrupts and turns it into Rein answers: every id
/// known and pending (ids of another pause are unknown), each answered once, every pending
/// one answered, each payload valid against its response schema, and an approval of an action
/// naming that action's fingerprint (409 `FINGERPRINT_MISMATCH` otherwise: it was given for
/// another call). A `cancelled` entry is a rejection (`{"approved": false}` for an approval,
/// `false` otherwise), bound to the interrupt's action: a rejection approves nothing.
pub(crate) fn answers(
    pending: &[PendingInterrupt],
    asking: &Asking<'_>,
    resume: &[ResumeEntry],
) -> Result<Vec<InterruptResponse>, ProtocolError> {
    let open: Vec<String> = pending.iter().map(|p| p.interrupt.resume_id()).collect();
    let unknown: Vec<&str> = resume
        .iter()
        .map(|r| r.interrupt_id.as_str())
        .filter(|id| !open.iter().any(|o| o == id))
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
    let missing: Vec<&str> = open
        .iter()
        .map(String::as_str)
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
    for (p, id) in pending.iter().zip(&open) {
        let Some(r) = resume.iter().find(|r| r.interrupt_id == *id) else {
            continue;
        };
        let (i, approval) = (&p.interrupt, takes_an_approval(p));
        let refused = |schema: Value, why: String| {
            ProtocolError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "INVALID_RESUME_PAYLOAD",
                format!("the answer to interrupt {id} does not match its response schema: {why}"),
            )
            .with_details(json!({"interruptId": id, "responseSchema": schema}))
        };
        let answer = match r.status {
            ResumeStatus::Cancelled if approval => json!({"approved": false}),
            ResumeStatus::Cancelled => {
                // A dismissal is `false`, refused here (the interrupt waits) when the
                // interrupt's declared schema does not take it; an MCP form's does (`cancel`).
                let schema = asking.wire(p).response_schema;
                check(&schema, &Value::Bool(false)).map_err(|why| refused(schema, why))?;
                Value::Bool(false)
            }
            ResumeStatus::Resolved => {
                let mut payload = r.payload.clone().unwrap_or(Value::Null);
                let schema = asking.wire(p).response_schema;
                check(&schema, &payload).map_err(|why| refused(schema.clone(), why))?;
                if approval {
                    // The fingerprint is what the answer approves, not part of the answer.
                    let named = payload
                        .as_object_mut()
                        .and_then(|o| o.remove(APPROVED_FINGERPRINT));
                    if named.as_ref().and_then(Value::as_str) != i.fingerprint.as_deref() {
                        return Err(fingerprint_mismatch(id));
                    }
                    // The one strict reading every wire shares (Restate's ingress too): what
                    // the schema lets through is an approval, never read as a silent "no".
                    // `trust` (offered by the schema) rides beside the approval.
                    let mut approval = payload.clone();
                    if let Some(o) = approval.as_object_mut() {
                        o.remove("trust");
                    }
                    Approval::from_wire(&approval).map_err(|why| {
                        ProtocolError::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "INVALID_RESUME_PAYLOAD",
                            format!("the answer to interrupt {id}: {why}"),
                        )
                        .with_details(json!({"interruptId": id, "responseSchema": schema}))
                    })?;
                }
                payload
            }
        };
        // Bound to what was asked about: checked above (a cancel approves nothing).
        out.push(i.answer(answer));
    }
    Ok(out)
}

/// Whether `resume` is the resume last applied (`applied`: its ids) sent again: every id among
/// them and none naming a pending interrupt. Safe to answer without running anything: ids carry
/// their pause's nonce, so an earlier pause's cannot name a later one.
pub(crate) fn already_applied(
    applied: &[String],
    pending: &[PendingInterrupt],
    resume: &[ResumeEntry],
) -> bool {
    !resume.is_empty()
        && resume.iter().all(|r| {
            applied.contains(&r.interrupt_id)
                && !pending
                    .iter()
                    .any(|p| p.interrupt.resume_id() == r.interrupt_id)
        })
}

/// 409: the approval names another action than the one pending (an earlier pause's, or this
/// call before it changed). Nothing runs; the interrupt stays pending.
fn fingerprint_mismatch(id: &str) -> ProtocolError {
    ProtocolError::new(
        StatusCode::CONFLICT,
        "FINGERPRINT_MISMATCH",
        format!(
            "the answer to interrupt {id} approves another action than the one it asks about: \
             its {APPROVED_FINGERPRINT} must be the interrupt's metadata.governance.actionFingerprint"
        ),
    )
    .with_details(json!({"interruptId": id}))
}

/// Rewrites every `$ref` that starts with `prefix` (`<id>#`) to the local `#...` it names.
fn localize_refs(schema: &mut Value, prefix: &str) {
    match schema {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(r) if key == "$ref" => {
                        if let Some(local) = r.strip_prefix(prefix) {
                            *r = format!("#{local}");
                        }
                    }
                    _ => localize_refs(v, prefix),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| localize_refs(v, prefix)),
        _ => {}
    }
}

/// Validates `value` against a JSON schema; the first error's text when it fails.
fn check(schema: &Value, value: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
    if validator.is_valid(value) {
        return Ok(());
    }
    // "not valid under any of the schemas listed in 'oneOf'" says nothing a person can fix:
    // the error of the alternative the answer chose (by its constants, the `action` of an
    // MCP form) says which field is wrong. The alternative is part of the schema, checked
    // with it: a subschema of a valid schema.
    let chosen = schema
        .get("oneOf")
        .and_then(Value::as_array)
        .and_then(|alts| alts.iter().find(|alt| chooses(alt, value)))
        .and_then(|alt| jsonschema::validator_for(alt).ok())
        .filter(|alt| !alt.is_valid(value));
    let validator = chosen.unwrap_or(validator);
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(e) => Err(format!("{e} (at `{}`)", e.instance_path())),
    }
}

/// Whether `value` is the alternative `alt` of a `oneOf` picks by its constant properties
/// (it has some, and `value` has each of them).
fn chooses(alt: &Value, value: &Value) -> bool {
    let Some(properties) = alt.get("properties").and_then(Value::as_object) else {
        return false;
    };
    let mut constants = properties
        .iter()
        .filter_map(|(k, p)| Some((k, p.get("const")?)))
        .peekable();
    constants.peek().is_some() && constants.all(|(k, c)| value.get(k) == Some(c))
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

    /// `interrupt` asked at `event` about `subject`.
    fn at(event: InterruptEvent, subject: &str, interrupt: Interrupt) -> PendingInterrupt {
        PendingInterrupt::new(
            InterruptPoint::new(event, subject, interrupt.name.clone()),
            interrupt,
        )
    }

    fn confirm(id: &str) -> PendingInterrupt {
        let i = Interrupt::new(format!("v1:before_tool_call:{id}:x"), "guard", "Delete?");
        at(InterruptEvent::BeforeToolCall, id, i.with_tool_use_id(id))
    }

    #[test]
    fn a_confirm_gets_the_approval_schema_and_a_hook_interrupt_takes_anything() {
        let w = to_wire(&confirm("t1"));
        assert_eq!(w.reason, "confirm");
        assert_eq!(w.metadata["rein"]["point"], "before_tool_call");
        assert_eq!(w.tool_call_id.as_deref(), Some("t1"));
        assert_eq!(w.response_schema["required"], json!(["approved"]));
        let ask = Interrupt::new("v1:tool_call:t1:y", "approval", json!({"prompt": "Go?"}));
        let w = to_wire(&at(InterruptEvent::ToolCall, "t1", ask));
        assert_eq!(w.reason, "approval");
        assert_eq!(w.message.as_deref(), Some("Go?"));
        assert_eq!(w.response_schema, json!({}));
    }

    /// What an interrupt is shown as comes from its point, never from its id: an id of any
    /// shape (a hook's own, or one that looks like a Confirm's) is only a name.
    #[test]
    fn the_point_not_the_id_says_what_is_asked() {
        let w = to_wire(&at(
            InterruptEvent::AfterToolCall,
            "t2",
            Interrupt::new("opaque-7", "check", "Show it?"),
        ));
        assert_eq!(
            (w.reason.as_str(), &w.metadata["rein"]["point"]),
            ("confirm", &json!("after_tool_call"))
        );
        assert_eq!(w.response_schema["required"], json!(["approved"]));
        let w = to_wire(&at(
            InterruptEvent::ToolCall,
            "t3",
            Interrupt::new("v1:before_tool_call:t3:x", "ask", "Go?"),
        ));
        assert_eq!(
            (w.reason.as_str(), &w.metadata["rein"]["point"]),
            ("ask", &Value::Null)
        );
        // A sub-agent's Confirm, raised at its parent, is answered by its fingerprint.
        let child = PendingInterrupt::new(
            InterruptPoint::new(InterruptEvent::BeforeToolCall, "d1", "check").under("r1"),
            Interrupt::new("v1:agent:r1:x", "researcher/check", "Delete?").with_fingerprint("f"),
        );
        let w = to_wire(&child);
        assert_eq!(w.reason, "researcher/check");
        assert_eq!(
            w.response_schema["required"],
            json!(["approved", "approvedActionFingerprint"])
        );
    }

    #[test]
    fn resume_rules() {
        let p = vec![confirm("t1"), confirm("t2")];
        let (a, b) = (p[0].interrupt.id.clone(), p[1].interrupt.id.clone());
        let ok = json!({"approved": true});
        // unknown id
        let e = answers(
            &p,
            &Asking::default(),
            &[entry("nope", ResumeStatus::Resolved, Some(ok.clone()))],
        )
        .unwrap_err();
        assert_eq!(e.code, "UNKNOWN_INTERRUPT");
        // one left open
        let e = answers(
            &p,
            &Asking::default(),
            &[entry(&a, ResumeStatus::Resolved, Some(ok.clone()))],
        )
        .unwrap_err();
        assert_eq!(e.code, "INTERRUPTS_UNANSWERED");
        // twice
        let e = answers(
            &p,
            &Asking::default(),
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
            &Asking::default(),
            &[
                entry(&a, ResumeStatus::Resolved, Some(json!({"approved": "yes"}))),
                entry(&b, ResumeStatus::Cancelled, None),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code, "INVALID_RESUME_PAYLOAD");
        let e = answers(
            &p,
            &Asking::default(),
            &[
                entry(&a, ResumeStatus::Resolved, None),
                entry(&b, ResumeStatus::Cancelled, None),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code, "INVALID_RESUME_PAYLOAD");
        // Issue #37: a typo, an empty object, a plain answer: refused, never a silent "no".
        for typo in [
            json!({"approve": true}),
            json!({}),
            json!("yes please"),
            json!(true),
            json!({"approved": true, "trust": true}),
        ] {
            let e = answers(
                &p,
                &Asking::default(),
                &[
                    entry(&a, ResumeStatus::Resolved, Some(typo.clone())),
                    entry(&b, ResumeStatus::Cancelled, None),
                ],
            )
            .unwrap_err();
            assert_eq!(e.code, "INVALID_RESUME_PAYLOAD", "{typo}");
            assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY, "{typo}");
        }
        // good, in pending order
        let r = answers(
            &p,
            &Asking::default(),
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

    /// A Confirm as the agent pauses on it: bound to the call's fingerprint, with the pause's
    /// nonce.
    fn asked(tool_use_id: &str, fingerprint: &str, nonce: &str) -> PendingInterrupt {
        let mut p = confirm(tool_use_id);
        p.interrupt.fingerprint = Some(fingerprint.into());
        p.interrupt.nonce = Some(nonce.into());
        p
    }

    #[test]
    fn an_approval_carries_the_actions_fingerprint_and_must_echo_it() {
        let p = asked("t1", "fp-1", "n1");
        let (w, i) = (to_wire(&p), p.interrupt.clone());
        assert_eq!(w.id, i.resume_id());
        assert_eq!(w.metadata["governance"]["actionFingerprint"], "fp-1");
        assert_eq!(
            w.response_schema["required"],
            json!(["approved", "approvedActionFingerprint"])
        );
        let p = vec![p];
        let id = i.resume_id();
        let with = |fingerprint: Option<&str>| {
            let mut payload = json!({"approved": true});
            if let Some(f) = fingerprint {
                payload["approvedActionFingerprint"] = json!(f);
            }
            answers(
                &p,
                &Asking::default(),
                &[entry(&id, ResumeStatus::Resolved, Some(payload))],
            )
        };
        // None named: the schema wants it.
        assert_eq!(with(None).unwrap_err().code, "INVALID_RESUME_PAYLOAD");
        // Another action's.
        let e = with(Some("fp-0")).unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::CONFLICT, "FINGERPRINT_MISMATCH")
        );
        // The one shown: the answer is the approval alone, bound to that fingerprint.
        let r = with(Some("fp-1")).unwrap();
        assert_eq!(r[0].interrupt_id, id);
        assert_eq!(r[0].response, json!({"approved": true}));
        assert_eq!(r[0].fingerprint.as_deref(), Some("fp-1"));
        // A cancel approves nothing: bound to the pending action without being named.
        let r = answers(
            &p,
            &Asking::default(),
            &[entry(&id, ResumeStatus::Cancelled, None)],
        )
        .unwrap();
        assert_eq!(r[0].response, json!({"approved": false}));
        assert_eq!(r[0].fingerprint.as_deref(), Some("fp-1"));
    }

    /// An interrupt that declares the schema of its answer (an MCP server's form) goes out
    /// with it as its `responseSchema`, and an answer it refuses is refused before anything
    /// runs, naming the field of the alternative the answer chose.
    #[test]
    fn a_declared_response_schema_goes_out_and_is_enforced() {
        let schema = json!({"oneOf": [
            {"type": "object", "properties": {"action": {"const": "accept"},
                "content": {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}},
                    "required": ["age"], "additionalProperties": false}},
             "required": ["action", "content"], "additionalProperties": false},
            {"type": "object", "properties": {"action": {"const": "decline"}},
             "required": ["action"], "additionalProperties": false}
        ]});
        let i = Interrupt::new(
            "v1:tool_call:t1:mcp_elicitation:0:f",
            "mcp_elicitation",
            json!({"message": "Age?"}),
        )
        .with_response_schema(schema.clone())
        .with_tool_use_id("t1");
        let p = PendingInterrupt::new(
            InterruptPoint::new(InterruptEvent::ToolCall, "t1", "mcp_elicitation"),
            i,
        );
        assert_eq!(to_wire(&p).response_schema, schema);
        let id = p.interrupt.resume_id();
        let with = |payload: Value| {
            answers(
                std::slice::from_ref(&p),
                &Asking::default(),
                &[entry(&id, ResumeStatus::Resolved, Some(payload))],
            )
        };
        let e = with(json!({"action": "accept", "content": {"age": -1}})).unwrap_err();
        assert_eq!(e.code, "INVALID_RESUME_PAYLOAD");
        assert!(e.message.contains("/content/age"), "{}", e.message);
        for bad in [
            json!({"action": "accept", "content": {"age": 1, "x": 1}}),
            json!(true),
            json!({"action": "accept"}),
        ] {
            assert_eq!(
                with(bad.clone()).unwrap_err().code,
                "INVALID_RESUME_PAYLOAD",
                "{bad}"
            );
        }
        let ok = json!({"action": "accept", "content": {"age": 36}});
        assert_eq!(with(ok.clone()).unwrap()[0].response, ok);
        assert_eq!(
            with(json!({"action": "decline"})).unwrap()[0].response,
            json!({"action": "decline"})
        );
        // A dismissal (`false`) where the schema does not take one is refused; the interrupt
        // waits for an answer it takes.
        let dismissed = answers(
            std::slice::from_ref(&p),
            &Asking::default(),
            &[entry(&id, ResumeStatus::Cancelled, None)],
        );
        assert_eq!(dismissed.unwrap_err().code, "INVALID_RESUME_PAYLOAD");
    }

    #[test]
    fn an_answer_to_an_earlier_pause_is_unknown_even_when_the_id_repeats() {
        let earlier = asked("t1", "fp-1", "n1");
        let now = asked("t1", "fp-2", "n2");
        assert_eq!(earlier.interrupt.id, now.interrupt.id);
        let replay = entry(
            &earlier.interrupt.resume_id(),
            ResumeStatus::Resolved,
            Some(json!({"approved": true, "approvedActionFingerprint": "fp-1"})),
        );
        let e = answers(&[now], &Asking::default(), &[replay]).unwrap_err();
        assert_eq!(e.code, "UNKNOWN_INTERRUPT");
    }

    /// human_approval's "always" (approve and trust the tool for the session) is offered on the
    /// wire only where the handler takes it, and passes through to it.
    #[test]
    fn trust_is_offered_where_the_handler_takes_it() {
        let mut p = asked("t1", "fp-1", "n1");
        let (id, trust) = (
            p.interrupt.resume_id(),
            json!({"approved": true, "trust": true, "approvedActionFingerprint": "fp-1"}),
        );
        let e = answers(
            std::slice::from_ref(&p),
            &Asking::default(),
            &[entry(&id, ResumeStatus::Resolved, Some(trust.clone()))],
        )
        .unwrap_err();
        assert_eq!(e.code, "INVALID_RESUME_PAYLOAD");
        p.interrupt.reason =
            json!({"prompt": "Allow delete_file?", "answers": ["yes", "no", "always"]});
        assert_eq!(
            to_wire(&p).response_schema["properties"]["trust"]["type"],
            "boolean"
        );
        let r = answers(
            &[p],
            &Asking::default(),
            &[entry(&id, ResumeStatus::Resolved, Some(trust))],
        )
        .unwrap();
        assert_eq!(r[0].response, json!({"approved": true, "trust": true}));
    }

    /// A tool schema's own definitions still resolve inside the approval's schema, so the
    /// edit is checked against the whole of it.
    #[test]
    fn the_edit_schema_keeps_the_tools_definitions() {
        let tool = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"refund": {"$ref": "#/$defs/money"}},
            "required": ["refund"],
            "additionalProperties": false,
            "$defs": {"money": {"type": "number", "minimum": 0}}
        });
        let schema = approval_schema(false, Some(&tool), false);
        let ok = json!({"approved": true, "edit": {"refund": 12.5}});
        assert_eq!(check(&schema, &ok), Ok(()));
        for bad in [
            json!({"approved": true, "edit": {"refund": -1}}),
            json!({"approved": true, "edit": {"refund": "12"}}),
            json!({"approved": true, "edit": {"refund": 1, "to": "me"}}),
        ] {
            assert!(check(&schema, &bad).is_err(), "{bad}");
        }
    }

    /// A tool schema with a root `$id` (references local or spelled with the id) is embedded
    /// as the edit schema and still checks the edit against its definitions.
    #[test]
    fn an_edit_schema_with_a_root_id_keeps_its_definitions() {
        let tool = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://example.com/schemas/refund",
            "type": "object",
            "properties": {
                "refund": {"$ref": "#/$defs/money"},
                "fee": {"$ref": "https://example.com/schemas/refund#/$defs/money"}
            },
            "required": ["refund"],
            "additionalProperties": false,
            "$defs": {"money": {"type": "number", "minimum": 0}}
        });
        let schema = approval_schema(false, Some(&tool), false);
        assert!(!schema.to_string().contains("example.com"), "{schema}");
        let ok = json!({"approved": true, "edit": {"refund": 12.5, "fee": 1}});
        assert_eq!(check(&schema, &ok), Ok(()));
        for bad in [
            json!({"approved": true, "edit": {"refund": -1}}),
            json!({"approved": true, "edit": {"refund": 1, "fee": "x"}}),
        ] {
            assert!(check(&schema, &bad).is_err(), "{bad}");
        }
    }
}
