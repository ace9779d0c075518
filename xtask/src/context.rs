//! The `context_*` rows (issue 43): a 2 000-turn scripted tool loop — each turn a user
//! prompt, a tool call with a long result, and an answer — with each conversation manager:
//! `SlidingWindow` (40 messages), `TokenWindow` and `SummarizingWindow` (a scripted summarizer),
//! both at an 8 000-token budget. Per manager: CPU per turn (the whole agent: run, manager,
//! summaries), estimated input tokens per request, and cache-prefix stability — the share of
//! requests whose first 4 messages equal the previous request's (a provider's prompt cache
//! matches the request's start). The scripted model reports no input tokens, so the estimate is
//! the plain heuristic (UTF-8 bytes / 4) and the budget means the same on every run.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, PoisonError};

use cpu_time::ProcessTime;
use rein::core::event::BeforeModelCallEvent;
use rein::core::stream::Usage;
use rein::core::{ToolHandle, tool::ToolOutput};
use rein::models::{ScriptedModel, ScriptedResponse};
use rein::{SlidingWindow, SummarizingWindow, TokenWindow};
use serde_json::json;

use crate::measure::Recorder;

/// Turns (invocations) of the loop.
const TURNS: usize = 2_000;
/// The token budget of the token and summarizing windows.
const BUDGET: u64 = 8_000;
/// Messages compared for prefix stability.
const PREFIX: usize = 4;

/// What the requests of one run sent.
#[derive(Default)]
struct Sent {
    requests: u64,
    tokens: u64,
    /// Requests whose first `PREFIX` messages equal the previous request's.
    stable: u64,
    last: Option<u64>,
    summary_calls: u64,
}

fn model() -> ScriptedModel {
    let none = || Usage::new(0, 1);
    // Not recording: a recorded request keeps its snapshot of the history alive, and every
    // message added after it would copy the whole history (the row would measure that).
    (0..TURNS)
        .fold(ScriptedModel::builder().record_requests(false), |b, i| {
            b.response(
                ScriptedResponse::new()
                    .tool_use(format!("t{i}"), "lookup", json!({"page": i}))
                    .usage(none()),
            )
            .response(
                ScriptedResponse::new()
                    .text(format!("Page {i} says what the user needed; noted."))
                    .usage(none()),
            )
        })
        .build()
}

fn lookup() -> ToolHandle {
    ToolHandle::from_sync_fn(
        "lookup",
        "Looks a page up.",
        json!({"type": "object", "properties": {"page": {"type": "integer"}}}),
        |input, _| {
            Ok(ToolOutput::text(format!(
                "page {}: {}",
                input["page"],
                "Reference text about the subject at hand. ".repeat(12)
            )))
        },
    )
}

/// Runs the loop with `manager` (`None`: the default sliding window); returns what was sent
/// and the process CPU time per turn, in µs.
async fn run(
    manager: Option<Box<dyn FnOnce(rein::AgentBuilder) -> rein::AgentBuilder>>,
) -> Result<(Sent, f64), String> {
    let sent = Arc::new(Mutex::new(Sent::default()));
    let log = sent.clone();
    let mut builder = rein::Agent::builder()
        .model(model())
        .system_prompt("You are a research assistant. Look pages up and answer briefly.")
        .tool(lookup())
        .hook(move |ev: &mut BeforeModelCallEvent| {
            let mut s = log.lock().unwrap_or_else(PoisonError::into_inner);
            if ev.is_summary() {
                s.summary_calls += 1;
                return;
            }
            let mut h = DefaultHasher::new();
            for m in ev.request.messages.iter().take(PREFIX) {
                serde_json::to_string(m).unwrap_or_default().hash(&mut h);
            }
            let prefix = h.finish();
            s.requests += 1;
            s.tokens += ev.estimated_input_tokens();
            if s.last == Some(prefix) {
                s.stable += 1;
            }
            s.last = Some(prefix);
        });
    if let Some(f) = manager {
        builder = f(builder);
    }
    let mut agent = builder.build().map_err(|e| e.to_string())?;
    let cpu = ProcessTime::now();
    for i in 0..TURNS {
        agent
            .invoke(format!("Question {i}: what does page {i} say?"))
            .await
            .map_err(|e| e.to_string())?;
    }
    let per_turn = cpu.elapsed().as_secs_f64() * 1e6 / TURNS as f64;
    let sent = std::mem::take(&mut *sent.lock().unwrap_or_else(PoisonError::into_inner));
    Ok((sent, per_turn))
}

/// The `context_*` rows.
pub(crate) fn rows(rec: &Recorder, rt: &tokio::runtime::Runtime) {
    type Setup = Box<dyn FnOnce(rein::AgentBuilder) -> rein::AgentBuilder>;
    let managers: Vec<(&str, Option<Setup>)> = vec![
        (
            "sliding",
            Some(Box::new(|b: rein::AgentBuilder| {
                b.conversation_manager(SlidingWindow::new(40))
            })),
        ),
        (
            "token",
            Some(Box::new(|b: rein::AgentBuilder| {
                b.conversation_manager(TokenWindow::new(BUDGET))
            })),
        ),
        (
            "summarizing",
            Some(Box::new(|b: rein::AgentBuilder| {
                let summarizer = ScriptedModel::builder()
                    .text("Earlier the user asked about pages one by one; each was looked up and noted.")
                    .cycle()
                    .build();
                b.conversation_manager(SummarizingWindow::new(BUDGET).summarizer(summarizer))
            })),
        ),
    ];
    for (name, setup) in managers {
        let (sent, cpu) = match rt.block_on(run(setup)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("context_{name}: {e}");
                continue;
            }
        };
        let requests = sent.requests.max(1) as f64;
        let meta = json!({"turns": TURNS, "requests": sent.requests,
            "summary_calls": sent.summary_calls, "budget_tokens": BUDGET,
            "note": "a 2 000-turn scripted tool loop; tokens are the agent's estimate (bytes/4, uncalibrated); prefix = the first 4 messages"});
        rec.record(
            "context_tool_loop",
            &format!("cpu_per_turn_{name}"),
            cpu,
            "us",
            meta.clone(),
        );
        rec.record(
            "context_tool_loop",
            &format!("tokens_per_request_{name}"),
            sent.tokens as f64 / requests,
            "tokens",
            meta.clone(),
        );
        rec.record(
            "context_tool_loop",
            &format!("prefix_stable_share_{name}"),
            sent.stable as f64 * 100.0 / requests,
            "%",
            meta,
        );
    }
}
