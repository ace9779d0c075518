//! The `rein` binary: see the `rein_cli` library.

fn main() -> std::process::ExitCode {
    rein_cli::run()
}
