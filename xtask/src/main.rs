//! Project tasks: `cargo run --release -p xtask -- <task>`.
//!
//! - `bench [--quick] [--out FILE] [SCENARIO-PREFIX ...]`: Rein's scenario benchmarks, written as
//!   JSON lines with `sdk: "rein"` (the schema of `xtask/peers/`), also printed.
//! - `bench-all [--quick]`: Rein's scenarios, rig's (`xtask/rig-peer`) and the Python peers'
//!   (Strands Agents, OpenAI Agents) in one run, then the ratio table.
//! - `ci`: runs `.ci/run`.

mod bench;
mod measure;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bench") => bench::main(&args[1..]),
        Some("bench-child") => bench::child(&args[1..]),
        Some("bench-all") => bench::all(&args[1..]),
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
                 ci                                         run the CI script (.ci/run)"
            );
            ExitCode::from(2)
        }
    }
}
