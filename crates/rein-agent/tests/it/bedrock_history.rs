//! The agent over a real Bedrock event stream (local fixture server): an exception in the
//! middle of a streamed answer leaves no partial message in the history, whether the agent
//! retries it or gives up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::assert_history_valid;
use rein_agent::{Agent, RetryStrategy};
use rein_core::{Error, Role, error::ModelErrorKind};
use rein_models::BedrockModel;
use rein_models::conformance::{FixtureResponse, FixtureServer};
use rein_models::fuzzing;

const TEXT: &str = include_str!("../../../rein-models/tests/fixtures/bedrock/text.json");
const EXCEPTION: &str =
    include_str!("../../../rein-models/tests/fixtures/bedrock/exception_midstream.json");

fn frames(json: &str) -> FixtureResponse {
    FixtureResponse::chunks(
        "application/vnd.amazon.eventstream",
        fuzzing::bedrock_frames(json).unwrap(),
    )
}

fn bedrock(server: &FixtureServer) -> BedrockModel {
    BedrockModel::builder("us.amazon.nova-lite-v1:0")
        .region("us-east-1")
        .endpoint_url(server.base_url())
        .bearer_token("test-key")
        .idle_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_throttled_stream_is_retried_and_its_partial_text_dropped() {
    let server = FixtureServer::start().await.unwrap();
    server.push(frames(EXCEPTION));
    server.push(frames(TEXT));
    let mut agent = Agent::builder()
        .model(bedrock(&server))
        .retry_strategy(
            RetryStrategy::default()
                .with_initial_delay(Duration::from_millis(1))
                .with_jitter(false),
        )
        .build()
        .unwrap();
    let result = agent.invoke("hi").await.unwrap();
    assert_eq!(server.requests().len(), 2, "the throttled call was retried");
    assert_eq!(result.message.text(), "Hello, world!");
    let history = agent.messages();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].role, Role::Assistant);
    assert_eq!(history[1].text(), "Hello, world!");
    assert!(!format!("{history:?}").contains("Partial"));
    assert_history_valid(history);
}

#[tokio::test]
async fn a_stream_exception_without_retries_fails_the_invocation_and_keeps_history() {
    let server = FixtureServer::start().await.unwrap();
    server.push(frames(EXCEPTION));
    let mut agent = Agent::builder()
        .model(bedrock(&server))
        .retry_strategy(RetryStrategy::none())
        .build()
        .unwrap();
    let err = agent.invoke("hi").await.unwrap_err();
    assert!(
        matches!(&err, Error::Model(e) if e.kind() == ModelErrorKind::Throttled),
        "{err}"
    );
    assert_eq!(agent.messages().len(), 1, "only the prompt");
    assert_history_valid(agent.messages());
}
