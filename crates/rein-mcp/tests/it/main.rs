//! The integration tests of rein-mcp, in one binary: `cargo test -p rein-mcp --test it`
//! (one link instead of one per file). A new test file is a module here; helpers that several
//! share go in a `common` module here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod elicitation;
mod hostile_server;
mod names;
mod progress;
mod resources;
mod sampling;
#[cfg(feature = "server")]
mod serve;
#[cfg(feature = "server-agent")]
mod serve_agent;
#[cfg(all(feature = "server-http", feature = "http"))]
mod serve_http;
mod servers;

/// Helpers several test files share.
mod common {
    use std::collections::HashMap;

    use rein_core::{
        id::InvocationId,
        interrupt::{InterruptAnswer, InterruptAnswers},
        state::{AgentState, InvocationState},
        tool::ToolContext,
    };
    use serde_json::Value;

    /// The context of the tool use `tool_use_id` of `tool`, resumed with `answers` (interrupt
    /// id → response, bound to no fingerprint, as a tool's own interrupts are).
    pub(crate) fn answered_cx(
        tool_use_id: &str,
        tool: &str,
        answers: &[(&str, Value)],
    ) -> ToolContext {
        let answers = answers
            .iter()
            .map(|(id, response)| {
                let answer = InterruptAnswer {
                    response: response.clone(),
                    fingerprint: None,
                };
                ((*id).to_owned(), answer)
            })
            .collect::<HashMap<_, _>>();
        ToolContext::new(
            tool_use_id,
            tool,
            InvocationId::new(),
            InvocationState::new(),
            AgentState::new(),
            InterruptAnswers::new(answers),
        )
    }
}
