//! An LLM judge (`LlmJudge`): a second model reviews each tool call before it runs. It lets a
//! search proceed and guides a folder delete away (the agent gets the reason); it sends a mass
//! e-mail to a human, whose "no" is final even though the judge is not asked again on resume;
//! and past its budget of judge calls, calls get the over-budget verdict unjudged (a human by
//! default; here a refusal). Every judged decision is in the audit with the verdict, the reason
//! and the judge's token usage. Both models are scripted (no API key; the scripted judge echoes
//! each call's nonce, as a verdict must); any `Model` can judge.
//!
//! ```sh
//! cargo run -p rein-examples --example llm_judge
//! ```

use rein::agent::judge::{LlmJudge, ScriptedJudge, Verdict};
use rein::prelude::*;
use serde_json::json;

fn tools() -> Vec<ToolHandle> {
    ["search", "delete_file", "send_email"]
        .into_iter()
        .map(|name| {
            ToolHandle::from_sync_fn(name, "A tool.", json!({"type": "object"}), move |i, _| {
                Ok(ToolOutput::text(format!("{name} ran with {i}")))
            })
        })
        .collect()
}

/// The audit: one line per decision, with the judge's detail.
fn audit(result: &AgentResult) {
    for d in &result.decisions {
        let detail = d.detail.clone().unwrap_or_default();
        let note = if detail["resumed"] == true {
            " (resumed: the judge was not asked again)".to_owned()
        } else if let Some(why) = detail["unjudged"].as_str() {
            format!(" (unjudged: {why})")
        } else {
            String::new()
        };
        println!(
            "decision: {} {:?} verdict={} reason={} tokens={}/{}{note}",
            d.handler,
            d.action,
            detail["verdict"],
            detail["reason"],
            detail["usage"]["input_tokens"],
            detail["usage"]["output_tokens"],
        );
    }
}

fn judged_agent(model: ScriptedModel, judge: LlmJudge) -> Result<Agent, rein::Error> {
    Agent::builder()
        .model(model)
        .tools(tools())
        .intervention(judge)
        .build()
}

fn results(agent: &Agent) {
    for m in agent.messages() {
        for r in m.tool_results() {
            println!("tool {} -> {}", r.tool_use_id, r.text());
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("models: scripted (no API key needed)\n");

    println!("== proceed and guide");
    let judge_model = ScriptedJudge::new([
        r#"{"verdict": "proceed", "reason": "a search is harmless", "nonce": "{nonce}"}"#,
        "```json\n{\"verdict\": \"guide\", \"reason\": \"list the files before deleting a folder\", \"nonce\": \"{nonce}\"}\n```",
    ]);
    let model = ScriptedModel::builder()
        .tool_use("s1", "search", json!({"q": "old reports"}))
        .tool_use("d1", "delete_file", json!({"path": "reports/"}))
        .text("I will list the files first.")
        .build();
    let judge = LlmJudge::new("judge", judge_model.clone())
        .criteria("Never delete a folder without listing it first.");
    let mut agent = judged_agent(model, judge)?;
    let r = agent.invoke("Clean up the old reports").await?;
    results(&agent);
    audit(&r);
    println!("reply: {}", r.text());

    println!("\n== confirm: a human decides");
    let judge_model = ScriptedJudge::new([
        r#"{"verdict": "confirm", "reason": "this mails every employee", "nonce": "{nonce}"}"#,
        // Were the judge asked again on resume, this would let the e-mail go.
        r#"{"verdict": "proceed", "nonce": "{nonce}"}"#,
    ]);
    let model = ScriptedModel::builder()
        .tool_use("e1", "send_email", json!({"to": "all@example.com"}))
        .text("The e-mail was not sent.")
        .build();
    let mut agent = judged_agent(model, LlmJudge::new("judge", judge_model.clone()))?;
    let r = agent.invoke("Announce the party to everyone").await?;
    for i in &r.interrupts {
        println!("asked: {}", i.reason["prompt"].as_str().unwrap_or(""));
    }
    let answers: Vec<InterruptResponse> = r.interrupts.iter().map(|i| i.answer("no")).collect();
    let r = agent.invoke(answers).await?;
    results(&agent);
    audit(&r);
    println!("judge calls: {}", judge_model.requests().len());

    println!("\n== budget: one judge call per invocation, then refused unjudged");
    let judge_model =
        ScriptedJudge::new([r#"{"verdict": "proceed", "reason": "fine", "nonce": "{nonce}"}"#]);
    let model = ScriptedModel::builder()
        .tool_use("s1", "search", json!({"q": "a"}))
        .tool_use("s2", "search", json!({"q": "b"}))
        .text("Searched twice.")
        .build();
    let judge = LlmJudge::new("judge", judge_model.clone())
        .budget(1)
        .over_budget(Verdict::Guide);
    let mut agent = judged_agent(model, judge)?;
    let r = agent.invoke("Search twice").await?;
    audit(&r);
    println!("judge calls: {}", judge_model.requests().len());
    Ok(())
}
