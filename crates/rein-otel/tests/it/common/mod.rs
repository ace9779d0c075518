//! What the tests against Phoenix share: its address, and reading spans back from its REST API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The export guards and their switches (experimental conventions, content capture) are
/// process-wide, and the tests run on threads of one process: the tests that make guards take
/// turns, or one test's guard turns the other's switches off mid-run (or keeps export on).
pub(crate) static SWITCHES: Mutex<()> = Mutex::new(());

/// Phoenix's base URL (`REIN_TEST_PHOENIX_URL`); `None` (the test prints SKIPPED) without it,
/// a failure under CI, where `.ci/peers-phoenix.sh` must have started it.
pub(crate) fn phoenix() -> Option<String> {
    match std::env::var("REIN_TEST_PHOENIX_URL") {
        Ok(v) if !v.is_empty() => Some(v.trim_end_matches('/').to_owned()),
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "REIN_TEST_PHOENIX_URL is not set under CI: .ci/peers-phoenix.sh must start Phoenix"
            )
        }
        _ => {
            eprintln!(
                "SKIPPED: REIN_TEST_PHOENIX_URL not set; this end-to-end test needs the Phoenix \
                 started by `bash .ci/peers-phoenix.sh DIR && source DIR/env`"
            );
            None
        }
    }
}

/// A span as Phoenix returns it.
#[derive(Debug)]
pub(crate) struct Span {
    pub(crate) name: String,
    pub(crate) trace: String,
    pub(crate) id: String,
    pub(crate) parent: Option<String>,
    pub(crate) status: String,
    pub(crate) attributes: HashMap<String, Value>,
    pub(crate) events: Vec<String>,
}

impl Span {
    pub(crate) fn attr(&self, key: &str) -> Option<String> {
        self.attributes.get(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .tls_backend_preconfigured(rein_models::http::tls_config().unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The spans of the traces whose root is `invoke_agent {agent}`, once `expected` have arrived
/// (Phoenix ingests asynchronously).
pub(crate) fn read_back(base: &str, agent: &str, expected: usize) -> Vec<Span> {
    let client = client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = client
            .get(format!("{base}/v1/projects/default/spans?limit=1000"))
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.text())
            .unwrap();
        let body: Value = serde_json::from_str(&text).unwrap();
        let all: Vec<Span> = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| Span {
                name: s["name"].as_str().unwrap().to_owned(),
                trace: s["context"]["trace_id"].as_str().unwrap().to_owned(),
                id: s["context"]["span_id"].as_str().unwrap().to_owned(),
                parent: s["parent_id"].as_str().map(str::to_owned),
                status: s["status_code"].as_str().unwrap_or_default().to_owned(),
                attributes: serde_json::from_value(s["attributes"].clone()).unwrap_or_default(),
                events: s["events"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["name"].as_str().map(str::to_owned))
                    .collect(),
            })
            .collect();
        let root = format!("invoke_agent {agent}");
        let traces: Vec<String> = all
            .iter()
            .filter(|s| s.name == root)
            .map(|s| s.trace.clone())
            .collect();
        let ours: Vec<Span> = all
            .into_iter()
            .filter(|s| traces.contains(&s.trace))
            .collect();
        if ours.len() >= expected || Instant::now() > deadline {
            return ours;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
