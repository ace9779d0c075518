//! `#[tool]`: turn functions into tools, show what the model is told about them, call them
//! directly through `ToolHandle::call`, then let an agent (on the embedded scripted model) call
//! them. Needs no API key and no network:
//!
//! ```sh
//! cargo run -p rein-examples --example tool_macro
//! ```

use rein::core::{
    id::InvocationId,
    interrupt::InterruptAnswers,
    state::{AgentState, InvocationState},
};
use rein::prelude::*;
use serde_json::json;

/// A temperature unit.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

/// Gets the current weather in a city.
///
/// # Arguments
/// * `city` - the city name, e.g. "Paris"
/// * `unit` - the temperature unit (default: celsius)
#[tool]
async fn get_weather(city: String, unit: Option<Unit>) -> Result<String, ToolError> {
    let celsius = match city.as_str() {
        "Paris" => 18.0,
        "Oslo" => 4.0,
        other => return Err(ToolError::msg(format!("no weather station in {other}"))),
    };
    Ok(match unit.unwrap_or(Unit::Celsius) {
        Unit::Celsius => format!("{celsius} °C and sunny in {city}"),
        Unit::Fahrenheit => format!("{} °F and sunny in {city}", celsius * 9.0 / 5.0 + 32.0),
    })
}

#[derive(serde::Serialize)]
struct Stats {
    count: usize,
    mean: f64,
}

/// Computes statistics of a list of numbers.
#[tool(name = "stats")]
fn compute_stats(
    /// the numbers
    values: Vec<f64>,
    cx: &ToolContext,
) -> Stats {
    // The context is not part of the schema: it gives the call's ids and states.
    cx.agent_state().set("last_stats_call", cx.tool_use_id());
    let count = values.len();
    let mean = if count == 0 {
        0.0
    } else {
        values.iter().sum::<f64>() / count as f64
    };
    Stats { count, mean }
}

fn context(tool: &str) -> ToolContext {
    ToolContext::new(
        "toolu_1",
        tool,
        InvocationId::new(),
        InvocationState::new(),
        AgentState::new(),
        InterruptAnswers::default(),
    )
}

async fn show(tool: &ToolHandle, input: serde_json::Value) {
    match tool.call(input.clone(), context(tool.name())).await {
        Ok(out) => println!(
            "  {}({input}) -> {:?}: {:?}",
            tool.name(),
            out.status,
            out.content
        ),
        // The agent turns this into an error tool result `Error: <message>`.
        Err(e) => println!("  {}({input}) -> Error: {e}", tool.name()),
    }
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    let tools = [ToolHandle::new(GetWeather), ToolHandle::from(ComputeStats)];
    for t in &tools {
        let spec = t.spec();
        println!("tool {}: {}", spec.name, spec.description);
        println!("{:#}\n", spec.input_schema);
    }
    let [weather, stats] = &tools;
    show(weather, json!({"city": "Paris"})).await;
    show(weather, json!({"city": "Oslo", "unit": "fahrenheit"})).await;
    show(weather, json!({"city": "Atlantis"})).await; // the tool's own error
    show(weather, json!({"town": "Paris"})).await; // invalid input: unknown/missing argument
    show(stats, json!({"values": [1.0, 2.0, 4.5]})).await;
    show(stats, json!({"values": "1, 2"})).await; // invalid input: wrong type

    // The same tools in an agent. The scripted model asks for the weather (once with an
    // argument the schema does not allow), then answers; a real provider, when one is
    // configured (see `rein_examples::demo_model`), decides for itself.
    let scripted = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use(
                    "t1",
                    "get_weather",
                    json!({"city": "Paris", "unit": "celsius"}),
                )
                .tool_use("t2", "stats", json!({"values": [3, 4]}))
                .tool_use(
                    "t3",
                    "get_weather",
                    json!({"city": "Paris", "unit": "kelvin"}),
                ),
        )
        .text("It is 18 °C in Paris; the mean of 3 and 4 is 3.5.")
        .build();
    let (model, about) = rein_examples::demo_model(scripted);
    println!("\nagent run (model: {about}):");
    let mut agent = Agent::builder()
        .shared_model(model)
        .tool(GetWeather)
        .tool(ComputeStats)
        .build()?;
    let mut events = agent.stream("Weather in Paris? And the mean of 3 and 4?");
    while let Some(event) = events.next().await {
        match event? {
            AgentEvent::ToolCallStarted { tool_use } => {
                println!("  [tool] {} {}", tool_use.name, tool_use.input)
            }
            AgentEvent::ToolResult(r) => {
                // The result as the model gets it (Bedrock-Converse JSON).
                println!(
                    "  [result] {}",
                    serde_json::to_string(&r).unwrap_or_default()
                )
            }
            AgentEvent::Finished(result) => println!("  [answer] {}", result.text()),
            _ => {}
        }
    }
    Ok(())
}
