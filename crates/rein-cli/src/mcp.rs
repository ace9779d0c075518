//! `rein mcp serve`: the tools of `rein chat` (the file tools under `--root`) served to any MCP
//! client, each call behind the same policy file `rein serve` takes; over stdio, or Streamable
//! HTTP with `--http ADDR` (a bearer token, made up and printed once unless given); with
//! `--agent`, the agent of `rein chat` served as one tool instead.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use rein_agent::Agent;
use rein_mcp::{HttpServeOptions, McpServer, ServedAgent};

use crate::Token;

/// `rein mcp`'s subcommands.
#[derive(Debug, clap::Args)]
pub(crate) struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Debug, clap::Subcommand)]
enum McpCommand {
    /// Serve the file tools under --root to an MCP client, each call behind the policy (a
    /// Confirm is asked of the client as an elicitation), or with --agent the agent of `rein
    /// chat` as one tool; stdio unless --http.
    Serve(ServeArgs),
}

/// Options of `rein mcp serve`.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    agent: crate::chat::AgentArgs,
    /// Serve the agent of `rein chat` (--model, the tools, the policy inside its run) as one
    /// tool, `agent` (input `prompt`, output the answer), instead of the tools themselves.
    #[arg(long = "agent")]
    serve_agent: bool,
    /// Model calls per agent call (with --agent).
    #[arg(long, default_value_t = 32, requires = "serve_agent")]
    max_turns: u32,
    /// Serve Streamable HTTP at this address (`127.0.0.1:8765`; port 0 picks a free one)
    /// instead of stdio. Other than a loopback address, also --allow-host the name clients use.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// The token HTTP clients must send (`Authorization: Bearer <token>`; also read from
    /// `REIN_MCP_TOKEN`). Default: a random token, made up at start and printed once.
    #[arg(
        long,
        env = "REIN_MCP_TOKEN",
        hide_env_values = true,
        requires = "http"
    )]
    token: Option<Token>,
    /// Answer to this Host name too (`name` or `name:port`); repeat for more. Default: the
    /// loopback names only (DNS rebinding).
    #[arg(long = "allow-host", requires = "http")]
    allow_hosts: Vec<String>,
    /// Accept browser requests from this origin (`https://app.example:443`); repeat for more.
    /// Default: none (a request with an `Origin` is refused).
    #[arg(long = "allow-origin", requires = "http")]
    allow_origins: Vec<String>,
    /// The bound on live MCP sessions over HTTP; one more is refused (503) until one is
    /// closed or idle for 5 minutes.
    #[arg(long, requires = "http", default_value_t = rein_mcp::server::DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,
    /// The bound on one call's arguments, in bytes.
    #[arg(long, default_value_t = rein_mcp::server::DEFAULT_MAX_INPUT_BYTES)]
    max_input_bytes: usize,
    /// The timeout of one tool's run, in seconds.
    #[arg(long, default_value_t = 60)]
    call_timeout: u64,
}

/// Entry point of `rein mcp`.
pub(crate) fn main(args: McpArgs) -> ExitCode {
    match args.command {
        McpCommand::Serve(args) => serve(args),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    const CMD: &str = "rein mcp serve";
    let parts = match args.agent.parts(CMD) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let tools = crate::chat::tools(&parts.root);
    let builder = if args.serve_agent {
        let system_prompt = args.agent.system_prompt.clone();
        let (model, handlers, max_turns) = (parts.model, parts.handlers, args.max_turns.max(1));
        // The policy acts inside the agent's run (its Confirms become elicitations there).
        McpServer::builder().tool(ServedAgent::new(
            "agent",
            "Ask the agent; it may read and delete files under its root.",
            move || {
                let mut b = Agent::builder()
                    .name("rein-mcp")
                    .shared_model(model.clone())
                    .tools(tools.clone())
                    .interventions(handlers.clone())
                    .max_turns(max_turns);
                if let Some(p) = &system_prompt {
                    b = b.system_prompt(p.as_str());
                }
                b.build()
            },
        ))
    } else {
        McpServer::builder()
            .tools(tools)
            .interventions(parts.handlers)
    };
    let server = builder
        .name("rein")
        .max_input_bytes(args.max_input_bytes)
        .call_timeout(std::time::Duration::from_secs(args.call_timeout.max(1)))
        .build();
    let server = match server {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{CMD}: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match crate::runtime(CMD) {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let served = match args.http {
            // Stdout is the protocol's: nothing else is written there.
            None => {
                tokio::select! {
                    r = server.serve_stdio() => r,
                    _ = tokio::signal::ctrl_c() => Ok(()),
                }
            }
            Some(addr) => {
                let generated = args.token.is_none();
                let mut options = HttpServeOptions::new()
                    .addr(addr)
                    .max_sessions(args.max_sessions);
                if let Some(Token(t)) = args.token {
                    options = options.token(t);
                }
                for h in args.allow_hosts {
                    options = options.allowed_host(h);
                }
                for o in args.allow_origins {
                    options = options.allowed_origin(o);
                }
                let bound = match server.bind_http(options).await {
                    Ok(b) => b,
                    Err(e) => {
                        eprintln!("{CMD}: {e}");
                        return ExitCode::from(1);
                    }
                };
                let local = bound.local_addr();
                if !local.ip().is_loopback() {
                    eprintln!(
                        "{CMD}: listening on {local}, reachable from other machines: the token \
                         travels in clear over plain HTTP, put TLS in front (docs/security.md)"
                    );
                }
                // A closed stdout (the caller stopped reading) is no reason to stop serving.
                let mut out = std::io::stdout();
                let _ = writeln!(out, "{CMD}: MCP endpoint {}", bound.url());
                if generated {
                    let _ = writeln!(out, "{CMD}: token {}", bound.token());
                }
                let _ = writeln!(
                    out,
                    "{CMD}: send `Authorization: Bearer <token>` (Ctrl-C stops)"
                );
                let _ = out.flush();
                bound
                    .serve_until(async {
                        let _ = tokio::signal::ctrl_c().await;
                    })
                    .await
            }
        };
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{CMD}: {e}");
                ExitCode::from(1)
            }
        }
    })
}
