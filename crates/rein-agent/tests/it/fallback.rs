//! A fallback chain under the agent (issue 40, item 6): each hop is an audited `rein:fallback`
//! decision, and the agent's retries retry the chain, each model once per attempt.

use std::time::Duration;

use rein_agent::{Agent, RetryStrategy};
use rein_core::{Error, audit::DecisionAction};
use rein_models::{FallbackModel, ScriptedModel};

const FALLBACK: &str = "rein:fallback";

fn scripted(id: &str) -> rein_models::ScriptedModelBuilder {
    ScriptedModel::builder().model_id(id)
}

#[tokio::test]
async fn each_hop_is_a_decision_in_the_result() {
    let chain = FallbackModel::new(scripted("primary").throttled().build())
        .with_fallback(scripted("second").server_error().build())
        .with_fallback(scripted("third").text("answered").build());
    let mut agent = Agent::builder()
        .model(chain)
        .retry_strategy(RetryStrategy::none())
        .build()
        .unwrap();
    let r = agent.invoke("hi").await.unwrap();
    assert_eq!(r.text(), "answered");
    let hops: Vec<_> = r
        .decisions
        .iter()
        .filter(|d| d.handler == FALLBACK)
        .collect();
    assert_eq!(hops.len(), 2, "{:?}", r.decisions);
    assert!(hops.iter().all(|d| d.action == DecisionAction::Fallback));
    assert_eq!(
        hops[0].text.as_deref(),
        Some("scripted/primary failed (throttled, HTTP 429): moved on to scripted/second")
    );
    assert_eq!(
        hops[1].text.as_deref(),
        Some("scripted/second failed (server, HTTP 500): moved on to scripted/third")
    );
    let detail = hops[1].detail.as_deref().unwrap();
    assert_eq!(detail["from"], "scripted/second");
    assert_eq!(detail["to"], "scripted/third");
    assert_eq!(detail["status"], 500);
    assert_eq!(detail["message"], "scripted server error");
}

#[tokio::test]
async fn no_hop_no_decision() {
    let chain = FallbackModel::new(scripted("primary").text("first try").build())
        .with_fallback(scripted("backup").text("unused").build());
    let mut agent = Agent::builder().model(chain).build().unwrap();
    let r = agent.invoke("hi").await.unwrap();
    assert_eq!(r.text(), "first try");
    assert!(r.decisions.iter().all(|d| d.handler != FALLBACK));
}

#[tokio::test]
async fn the_agents_retry_retries_the_chain_each_model_once_per_attempt() {
    // Attempt 1: primary 429, backup 503: the chain fails (retryable). Attempt 2: primary
    // answers. Neither model is retried inside the chain.
    let primary = scripted("primary").throttled().text("from primary").build();
    let backup = scripted("backup")
        .server_error()
        .text("unused")
        .record_requests(true)
        .build();
    let chain = FallbackModel::new(primary.clone()).with_fallback(backup.clone());
    let mut agent = Agent::builder()
        .model(chain)
        .retry_strategy(RetryStrategy::default().with_initial_delay(Duration::ZERO))
        .build()
        .unwrap();
    let r = agent.invoke("hi").await.unwrap();
    assert_eq!(r.text(), "from primary");
    assert_eq!(primary.remaining(), 0, "primary: called twice");
    assert_eq!(backup.remaining(), 1, "backup: called once");
    assert!(r.decisions.iter().all(|d| d.handler != FALLBACK));
}

#[tokio::test]
async fn without_retries_the_chains_error_names_every_model() {
    let chain = FallbackModel::new(scripted("primary").throttled().build())
        .with_fallback(scripted("backup").server_error().build());
    let mut agent = Agent::builder()
        .model(chain)
        .retry_strategy(RetryStrategy::none())
        .build()
        .unwrap();
    let error = agent.invoke("hi").await.unwrap_err();
    let Error::Model(error) = error else {
        panic!("{error:?}")
    };
    let message = error.to_string();
    assert!(
        message.contains("scripted/primary: model throttled (HTTP 429)"),
        "{message}"
    );
    assert!(
        message.contains("scripted/backup: model server error (HTTP 500)"),
        "{message}"
    );
    assert!(error.is_retryable());
}

#[tokio::test]
async fn a_withheld_answer_keeps_its_fallback_hops_in_the_audit() {
    use rein_interventions::policy::{DenyStreamMatch, PolicyHandler};
    // The backup's answer is withheld by a stream guard: what it said is not shown, but that the
    // primary was skipped and the backup answered still is.
    let chain = FallbackModel::new(scripted("primary").throttled().build())
        .with_fallback(scripted("backup").text("a FORBIDDEN answer").build());
    let mut agent = Agent::builder()
        .model(chain)
        .retry_strategy(RetryStrategy::none())
        .intervention(
            PolicyHandler::new(
                "no-forbidden",
                DenyStreamMatch {
                    pattern: "FORBIDDEN".into(),
                    reason: None,
                },
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    let r = agent.invoke("hi").await.unwrap();
    assert!(!r.text().contains("FORBIDDEN"), "{}", r.text());
    let hops: Vec<_> = r
        .decisions
        .iter()
        .filter(|d| d.handler == FALLBACK)
        .collect();
    assert_eq!(hops.len(), 1, "{:?}", r.decisions);
    assert_eq!(
        hops[0].text.as_deref(),
        Some("scripted/primary failed (throttled, HTTP 429): moved on to scripted/backup")
    );
}
