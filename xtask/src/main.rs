//! Project tasks: `cargo run -p xtask -- <task>`.

fn main() {
    let task = std::env::args().nth(1);
    match task.as_deref() {
        Some("ci") => {
            let status = std::process::Command::new("bash").arg(".ci/run").status();
            std::process::exit(status.map(|s| s.code().unwrap_or(1)).unwrap_or(1));
        }
        _ => {
            eprintln!(
                "usage: cargo run -p xtask -- <task>\n\ntasks:\n  ci    run the CI script (.ci/run)"
            );
            std::process::exit(2);
        }
    }
}
