//! Streams one answer from AWS Bedrock, configured from the standard AWS variables: `AWS_REGION`
//! (or `AWS_DEFAULT_REGION`), and `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
//! `AWS_SESSION_TOKEN` or a Bedrock API key in `AWS_BEARER_TOKEN_BEDROCK`;
//! `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` for another endpoint. Reasoning, when the model streams
//! some, goes to stderr.
//!
//! `cargo run -p rein-models --features bedrock --example stream_bedrock -- [model-id] [prompt]`

use futures_util::StreamExt;
use rein_core::{
    Message,
    stream::{BlockDelta, StreamEvent},
};
use rein_models::{BedrockModel, Model, ModelRequest, StreamAssembler};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model_id = args
        .next()
        .unwrap_or_else(|| "us.amazon.nova-lite-v1:0".into());
    let prompt = args.next().unwrap_or_else(|| "Name three colors.".into());
    let model = BedrockModel::from_env(model_id).build()?;
    let auth = if model.uses_bearer_token() {
        "API key"
    } else {
        "SigV4"
    };
    eprintln!("[{} via {}, {auth}]", model.region(), model.endpoint());

    let mut events = model
        .stream(ModelRequest::new(vec![Message::user(prompt)]))
        .await?;
    let mut assembler = StreamAssembler::new();
    while let Some(event) = events.next().await.transpose()? {
        match &event {
            StreamEvent::BlockDelta(BlockDelta::Text(t)) => print!("{t}"),
            StreamEvent::BlockDelta(BlockDelta::ReasoningText(t)) => eprint!("{t}"),
            _ => {}
        }
        assembler.push(event)?;
    }
    let done = assembler.finish()?;
    let u = done.usage;
    eprintln!(
        "\n[{:?}; tokens in {} out {}, cache read {} write {}]",
        done.stop_reason,
        u.input_tokens,
        u.output_tokens,
        u.cache_read_input_tokens,
        u.cache_write_input_tokens
    );
    Ok(())
}
