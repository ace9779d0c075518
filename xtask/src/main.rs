//! Project tasks: `cargo run --release -p xtask -- <task>`.
//!
//! - `bench [--quick] [--out FILE] [SCENARIO-PREFIX ...]`: Rein's scenario benchmarks, written as
//!   JSON lines with `sdk: "rein"` (the schema of `xtask/peers/`), also printed; the `durable_*`
//!   rows run when `REIN_RESTATE_SERVER` is set (`.ci/peers-restate.sh`), the `mcp_call` rows
//!   when `REIN_MCP_EVERYTHING` is (the reference MCP server's command line).
//! - `bench-all [--quick]`: Rein's scenarios, rig's (`xtask/rig-peer`) and the Python peers'
//!   (Strands Agents, OpenAI Agents) in one run, then the ratio table.
//! - `bench-instr [--out FILE] [PREFIX ...]`: instruction counts (callgrind) and allocation
//!   counts per invocation of `invoke_text`, `tools10_seq` and the `otel` variants,
//!   deterministic on a loaded machine.
//! - `mock-openai [--delay-ms MS]`: the local OpenAI-compatible server of the `http_*`
//!   scenarios (prints its port, stops when stdin closes).
//! - `ci`: runs `.ci/run`.

mod agui;
mod bench;
mod caching;
mod context;
mod durable;
mod instr;
mod mcp;
mod measure;
mod mock;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bench") => bench::main(&args[1..]),
        Some("bench-child") => bench::child(&args[1..]),
        Some("bench-all") => bench::all(&args[1..]),
        Some("bench-instr") => instr::main(&args[1..]),
        Some("mock-openai") => mock::main(&args[1..]),
        Some("bench-instr-child") => instr::child(&args[1..]),
        Some("ci") => match Command::new("bash").arg(".ci/run").status() {
            Ok(s) if s.success() => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        },
        _ => {
            eprintln!(
                "usage: cargo run --release -p xtask -- <task>\n\n\
                 tasks:\n  \
                 bench [--quick] [--out FILE] [PREFIX ...]  Rein's scenario benchmarks (JSON lines)\n  \
                 bench-all [--quick]                        Rein, rig and the Python peers, one run, ratio table\n  \
                 bench-instr [--out FILE] [PREFIX ...]      instruction counts per invocation (callgrind)\n  \
                 ci                                         run the CI script (.ci/run)"
            );
            ExitCode::from(2)
        }
    }
}
