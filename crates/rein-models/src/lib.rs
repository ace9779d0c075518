//! Rein's model layer: the [`Model`] trait that every provider implements, its type-erased
//! twin [`SharedModel`], and [`ScriptedModel`] for tests, demos and benchmarks.
//!
//! Providers live behind cargo features of this crate:
//!
//! | feature | provider |
//! |---|---|
//! | `openai` | [`OpenAiModel`]: OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp, LM Studio, LiteLLM, Ollama `/v1`) |
//! | `openai-responses` | [`OpenAiResponsesModel`]: OpenAI's Responses API (`/v1/responses`: OpenAI, Azure OpenAI, llama.cpp, vLLM), encrypted reasoning kept across a tool loop |
//! | `gemini` | [`GeminiModel`]: the Gemini API's `streamGenerateContent` (thought signatures kept across a tool loop) |
//! | `anthropic` | [`AnthropicModel`]: Anthropic Messages |
//! | `ollama` | [`OllamaModel`]: Ollama's native `/api/chat` (NDJSON streaming, thinking, tools) |
//! | `bedrock` | [`BedrockModel`]: AWS Bedrock `ConverseStream` (binary event stream; SigV4 from [`AwsCredentials`] or an [`AwsCredentialsProvider`], or a Bedrock API key) |
//! | `test-util` | [`conformance`]: the provider-conformance suite and its local fixture server |
//! | `http-kit` | [`http`]: the provider kit, the HTTP plumbing the providers above are built on (enabled by each of them) |
//!
//! Combinators wrap any model: [`FallbackModel`] tries its models in order, moving on by error
//! class; [`LimitedModel`] calls through a shared [`RateLimiter`] (in flight, requests and
//! tokens per minute).
//!
//! HTTP failures become typed [`ModelError`]s (see `docs/providers.md` for the mapping):
//! `is_retryable()` and `retry_after()` drive the agent's retry strategy.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod fallback;
#[cfg(feature = "http-kit")]
pub mod http;
mod limit;
mod model;
mod scripted;
#[cfg(all(
    test,
    any(
        feature = "openai",
        feature = "gemini",
        feature = "anthropic",
        feature = "ollama",
        feature = "bedrock"
    )
))]
mod test_requests;

#[cfg(feature = "anthropic")]
mod anthropic;
#[cfg(feature = "bedrock")]
mod bedrock;
#[cfg(feature = "test-util")]
pub mod conformance;
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "gemini")]
mod gemini;
#[cfg(feature = "ollama")]
mod ollama;
#[cfg(feature = "openai")]
mod openai;
#[cfg(feature = "openai-responses")]
mod openai_responses;

#[cfg(feature = "anthropic")]
pub use anthropic::{
    ANTHROPIC_API_VERSION, ANTHROPIC_DEFAULT_BASE_URL, ANTHROPIC_DEFAULT_MAX_TOKENS,
    AnthropicModel, AnthropicModelBuilder,
};
#[cfg(feature = "bedrock")]
pub use bedrock::{AwsCredentials, AwsCredentialsProvider, BedrockModel, BedrockModelBuilder};
pub use fallback::FallbackModel;
#[cfg(feature = "gemini")]
pub use gemini::{GEMINI_DEFAULT_BASE_URL, GeminiModel, GeminiModelBuilder};
pub use limit::{LimitedModel, RateLimiter, RateLimiterBuilder};
pub use model::{Model, ModelInfo, ModelStream, SharedModel};
#[cfg(feature = "ollama")]
pub use ollama::{OLLAMA_DEFAULT_BASE_URL, OllamaModel, OllamaModelBuilder};
#[cfg(feature = "openai")]
pub use openai::{OPENAI_DEFAULT_BASE_URL, OpenAiModel, OpenAiModelBuilder};
#[cfg(feature = "openai-responses")]
pub use openai_responses::{OpenAiResponsesModel, OpenAiResponsesModelBuilder};
// Everything a provider author names, so a provider compiles with `rein-models` alone.
/// The `futures-util` crate (0.3) the [`ModelStream`] type is built with: its `stream`
/// combinators build a provider's event stream, `StreamExt` reads one.
pub use futures_util as futures;
pub use rein_core::{
    Error, Map, ModelError,
    error::{BuildError, ModelErrorKind},
    message::{
        Bytes, ContentBlock, DocumentBlock, ImageBlock, MediaSource, Message, ProviderState,
        ReasoningContent, ReasoningText, Role, ToolResult, ToolResultContent, ToolResultStatus,
        ToolUse,
    },
    request::{CachePoints, InferenceConfig, ModelRequest, ToolChoice},
    stream::{
        BlockDelta, BlockStart, FallbackRoute, ModelResponse, SkippedModel, StopReason,
        StreamAssembler, StreamEvent, StreamMetrics, Usage,
    },
    tool::{BoxFuture, ToolSpec},
};
pub use scripted::{ConversationModel, ScriptedModel, ScriptedModelBuilder, ScriptedResponse};

/// `docs/providers.md`: its Rust snippets run as doc tests, with `rein-models` alone.
#[cfg(all(
    doctest,
    feature = "openai",
    feature = "openai-responses",
    feature = "gemini",
    feature = "anthropic",
    feature = "ollama",
    feature = "bedrock",
    feature = "test-util"
))]
#[doc = include_str!("../../../docs/providers.md")]
struct ProvidersGuide;
