//! `rein_otel::init()` configured from the standard `OTEL_*` variables alone: the endpoint of
//! Phoenix in `OTEL_EXPORTER_OTLP_ENDPOINT`, metrics off with `OTEL_METRICS_EXPORTER=none`; a
//! run's spans arrive and read back from Phoenix's REST API.
//!
//! Needs the Phoenix of `.ci/peers-phoenix.sh`; without `REIN_TEST_PHOENIX_URL` the test prints
//! SKIPPED (and fails under CI, where the peer must be up). The export runs in a child process
//! of the test: `init()` installs the process's global subscriber, and the variables are the
//! child's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_agent::Agent;
use rein_core::ToolHandle;
use rein_core::tool::ToolOutput;
use rein_models::ScriptedModel;
use serde_json::{Value, json};

use crate::common;
use common::{phoenix, read_back};

/// Set in the child process that runs the export, with the `OTEL_*` variables (the workspace
/// forbids `unsafe`, so the test cannot set them in its own process).
const CHILD: &str = "REIN_OTEL_ENV_TEST_CHILD";

#[test]
fn init_exports_to_the_endpoint_of_the_environment() {
    let Some(base) = phoenix() else { return };
    if std::env::var_os(CHILD).is_none() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "env::init_exports_to_the_endpoint_of_the_environment",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &base)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .env("OTEL_METRICS_EXPORTER", "none")
            .env_remove("OTEL_SDK_DISABLED")
            .env_remove("OTEL_TRACES_EXPORTER")
            .status()
            .unwrap();
        assert!(status.success(), "the export run failed: {status}");
        return;
    }
    let name = format!("env-{}", std::process::id());
    let otel = rein_otel::init().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let echo = ToolHandle::from_sync_fn(
            "echo",
            "Echoes text.",
            json!({"type": "object"}),
            |input: Value, _| Ok(ToolOutput::text(input.to_string())),
        );
        let model = ScriptedModel::builder()
            .tool_use("t1", "echo", json!({"text": "x"}))
            .text("done")
            .build();
        let mut agent = Agent::builder()
            .name(name.as_str())
            .model(model)
            .tool(echo)
            .build()
            .unwrap();
        assert_eq!(agent.invoke("hi").await.unwrap().text(), "done");
    });
    otel.shutdown().unwrap();

    // invoke_agent, two chats, one tool.
    let spans = read_back(&base, &name, 4);
    let root_name = format!("invoke_agent {name}");
    let root = spans
        .iter()
        .find(|s| s.name == root_name)
        .expect("the run's span arrived");
    assert_eq!(root.parent, None);
    assert_eq!(
        root.attr("gen_ai.agent.name").as_deref(),
        Some(name.as_str())
    );
    assert_eq!(root.attr("rein.stop_reason").as_deref(), Some("end_turn"));
    let children: Vec<&str> = spans
        .iter()
        .filter(|s| s.parent.as_deref() == Some(root.id.as_str()))
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        children.iter().filter(|n| **n == "chat scripted").count(),
        2,
        "{children:?}"
    );
    assert!(children.contains(&"execute_tool echo"), "{children:?}");
}
