//! The approval console in a real browser (headless Debian chromium, driven by playwright-core
//! from Node: `tests/js/console_browser.cjs`), at 1280 px and at a phone's 390 px: approve,
//! approve after a restart and a reload with auth on (sign in first), edit through the form
//! (a refused edit leaves the card working), reject with a reason, four-eyes, the phone layout,
//! a page opened during a run that shows its end.
//! Screenshots are kept under `target/tmp/rein-agui-console/`; with
//! `REIN_AGUI_UPDATE_SCREENSHOT=1` those the docs show are copied to docs/images
//! (`bash docs/images/agui-console.sh`). SKIPPED without `REIN_AGUI_NODE_MODULES` and
//! `REIN_AGUI_CHROMIUM` (`.ci/peers-agui.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use rein_sessions::MemorySessionStore;
use serde_json::{Value, json};

/// The browser peer, or `None` (the test is skipped).
fn browser() -> Option<(String, String)> {
    match (
        std::env::var("REIN_AGUI_NODE_MODULES"),
        std::env::var("REIN_AGUI_CHROMIUM"),
    ) {
        (Ok(m), Ok(c)) => Some((m, c)),
        _ => {
            println!(
                "SKIPPED: REIN_AGUI_NODE_MODULES / REIN_AGUI_CHROMIUM not set (bash .ci/peers-agui.sh DIR)"
            );
            None
        }
    }
}

fn shots() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("rein-agui-console")
}

/// Runs `scenario` of the driver at `width` px on `thread`: what the page showed.
async fn drive(url: &str, scenario: &str, width: u32, thread: &str) -> Value {
    let (modules, chromium) = browser().expect("checked by the caller");
    let shots = shots().to_string_lossy().into_owned();
    let width = width.to_string();
    let stdout = common::node(
        "console_browser.cjs",
        &[&modules, &chromium, url, &shots, scenario, &width, thread],
    )
    .await;
    let page: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(page["pageErrors"], json!([]), "{page}");
    page
}

fn text<'a>(page: &'a Value, k: &str) -> &'a str {
    page[k].as_str().unwrap_or_default()
}

/// With `REIN_AGUI_UPDATE_SCREENSHOT=1`, the screenshot `name` becomes docs/images/`doc`.
fn keep(name: &str, doc: &str) {
    let shot = shots().join(name);
    assert!(shot.metadata().unwrap().len() > 10_000, "{name}");
    if std::env::var("REIN_AGUI_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        let docs = format!("{}/../../docs/images/{doc}", env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(shot, docs).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_in_the_console_in_a_real_browser() {
    if browser().is_none() {
        return;
    }
    let server = common::start(MemorySessionStore::new()).await;
    for width in [1280, 390] {
        let thread = format!("browser-approve-{width}");
        let page = drive(&server.url(), "approve", width, &thread).await;
        // The page took its token out of the address bar (it keeps it for its requests).
        assert!(!text(&page, "addressBar").contains("token"), "{page}");
        assert!(text(&page, "addressBar").contains(&format!("?thread={thread}")));
        // Plain words: what the tool is and its input; the handler's question beside it.
        assert_eq!(text(&page, "title"), "Delete file needs your approval");
        let card = text(&page, "card");
        for shown in ["Delete a.txt?", "Path", "a.txt"] {
            assert!(card.contains(shown), "{shown:?} not in {card}");
        }
        assert!(
            text(&page, "askedDecision").contains("Asked for approval"),
            "{page}"
        );
        let transcript = text(&page, "transcript");
        for shown in [
            "Please delete a.txt",
            "→ Delete file (path: a.txt)",
            "← deleted a.txt",
            "Done: I asked before deleting.",
        ] {
            assert!(transcript.contains(shown), "{shown:?} not in {transcript}");
        }
        // Who answered: the token's principal; the page claims no name.
        let decisions = text(&page, "decisions");
        assert!(
            decisions.contains("Approved Delete file by token holder"),
            "{decisions}"
        );
        assert!(!decisions.contains("before_tool_call"), "{decisions}");
        assert!(text(&page, "approvals").contains("Nothing waits for you."));
        assert_eq!(text(&page, "error"), "");
        // A reload shows the finished conversation, from the store.
        let reloaded = text(&page, "reloadedTranscript");
        for shown in [
            "Please delete a.txt",
            "→ Delete file (path: a.txt)",
            "← deleted a.txt",
            "Done: I asked before deleting.",
        ] {
            assert!(reloaded.contains(shown), "{shown:?} not in {reloaded}");
        }
        // ... and what was decided, from the stored approval records (issue 38, item 3): who was
        // asked and who approved, as the server authenticated them.
        let decided = text(&page, "reloadedDecisions");
        assert!(
            decided.contains("Asked for approval Delete file"),
            "{decided}"
        );
        assert!(
            decided.contains("Approved Delete file by token holder"),
            "{decided}"
        );
        // Another tab on the thread sees the open approval, and its new request is refused in
        // plain words (the code in the details).
        assert!(text(&page, "reloadedApprovals").contains("Delete a.txt?"));
        assert!(
            text(&page, "refusal").contains("waits for an approval first"),
            "{page}"
        );
        assert!(text(&page, "refusalDetails").contains("INTERRUPTS_PENDING"));
        // The inbox (GET approvals) lists the thread's open approval, with its question and who
        // asked.
        let inbox = text(&page, "inbox");
        assert!(inbox.contains("Delete a.txt?"), "{page}");
        assert!(inbox.contains("asked by token holder"), "{page}");
    }
    server.shutdown().await.unwrap();
    keep("console-approval-1280.png", "agui-console.png");
}

/// Issue 38, items 1 and 6: with auth on, after a restart and a reload the console asks for
/// the token before it shows anything (never "Nothing waits for you"), then shows the
/// conversation and the pending call in full; the edit form is filled with the call's input;
/// an edit the server refuses is explained in plain words and leaves the card working; an edit
/// through the form is approved and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_and_a_reload_sign_in_then_edit_through_the_form() {
    if browser().is_none() {
        return;
    }
    for width in [1280, 390] {
        let store = MemorySessionStore::new();
        let models = common::Models::default();
        let thread = format!("approve-reload-{width}");
        let before = common::start_with(store.clone(), models.clone()).await;
        let (status, body) = common::http(
            before.local_addr(),
            "POST",
            "/agent",
            &common::run_input(&thread, Some("Please delete a.txt"), None),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        before.shutdown().await.unwrap();
        let server = common::start_with(store, models).await;
        let url = format!("http://{}/", server.local_addr());
        let page = drive(&url, "reload-auth", width, &thread).await;
        server.shutdown().await.unwrap();

        let signed_out = text(&page, "signedOutApprovals");
        assert!(signed_out.contains("Sign in"), "{width}: {page}");
        assert!(!signed_out.contains("Nothing waits"), "{width}: {page}");
        let card = text(&page, "card");
        for shown in ["Delete file needs your approval", "Delete a.txt?", "a.txt"] {
            assert!(card.contains(shown), "{width}: {shown:?} not in {card}");
        }
        assert!(
            text(&page, "transcript").contains("Please delete a.txt"),
            "{width}: {page}"
        );
        assert_eq!(text(&page, "prefilled"), "a.txt", "{width}");
        let refusal = text(&page, "refusal");
        assert!(
            refusal.starts_with("The server refused this answer:")
                && refusal.contains("(field: path)"),
            "{width}: {refusal}"
        );
        assert!(
            !refusal.contains("v1:"),
            "an interrupt id in the banner: {refusal}"
        );
        assert!(text(&page, "refusalDetails").contains("INVALID_RESUME_PAYLOAD"));
        assert_eq!(
            page["buttonsAfterRefusal"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| **d == json!(true))
                .count(),
            0,
            "{width}: {page}"
        );
        assert!(
            text(&page, "transcriptAfter").contains("← deleted b.txt"),
            "{width}: {page}"
        );
        let decisions = text(&page, "decisions");
        assert!(decisions.contains("changed to: path: b.txt"), "{decisions}");
        assert!(text(&page, "approvals").contains("Nothing waits for you."));
    }
    keep("console-signin-1280.png", "agui-console-signin.png");
    keep("console-edit-1280.png", "agui-console-edit.png");
}

/// Issue 38, item 8: a rejection carries the reason typed with it, kept with the decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_with_a_reason() {
    if browser().is_none() {
        return;
    }
    let server = common::start(MemorySessionStore::new()).await;
    for width in [1280, 390] {
        let page = drive(&server.url(), "reject", width, &format!("reject-{width}")).await;
        let decisions = text(&page, "decisions");
        assert!(decisions.contains("Rejected Delete file"), "{decisions}");
        assert!(
            decisions.contains("reason: not this file, it is the ledger"),
            "{decisions}"
        );
        assert!(!text(&page, "transcript").contains("← deleted"), "{page}");
    }
    server.shutdown().await.unwrap();
    keep("console-reject-390.png", "agui-console-reject-phone.png");
}

/// Issue 38, item 8: where the handler takes it (human_approval), "Always allow" approves and
/// trusts the tool for the session: the next call runs without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_where_the_handler_takes_it() {
    if browser().is_none() {
        return;
    }
    let server = common::start(MemorySessionStore::new()).await;
    let page = drive(&server.url(), "always", 390, "always-1").await;
    server.shutdown().await.unwrap();
    let card = text(&page, "card");
    for shown in ["Refund needs your approval", "Amount", "250", "Order", "17"] {
        assert!(card.contains(shown), "{shown:?} not in {card}");
    }
    assert_eq!(text(&page, "always"), "Always allow refund");
    let transcript = text(&page, "transcript");
    for shown in [
        "← refunded 250 to order 17",
        "← refunded 80 to order 18",
        "Refunded again.",
    ] {
        assert!(transcript.contains(shown), "{shown:?} not in {transcript}");
    }
    assert!(text(&page, "approvals").contains("Nothing waits for you."));
}

/// Issue 38, item 7: at 390 px nothing is wider than the screen and Approve and Reject are on
/// it; at 1280 px likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_fits_a_phone() {
    if browser().is_none() {
        return;
    }
    let server = common::start(MemorySessionStore::new()).await;
    for width in [390, 1280] {
        let page = drive(
            &server.url(),
            "layout",
            width,
            &format!("browser-layout-{width}"),
        )
        .await;
        let l = &page["layout"];
        let f = |v: &Value| v.as_f64().unwrap();
        assert_eq!(f(&l["innerWidth"]), f64::from(width), "{l}");
        assert!(f(&l["scrollWidth"]) <= f(&l["innerWidth"]), "{width}: {l}");
        for button in ["approve", "reject"] {
            let b = &l[button];
            assert!(
                f(&b["left"]) >= 0.0
                    && f(&b["right"]) <= f(&l["innerWidth"])
                    && f(&b["top"]) >= 0.0
                    && f(&b["bottom"]) <= f(&l["innerHeight"]),
                "{width}: {button} off the screen: {l}"
            );
        }
    }
    server.shutdown().await.unwrap();
    keep("console-layout-390.png", "agui-console-phone.png");
}

/// Issue 38, item 4: four-eyes in the console — bob asks for a refund over the threshold and may
/// not approve it himself (a plain refusal; the approval still waits); alice signs in on the
/// same page and approves; the tool sees both names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_eyes_in_the_console() {
    if browser().is_none() {
        return;
    }
    let server = crate::identity::start(
        crate::identity::ops(MemorySessionStore::new(), common::Models::default()).four_eyes(true),
    )
    .await;
    for width in [1280, 390] {
        let page = drive(
            &server.url(),
            "four-eyes",
            width,
            &format!("four-eyes-{width}"),
        )
        .await;
        let refusal = text(&page, "refusal");
        assert!(
            refusal.contains("another person must approve it"),
            "{width}: {page}"
        );
        assert!(
            text(&page, "refusalDetails").contains("FOUR_EYES"),
            "{page}"
        );
        assert!(
            text(&page, "stillWaiting").contains("Refund needs your approval"),
            "{width}: {page}"
        );
        let transcript = text(&page, "transcript");
        assert!(
            transcript.contains("refunded 250 for bob approved by alice"),
            "{width}: {transcript}"
        );
        let decisions = text(&page, "decisions");
        assert!(
            decisions.contains("Approved Refund by alice"),
            "{decisions}"
        );
    }
    server.shutdown().await.unwrap();
}

/// Issue 38: a page opened (or reloaded) while the thread's run is going says so, and shows
/// the run's answer once it ends — it reads the thread again until then — instead of
/// "working…" for ever. The run is started by the test and held at its gate until the page
/// says it is following; the page is never reloaded after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_opened_during_a_run_shows_its_end() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let Some((modules, chromium)) = browser() else {
        return;
    };
    let server = common::start(MemorySessionStore::new()).await;
    let addr = server.local_addr();
    for width in [1280, 390] {
        let thread = format!("gate-follow-{width}");
        let input = common::run_input(&thread, Some("go through the gate"), None);
        let run = tokio::spawn(async move { common::http(addr, "POST", "/agent", &input).await });
        common::wait_running(addr, &thread).await;

        let shots = shots().to_string_lossy().into_owned();
        let script = format!(
            "{}/tests/js/console_browser.cjs",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut node = tokio::process::Command::new("node")
            .env("REIN_AGUI_TOKEN", common::TOKEN)
            .arg(script)
            .args([&modules, &chromium, &server.url(), &shots, "follow"])
            .args([width.to_string(), thread.clone()])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let mut lines = BufReader::new(node.stdout.take().unwrap()).lines();
        let mut page = Value::Null;
        while let Some(line) = lines.next_line().await.unwrap() {
            if line == "READY" {
                // The page shows the run as going: now let it end.
                common::open_gate(&thread);
            } else {
                page = serde_json::from_str(&line).unwrap();
            }
        }
        assert!(node.wait().await.unwrap().success(), "the driver failed");
        let (got, _) = run.await.unwrap();
        assert_eq!(got, 200);
        assert_eq!(page["pageErrors"], json!([]), "{page}");
        assert_eq!(text(&page, "statusWhileRunning"), "working…", "{page}");
        let transcript = text(&page, "transcript");
        for shown in ["go through the gate", "← through", "Through the gate."] {
            assert!(transcript.contains(shown), "{shown:?} not in {transcript}");
        }
        assert!(text(&page, "approvals").contains("Nothing waits for you."));
    }
    server.shutdown().await.unwrap();
}

/// Issue 42, item 1: an interrupt that declares the schema of its answer (as an MCP server's
/// elicitation does) gets a form: one input per field by type, required marks, an enum as a
/// select, a boolean as a checkbox, Accept / Decline / Cancel from the schema's choices. The
/// server's message and field titles are text, never markup. A value the server refuses keeps
/// the form as typed; a valid answer resumes the run, and the tool gets exactly that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_is_answered_through_its_form_in_a_real_browser() {
    if browser().is_none() {
        return;
    }
    let server = common::start(MemorySessionStore::new()).await;
    let page = drive(&server.url(), "elicit", 1280, "elicit-in-a-browser").await;
    assert_eq!(text(&page, "title"), "Sign up needs your answer", "{page}");
    let card = text(&page, "card");
    // The markup is shown as the text it is, and nothing of it ran.
    assert!(
        card.contains(&format!("Sign-up details {}", common::HOSTILE)),
        "{card}"
    );
    assert!(
        card.contains(&format!("Name {}", common::HOSTILE)),
        "{card}"
    );
    assert!(
        card.contains(&format!("As on your card {}", common::HOSTILE)),
        "{card}"
    );
    assert_eq!(page["markup"], json!(0), "{page}");
    assert_eq!(page["pwned"], json!(false), "{page}");
    assert_eq!(
        page["inputs"],
        json!([
            "name:input:text:true",
            "age:input:number:true",
            "plan:select:select-one:true",
            "newsletter:input:checkbox:false",
            "email:input:email:false"
        ]),
        "{page}"
    );
    assert_eq!(page["planOptions"], json!(["", "Free", "Pro"]), "{page}");
    assert_eq!(
        page["buttons"],
        json!([
            "answer-accept:Accept",
            "answer-decline:Decline",
            "answer-cancel:Cancel"
        ]),
        "{page}"
    );
    // The server refused -5 with the field it is about; the form kept what was typed.
    let refusal = text(&page, "refusal");
    assert!(refusal.contains("field: age"), "{refusal}");
    assert!(
        text(&page, "refusalDetails").contains("INVALID_RESUME_PAYLOAD"),
        "{page}"
    );
    assert_eq!(
        (text(&page, "keptAge"), text(&page, "keptName")),
        ("-5", "Ada")
    );
    assert_eq!(page["blockedByBrowser"], json!(true), "{page}");
    // The run resumed with the accepted form: the tool saw exactly it.
    let transcript = text(&page, "transcript");
    let answered = transcript
        .lines()
        .find_map(|l| l.strip_prefix("← answered "))
        .map(|a| serde_json::from_str::<Value>(a).unwrap());
    assert_eq!(
        answered,
        Some(
            json!({"action": "accept", "content": {"name": "Ada", "age": 36, "plan": "pro", "newsletter": true}})
        ),
        "{transcript}"
    );
    assert!(transcript.contains("Signed up."), "{transcript}");
    assert!(text(&page, "approvals").contains("Nothing waits for you."));
    server.shutdown().await.unwrap();
}

/// A URL-mode question: the URL as a link that opens apart from the console, and Done /
/// Decline / Cancel; Done resumes the run with `accept` and no content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_elicitation_is_a_link_and_done_in_a_real_browser() {
    if browser().is_none() {
        return;
    }
    let server = common::start(MemorySessionStore::new()).await;
    let page = drive(&server.url(), "visit", 390, "visit-in-a-browser").await;
    assert_eq!(text(&page, "title"), "Pay needs your answer", "{page}");
    assert_eq!(
        page["link"],
        json!({"href": "https://shop.example.com/checkout?order=17", "text": "https://shop.example.com/checkout?order=17",
            "rel": "noopener noreferrer", "target": "_blank"}),
        "{page}"
    );
    assert_eq!(
        page["buttons"],
        json!([
            "answer-accept:Done",
            "answer-decline:Decline",
            "answer-cancel:Cancel"
        ]),
        "{page}"
    );
    let transcript = text(&page, "transcript");
    assert!(
        transcript.contains(r#"← answered {"action":"accept"}"#),
        "{transcript}"
    );
    assert!(transcript.contains("Paid."), "{transcript}");
    server.shutdown().await.unwrap();
}
