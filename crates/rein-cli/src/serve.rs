//! `rein serve`: the agent of `rein chat` (same model choice, tools and policy) served to a
//! browser over AG-UI, with the approval console at the printed URL — which carries the token
//! the server made up, unless one was given (docs/security.md).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use rein_agent::Agent;
use rein_agui::{AguiError, AguiServer, Cors, ServerLimits};
use rein_sessions::{
    FileSessionStore, MemorySessionStore, PostgresSessionStore, SharedSessionStore,
    SqliteSessionStore, TlsMode, TlsRoots,
};

use crate::Token;
use crate::users::Users;

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
    /// Where the threads (sessions) are kept, so they survive a restart and another `rein
    /// serve` on the same store can resume them: a directory (files), `sqlite:PATH` (one
    /// SQLite database file) or a `postgres://user:password@host/db` URL (also read from
    /// `REIN_SERVE_SESSIONS`; TLS to any host but this machine). Default: in memory.
    #[arg(long, env = "REIN_SERVE_SESSIONS", hide_env_values = true)]
    sessions: Option<Sessions>,
    /// The CA certificates (PEM) that sign the PostgreSQL server's certificate, for a private
    /// CA; default: the public web roots.
    #[arg(long)]
    postgres_ca: Option<PathBuf>,
    /// The token the AG-UI routes require (`Authorization: Bearer <token>`; at least 16
    /// characters; also read from `REIN_SERVE_TOKEN`). Default: a random token, made up at start
    /// and printed in the console's URL (`/?token=...`), as Jupyter does.
    #[arg(
        long,
        env = "REIN_SERVE_TOKEN",
        hide_env_values = true,
        conflicts_with = "users"
    )]
    token: Option<Token>,
    /// A TOML file naming each operator and the SHA-256 of their token (`[[user]] name =
    /// "alice"`, `token_sha256 = "<64 hex digits>"`): each request is then from the user whose
    /// token it carries, and approvals are recorded as theirs. Instead of `--token`.
    #[arg(long)]
    users: Option<PathBuf>,
    /// Four-eyes: whoever sent the message that asks for an approval may not approve it (with
    /// `--users`, another operator must; a rejection is allowed).
    #[arg(long, requires = "users")]
    four_eyes: bool,
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

/// Where `rein serve` keeps its threads.
#[derive(Clone)]
enum Sessions {
    Files(PathBuf),
    Sqlite(PathBuf),
    /// The URL holds a password: never shown by `Debug`.
    Postgres(String),
}

impl std::str::FromStr for Sessions {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Ok(Self::Postgres(s.to_owned()))
        } else if let Some(path) = s.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err("`sqlite:` needs a file path, e.g. sqlite:threads.db".into());
            }
            Ok(Self::Sqlite(PathBuf::from(path)))
        } else if s.is_empty() {
            Err("a directory, sqlite:PATH or a postgres:// URL is needed".into())
        } else {
            Ok(Self::Files(PathBuf::from(s)))
        }
    }
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Files(dir) => write!(f, "Files({dir:?})"),
            Self::Sqlite(path) => write!(f, "Sqlite({path:?})"),
            Self::Postgres(_) => f.write_str("Postgres(..)"),
        }
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
    let users = match args.users.as_deref().map(Users::load).transpose() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("rein serve: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match crate::runtime("rein serve") {
        Ok(r) => r,
        Err(code) => return code,
    };
    let addr = format!("{}:{}", args.host, args.port);
    runtime.block_on(async move {
        let store = match open_store(&args).await {
            Ok(store) => store,
            Err(e) => {
                eprintln!("rein serve: cannot open the sessions store: {e}");
                return ExitCode::from(1);
            }
        };
        let server = configure(AguiServer::new(store, make_agent), &args, users);
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

/// The store of `--sessions`, opened.
async fn open_store(args: &ServeArgs) -> Result<SharedSessionStore, rein_sessions::SessionError> {
    Ok(match &args.sessions {
        None => SharedSessionStore::new(MemorySessionStore::new()),
        Some(Sessions::Files(dir)) => SharedSessionStore::new(FileSessionStore::new(dir)),
        Some(Sessions::Sqlite(path)) => {
            SharedSessionStore::new(SqliteSessionStore::open(path).await?)
        }
        Some(Sessions::Postgres(url)) => {
            let mut builder = PostgresSessionStore::builder(url).application_name("rein-serve");
            if let Some(ca) = &args.postgres_ca {
                builder = builder.tls(TlsMode::Require {
                    ca: TlsRoots::PemFile(ca.clone()),
                });
            }
            SharedSessionStore::new(builder.build().await?)
        }
    })
}

/// The server's settings from the options, whatever its store.
fn configure(server: AguiServer, args: &ServeArgs, users: Option<Users>) -> AguiServer {
    let mut server = server
        .allow_hosts(args.allow_hosts.clone())
        .limits(ServerLimits::default().max_turns_per_run(args.max_turns.max(1)));
    if let Some(Token(token)) = args.token.clone() {
        server = server.token(token);
    }
    if let Some(users) = users {
        server = server
            .bearer_auth(move |token| users.principal(token))
            .four_eyes(args.four_eyes);
    }
    if !args.cors_origins.is_empty() {
        server = server.cors(if args.cors_origins.iter().any(|o| o == "*") {
            Cors::AnyOrigin
        } else {
            Cors::Origins(args.cors_origins.clone())
        });
    }
    server
}
