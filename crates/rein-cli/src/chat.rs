//! `rein chat`: an interactive terminal agent with a small built-in tool set, a policy, a
//! spinner while the model thinks, streamed answers, one line per intervention decision, and
//! human approval of confirmed tool calls at the terminal. Ctrl-C cancels the running turn
//! (the agent's `CancelHandle`) and keeps the conversation; at the prompt it quits with status
//! 130.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use console::{Term, style};
use indicatif::{ProgressBar, ProgressStyle};
use rein_agent::{Agent, AgentEvent, AgentResult, Input, OnRetryLimit, PendingInterrupt};
use rein_core::{
    Error, ToolHandle,
    audit::{AnswerSource, DecisionAction, DecisionOutcome, DecisionRecord},
    interrupt::{Approval, InterruptEvent, InterruptPoint},
    message::InterruptResponse,
    stream::StopReason,
    tool::{ToolError, ToolOutput},
};
use rein_interventions::SharedHandler;
use rein_interventions::policy::{ConfirmTools, PolicyHandler};
use rein_models::SharedModel;
use serde_json::{Value, json};

mod demo;
mod input;

use demo::DemoModel;
use input::{Read, UserInput};

/// Options of `rein chat`.
/// The agent options `rein chat` and `rein serve` share.
#[derive(Debug, clap::Args)]
pub(crate) struct AgentArgs {
    /// A policy file (TOML or JSON) whose handlers guard the agent. Default: ask before
    /// `delete_file` runs.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The directory the file tools work in (they refuse paths outside it).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// The model: `demo` (a scripted demo model, no API needed) or `PROVIDER:MODEL`.
    #[arg(long, default_value = "demo")]
    model: String,
    /// The system prompt.
    #[arg(long)]
    pub(crate) system_prompt: Option<String>,
}

/// What [`AgentArgs`] select: the model, the policy's handlers, the tools under the root.
pub(crate) struct AgentParts {
    pub(crate) model: SharedModel,
    pub(crate) handlers: Vec<SharedHandler>,
    pub(crate) policy_label: String,
    pub(crate) root: PathBuf,
}

impl AgentArgs {
    /// Builds the parts; on bad input prints `<command>: <why>` and gives the exit status (2
    /// invalid input, 1 other failure).
    pub(crate) fn parts(&self, command: &str) -> Result<AgentParts, ExitCode> {
        let model = build_model(&self.model).map_err(|e| {
            eprintln!("{command}: {e}");
            ExitCode::from(2)
        })?;
        let (handlers, policy_label) = match &self.policy {
            // An `llm_judge` in the file asks the agent's own model.
            Some(path) => match crate::policies::load_file(path, Some(&model)) {
                Ok(handlers) => (handlers, format!("{} ({})", path.display(), "loaded")),
                Err(e) => {
                    eprintln!("{command}: invalid policy {}: {e}", path.display());
                    return Err(ExitCode::from(2));
                }
            },
            None => match default_policy() {
                Ok(h) => (
                    vec![SharedHandler::new(h)],
                    "built-in (approve delete_file)".to_owned(),
                ),
                Err(e) => {
                    eprintln!("{command}: {e}");
                    return Err(ExitCode::from(1));
                }
            },
        };
        let root = self.root.canonicalize().map_err(|e| {
            eprintln!("{command}: cannot use root {}: {e}", self.root.display());
            ExitCode::from(2)
        })?;
        Ok(AgentParts {
            model,
            handlers,
            policy_label,
            root,
        })
    }
}

/// Options of `rein chat`.
#[derive(Debug, clap::Args)]
pub(crate) struct ChatArgs {
    #[command(flatten)]
    agent: AgentArgs,
    /// When guidance on a response fails after the retries: `deny` withholds the response,
    /// `confirm` asks you whether to accept it anyway (SPEC §3.8).
    #[arg(long, value_enum, default_value_t = RetryLimit::Deny)]
    on_retry_limit: RetryLimit,
    /// A JSON Schema file: each answer must be a JSON value matching it (checked, sent back
    /// with its errors at most twice — SPEC §13), printed as JSON. Named after the file.
    #[arg(long, value_name = "FILE")]
    output_schema: Option<PathBuf>,
}

/// The largest `--output-schema` file read (bytes): a schema is a few KiB.
const MAX_SCHEMA_BYTES: u64 = 1 << 20;

/// The typed answer `--output-schema` asks for: its name (the file's stem) and schema.
fn output_schema(path: &Path) -> Result<(String, Value), String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read --output-schema {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_SCHEMA_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read --output-schema {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_SCHEMA_BYTES {
        return Err(format!(
            "--output-schema {}: larger than {MAX_SCHEMA_BYTES} bytes",
            path.display()
        ));
    }
    let schema = serde_json::from_str(&text)
        .map_err(|e| format!("--output-schema {}: not JSON: {e}", path.display()))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = stem.strip_suffix(".schema").unwrap_or(&stem);
    Ok((rein_core::tool::ToolSpec::name_from(stem), schema))
}

/// What `--on-retry-limit` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RetryLimit {
    /// Withhold the response (`DENIED: retry limit (<n>) reached`).
    Deny,
    /// Ask a human whether to accept the response anyway.
    Confirm,
}

/// Entry point of `rein chat`.
pub(crate) fn main(args: ChatArgs) -> ExitCode {
    let out = Term::stdout();
    let AgentParts {
        model,
        handlers,
        policy_label,
        root,
    } = match args.agent.parts("rein chat") {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut builder = Agent::builder()
        .name("rein-chat")
        .shared_model(model.clone())
        .tools(tools(&root))
        .interventions(handlers)
        .on_retry_limit(match args.on_retry_limit {
            RetryLimit::Deny => OnRetryLimit::Deny,
            RetryLimit::Confirm => OnRetryLimit::Confirm,
        });
    if let Some(p) = &args.agent.system_prompt {
        builder = builder.system_prompt(p.as_str());
    }
    if let Some(path) = &args.output_schema {
        match output_schema(path) {
            Ok((name, schema)) => builder = builder.output_schema(name, schema),
            Err(e) => {
                eprintln!("rein chat: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let typed = args.output_schema.is_some();
    let mut agent = match builder.build() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rein chat: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match crate::runtime("rein chat") {
        Ok(r) => r,
        Err(code) => return code,
    };
    // From here on Ctrl-C no longer kills the process: the chat loop handles it.
    let input = {
        let _context = runtime.enter();
        UserInput::new()
    };
    let mut input = match input {
        Ok(i) => i,
        Err(e) => {
            eprintln!("rein chat: cannot read the terminal: {e}");
            return ExitCode::from(1);
        }
    };

    let info = model.info();
    let model_label = if info.provider == "demo" {
        "the scripted demo model (no provider configured; it only knows a few requests)".to_owned()
    } else {
        format!("{} provider, model {}", info.provider, info.model_id)
    };
    let _ = out.write_line(&format!(
        "{} model: {model_label}\n     tools: {} (root {})\n     policy: {policy_label}\n     Type a request; end of input (or an empty line at a terminal) quits.\n     Ctrl-C cancels a running turn; at the prompt it quits.",
        style("rein chat").bold(),
        agent.tool_names().join(", "),
        root.display(),
    ));
    runtime.block_on(converse(&mut agent, &mut input, &out, typed))
}

/// The exit status after Ctrl-C at the prompt (or a second Ctrl-C in a turn being cancelled):
/// 128 + SIGINT, as shells report a process interrupted by Ctrl-C.
const EXIT_CTRL_C: u8 = 130;

/// Reads requests and runs them until the input ends, an empty line at a terminal, or Ctrl-C
/// at the prompt.
async fn converse(agent: &mut Agent, input: &mut UserInput, out: &Term, typed: bool) -> ExitCode {
    loop {
        if out.is_term() {
            let _ = out.write_str(&format!("{} ", style(">").cyan().bold()));
        }
        let line = match input.read().await {
            Read::Line(line) => line.trim().to_owned(),
            Read::End => return ExitCode::SUCCESS,
            Read::CtrlC => {
                // The shell's prompt starts on a line of its own.
                let _ = out.write_line("");
                return ExitCode::from(EXIT_CTRL_C);
            }
        };
        if line.is_empty() {
            if out.is_term() {
                return ExitCode::SUCCESS;
            }
            continue;
        }
        let mut request = Input::text(line);
        loop {
            let interrupts = match turn(agent, request, input, out, typed).await {
                Ok(Turn::Finished(r)) if r.stop_reason == StopReason::Interrupt => {
                    match agent.pending_interrupts() {
                        Some(p) => p.pending().to_vec(),
                        None => break,
                    }
                }
                Ok(Turn::Finished(_)) => break,
                Ok(Turn::Abandoned) => return ExitCode::from(EXIT_CTRL_C),
                // A bad answer (an edit that fails the tool's schema, say) changed nothing: the
                // same questions are asked again.
                Err(e @ Error::InvalidAnswer { .. }) => {
                    let _ = out.write_line(&format!("{} {e}", style("error:").red().bold()));
                    match agent.pending_interrupts() {
                        Some(p) => p.pending().to_vec(),
                        None => break,
                    }
                }
                Err(e) => {
                    let _ = out.write_line(&format!("{} {e}", style("error:").red().bold()));
                    if agent.pending_interrupts().is_some() {
                        agent.discard_interrupts();
                    }
                    break;
                }
            };
            match approve(interrupts, input, out).await {
                Some(responses) => request = Input::resume(responses),
                None => {
                    // Ctrl-C at an approval: nothing runs, the tool uses get an error result.
                    agent.discard_interrupts();
                    let _ = out.write_line(&cancelled_line());
                    break;
                }
            }
        }
    }
}

/// Asks `Approve <reason>? [y/N]` for each interrupt (`e <edit>` approves with an edit: JSON,
/// else text); `None` when Ctrl-C is pressed instead.
async fn approve(
    interrupts: Vec<PendingInterrupt>,
    input: &mut UserInput,
    out: &Term,
) -> Option<Vec<InterruptResponse>> {
    let mut responses = Vec::new();
    for PendingInterrupt {
        point,
        interrupt: i,
        ..
    } in interrupts
    {
        let _ = out.write_str(&format!(
            "{} {}{}? [y/N] ",
            style("Approve").yellow().bold(),
            i.prompt_text(),
            what_is_asked(&point),
        ));
        let _ = std::io::stdout().flush();
        let answer = match input.read().await {
            Read::Line(a) => a.trim().to_owned(),
            Read::End => String::new(),
            Read::CtrlC => {
                let _ = out.write_line("");
                return None;
            }
        };
        if !out.is_term() {
            // Echo the answer so a piped transcript reads like the session.
            let _ = out.write_line(&answer);
        }
        responses.push(i.answer(answer_value(answer)));
    }
    Some(responses)
}

/// What a pause holds, from where it was raised, for pauses other than a tool call's:
/// ` (input)`, ` (request)`, ` (response)`, ` (tool output)`.
fn what_is_asked(point: &InterruptPoint) -> String {
    let what = match point.event {
        InterruptEvent::BeforeInvocation => "input",
        InterruptEvent::BeforeModelCall => "request",
        InterruptEvent::AfterModelCall => "response",
        InterruptEvent::AfterToolCall => "tool output",
        _ => return String::new(),
    };
    format!(" {}", style(format!("({what})")).dim())
}

/// A typed answer: `e <edit>` / `edit <edit>` approves with an edit (a tool call's new input as
/// JSON, or a result's new text); anything else is the plain answer.
fn answer_value(answer: String) -> Value {
    let edit = answer
        .strip_prefix("e ")
        .or_else(|| answer.strip_prefix("edit "))
        .map(str::trim);
    match edit {
        Some(edit) => {
            let edit = serde_json::from_str(edit).unwrap_or_else(|_| Value::from(edit));
            Approval::approve().with_edit(edit).into()
        }
        None => Value::String(answer),
    }
}

/// The dimmed line printed when Ctrl-C cancelled a turn.
fn cancelled_line() -> String {
    style("cancelled").dim().to_string()
}

fn default_policy() -> Result<PolicyHandler, String> {
    PolicyHandler::new(
        "delete-approval",
        ConfirmTools {
            tools: vec!["delete_file".into()],
            prompt: "delete {path}".into(),
            response: None,
        },
    )
    .map_err(|e| e.to_string())
}

/// How a turn ended.
enum Turn {
    /// The invocation returned (its stop reason is `Cancelled` after Ctrl-C).
    Finished(Box<AgentResult>),
    /// Ctrl-C was pressed again while the turn was being cancelled: the invocation was dropped
    /// unfinished, and the chat ends.
    Abandoned,
}

/// Runs one invocation, printing as it goes. Ctrl-C cancels it through the agent's
/// [`CancelHandle`](rein_agent::CancelHandle); a second Ctrl-C abandons it.
async fn turn(
    agent: &mut Agent,
    request: Input,
    input: &mut UserInput,
    out: &Term,
    typed: bool,
) -> Result<Turn, Error> {
    let spinner_on = out.is_term();
    let mut spinner: Option<ProgressBar> = None;
    let mut streamed = String::new();
    let mut shown_output = false;
    let cancel = agent.cancel_handle();
    let mut cancelling = false;
    let mut stream = agent.stream(request);
    let mut result = None;
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            () = input.ctrl_c() => {
                if cancelling {
                    break;
                }
                cancelling = true;
                cancel.cancel();
                continue;
            }
        };
        let Some(event) = event else { break };
        let event = event?;
        if !matches!(event, AgentEvent::ModelCallStarted { .. })
            && let Some(s) = spinner.take()
        {
            s.finish_and_clear();
        }
        match event {
            AgentEvent::ModelCallStarted { .. } => {
                streamed.clear();
                if spinner_on {
                    let s = ProgressBar::new_spinner();
                    s.set_style(
                        ProgressStyle::default_spinner()
                            .template("{spinner} {msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    s.set_message("thinking…");
                    s.enable_steady_tick(Duration::from_millis(80));
                    spinner = Some(s);
                }
            }
            // A typed answer is printed once checked (below), not as it streams.
            AgentEvent::TextDelta(_) if typed => {}
            AgentEvent::Output { value } => {
                let json = serde_json::to_string_pretty(&value).unwrap_or_default();
                let _ = out.write_line(&json);
                shown_output = true;
            }
            AgentEvent::TextDelta(t) => {
                streamed.push_str(&t);
                let _ = out.write_str(&t);
                let _ = std::io::stdout().flush();
            }
            AgentEvent::ResponseDiscarded { reason, handler } => {
                if !streamed.is_empty() {
                    let _ = out.write_line("");
                }
                streamed.clear();
                // After Ctrl-C the `cancelled` line says it.
                if !cancelling {
                    let _ = out.write_line(&format!(
                        "{}",
                        style(match handler {
                            Some(h) => format!("(withdrawn by {h}: {reason})"),
                            None => format!("(withdrawn: {reason})"),
                        })
                        .dim()
                    ));
                }
            }
            AgentEvent::ResponseReplaced { message } => {
                if !streamed.is_empty() {
                    let _ = out.write_line("");
                }
                streamed = message.text();
                let _ = out.write_line(&format!("{} {}", style("(replaced)").dim(), streamed));
            }
            AgentEvent::ToolCallStarted { tool_use } => {
                if !streamed.is_empty() {
                    let _ = out.write_line("");
                    streamed.clear();
                }
                let _ = out.write_line(&format!(
                    "{}",
                    style(format!("→ {} {}", tool_use.name, tool_use.input)).dim()
                ));
            }
            AgentEvent::ToolResult(r) => {
                let text = one_line(&r.text(), 120);
                let line = format!("← {text}");
                let _ = out.write_line(&if r.is_error() {
                    style(line).red().to_string()
                } else {
                    style(line).dim().to_string()
                });
            }
            AgentEvent::Decision(d) => {
                if !streamed.is_empty() {
                    let _ = out.write_line("");
                    streamed.clear();
                }
                let _ = out.write_line(&decision_line(&d));
            }
            AgentEvent::Finished(r) => result = Some(r),
            _ => {}
        }
    }
    if let Some(s) = spinner.take() {
        s.finish_and_clear();
    }
    let Some(result) = result else {
        if cancelling {
            let _ = out.write_line("");
            return Ok(Turn::Abandoned);
        }
        return Err(Error::Internal("the invocation ended without a result"));
    };
    match result.stop_reason {
        StopReason::Interrupt => {}
        StopReason::Cancelled => {
            if !streamed.is_empty() {
                let _ = out.write_line("");
            }
            let _ = out.write_line(&cancelled_line());
        }
        _ if shown_output => {}
        _ => {
            let text = result.text();
            if streamed.is_empty() && !text.is_empty() {
                let _ = out.write_line(&text);
            } else if !streamed.is_empty() {
                let _ = out.write_line("");
            }
        }
    }
    Ok(Turn::Finished(Box::new(result)))
}

fn one_line(text: &str, max: usize) -> String {
    let flat = text.replace('\n', " ⏎ ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// A compact coloured line for one decision: `[deny] handler @ event: text`.
fn decision_line(d: &DecisionRecord) -> String {
    let action = match d.action {
        DecisionAction::Deny => style("deny".to_owned()).red().bold(),
        DecisionAction::Guide => style("guide".to_owned()).yellow().bold(),
        // What the human decided: asked, approved or rejected.
        DecisionAction::Confirm => match &d.confirmation {
            Some(c) => style(format!("confirm {}", c.status.as_str()))
                .cyan()
                .bold(),
            None => style("confirm".to_owned()).cyan().bold(),
        },
        DecisionAction::Transform => style("transform".to_owned()).blue().bold(),
        DecisionAction::Error => style("error".to_owned()).magenta().bold(),
        // A parallel handler cancelled by an earlier member's stop: it decided nothing.
        DecisionAction::None => style("skipped".to_owned()).dim(),
        // Recorded for its detail (an LLM judge's verdict): the call went ahead.
        DecisionAction::Proceed => style("proceed".to_owned()).green(),
        // A fallback chain moved on to its next model.
        DecisionAction::Fallback => style("fallback".to_owned()).yellow(),
        _ => style("decision".to_owned()).bold(),
    };
    let outcome = match d.outcome {
        DecisionOutcome::Applied => String::new(),
        DecisionOutcome::Shadowed => " (shadow)".into(),
        DecisionOutcome::Overridden => " (overridden)".into(),
        DecisionOutcome::Error => " (handler error)".into(),
        DecisionOutcome::NotRun => " (not run)".into(),
        _ => String::new(),
    };
    let text = d
        .text
        .as_deref()
        .map(|t| format!(": {}", one_line(t, 120)))
        .unwrap_or_default();
    let answer = match d
        .confirmation
        .as_ref()
        .and_then(|c| Some((c.answer.as_ref()?, c.source?)))
    {
        Some((answer, source)) => {
            let answer = answer
                .as_str()
                .map_or_else(|| answer.to_string(), str::to_owned);
            let from = match source {
                AnswerSource::Preemptive => "given in advance",
                _ => "on resume",
            };
            format!(" (answer {answer}, {from})")
        }
        None => String::new(),
    };
    format!(
        "  {} [{action}{outcome}] {} @ {}{text}{answer}",
        style("◆").dim(),
        style(&d.handler).bold(),
        d.event
    )
}

// ---- model ----

/// The model for `--model`: `demo`, or `PROVIDER:MODEL` with a provider compiled in through this
/// crate's features `openai` / `anthropic` / `ollama` / `bedrock` (credentials and base URLs
/// from the environment, as
/// `rein_models` reads them). To add a provider: a feature forwarding to `rein-models`, and an
/// arm here.
fn build_model(spec: &str) -> Result<SharedModel, String> {
    if spec == "demo" {
        return Ok(SharedModel::new(DemoModel::default()));
    }
    let Some((provider, model_id)) = spec.split_once(':').filter(|(_, m)| !m.is_empty()) else {
        return Err(format!(
            "invalid --model `{spec}`: use `demo` or PROVIDER:MODEL (e.g. openai:gpt-4o-mini)"
        ));
    };
    // Without a provider feature, the model id is only checked for presence.
    let _ = model_id;
    match provider {
        #[cfg(feature = "openai")]
        "openai" => rein_models::OpenAiModel::from_env(model_id)
            .build()
            .map(SharedModel::new)
            .map_err(|e| format!("OpenAI provider: {e}")),
        #[cfg(feature = "anthropic")]
        "anthropic" => rein_models::AnthropicModel::from_env(model_id)
            .build()
            .map(SharedModel::new)
            .map_err(|e| format!("Anthropic provider: {e}")),
        #[cfg(feature = "ollama")]
        "ollama" => rein_models::OllamaModel::from_env(model_id)
            .build()
            .map(SharedModel::new)
            .map_err(|e| format!("Ollama provider: {e}")),
        #[cfg(feature = "bedrock")]
        "bedrock" => rein_models::BedrockModel::from_env(model_id)
            .build()
            .map(SharedModel::new)
            .map_err(|e| format!("Bedrock provider: {e}")),
        #[cfg(not(feature = "openai"))]
        "openai" => Err(not_built(spec, provider)),
        #[cfg(not(feature = "anthropic"))]
        "anthropic" => Err(not_built(spec, provider)),
        #[cfg(not(feature = "ollama"))]
        "ollama" => Err(not_built(spec, provider)),
        #[cfg(not(feature = "bedrock"))]
        "bedrock" => Err(not_built(spec, provider)),
        other => Err(format!(
            "unknown provider `{other}` in --model `{spec}` (known: openai, anthropic, ollama, \
             bedrock; or `demo`)"
        )),
    }
}

#[cfg(not(all(
    feature = "openai",
    feature = "anthropic",
    feature = "ollama",
    feature = "bedrock"
)))]
fn not_built(spec: &str, provider: &str) -> String {
    format!(
        "provider support not built: `--model {spec}` needs `rein` built with `--features \
         {provider}` (this one has only the scripted demo model, `--model demo`)"
    )
}

// ---- tools ----

pub(crate) fn tools(root: &Path) -> Vec<ToolHandle> {
    let root = Arc::new(root.to_path_buf());
    let path_schema = json!({
        "type": "object",
        "properties": {"path": {"type": "string", "description": "A path relative to the root."}},
        "required": ["path"]
    });
    let r1 = Arc::clone(&root);
    let r2 = Arc::clone(&root);
    let r3 = root;
    vec![
        ToolHandle::from_sync_fn(
            "read_file",
            "Read a text file under the root directory.",
            path_schema.clone(),
            move |input, _| {
                let path = resolve(&r1, &input)?;
                let bytes = std::fs::read(&path)
                    .map_err(|e| ToolError::msg(format!("cannot read {}: {e}", path.display())))?;
                let mut text = String::from_utf8_lossy(&bytes).into_owned();
                if text.len() > 16_000 {
                    let mut cut = 16_000;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                    text.push_str("\n[truncated]");
                }
                Ok(ToolOutput::text(text))
            },
        ),
        ToolHandle::from_sync_fn(
            "list_dir",
            "List a directory under the root directory.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            move |input, _| {
                let path = resolve(&r2, &input)?;
                let entries = std::fs::read_dir(&path)
                    .map_err(|e| ToolError::msg(format!("cannot list {}: {e}", path.display())))?;
                let mut names: Vec<String> = entries
                    .filter_map(Result::ok)
                    .map(|e| {
                        let mut name = e.file_name().to_string_lossy().into_owned();
                        if e.file_type().is_ok_and(|t| t.is_dir()) {
                            name.push('/');
                        }
                        name
                    })
                    .collect();
                names.sort();
                Ok(ToolOutput::text(names.join("\n")))
            },
        ),
        ToolHandle::from_sync_fn(
            "current_time",
            "The current date and time (UTC).",
            json!({"type": "object", "properties": {}}),
            |_, _| Ok(ToolOutput::text(utc_now())),
        ),
        ToolHandle::from_sync_fn(
            "delete_file",
            "Delete a file under the root directory (demo: nothing is removed).",
            path_schema,
            move |input, _| {
                let path = resolve(&r3, &input)?;
                Ok(ToolOutput::text(format!(
                    "deleted {} (demo: nothing was removed)",
                    path.strip_prefix(r3.as_path()).unwrap_or(&path).display()
                )))
            },
        ),
    ]
}

/// The input's `path` (default `.`) under `root`; paths that leave the root are refused.
fn resolve(root: &Path, input: &Value) -> Result<PathBuf, ToolError> {
    let rel = input.get("path").and_then(Value::as_str).unwrap_or(".");
    let candidate = root.join(rel);
    let mut normal = PathBuf::new();
    for c in candidate.components() {
        match c {
            std::path::Component::ParentDir => {
                normal.pop();
            }
            std::path::Component::CurDir => {}
            other => normal.push(other),
        }
    }
    // Symlinks may point anywhere: compare the real path when the file exists.
    let real = normal.canonicalize().unwrap_or_else(|_| normal.clone());
    if !real.starts_with(root) {
        return Err(ToolError::msg(format!(
            "{rel} is outside the root directory"
        )));
    }
    Ok(real)
}

/// Now, as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn a_parallel_handler_not_run_is_shown_as_skipped() {
        let d = DecisionRecord::new(
            "judge",
            rein_core::audit::EventKind::BeforeToolCall,
            DecisionAction::None,
            DecisionOutcome::NotRun,
        );
        let line = console::strip_ansi_codes(&decision_line(&d)).into_owned();
        assert!(line.contains("[skipped (not run)] judge"), "{line}");
    }

    #[test]
    fn resolve_stays_under_root() {
        let root = std::env::temp_dir().canonicalize().unwrap();
        assert!(resolve(&root, &json!({"path": "../../etc/passwd"})).is_err());
        assert!(resolve(&root, &json!({"path": "a/../b.txt"})).is_ok());
        assert!(resolve(&root, &json!({})).is_ok());
    }
}
