//! Token estimates of a request (SPEC §6.1): a cheap heuristic, calibrated from the usage the
//! provider reports as the run goes.
//!
//! The heuristic counts UTF-8 bytes / 4 per part (English text and JSON run at 3.5–4.5 bytes
//! per token in the BPE tokenizers of current models), plus a few tokens per message and per
//! tool for the chat template's markers, plus fixed guesses for images and documents (their
//! real cost depends on the provider's rendering, which the request does not show). No
//! tokenizer: the model's own is unknown to the agent and differs per provider; the
//! calibration absorbs the difference.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rein_core::{
    ContentBlock, Map, Message,
    message::{ReasoningContent, ToolResultContent},
    stream::Usage,
    tool::ToolSpec,
};
use serde::{Deserialize, Serialize};

/// UTF-8 bytes per token of the heuristic.
const BYTES_PER_TOKEN: u64 = 4;
/// Tokens of a chat template's markers around a message (role, separators).
const MESSAGE_OVERHEAD: u64 = 4;
/// Tokens of a tool declaration's framing.
const TOOL_OVERHEAD: u64 = 8;
/// An image or a document: a fixed guess (providers charge ~85–1 600 tokens per image).
const ATTACHMENT_TOKENS: u64 = 1_000;
/// Weight of a new sample in the smoothed ratio (an exponential moving average).
const SMOOTHING: f64 = 0.3;
/// Bounds of the ratio: a provider reporting nonsense cannot make the estimate zero or huge.
const MIN_RATIO: f64 = 0.1;
const MAX_RATIO: f64 = 10.0;
/// The key of the conversation's token calibration in a stored agent state: the agent holds
/// the calibration itself and adds it to the state it saves with sessions and checkpoints
/// (taking it back on restore). A server showing a stored state to clients may hide it.
pub const TOKEN_CALIBRATION_KEY: &str = "rein:token_calibration";

/// A per-conversation estimate of input tokens: the heuristic times a ratio learnt from the
/// provider's reported input tokens for the requests it estimated.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenEstimator {
    ratio: f64,
    samples: u32,
}

impl Default for TokenEstimator {
    fn default() -> Self {
        Self {
            ratio: 1.0,
            samples: 0,
        }
    }
}

impl TokenEstimator {
    /// The calibration ratio: reported input tokens per heuristic token (1.0 until a call
    /// reported usage).
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// How many model calls calibrated the estimate.
    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// The calibrated estimate of `raw` heuristic tokens.
    pub fn calibrated(&self, raw: u64) -> u64 {
        // f64 to u64 saturates; the ratio is bounded.
        (raw as f64 * self.ratio).ceil() as u64
    }

    /// The calibrated estimate of one message.
    pub fn message(&self, message: &Message) -> u64 {
        self.calibrated(raw_message(message))
    }

    /// The calibrated estimate of a request's input: system prompt, tools and messages.
    pub fn request(&self, system: Option<&str>, tools: &[ToolSpec], messages: &[Message]) -> u64 {
        self.calibrated(raw_parts(system, tools, messages))
    }

    /// Learns from a call: `raw` is the heuristic's count of the request sent, `usage` what
    /// the provider reported for it (see [`prompt_tokens`]).
    pub(crate) fn calibrate(&mut self, raw: u64, usage: &Usage) -> bool {
        let reported = prompt_tokens(usage);
        if raw == 0 || reported == 0 {
            return false;
        }
        let sample = (reported as f64 / raw as f64).clamp(MIN_RATIO, MAX_RATIO);
        // Clamped again: the average of two bounded ratios can round past a bound.
        self.ratio = if self.samples == 0 {
            sample
        } else {
            (SMOOTHING * sample + (1.0 - SMOOTHING) * self.ratio).clamp(MIN_RATIO, MAX_RATIO)
        };
        self.samples = self.samples.saturating_add(1);
        true
    }

    /// A usable estimator: finite ratio within the bounds.
    fn is_valid(&self) -> bool {
        self.ratio.is_finite() && (MIN_RATIO..=MAX_RATIO).contains(&self.ratio)
    }
}

/// The conversation's calibration, held by the agent and learnt during a model call through
/// a shared reference (the call's future reads the agent). Only the invocation in progress
/// writes it.
#[derive(Debug)]
pub(crate) struct Calibration {
    ratio_bits: AtomicU64,
    samples: AtomicU32,
}

impl Default for Calibration {
    fn default() -> Self {
        Self::new(TokenEstimator::default())
    }
}

impl Calibration {
    fn new(e: TokenEstimator) -> Self {
        Self {
            ratio_bits: AtomicU64::new(e.ratio.to_bits()),
            samples: AtomicU32::new(e.samples),
        }
    }

    pub(crate) fn get(&self) -> TokenEstimator {
        TokenEstimator {
            ratio: f64::from_bits(self.ratio_bits.load(Ordering::Relaxed)),
            samples: self.samples.load(Ordering::Relaxed),
        }
    }

    fn set(&self, e: TokenEstimator) {
        self.ratio_bits.store(e.ratio.to_bits(), Ordering::Relaxed);
        self.samples.store(e.samples, Ordering::Relaxed);
    }

    /// Learns from a call (see [`TokenEstimator::calibrate`]).
    pub(crate) fn calibrate(&self, raw: u64, usage: &Usage) {
        let mut e = self.get();
        if e.calibrate(raw, usage) {
            self.set(e);
        }
    }

    /// Takes the calibration a stored agent state carries (sessions and checkpoints keep it
    /// under [`TOKEN_CALIBRATION_KEY`]); an unreadable one is dropped and the default used.
    pub(crate) fn take_from(&self, state: &mut Map) {
        let stored = state
            .remove(TOKEN_CALIBRATION_KEY)
            .and_then(|v| serde_json::from_value::<TokenEstimator>(v).ok())
            .filter(TokenEstimator::is_valid);
        self.set(stored.unwrap_or_default());
    }

    /// Puts the calibration into an agent state about to be stored (nothing before the first
    /// calibrated call).
    pub(crate) fn put_into(&self, state: &mut Map) {
        let e = self.get();
        if e.samples > 0
            && let Ok(v) = serde_json::to_value(e)
        {
            state.insert(TOKEN_CALIBRATION_KEY.to_owned(), v);
        }
    }
}

/// The whole prompt a provider reports having read. Providers differ on whether their input
/// count includes prompt-cache tokens: OpenAI's, llama.cpp's and Gemini's include the cached
/// tokens (read ≤ input, no writes reported); Anthropic's and Bedrock's count them apart (and
/// report cache writes). A report with writes, or with more read than input, is of the second
/// kind. The one ambiguous case — an Anthropic-style read smaller than the uncached input,
/// with no write — is taken as the first and undercounts by the read; the smoothing blunts it.
fn prompt_tokens(usage: &Usage) -> u64 {
    let (read, write) = (
        usage.cache_read_input_tokens,
        usage.cache_write_input_tokens,
    );
    if write > 0 || read > usage.input_tokens {
        usage
            .input_tokens
            .saturating_add(read)
            .saturating_add(write)
    } else {
        usage.input_tokens
    }
}

fn text(s: &str) -> u64 {
    (s.len() as u64).div_ceil(BYTES_PER_TOKEN)
}

fn json(v: &serde_json::Value) -> u64 {
    /// Counts the bytes written to it: the serialized size without building the bytes (this
    /// runs over every tool schema and tool input of a request, on every model call).
    struct Counted(u64);
    impl std::io::Write for Counted {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counted = Counted(0);
    // A serialization error cannot happen for a `Value`; count nothing then.
    match serde_json::to_writer(&mut counted, v) {
        Ok(()) => counted.0.div_ceil(BYTES_PER_TOKEN),
        Err(_) => 0,
    }
}

fn raw_block(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text(t) => text(t),
        ContentBlock::ToolUse(u) => text(&u.name) + text(&u.tool_use_id) + json(&u.input),
        ContentBlock::ToolResult(r) => {
            text(&r.tool_use_id)
                + r.content
                    .iter()
                    .map(|c| match c {
                        ToolResultContent::Text(t) => text(t),
                        ToolResultContent::Json(v) => json(v),
                        _ => ATTACHMENT_TOKENS,
                    })
                    .sum::<u64>()
        }
        ContentBlock::ReasoningContent(r) => match &**r {
            ReasoningContent::ReasoningText(t) => text(&t.text),
            // Redacted reasoning goes back to the provider as opaque bytes.
            ReasoningContent::RedactedContent(b) => (b.0.len() as u64).div_ceil(BYTES_PER_TOKEN),
            #[allow(unreachable_patterns)]
            _ => 0,
        },
        ContentBlock::InterruptResponse(r) => json(&r.response),
        // Its text and the lead-in a provider sends before it.
        ContentBlock::Summary(s) => text(&s.text) + 9,
        _ => ATTACHMENT_TOKENS,
    }
}

/// The heuristic's count of one message.
pub(crate) fn raw_message(message: &Message) -> u64 {
    MESSAGE_OVERHEAD + message.content.iter().map(raw_block).sum::<u64>()
}

/// The heuristic's count of the system prompt and tool declarations: what every request of
/// the agent carries besides its messages.
pub(crate) fn raw_fixed(system: Option<&str>, tools: &[ToolSpec]) -> u64 {
    system.map_or(0, |s| MESSAGE_OVERHEAD + text(s))
        + tools
            .iter()
            .map(|t| {
                TOOL_OVERHEAD
                    + text(&t.name)
                    + text(&t.description)
                    + crate::schema_cache::token_count(&t.input_schema, json)
            })
            .sum::<u64>()
}

fn raw_parts(system: Option<&str>, tools: &[ToolSpec], messages: &[Message]) -> u64 {
    raw_fixed(system, tools) + messages.iter().map(raw_message).sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heuristic_counts_bytes_over_four_plus_overheads() {
        let m = Message::user("x".repeat(40));
        assert_eq!(raw_message(&m), 4 + 10);
        let tools = [ToolSpec::new("abcd", "efgh", serde_json::json!({}))];
        assert_eq!(
            raw_fixed(Some("abcdefgh"), &tools),
            (4 + 2) + (8 + 1 + 1 + 1)
        );
    }

    #[test]
    fn calibration_follows_reported_usage_and_resists_nonsense() {
        let mut e = TokenEstimator::default();
        assert_eq!(e.calibrated(100), 100);
        assert!(e.calibrate(100, &Usage::new(150, 1)));
        assert_eq!(e.calibrated(100), 150, "the first sample sets the ratio");
        assert!(e.calibrate(100, &Usage::new(150, 1)));
        assert_eq!(e.calibrated(1000), 1500, "a steady ratio stays");
        // A zero report teaches nothing.
        assert!(!e.calibrate(100, &Usage::new(0, 1)));
        assert_eq!(e.samples(), 2);
        // Cached tokens count once, whichever way the provider reports them.
        let openai_style = Usage::new(150, 1).with_cache_tokens(140, 0);
        let anthropic_style = Usage::new(10, 1).with_cache_tokens(130, 10);
        assert_eq!(prompt_tokens(&openai_style), 150);
        assert_eq!(prompt_tokens(&anthropic_style), 150);
        assert!(e.calibrate(100, &openai_style) && e.calibrate(100, &anthropic_style));
        assert_eq!(e.calibrated(1000), 1500);
        // A hostile report moves the ratio only within its bounds.
        assert!(e.calibrate(1, &Usage::new(u64::MAX, 1)));
        assert!(e.ratio() <= MAX_RATIO);
        assert!(e.calibrated(u64::MAX) == u64::MAX, "saturates, never wraps");
        // Steady reports at a bound settle on it, never a rounding past it (a stored ratio
        // outside the bounds is read back as unusable).
        for _ in 0..200 {
            e.calibrate(1_000, &Usage::new(1, 1));
            assert!(e.is_valid(), "{e:?}");
        }
        assert!(e.ratio() - MIN_RATIO < 1e-6, "{e:?}");
    }

    #[test]
    fn calibration_round_trips_through_a_stored_state_and_ignores_garbage() {
        let c = Calibration::default();
        let mut map = Map::new();
        c.put_into(&mut map);
        assert!(map.is_empty(), "nothing stored before a calibrated call");
        c.calibrate(100, &Usage::new(130, 1));
        c.put_into(&mut map);
        let restored = Calibration::default();
        restored.take_from(&mut map);
        assert_eq!(restored.get(), c.get());
        assert!(map.is_empty(), "taken out of the live state");
        for garbage in [
            serde_json::json!({"ratio": -5.0, "samples": 1}),
            serde_json::json!("nonsense"),
        ] {
            map.insert(TOKEN_CALIBRATION_KEY.to_owned(), garbage);
            restored.take_from(&mut map);
            assert_eq!(restored.get(), TokenEstimator::default());
        }
    }
}
