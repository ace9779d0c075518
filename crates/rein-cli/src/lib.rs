//! The `rein` command line, as a library: [`run`] is the whole program (the `rein` binary calls
//! it), so the integration tests and other tools can drive the same code.
//!
//! - `rein replay SCENARIO.json` runs a scenario file offline against its scripted model, with
//!   interventions built from its declarative policy (or the policy file of `--policy`), and
//!   prints the transcript as JSON; with `--expect FILE` (or `--bless`) it compares the
//!   transcript with a blessed one (or writes it), and given a directory it runs every scenario
//!   in it as a suite (`docs/replay.md`). The [`replay`] module does the same for `cargo test`.
//! - `rein chat` is an interactive terminal agent: streamed answers, one line per intervention
//!   decision, `Approve <prompt>? [y/N]` for tool calls that need a human, and Ctrl-C to cancel
//!   a running turn.
//! - `rein serve` serves the same agent to a browser over AG-UI (`rein-agui`), with the approval
//!   console at the printed URL (it carries the token the server requires).
//! - `rein mcp serve` serves the same tools to any MCP client (stdio, or Streamable HTTP with
//!   `--http ADDR`), each call behind the same policy; a Confirm is asked of the client as an
//!   elicitation.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod chat;
mod mcp;
mod policies;
pub mod replay;
mod scenario;
mod serve;
mod users;

/// Rein's command line.
#[derive(Debug, Parser)]
#[command(
    name = "rein",
    version,
    about = "Rein agent SDK: replay scenarios, chat with an agent, serve it to a browser or an MCP client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario file offline against its scripted model and print the transcript (JSON);
    /// or compare it with an expected one; or run a directory of scenarios as a suite.
    ///
    /// Exit status: 0 when the scenario ran (whatever its stop reasons) and, comparing, every
    /// transcript is the expected one; 1 when one differs, has no expected transcript, or
    /// anything else fails; 2 for an invalid scenario or policy (the message names the JSON path
    /// of the problem).
    Replay(ReplayArgs),
    /// Chat with an agent in the terminal; tool calls that need approval are asked here.
    Chat(chat::ChatArgs),
    /// Serve the agent to a browser over AG-UI, with an approval console (prints its URL, with
    /// the random token the server requires unless --token gives one).
    Serve(serve::ServeArgs),
    /// Serve the tools to an MCP client (stdio, or Streamable HTTP with --http), each call
    /// behind the policy.
    Mcp(mcp::McpArgs),
}

/// `rein replay`'s arguments.
#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// A scenario file (JSON), or a directory: every `NAME.json` in it (not `*.expected.json`)
    /// compared with `NAME.expected.json` beside it, one summary line.
    path: PathBuf,
    /// A policy file (TOML or JSON, loaded as an app loads it) in place of each scenario's
    /// `policy` or `policy_file`.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Compare the scenario's transcript with this one (random ids ignored): a unified diff and
    /// exit 1 when they differ.
    #[arg(long, value_name = "FILE")]
    expect: Option<PathBuf>,
    /// Write the transcript as the expected one (`--expect FILE`, default `NAME.expected.json`
    /// beside the scenario) instead of comparing.
    #[arg(long)]
    bless: bool,
    /// Also write the results as JUnit XML to this file (with a directory, `--expect` or
    /// `--bless`).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

fn replay_main(args: ReplayArgs) -> ExitCode {
    let mut options = replay::Replay::new().bless(args.bless);
    if let Some(p) = &args.policy {
        options = options.policy(p);
    }
    let suite = if args.path.is_dir() {
        if args.expect.is_some() {
            eprintln!(
                "rein replay: --expect names one scenario's expected transcript; a directory's are NAME.expected.json"
            );
            return ExitCode::from(2);
        }
        match options.suite(&args.path) {
            Ok(suite) => suite,
            Err(e) => {
                eprintln!("rein replay: {e}");
                return ExitCode::from(1);
            }
        }
    } else if args.expect.is_some() || args.bless {
        let expected = args
            .expect
            .clone()
            .unwrap_or_else(|| replay::expected_path(&args.path));
        replay::Suite::of_one(options.check(&args.path, expected))
    } else {
        if args.junit.is_some() {
            eprintln!("rein replay: --junit needs a directory, --expect or --bless");
            return ExitCode::from(2);
        }
        return print_transcript(&options, &args.path);
    };
    println!("{}", suite.report());
    if let Some(file) = &args.junit
        && let Err(e) = std::fs::write(file, suite.junit_xml())
    {
        eprintln!("rein replay: cannot write {}: {e}", file.display());
        return ExitCode::from(1);
    }
    if suite.has_invalid() {
        ExitCode::from(2)
    } else if suite.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_transcript(options: &replay::Replay, scenario: &std::path::Path) -> ExitCode {
    match options.transcript(scenario) {
        Ok(transcript) => match serde_json::to_string_pretty(&transcript) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rein replay: cannot write the transcript: {e}");
                ExitCode::from(1)
            }
        },
        Err(e @ replay::ReplayError::Invalid(_)) => {
            eprintln!("rein replay: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("rein replay: {e}");
            ExitCode::from(1)
        }
    }
}

/// The single-threaded runtime a command runs on; on failure prints `<command>: <why>` and gives
/// exit status 1.
pub(crate) fn runtime(command: &str) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("{command}: cannot start the runtime: {e}");
            ExitCode::from(1)
        })
}

/// A bearer token from the command line: never shown by `Debug`.
#[derive(Clone)]
pub(crate) struct Token(pub(crate) String);

impl std::str::FromStr for Token {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Runs the `rein` command with the process arguments; returns the exit status (0 ran, 2 invalid
/// input, 1 other failure).
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay(args) => replay_main(args),
        Command::Chat(args) => chat::main(args),
        Command::Serve(args) => serve::main(args),
        Command::Mcp(args) => mcp::main(args),
    }
}
