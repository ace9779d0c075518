use super::*;
use serde_json::json;

fn tool_use_message(id: &str, name: &str) -> Message {
    Message::new(
        rein_core::Role::Assistant,
        vec![rein_core::ContentBlock::ToolUse(Box::new(
            rein_core::ToolUse::new(id, name, json!({"path": "draft.txt"})),
        ))],
    )
}

/// Release 0.1's pending interrupts of a parent paused inside its sub-agent `researcher`
/// (the `nested` fixture's shape): the child's run saved as JSON in `tool_states`, the
/// interrupts' points only in their ids.
fn nested_v1() -> Value {
    let child_message = tool_use_message("d1", "delete");
    json!({
        "schema_version": 1,
        "interrupts": [{
            "id": "v1:agent:r1:v1:before_tool_call:d1:225d3982-9eb3-5ce9-93ca-f09a444307f7",
            "name": "researcher/approval",
            "reason": "Delete the draft?",
            "fingerprint": "fp",
            "tool_use_id": "r1"
        }],
        "answers": {},
        "assistant_message_id": "c8560333-38fa-47c1-a470-2dc6ba09960e",
        "assistant_message": tool_use_message("r1", "researcher"),
        "completed_results": [],
        "invocation_state": {"user": "ann"},
        "model_call_index": 0,
        "tool_states": {
            "r1": {
                "agent_state": {"k": 1},
                "messages": [Message::user("clean up"), child_message],
                "pending": {
                    "schema_version": 1,
                    "answers": {},
                    "assistant_message": child_message,
                    "assistant_message_id": "ba29aaff-10ad-49a7-80af-a2cf2b3d988b",
                    "completed_results": [],
                    "interrupts": [{
                        "fingerprint": "fp",
                        "id": "v1:before_tool_call:d1:225d3982-9eb3-5ce9-93ca-f09a444307f7",
                        "name": "approval",
                        "reason": "Delete the draft?",
                        "tool_use_id": "d1"
                    }],
                    "invocation_state": {},
                    "model_call_index": 0
                }
            }
        }
    })
}

#[test]
fn a_nested_pause_of_release_0_1_loads_with_typed_points_and_a_child_checkpoint() {
    let run = PausedRun::from_json(nested_v1()).unwrap();
    let [asked] = run.pending() else {
        panic!("one interrupt: {:?}", run.pending());
    };
    assert_eq!(
        asked.point,
        InterruptPoint::new(InterruptEvent::BeforeToolCall, "d1", "approval").under("r1")
    );
    // The wire id is kept as it was: answers name it.
    assert!(asked.interrupt.id.starts_with("v1:agent:r1:"));
    let Pause::Tools(tools) = run.pause() else {
        panic!("a tool phase: {:?}", run.pause());
    };
    assert_eq!(
        tools.message_id.to_string(),
        "c8560333-38fa-47c1-a470-2dc6ba09960e"
    );
    let child = &tools.children["r1"];
    assert_eq!(child.agent_state.get("k"), Some(&json!(1)));
    let child_run = child.paused.as_ref().expect("the child is paused");
    let Pause::Tools(child_tools) = child_run.pause() else {
        panic!("the child paused in its tool phase");
    };
    // The child's messages had no ids: the one its pause is about gets the pause's.
    assert_eq!(child.messages.len(), 2);
    assert_eq!(child.messages[1].0, child_tools.message_id);
    assert_eq!(
        child_run.pending()[0].point,
        InterruptPoint::new(InterruptEvent::BeforeToolCall, "d1", "approval")
    );
}

#[test]
fn each_pause_of_release_0_1_loads_where_it_stopped() {
    let base = || {
        json!({
            "schema_version": 1,
            "interrupts": [],
            "assistant_message_id": "c8560333-38fa-47c1-a470-2dc6ba09960e",
            "assistant_message": Message::assistant("held"),
            "model_call_index": 3,
        })
    };
    let with = |key: &str, value: Value| {
        let mut v = base();
        v[key] = value;
        PausedRun::from_json(v).unwrap().at
    };
    assert_eq!(
        with("held_input", json!([Message::user("wire $5")])),
        Pause::Input {
            messages: vec![Message::user("wire $5")]
        }
    );
    assert!(matches!(
        with("held_request", json!(true)),
        Pause::Request {
            model_call_index: 3,
            ..
        }
    ));
    match with(
        "held_response",
        json!({"stop_reason": "end_turn", "hook_retries": 2}),
    ) {
        Pause::Response(r) => {
            assert_eq!(r.message, Message::assistant("held"));
            assert_eq!((r.hook_retries, r.model_call_index), (2, 3));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_checkpoint_goes_through_json_unchanged() {
    let mut run = PausedRun::from_json(nested_v1()).unwrap();
    run.interrupts[0].interrupt.nonce = Some("n1".into());
    let checkpoint = Checkpoint::new(
        vec![(MessageId::new(), Message::user("hi"))],
        Map::new(),
        json!({"window": 40}),
        Some(run),
    );
    let text = serde_json::to_value(&checkpoint).unwrap();
    assert_eq!(text["schema_version"], json!(CHECKPOINT_VERSION));
    assert_eq!(text["paused"]["pause"]["at"], json!("tools"));
    // The point sits beside the interrupt's wire fields.
    assert_eq!(
        text["paused"]["interrupts"][0]["point"]["event"],
        json!("before_tool_call")
    );
    assert_eq!(text["paused"]["interrupts"][0]["nonce"], json!("n1"));
    let back: Checkpoint = serde_json::from_value(text).unwrap();
    assert_eq!(back, checkpoint);
}

#[test]
fn a_checkpoint_of_a_newer_release_is_refused_typed() {
    let newer = json!({"schema_version": CHECKPOINT_VERSION + 1, "whatever": true});
    assert!(matches!(
        Checkpoint::from_json(newer.clone()),
        Err(Error::CheckpointTooNew { found, supported })
            if found == CHECKPOINT_VERSION + 1 && supported == CHECKPOINT_VERSION
    ));
    assert!(matches!(
        PausedRun::from_json(newer),
        Err(Error::CheckpointTooNew { .. })
    ));
    assert!(matches!(
        PausedRun::from_json(json!("no")),
        Err(Error::InvalidCheckpoint(_))
    ));
    assert!(matches!(
        PausedRun::from_json(json!({"schema_version": 2})),
        Err(Error::InvalidCheckpoint(_))
    ));
}

#[test]
fn rein_restate_state_of_release_0_1_loads_as_a_checkpoint() {
    let id = MessageId::new();
    let stored = json!({
        "messages": [[id, Message::user("hi")]],
        "agent_state": {"rein:agent": "refunds"},
        "conversation_manager_state": null,
        "pending": nested_v1(),
    });
    let c = Checkpoint::from_json(stored).unwrap();
    assert_eq!(c.messages, vec![(id, Message::user("hi"))]);
    assert_eq!(c.agent_state.get("rein:agent"), Some(&json!("refunds")));
    assert!(matches!(
        c.paused.as_ref().map(PausedRun::pause),
        Some(Pause::Tools(_))
    ));
}

/// An interrupt that declares the schema of its answer (an MCP server's form) refuses an
/// answer that does not match it before anything runs, whoever sends it (a process of its own,
/// Restate, AG-UI); a matching answer is taken.
#[test]
fn an_answer_must_match_the_declared_response_schema() {
    let schema = json!({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}},
        "required": ["age"], "additionalProperties": false});
    let mut asked = Interrupt::new("v1:tool_call:t1:form", "form", json!({"message": "Age?"}))
        .with_response_schema(schema);
    asked.nonce = Some("n1".into());
    let mut run = PausedRun::from_json(nested_v1()).unwrap();
    run.interrupts = vec![PendingInterrupt::new(
        InterruptPoint::new(InterruptEvent::ToolCall, "t1", "form"),
        asked.clone(),
    )];
    for bad in [
        json!({"age": -1}),
        json!({"age": 3, "x": 1}),
        json!("36"),
        json!(null),
    ] {
        let e = run.answered_by(&asked.answer(bad.clone())).unwrap_err();
        assert!(matches!(e, Error::InvalidAnswer { .. }), "{bad}: {e}");
    }
    assert!(run.answered_by(&asked.answer(json!({"age": 36}))).is_ok());
    // A schema that is no schema takes no answer.
    run.interrupts[0].interrupt.response_schema = Some(json!({"type": 7}));
    let e = run
        .answered_by(&asked.answer(json!({"age": 36})))
        .unwrap_err();
    assert!(e.to_string().contains("not a valid JSON schema"), "{e}");
    // An error says where in the answer it is, whether the schema is checked by hand first or
    // not (`not` is outside the hand-checked subset).
    for schema in [
        json!({"type": "object", "properties": {"age": {"type": "integer"}}}),
        json!({"type": "object", "properties": {"age": {"type": "integer"}}, "not": {"required": ["x"]}}),
    ] {
        run.interrupts[0].interrupt.response_schema = Some(schema.clone());
        let e = run
            .answered_by(&asked.answer(json!({"age": "old"})))
            .unwrap_err();
        assert!(e.to_string().contains("/age"), "{schema}: {e}");
        assert!(
            run.answered_by(&asked.answer(json!({"age": 7}))).is_ok(),
            "{schema}"
        );
    }
}
