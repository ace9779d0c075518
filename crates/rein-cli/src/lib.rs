//! The `rein` command line, as a library: [`run`] is the whole program (the `rein` binary calls
//! it), so the integration tests and other tools can drive the same code.
//!
//! - `rein replay SCENARIO.json` runs a scenario file offline against its scripted model, with
//!   interventions built from its declarative policy, and prints the transcript as JSON
//!   (`docs/replay.md`).
//! - `rein chat` is an interactive terminal agent: streamed answers, one line per intervention
//!   decision, `Approve <prompt>? [y/N]` for tool calls that need a human, and Ctrl-C to cancel
//!   a running turn.
//! - `rein serve` serves the same agent to a browser over AG-UI (`rein-agui`), with the approval
//!   console at the printed URL (it carries the token the server requires).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod chat;
mod policies;
mod replay;
mod scenario;
mod serve;

/// Rein's command line.
#[derive(Debug, Parser)]
#[command(
    name = "rein",
    version,
    about = "Rein agent SDK: replay scenarios, chat with an agent, serve it to a browser"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario file offline against its scripted model and print the transcript (JSON).
    ///
    /// Exit status: 0 when the scenario ran (whatever its stop reasons), 2 for an invalid
    /// scenario (the message names the JSON path of the problem), 1 for any other failure.
    Replay {
        /// The scenario file (JSON).
        scenario: PathBuf,
    },
    /// Chat with an agent in the terminal; tool calls that need approval are asked here.
    Chat(chat::ChatArgs),
    /// Serve the agent to a browser over AG-UI, with an approval console (prints its URL, with
    /// the random token the server requires unless --token gives one).
    Serve(serve::ServeArgs),
}

/// Runs the `rein` command with the process arguments; returns the exit status (0 ran, 2 invalid
/// input, 1 other failure).
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay { scenario } => match replay::replay_file(&scenario) {
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
            Err(replay::ReplayError::Invalid(e)) => {
                eprintln!("rein replay: invalid scenario {}: {e}", scenario.display());
                ExitCode::from(2)
            }
            Err(replay::ReplayError::Internal(e)) => {
                eprintln!("rein replay: {e}");
                ExitCode::from(1)
            }
        },
        Command::Chat(args) => chat::main(args),
        Command::Serve(args) => serve::main(args),
    }
}
