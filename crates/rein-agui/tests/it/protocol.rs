//! Bad input gets protocol errors and changes nothing; a resume works on another server over
//! the same store; auth and CORS. Raw HTTP, no Node needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::http;
use rein_agui::Cors;
use rein_sessions::MemorySessionStore;
use serde_json::{Value, json};

fn run_input(thread: &str, messages: Value, resume: Option<Value>) -> String {
    let mut v = json!({"threadId": thread, "runId": "r1", "messages": messages});
    if let Some(r) = resume {
        v["resume"] = r;
    }
    v.to_string()
}

/// An approval of the interrupt `i` (with `fields` added): it names the fingerprint of the
/// action, as the interrupt carries it (ag-ui-protocol/ag-ui#2278).
fn approval(i: &Value, fields: Value) -> Value {
    let mut payload = json!({"approved": true});
    if let Some(f) = i["metadata"]["governance"].get("actionFingerprint") {
        payload["approvedActionFingerprint"] = f.clone();
    }
    for (k, v) in fields.as_object().into_iter().flatten() {
        payload[k] = v.clone();
    }
    payload
}

fn user(text: &str) -> Value {
    json!([{"id": "m1", "role": "user", "content": text}])
}

/// The JSON events of an SSE body (the body may be chunk-encoded: lines that are not
/// `data:` frames are skipped).
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

async fn thread_info(addr: std::net::SocketAddr, thread: &str) -> Value {
    let (status, body) = http(addr, "GET", &format!("/threads/{thread}"), "").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test]
async fn malformed_requests_are_400_with_a_code() {
    let server = common::start(MemorySessionStore::new()).await;
    let addr = server.local_addr();
    let resume = Some(json!([{"interruptId": "v1:x", "status": "cancelled"}]));
    let (status, resp) = http(
        addr,
        "POST",
        "/agent",
        &run_input("plain-x", json!([]), resume),
    )
    .await;
    assert_eq!(status, 404, "{resp}");
    assert_eq!(
        serde_json::from_str::<Value>(&resp).unwrap()["code"],
        "UNKNOWN_THREAD"
    );
    for (body, code) in [
        ("not json".to_owned(), "INVALID_RUN_INPUT"),
        (json!({"threadId": "t"}).to_string(), "INVALID_RUN_INPUT"),
        (run_input("bad id!", user("hi"), None), "INVALID_THREAD_ID"),
        (run_input("plain-x", json!([]), None), "NO_USER_MESSAGE"),
        (
            run_input(
                "plain-x",
                json!([{"id": "a", "role": "assistant", "content": "x"}]),
                None,
            ),
            "NO_USER_MESSAGE",
        ),
    ] {
        let (status, resp) = http(addr, "POST", "/agent", &body).await;
        assert_eq!(status, 400, "{body} -> {resp}");
        let v: Value = serde_json::from_str(&resp).unwrap();
        assert_eq!(v["code"], code, "{resp}");
        assert!(v["message"].as_str().unwrap().len() > 10);
    }
    // Nothing was stored for the thread (and looking does not store anything either).
    for _ in 0..2 {
        let (status, resp) = http(addr, "GET", "/threads/plain-x", "").await;
        assert_eq!(status, 404, "{resp}");
        assert_eq!(
            serde_json::from_str::<Value>(&resp).unwrap()["code"],
            "UNKNOWN_THREAD"
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn pending_interrupts_block_and_bad_answers_change_nothing_and_another_server_resumes() {
    let store = MemorySessionStore::new();
    let models = common::Models::default();
    let a = common::start_with(store.clone(), models.clone()).await;
    let (status, body) = http(
        a.local_addr(),
        "POST",
        "/agent",
        &run_input("approve-1", user("delete a.txt"), None),
    )
    .await;
    assert_eq!(status, 200);
    let evs = events(&body);
    let last = evs.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED");
    assert_eq!(last["outcome"]["type"], "interrupt");
    let asked = last["outcome"]["interrupts"][0].clone();
    let id = asked["id"].as_str().unwrap().to_owned();
    let before = thread_info(a.local_addr(), "approve-1").await;
    assert_eq!(before["pendingInterrupts"][0]["id"], id.as_str());

    // A second run on the thread: refused, the interrupts in the details.
    let (status, resp) = http(
        a.local_addr(),
        "POST",
        "/agent",
        &run_input("approve-1", user("other"), None),
    )
    .await;
    assert_eq!(status, 409, "{resp}");
    let v: Value = serde_json::from_str(&resp).unwrap();
    assert_eq!(v["code"], "INTERRUPTS_PENDING");
    assert_eq!(v["details"]["interrupts"][0]["id"], id.as_str());
    // Answers that break the rules.
    for (resume, status_code, code) in [
        (
            json!([{"interruptId": "v1:nope", "status": "cancelled"}]),
            404,
            "UNKNOWN_INTERRUPT",
        ),
        (json!([]), 422, "INTERRUPTS_UNANSWERED"),
        (
            json!([{"interruptId": id, "status": "resolved", "payload": "yes"}]),
            422,
            "INVALID_RESUME_PAYLOAD",
        ),
        (
            json!([{"interruptId": id, "status": "resolved", "payload": approval(&asked, json!({"extra": 1}))}]),
            422,
            "INVALID_RESUME_PAYLOAD",
        ),
        // An approval that names no action, or another one than the pending call.
        (
            json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]),
            422,
            "INVALID_RESUME_PAYLOAD",
        ),
        (
            json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true, "approvedActionFingerprint": "9f0c0ae1-0000-5000-8000-000000000000"}}]),
            409,
            "FINGERPRINT_MISMATCH",
        ),
        (
            json!([{"interruptId": id, "status": "cancelled"}, {"interruptId": id, "status": "cancelled"}]),
            422,
            "DUPLICATE_RESUME_ENTRY",
        ),
        (
            json!([{"interruptId": id, "status": "maybe"}]),
            400,
            "INVALID_RUN_INPUT",
        ),
    ] {
        let (status, resp) = http(
            a.local_addr(),
            "POST",
            "/agent",
            &run_input("approve-1", json!([]), Some(resume.clone())),
        )
        .await;
        assert_eq!(status, status_code, "{resume} -> {resp}");
        assert_eq!(
            serde_json::from_str::<Value>(&resp).unwrap()["code"],
            code,
            "{resp}"
        );
    }
    // An edit that fails the tool's schema (ill-typed, a field the tool does not take, a field
    // left out): refused before anything runs, saying where; the interrupt stays pending.
    for (edit, at) in [
        (json!({"path": 7}), "/edit/path"),
        (json!({"path": "b.txt", "force": true}), "/edit"),
        (json!({}), "/edit"),
    ] {
        let (status, resp) = http(
            a.local_addr(),
            "POST",
            "/agent",
            &run_input("approve-1", json!([]), Some(json!([{"interruptId": id, "status": "resolved", "payload": approval(&asked, json!({"edit": edit}))}]))),
        )
        .await;
        assert_eq!(status, 422, "{edit} -> {resp}");
        let v: Value = serde_json::from_str(&resp).unwrap();
        assert_eq!(v["code"], "INVALID_RESUME_PAYLOAD", "{resp}");
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains(&format!("(at `{at}`)")),
            "{resp}"
        );
    }
    let after = thread_info(a.local_addr(), "approve-1").await;
    assert_eq!(after["pendingInterrupts"], before["pendingInterrupts"]);
    assert_eq!(after["messageCount"], before["messageCount"]);

    // Server A goes away; server B, over the same store, takes the approval.
    a.shutdown().await.unwrap();
    let b = common::start_with(store, models).await;
    // After the restart the thread shows its conversation and the pending call in full, with
    // the tool's input schema as the edit's (a client builds its edit form from it).
    let reopened = thread_info(b.local_addr(), "approve-1").await;
    let pending = &reopened["pendingInterrupts"][0];
    assert_eq!(
        pending["metadata"]["rein"]["toolCall"],
        json!({"id": "d1", "name": "delete_file", "input": {"path": "a.txt"}})
    );
    let edit = &pending["responseSchema"]["properties"]["edit"];
    assert_eq!(edit["properties"]["path"]["type"], "string", "{pending}");
    assert_eq!(edit["additionalProperties"], false, "{pending}");
    let roles: Vec<&str> = reopened["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant"], "{reopened}");
    assert_eq!(reopened["messages"][0]["content"], "delete a.txt");
    assert_eq!(
        reopened["messages"][1]["toolCalls"][0]["function"]["name"],
        "delete_file"
    );
    let (status, body) = http(
        b.local_addr(),
        "POST",
        "/agent",
        &run_input("approve-1", json!([]), Some(json!([{"interruptId": id, "status": "resolved", "payload": approval(&asked, json!({})), "metadata": {"answeredBy": "ops@example.com"}}]))),
    )
    .await;
    assert_eq!(status, 200);
    let evs = events(&body);
    let decision = evs.iter().find(|e| e["name"] == "rein.decision").unwrap();
    assert_eq!(decision["value"]["confirmation"]["status"], "approved");
    // Who answered is who authenticated (the test token's holder); the name the client gave is
    // kept beside it.
    assert_eq!(decision["value"]["answeredBy"], "token holder");
    assert_eq!(decision["value"]["claimedAnsweredBy"], "ops@example.com");
    let result = evs
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    assert_eq!(result["content"], "deleted a.txt");
    assert_eq!(evs.last().unwrap()["outcome"]["type"], "success", "{body}");
    assert!(
        thread_info(b.local_addr(), "approve-1").await["pendingInterrupts"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    b.shutdown().await.unwrap();
}

/// `AguiServer::for_agent`: one built agent, each thread a conversation of it with its own
/// session; a confirm on one thread neither blocks nor leaks into another, and a second server
/// over the same store resumes it.
#[tokio::test]
async fn a_server_for_one_agent_keeps_each_thread_its_own_conversation() {
    use rein_agent::Agent;
    use rein_interventions::{BeforeToolCallAction, Intervention};
    use rein_models::{ScriptedModel, SharedModel};
    let model = SharedModel::new(
        ScriptedModel::builder()
            .tool_use("d1", "delete_file", json!({"path": "a.txt"}))
            .text("Hello, B.")
            .text("Deleted after your approval.")
            .build(),
    );
    let agent = |model: &SharedModel| {
        Agent::builder()
            .shared_model(model.clone())
            .tool(rein_core::ToolHandle::from_sync_fn(
                "delete_file",
                "Deletes a file.",
                json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                |_, _| Ok("deleted".into()),
            ))
            .intervention(
                Intervention::named("delete-guard").before_tool_call(|ev, _| {
                    if ev.tool_use().name == "delete_file" {
                        BeforeToolCallAction::confirm("Delete it?")
                    } else {
                        BeforeToolCallAction::Proceed
                    }
                }),
            )
            .build()
            .unwrap()
    };
    let store = MemorySessionStore::new();
    let a = rein_agui::AguiServer::for_agent(store.clone(), agent(&model))
        .token(common::TOKEN)
        .bind_local(0)
        .await
        .unwrap()
        .spawn();
    let post = |body: String| {
        let addr = a.local_addr();
        async move { http(addr, "POST", "/agent", &body).await }
    };
    let (status, body) = post(run_input("a", user("delete a.txt"), None)).await;
    assert_eq!(status, 200, "{body}");
    let last = events(&body).last().cloned().unwrap();
    assert_eq!(last["outcome"]["type"], "interrupt", "{body}");
    let asked = last["outcome"]["interrupts"][0].clone();
    // Another thread runs meanwhile, on its own conversation.
    let (status, body) = post(run_input("b", user("hi"), None)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Hello, B."), "{body}");
    let b = thread_info(a.local_addr(), "b").await;
    assert_eq!(b["messageCount"], 2, "{b}");
    assert!(b["pendingInterrupts"].as_array().unwrap().is_empty(), "{b}");
    // A second server over the same store (another process) takes the approval.
    let second = rein_agui::AguiServer::for_agent(store.clone(), agent(&model))
        .token(common::TOKEN)
        .bind_local(0)
        .await
        .unwrap()
        .spawn();
    let resume = json!([{"interruptId": asked["id"], "status": "resolved", "payload": approval(&asked, json!({}))}]);
    let (status, body) = http(
        second.local_addr(),
        "POST",
        "/agent",
        &run_input("a", json!([]), Some(resume)),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Deleted after your approval."), "{body}");
    let a_info = thread_info(second.local_addr(), "a").await;
    assert_eq!(a_info["messageCount"], 4, "{a_info}");
}

#[tokio::test]
async fn bearer_auth_and_cors() {
    let server = common::server(MemorySessionStore::new())
        .bearer_auth(|token| (token == "s3cret").then(|| rein_agui::Principal::new("alice")))
        .cors(Cors::Origins(vec!["http://app.example".into()]))
        .bind("127.0.0.1:0")
        .await
        .unwrap()
        .spawn();
    let addr = server.local_addr();
    let (status, resp) = http(
        addr,
        "POST",
        "/agent",
        &run_input("plain-1", user("hi"), None),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        serde_json::from_str::<Value>(&resp).unwrap()["code"],
        "UNAUTHORIZED"
    );
    assert!(!resp.contains("s3cret"));
    // The console stays public.
    let (status, page) = http(addr, "GET", "/", "").await;
    assert_eq!(status, 200);
    assert!(page.contains("Rein approval console"));

    // With the token; and a CORS preflight from the allowed origin.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let raw = |req: String| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    let body = run_input("plain-1", user("hi"), None);
    let resp = raw(format!(
        "POST /agent HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer s3cret\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("RUN_FINISHED"));
    let pre = raw(format!("OPTIONS /agent HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://app.example\r\nAccess-Control-Request-Method: POST\r\nConnection: close\r\n\r\n")).await;
    assert!(
        pre.to_lowercase()
            .contains("access-control-allow-origin: http://app.example"),
        "{pre}"
    );
    server.shutdown().await.unwrap();

    // CORS is off by default.
    let plain = common::start(MemorySessionStore::new()).await;
    let addr = plain.local_addr();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("OPTIONS /agent HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://app.example\r\nAccess-Control-Request-Method: POST\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(
        !out.to_lowercase().contains("access-control-allow-origin"),
        "{out}"
    );
    plain.shutdown().await.unwrap();
}

#[tokio::test]
async fn refuse_mode_answers_409_while_a_run_goes() {
    let server = common::server(MemorySessionStore::new())
        .while_running(rein_agui::WhileRunning::Refuse)
        .bind("127.0.0.1:0")
        .await
        .unwrap()
        .spawn();
    let addr = server.local_addr();
    let slow = tokio::spawn(async move {
        http(
            addr,
            "POST",
            "/agent",
            &run_input("gate-refuse", user("go"), None),
        )
        .await
    });
    common::wait_running(addr, "gate-refuse").await;
    let (status, resp) = http(
        addr,
        "POST",
        "/agent",
        &run_input("gate-refuse", user("more"), None),
    )
    .await;
    assert_eq!(status, 409, "{resp}");
    assert_eq!(
        serde_json::from_str::<Value>(&resp).unwrap()["code"],
        "RUN_IN_PROGRESS"
    );
    common::open_gate("gate-refuse");
    let (status, body) = slow.await.unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("Through the gate."));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_confirm_after_the_tool_is_an_interrupt_too_and_takes_a_text_edit() {
    let server = common::start(MemorySessionStore::new()).await;
    let addr = server.local_addr();
    let (status, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("output-1", user("time?"), None),
    )
    .await;
    assert_eq!(status, 200);
    let evs = events(&body);
    // The result is held for approval: the model (and the browser) have not seen it.
    assert!(
        !evs.iter().any(|e| e["type"] == "TOOL_CALL_RESULT"),
        "{body}"
    );
    let last = evs.last().unwrap();
    assert_eq!(last["outcome"]["type"], "interrupt");
    let i = &last["outcome"]["interrupts"][0];
    assert_eq!(i["reason"], "confirm");
    assert_eq!(i["message"], "Show the time to the model?");
    assert_eq!(i["metadata"]["rein"]["point"], "after_tool_call");
    assert_eq!(i["responseSchema"]["required"][0], "approved");
    let resume = json!([{"interruptId": i["id"], "status": "resolved", "payload": approval(i, json!({"edit": "about noon"}))}]);
    let (status, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("output-1", json!([]), Some(resume)),
    )
    .await;
    assert_eq!(status, 200);
    let evs = events(&body);
    let result = evs
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    assert_eq!(result["content"], "about noon", "{body}");
    assert_eq!(evs.last().unwrap()["outcome"]["type"], "success");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_message_parked_on_a_confirm_is_answered_by_a_resume_while_the_run_goes() {
    let server = common::start(MemorySessionStore::new()).await;
    let addr = server.local_addr();
    let main = tokio::spawn(async move {
        http(
            addr,
            "POST",
            "/agent",
            &run_input("parked-1", user("go"), None),
        )
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (status, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("parked-1", user("also X"), None),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains("rein.injection_queued"), "{body}");
    // At the turn boundary after the first slow tool the message is parked on the confirm.
    let mut parked = Value::Null;
    for _ in 0..100 {
        let t = thread_info(addr, "parked-1").await;
        if !t["parkedInjections"].as_array().is_none_or(Vec::is_empty) {
            parked = t["parkedInjections"][0].clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(parked["text"], "also X", "never parked");
    let asked = parked["interrupts"][0].clone();
    let id = asked["id"].as_str().unwrap().to_owned();
    assert_eq!(
        parked["interrupts"][0]["metadata"]["rein"]["point"],
        "before_invocation"
    );
    // A bad payload is refused; an unknown id while the run goes is 409.
    let bad = json!([{"interruptId": id, "status": "resolved", "payload": {"approved": 1}}]);
    let (status, _) = http(
        addr,
        "POST",
        "/agent",
        &run_input("parked-1", json!([]), Some(bad)),
    )
    .await;
    assert_eq!(status, 422);
    let unknown = json!([{"interruptId": "v1:zzz", "status": "cancelled"}]);
    let (status, _) = http(
        addr,
        "POST",
        "/agent",
        &run_input("parked-1", json!([]), Some(unknown)),
    )
    .await;
    assert_eq!(status, 409);
    let ok =
        json!([{"interruptId": id, "status": "resolved", "payload": approval(&asked, json!({}))}]);
    let (status, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("parked-1", json!([]), Some(ok)),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains("rein.injection_answered"), "{body}");
    let (_, body) = main.await.unwrap();
    let evs = events(&body);
    let names: Vec<&str> = evs.iter().filter_map(|e| e["name"].as_str()).collect();
    assert!(
        names.contains(&"rein.injection_awaiting_approval"),
        "{names:?}"
    );
    let consumed = evs
        .iter()
        .find(|e| e["name"] == "rein.injection_consumed")
        .unwrap();
    assert_eq!(consumed["value"]["text"], "also X");
    assert_eq!(evs.last().unwrap()["outcome"]["type"], "success");
    server.shutdown().await.unwrap();
}

/// A resume sent again after the run paused anew on the same tool-use id (a retried or
/// replayed request) approves nothing new: it is the answer to another pause. An approval
/// naming the new pause's id with the earlier call's fingerprint is refused, and the call
/// stays pending; answered as shown, it runs.
#[tokio::test]
async fn a_replayed_resume_approves_nothing_after_a_new_pause_on_the_same_tool_use_id() {
    let server = common::start(MemorySessionStore::new()).await;
    let addr = server.local_addr();
    let post = |resume: Value| {
        let body = run_input("replay-1", json!([]), Some(resume));
        async move { http(addr, "POST", "/agent", &body).await }
    };
    let (status, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("replay-1", user("clean up"), None),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let first = events(&body).pop().unwrap()["outcome"]["interrupts"][0].clone();
    assert_eq!(first["toolCallId"], "d1");
    let approve_first = json!([{"interruptId": first["id"], "status": "resolved", "payload": approval(&first, json!({}))}]);
    let (status, body) = post(approve_first.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("deleted a.txt"), "{body}");
    let second = events(&body).pop().unwrap()["outcome"]["interrupts"][0].clone();
    assert_eq!(
        second["toolCallId"], "d1",
        "the model repeats its tool-use id"
    );
    assert_eq!(second["message"], "Delete b.txt?");

    // The first resume again: nothing runs, b.txt stays asked about.
    let (status, body) = post(approve_first).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !body.contains("deleted b.txt"),
        "the replay approved b.txt: {body}"
    );
    assert!(body.contains("alreadyApplied"), "{body}");
    let t = thread_info(addr, "replay-1").await;
    assert_eq!(t["pendingInterrupts"][0]["message"], "Delete b.txt?", "{t}");

    // The new pause's id with the fingerprint of a.txt's call: refused, still pending.
    let mut forged = approval(&second, json!({}));
    forged["approvedActionFingerprint"] =
        first["metadata"]["governance"]["actionFingerprint"].clone();
    let (status, resp) =
        post(json!([{"interruptId": second["id"], "status": "resolved", "payload": forged}])).await;
    assert_eq!(status, 409, "{resp}");
    assert_eq!(
        serde_json::from_str::<Value>(&resp).unwrap()["code"],
        "FINGERPRINT_MISMATCH"
    );
    let t = thread_info(addr, "replay-1").await;
    assert_eq!(t["pendingInterrupts"][0]["message"], "Delete b.txt?", "{t}");

    // Answered as shown, it runs.
    let (status, body) = post(json!([{"interruptId": second["id"], "status": "resolved", "payload": approval(&second, json!({}))}])).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("deleted b.txt"), "{body}");
    server.shutdown().await.unwrap();
}

/// Two confirms answered in one resume, each entry claiming another name: each tool call's
/// decision names who answered its own interrupt (matched by where the interrupt was asked,
/// never by taking its id apart).
#[tokio::test]
async fn each_decision_names_who_answered_its_own_interrupt() {
    let server = common::start(MemorySessionStore::new()).await;
    let addr = server.local_addr();
    let (status, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("pair-1", user("delete both"), None),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let last = events(&body).pop().unwrap();
    let asked = last["outcome"]["interrupts"].as_array().unwrap().clone();
    assert_eq!(asked.len(), 2, "{last}");
    let resume: Vec<Value> = asked
        .iter()
        .map(|i| {
            let who = format!("owner-of-{}@example.com", i["toolCallId"].as_str().unwrap());
            json!({"interruptId": i["id"], "status": "resolved", "payload": approval(i, json!({})),
                   "metadata": {"answeredBy": who}})
        })
        .collect();
    let (status, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("pair-1", json!([]), Some(Value::Array(resume))),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let decisions: Vec<Value> = events(&body)
        .into_iter()
        .filter(|e| e["name"] == "rein.decision")
        .map(|e| e["value"].clone())
        .collect();
    for call in ["d1", "d2"] {
        let d = decisions
            .iter()
            .find(|d| d["tool_use_id"] == call)
            .unwrap_or_else(|| panic!("no decision for {call}: {decisions:?}"));
        assert_eq!(d["confirmation"]["status"], "approved", "{d}");
        assert_eq!(
            d["claimedAnsweredBy"],
            format!("owner-of-{call}@example.com"),
            "{d}"
        );
    }
    server.shutdown().await.unwrap();
}

/// SPEC §13: a typed agent's answer reaches the client — its partials as
/// `CUSTOM rein.output_partial` with their attempt, the checked value in `RUN_FINISHED`'s
/// `result.output`; a refused first answer's partials are attempt 1, the accepted one's 2.
#[tokio::test]
async fn a_typed_answer_reaches_the_client_in_run_finished() {
    use rein_agent::Agent;
    use rein_models::ScriptedModel;
    let schema = json!({"type": "object", "properties": {"total_cents": {"type": "integer"}},
        "required": ["total_cents"], "additionalProperties": false});
    let agent = Agent::builder()
        .model(
            ScriptedModel::builder()
                .text(r#"{"total_cents": "twelve"}"#)
                .text(r#"{"total_cents": 1200}"#)
                .chunk_chars(6)
                .build(),
        )
        .output_schema("invoice", schema)
        .build()
        .unwrap();
    let server = rein_agui::AguiServer::for_agent(MemorySessionStore::new(), agent)
        .token(common::TOKEN)
        .bind_local(0)
        .await
        .unwrap()
        .spawn();
    let (status, body) = http(
        server.local_addr(),
        "POST",
        "/agent",
        &run_input("t", user("Total?"), None),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let events = events(&body);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{body}");
    assert_eq!(
        last["result"]["output"],
        json!({"total_cents": 1200}),
        "{body}"
    );
    let partials: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "rein.output_partial")
        .map(|e| &e["value"])
        .collect();
    assert!(
        partials.contains(&&json!({"attempt": 1, "value": {"total_cents": "twelve"}})),
        "{partials:?}"
    );
    assert_eq!(
        partials.last().unwrap(),
        &&json!({"attempt": 2, "value": {"total_cents": 1200}})
    );
}

/// A running tool's progress reaches the client as `CUSTOM rein.tool_progress` of its tool
/// call, before its result; a tool reporting without end sends at most 256 (the channel to the
/// client is not bounded), each message at most 1024 characters.
#[tokio::test]
async fn tool_progress_reaches_the_client_bounded() {
    use rein_agent::Agent;
    use rein_core::{
        ToolHandle,
        tool::{ToolOutput, ToolProgress},
    };
    use rein_models::ScriptedModel;
    let chatty = ToolHandle::from_fn("chatty", "Reports a lot.", json!({}), |_, cx| async move {
        for i in 1..=2_000 {
            cx.report_progress(
                ToolProgress::new(f64::from(i))
                    .with_total(2_000.0)
                    .with_message("x".repeat(5_000)),
            );
            // Each report is read before the next: none is coalesced away in the agent.
            tokio::task::yield_now().await;
        }
        Ok(ToolOutput::text("done"))
    });
    let agent = Agent::builder()
        .model(
            ScriptedModel::builder()
                .tool_use("p1", "chatty", json!({}))
                .text("ok")
                .build(),
        )
        .tool(chatty)
        .build()
        .unwrap();
    let server = rein_agui::AguiServer::for_agent(MemorySessionStore::new(), agent)
        .token(common::TOKEN)
        .bind_local(0)
        .await
        .unwrap()
        .spawn();
    let (status, body) = http(
        server.local_addr(),
        "POST",
        "/agent",
        &run_input("t", user("Go"), None),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let events = events(&body);
    let result = events
        .iter()
        .position(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    let progress: Vec<(usize, &Value)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "CUSTOM" && e["name"] == "rein.tool_progress")
        .map(|(i, e)| (i, &e["value"]))
        .collect();
    assert!(
        (2..=256).contains(&progress.len()),
        "{} progress events",
        progress.len()
    );
    for (i, v) in &progress {
        assert!(*i < result);
        assert_eq!(v["toolCallId"], "p1");
        assert_eq!(v["name"], "chatty");
        assert_eq!(v["total"], 2_000.0);
        assert_eq!(v["message"].as_str().unwrap().len(), 1024);
    }
    let values: Vec<f64> = progress
        .iter()
        .map(|(_, v)| v["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    server.shutdown().await.unwrap();
}
