//! The approval console in a real browser (headless Debian chromium, driven by playwright-core
//! from Node): type a request, see the approval, click approve, see the tool result and the
//! final answer. Screenshots are kept under `target/tmp/rein-agui-console/`; with
//! `REIN_AGUI_UPDATE_SCREENSHOT=1` the approval one is copied to docs/images
//! (`bash docs/images/agui-console.sh`). SKIPPED without `REIN_AGUI_NODE_MODULES` and
//! `REIN_AGUI_CHROMIUM` (`.ci/peers-agui.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use rein_sessions::MemorySessionStore;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_in_the_console_in_a_real_browser() {
    let (Ok(modules), Ok(chromium)) = (
        std::env::var("REIN_AGUI_NODE_MODULES"),
        std::env::var("REIN_AGUI_CHROMIUM"),
    ) else {
        println!(
            "SKIPPED: REIN_AGUI_NODE_MODULES / REIN_AGUI_CHROMIUM not set (bash .ci/peers-agui.sh DIR)"
        );
        return;
    };
    let server = common::start(MemorySessionStore::new()).await;
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("rein-agui-console");
    let url = server.url();
    let shots_arg = shots.to_string_lossy().into_owned();
    let stdout = common::node(
        "console_browser.cjs",
        &[&modules, &chromium, &url, &shots_arg],
    )
    .await;
    server.shutdown().await.unwrap();
    let page: Value = serde_json::from_str(stdout.trim()).unwrap();
    let text = |k: &str| page[k].as_str().unwrap_or_default().to_owned();

    assert_eq!(text("question"), "Delete a.txt?");
    // The page took its token out of the address bar (it keeps it for its requests).
    assert!(!text("addressBar").contains("token"), "{page}");
    assert!(text("addressBar").contains("?thread=browser-"), "{page}");
    assert!(
        text("askedCall").contains(r#"delete_file {"path":"a.txt"}"#),
        "{page}"
    );
    assert!(text("askedDecision").contains("confirm asked"), "{page}");
    let transcript = text("transcript");
    for shown in [
        "Please delete a.txt",
        "→ delete_file",
        "← deleted a.txt",
        "Done: I asked before deleting.",
    ] {
        assert!(transcript.contains(shown), "{shown:?} not in {transcript}");
    }
    let decisions = text("decisions");
    assert!(decisions.contains("confirm approved"), "{decisions}");
    // Who answered: the token's principal; the name typed in the page is a claim beside it.
    assert!(
        decisions.contains(r#"answered by token holder (as "web console")"#),
        "{decisions}"
    );
    assert!(
        text("approvals").contains("Nothing waits for you."),
        "{page}"
    );
    assert_eq!(text("error"), "");
    // Another tab on the thread sees the open approval, and its new request is refused.
    assert!(
        text("reloadedApprovals").contains("Delete a.txt?"),
        "{page}"
    );
    assert!(text("refusal").contains("INTERRUPTS_PENDING"), "{page}");
    assert_eq!(page["pageErrors"], serde_json::json!([]));

    for name in ["console-approval.png", "console-approved.png"] {
        assert!(
            shots.join(name).metadata().unwrap().len() > 10_000,
            "{name}"
        );
    }
    if std::env::var("REIN_AGUI_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        let docs = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/images/agui-console.png"
        );
        std::fs::copy(shots.join("console-approval.png"), docs).unwrap();
    }
}
