//! Streams one answer from AWS Bedrock, configured from the standard AWS variables: `AWS_REGION`
//! (or `AWS_DEFAULT_REGION`), and `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
//! `AWS_SESSION_TOKEN` or a Bedrock API key in `AWS_BEARER_TOKEN_BEDROCK`;
//! `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` for another endpoint.
//!
//! `cargo run -p rein-models --features bedrock --example stream_bedrock -- [model-id]`

use futures_util::StreamExt;
use rein_core::{BlockDelta, Message, StreamEvent};
use rein_models::{BedrockModel, Model, ModelRequest, StreamAssembler};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model_id = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "us.amazon.nova-lite-v1:0".into());
    let model = BedrockModel::from_env(model_id).build()?;
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
