//! `rein serve`: the agent of `rein chat` (same model choice, tools and policy) served to a
//! browser over AG-UI, with the approval console at the printed URL.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use rein_agent::Agent;
use rein_agui::{AguiServer, Cors};
use rein_sessions::{FileSessionStore, MemorySessionStore};

/// Options of `rein serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    agent: crate::chat::AgentArgs,
    /// The address to listen on. Other than 127.0.0.1, anyone who can reach it can approve:
    /// set `--token` too.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Keep the threads (sessions) in this directory, so they survive a restart and another
    /// `rein serve` on the same directory can resume them. Default: in memory.
    #[arg(long)]
    sessions: Option<PathBuf>,
    /// Require `Authorization: Bearer <token>` on the AG-UI routes (also read from
    /// `REIN_SERVE_TOKEN`). The console has a token field.
    #[arg(long, env = "REIN_SERVE_TOKEN", hide_env_values = true)]
    token: Option<Token>,
    /// Allow pages from this origin to call the server (CORS); repeat for more; `*` for any.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
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
    let make_agent = move |_thread: &str| {
        let mut b = Agent::builder()
            .name("rein-serve")
            .shared_model(model.clone())
            .tools(tools.clone())
            .interventions(handlers.clone());
        if let Some(p) = &system_prompt {
            b = b.system_prompt(p.as_str());
        }
        b
    };
    let mut server = match &args.sessions {
        Some(dir) => AguiServer::new(FileSessionStore::new(dir), make_agent),
        None => AguiServer::new(MemorySessionStore::new(), make_agent),
    };
    if let Some(Token(token)) = args.token.clone() {
        server = server.bearer_auth(move |t| (t == token).then(|| "token holder".to_owned()));
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
            Err(e) => {
                eprintln!("rein serve: {e}");
                return ExitCode::from(1);
            }
        };
        let url = bound.url();
        // A closed stdout (the caller stopped reading) is no reason to stop serving.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "rein serve: approval console at {url}");
        let _ = writeln!(
            out,
            "rein serve: AG-UI endpoint POST {url}agent (Ctrl-C stops)"
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
