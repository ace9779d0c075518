//! Pages of other origins attack a server on 127.0.0.1 in a real browser (headless Debian
//! chromium, driven by playwright-core from Node; issue 35, finding 1): a page on another
//! origin sends a no-cors `text/plain` fetch, a preflighted JSON fetch and an HTML form post; a
//! DNS-rebinding page, same-origin in the browser's eyes, posts and reads. None starts a run or
//! reads a thread. (Before, the simple request and the form post started runs.) SKIPPED without
//! `REIN_AGUI_NODE_MODULES` and `REIN_AGUI_CHROMIUM` (`.ci/peers-agui.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use rein_sessions::{MemorySessionStore, SessionStore};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_origins_cannot_start_a_run() {
    let (Ok(modules), Ok(chromium)) = (
        std::env::var("REIN_AGUI_NODE_MODULES"),
        std::env::var("REIN_AGUI_CHROMIUM"),
    ) else {
        println!(
            "SKIPPED: REIN_AGUI_NODE_MODULES / REIN_AGUI_CHROMIUM not set (bash .ci/peers-agui.sh DIR)"
        );
        return;
    };
    let store = MemorySessionStore::new();
    let server = common::start(store.clone()).await;
    let base = format!("http://{}", server.local_addr());
    // The attacking page is even given the token: the Origin check and CORS still stop it.
    let stdout = common::node(
        "cross_site_browser.cjs",
        &[&modules, &chromium, &base, common::TOKEN],
    )
    .await;
    server.shutdown().await.unwrap();
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap();

    for thread in ["xsite-nocors", "xsite-json", "xsite-form", "xsite-rebind"] {
        assert!(
            store.load(thread).await.unwrap().is_none(),
            "a page of another origin started a run on {thread}: {seen}"
        );
    }
    let cross = &seen["crossOrigin"];
    // The JSON fetch needs a preflight, which the server refuses: the browser blocks it.
    assert!(
        cross["json"].as_str().unwrap().starts_with("blocked"),
        "{seen}"
    );
    assert!(
        cross["read"].as_str().unwrap().starts_with("blocked"),
        "{seen}"
    );
    assert_eq!(cross["form"], "submitted", "{seen}");
    // The rebinding page reached the server (its answers are readable to it) and was refused by
    // its Host name, the console included.
    let rebound = &seen["rebinding"];
    for k in ["post", "read"] {
        assert_eq!(rebound[k]["status"], 403, "{seen}");
        assert!(
            rebound[k]["body"]
                .as_str()
                .unwrap()
                .contains("HOST_NOT_ALLOWED"),
            "{seen}"
        );
    }
    assert_eq!(rebound["console"]["status"], 403, "{seen}");
}
