//! `rein serve`: the agent of `rein chat` (same model choice, tools and policy) served to a
//! browser over AG-UI, with the approval console at the printed URL — which carries the token
//! the server made up, unless one was given (docs/security.md).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use rein_agent::Agent;
use rein_agui::{AguiError, AguiServer, Cors, ServerLimits};
use rein_sessions::{FileSessionStore, MemorySessionStore};

/// Options of `rein serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    agent: crate::chat::AgentArgs,
    /// The address to listen on. Other than 127.0.0.1 (this machine only), whoever can reach it
    /// and has the token can run the agent and approve: put TLS in front (a reverse proxy).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Keep the threads (sessions) in this directory, so they survive a restart and another
    /// `rein serve` on the same directory can resume them. Default: in memory.
    #[arg(long)]
    sessions: Option<PathBuf>,
    /// The token the AG-UI routes require (`Authorization: Bearer <token>`; at least 16
    /// characters; also read from `REIN_SERVE_TOKEN`). Default: a random token, made up at start
    /// and printed in the console's URL (`/?token=...`), as Jupyter does.
    #[arg(long, env = "REIN_SERVE_TOKEN", hide_env_values = true)]
    token: Option<Token>,
    /// Allow pages from this origin to call the server (CORS and the Origin check); repeat for
    /// more; `*` for any (the token still decides). Default: only the server's own pages.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    /// Answer to this Host name too (`name` or `name:port`), e.g. the public name a reverse
    /// proxy forwards; repeat for more. Bound to 127.0.0.1 the server answers only to
    /// `localhost`, `127.0.0.1` and `[::1]` with its port (DNS rebinding).
    #[arg(long = "allow-host")]
    allow_hosts: Vec<String>,
    /// Model calls per run request (each request's run stops before the next one).
    #[arg(long, default_value_t = 32)]
    max_turns: u32,
    /// Tokens (input and output, all model calls) per run request.
    #[arg(long, default_value_t = 500_000)]
    max_tokens: u64,
}

/// The bearer token: never shown by `Debug`.
#[derive(Clone)]
struct Token(String);

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

/// Entry point of `rein serve`.
pub(crate) fn main(args: ServeArgs) -> ExitCode {
    let crate::chat::AgentParts {
        model,
        handlers,
        root,
        ..
    } = match args.agent.parts("rein serve") {
        Ok(p) => p,
        Err(code) => return code,
    };
    let tools = crate::chat::tools(&root);
    let system_prompt = args.agent.system_prompt.clone();
    let (max_turns, max_tokens) = (args.max_turns.max(1), args.max_tokens);
    let make_agent = move |_thread: &str| {
        let mut b = Agent::builder()
            .name("rein-serve")
            .shared_model(model.clone())
            .tools(tools.clone())
            .interventions(handlers.clone())
            // A served agent has a budget: a browser tab (or a script with the token) must not
            // be able to run it without end.
            .max_turns(max_turns)
            .max_total_tokens(max_tokens);
        if let Some(p) = &system_prompt {
            b = b.system_prompt(p.as_str());
        }
        b
    };
    let mut server = match &args.sessions {
        Some(dir) => AguiServer::new(FileSessionStore::new(dir), make_agent),
        None => AguiServer::new(MemorySessionStore::new(), make_agent),
    };
    server = server
        .allow_hosts(args.allow_hosts.clone())
        .limits(ServerLimits::default().max_turns_per_run(max_turns));
    if let Some(Token(token)) = args.token.clone() {
        server = server.token(token);
    }
    if !args.cors_origins.is_empty() {
        server = server.cors(if args.cors_origins.iter().any(|o| o == "*") {
            Cors::AnyOrigin
        } else {
            Cors::Origins(args.cors_origins.clone())
        });
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rein serve: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let addr = format!("{}:{}", args.host, args.port);
    runtime.block_on(async move {
        let bound = match server.bind(&addr).await {
            Ok(b) => b,
            Err(e @ AguiError::Config(_)) => {
                eprintln!("rein serve: {e}");
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("rein serve: {e}");
                return ExitCode::from(1);
            }
        };
        let local = bound.local_addr();
        if !local.ip().is_loopback() {
            eprintln!(
                "rein serve: listening on {local}, reachable from other machines: the token \
                 travels in clear over plain HTTP, put TLS in front (docs/security.md)"
            );
        }
        // A closed stdout (the caller stopped reading) is no reason to stop serving.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "rein serve: approval console at {}", bound.url());
        let token = if bound.generated_token().is_some() {
            "the token in the console's URL"
        } else {
            "your token"
        };
        let _ = writeln!(
            out,
            "rein serve: AG-UI endpoint POST http://{local}/agent with `Authorization: Bearer` \
             {token} (Ctrl-C stops)"
        );
        let _ = out.flush();
        tokio::select! {
            r = bound.serve() => match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rein serve: {e}");
                    ExitCode::from(1)
                }
            },
            _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
        }
    })
}
