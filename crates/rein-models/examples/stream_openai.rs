//! Streams one answer from an OpenAI-compatible server configured by `OPENAI_BASE_URL` and
//! `OPENAI_API_KEY` (e.g. `OPENAI_BASE_URL=http://127.0.0.1:18080/v1` with `.ci/peers-llm.sh`).
//!
//! `cargo run -p rein-models --features openai --example stream_openai -- [model]`

use futures_util::StreamExt;
use rein_core::{
    Message,
    stream::{BlockDelta, StreamEvent},
};
use rein_models::{Model, ModelRequest, OpenAiModel, StreamAssembler};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model_id = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "gpt-4o-mini".into());
    let model = OpenAiModel::from_env(model_id).build()?;
    let request = ModelRequest::new(vec![Message::user("Name three colors.")]);
    let mut stream = model.stream(request).await?;
    let mut assembler = StreamAssembler::new();
    while let Some(event) = stream.next().await {
        let event = event?;
        if let StreamEvent::BlockDelta(BlockDelta::Text(t)) = &event {
            print!("{t}");
        }
        assembler.push(event)?;
    }
    let response = assembler.finish()?;
    println!("\n[{:?}, {:?}]", response.stop_reason, response.usage);
    Ok(())
}
