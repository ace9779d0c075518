//! A Restate server and worker processes for the tests, on 127.0.0.1 only, with their data in
//! a directory of the test's; all are killed when dropped.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const WORKER: &str = env!("CARGO_BIN_EXE_rein-restate-worker");

/// A port free now, taken below the kernel's ephemeral range: a port the kernel handed out
/// (`bind(0)`) can be handed out again to any outgoing connection before the server binds it,
/// which a test opening thousands of connections beside this one made happen in CI.
pub fn free_port() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = ephemeral_low.saturating_sub(12_000).max(1024);
    let span = u64::from(ephemeral_low - low);
    let mut seed = {
        use std::hash::{BuildHasher as _, Hasher as _};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    for _ in 0..200 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let port = low + u16::try_from((seed >> 33) % span).unwrap();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {low}..{ephemeral_low}")
}

/// An Ed25519 request-identity key pair, as Restate uses them: the private key as PKCS#8 in a
/// PEM file (what `openssl genpkey -algorithm ed25519` writes), the public one as
/// `publickeyv1_<base58>`.
pub struct IdentityKey {
    pub pkcs8: Vec<u8>,
    pub public: String,
}

impl IdentityKey {
    pub fn generate() -> Self {
        use ring::signature::KeyPair as _;
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng)
            .unwrap()
            .as_ref()
            .to_vec();
        let pair = ring::signature::Ed25519KeyPair::from_pkcs8(&pkcs8).unwrap();
        let public = format!(
            "publickeyv1_{}",
            bs58::encode(pair.public_key().as_ref()).into_string()
        );
        Self { pkcs8, public }
    }

    pub fn pem(&self) -> String {
        pem_rfc7468::encode_string("PRIVATE KEY", pem_rfc7468::LineEnding::LF, &self.pkcs8).unwrap()
    }
}

pub struct Restate {
    bin: String,
    child: Option<Child>,
    pub dir: PathBuf,
    ports: [u16; 3],
    pub ingress: String,
    pub admin: String,
    /// The key Restate signs its requests to workers with; the workers get its public half.
    pub identity: IdentityKey,
}

impl Restate {
    /// Starts a server, or says SKIPPED and returns `None` when none is installed
    /// (`REIN_RESTATE_SERVER`, set by `.ci/peers-restate.sh`).
    pub async fn start(test: &str) -> Option<Self> {
        let Ok(bin) = std::env::var("REIN_RESTATE_SERVER") else {
            println!("SKIPPED {test}: REIN_RESTATE_SERVER is not set (bash .ci/peers-restate.sh)");
            return None;
        };
        let dir = std::env::temp_dir().join(format!(
            "rein-restate-{test}-{}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        // The server makes a scratch directory per partition in TMPDIR and leaves them: keep
        // them in the test's directory, removed with it.
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let ports = [free_port(), free_port(), free_port()];
        let identity = IdentityKey::generate();
        std::fs::write(dir.join("identity.pem"), identity.pem()).unwrap();
        let mut restate = Self {
            bin,
            child: None,
            dir,
            ports,
            ingress: format!("http://127.0.0.1:{}", ports[0]),
            admin: format!("http://127.0.0.1:{}", ports[1]),
            identity,
        };
        // Another process may still bind a port between the check and the server's bind: the
        // server then exits at once, and a fresh set of ports is tried.
        for attempt in 1.. {
            match restate.launch().await {
                Ok(()) => break,
                Err(why) if attempt < 3 => {
                    eprintln!("restate-server exited at start ({why}); trying other ports");
                    restate.ports = [free_port(), free_port(), free_port()];
                    restate.ingress = format!("http://127.0.0.1:{}", restate.ports[0]);
                    restate.admin = format!("http://127.0.0.1:{}", restate.ports[1]);
                }
                Err(why) => panic!("restate-server did not come up: {why}"),
            }
        }
        Some(restate)
    }

    /// Starts the server and waits until both its admin and ingress answer; `Err` says why not,
    /// with the end of its log.
    async fn launch(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("restate.log"))
            .unwrap();
        let child = Command::new(&self.bin)
            .arg("--no-logo")
            .env("RESTATE_BASE_DIR", self.dir.join("data"))
            .env("TMPDIR", self.dir.join("tmp"))
            .env(
                "RESTATE_REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE",
                self.dir.join("identity.pem"),
            )
            .env("RESTATE_LISTEN_MODE", "tcp")
            .env(
                "RESTATE_INGRESS__BIND_ADDRESS",
                format!("127.0.0.1:{}", self.ports[0]),
            )
            .env(
                "RESTATE_ADMIN__BIND_ADDRESS",
                format!("127.0.0.1:{}", self.ports[1]),
            )
            .env(
                "RESTATE_BIND_ADDRESS",
                format!("127.0.0.1:{}", self.ports[2]),
            )
            .env(
                "RESTATE_ADVERTISED_ADDRESS",
                format!("http://127.0.0.1:{}", self.ports[2]),
            )
            // Fast retries: a killed worker's runs are taken over within tens of milliseconds.
            .env("RESTATE_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL", "50ms")
            .env("RESTATE_DEFAULT_RETRY_POLICY__MAX_INTERVAL", "500ms")
            .env("RESTATE_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS", "1000")
            .env("RESTATE_LOG_FILTER", "warn")
            .env("RESTATE_LOG_FORMAT", "compact")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("restate-server starts");
        self.child = Some(child);
        let http = reqwest_client();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let admin = http.get(format!("{}/health", self.admin)).send().await;
            let ingress = http
                .get(format!("{}/restate/health", self.ingress))
                .send()
                .await;
            if admin.is_ok_and(|r| r.status().is_success())
                && ingress.is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                return Err(format!("{status}; log ends:\n{}", self.log_tail()));
            }
            if Instant::now() >= deadline {
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return Err(format!("no answer in 90 s; log ends:\n{}", self.log_tail()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("restate.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Stops the server (SIGKILL) and starts it again on the same data and ports.
    pub async fn restart(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The same ports, so the workers and the test keep their addresses; one that a
        // connection took meanwhile is released when that connection closes.
        for attempt in 1.. {
            match self.launch().await {
                Ok(()) => return,
                Err(why) if attempt < 5 => {
                    eprintln!("restate-server exited at restart ({why}); trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(why) => panic!("restate-server did not come back: {why}"),
            }
        }
    }

    pub fn ledger(&self) -> PathBuf {
        self.dir.join("ledger")
    }
}

impl Drop for Restate {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn reqwest_client() -> reqwest::Client {
    rein_models::http::client(Duration::from_secs(5)).unwrap()
}

/// A worker process.
pub struct Worker {
    child: Child,
    pub port: u16,
}

pub struct WorkerOptions<'a> {
    pub port: u16,
    pub reuse_port: bool,
    pub register: bool,
    pub model_delay_ms: u64,
    pub tool_delay_ms: u64,
    pub ledger: Option<&'a Path>,
    /// The demo agent's revision (`REIN_DEMO_REVISION`; 0: the first).
    pub revision: u32,
    /// Where the worker's log goes (its errors), instead of nowhere.
    pub log: Option<&'a Path>,
}

impl Default for WorkerOptions<'_> {
    fn default() -> Self {
        Self {
            port: 0,
            reuse_port: false,
            register: true,
            model_delay_ms: 0,
            tool_delay_ms: 0,
            ledger: None,
            revision: 0,
            log: None,
        }
    }
}

impl Worker {
    /// Starts a worker that accepts only `restate`'s signed requests; it registers itself with
    /// its admin API when asked.
    pub async fn start(restate: &Restate, options: WorkerOptions<'_>) -> Self {
        let admin = restate.admin.as_str();
        let port = if options.port == 0 {
            free_port()
        } else {
            options.port
        };
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(WORKER);
        cmd.args(["--bind", &addr])
            .args(["--identity-key", &restate.identity.public])
            .env("REIN_MODEL_DELAY_MS", options.model_delay_ms.to_string())
            .env("REIN_TOOL_DELAY_MS", options.tool_delay_ms.to_string())
            .env("REIN_DEMO_REVISION", options.revision.to_string())
            .stdout(Stdio::piped());
        match options.log {
            Some(log) => {
                let file = std::fs::File::create(log).unwrap();
                cmd.env("RUST_LOG", "rein_restate=error").stderr(file);
            }
            None => {
                cmd.stderr(Stdio::null());
            }
        }
        if options.reuse_port {
            cmd.arg("--reuse-port");
        }
        if options.register {
            cmd.args(["--register", admin, &format!("http://{addr}")]);
        }
        if let Some(ledger) = options.ledger {
            cmd.env("REIN_LEDGER", ledger);
        }
        let mut child = cmd.spawn().expect("the worker starts");
        // It prints `listening ADDR` once it serves (and is registered).
        let stdout = child.stdout.take().unwrap();
        let line = tokio::task::spawn_blocking(move || {
            use std::io::BufRead as _;
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .unwrap();
            line
        })
        .await
        .unwrap();
        assert!(line.starts_with("listening"), "worker said {line:?}");
        Self { child, port }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What most durable tests start with: a Restate server, one worker registered with it (its
/// `ledger` the server's, [`Restate::ledger`]) and a client of the ingress; `None` (the test says
/// SKIPPED) when no server is installed. Bind the server and the worker to names (`_worker`,
/// not `_`): each is killed when dropped.
pub async fn durable(
    test: &str,
    options: WorkerOptions<'_>,
) -> Option<(Restate, Worker, rein_restate::Client)> {
    let restate = Restate::start(test).await?;
    let ledger = restate.ledger();
    let worker = Worker::start(
        &restate,
        WorkerOptions {
            ledger: Some(&ledger),
            ..options
        },
    )
    .await;
    let client = rein_restate::Client::new(&restate.ingress).unwrap();
    Some((restate, worker, client))
}

/// Ledger lines: (millis, session, tool use id). A malformed line fails the test (two
/// processes' writes interleaved, say) rather than hiding a run.
pub fn ledger_lines(path: &Path) -> Vec<(u128, String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let parts: Vec<&str> = l.split(' ').collect();
            match parts.as_slice() {
                [t, session, id] => (
                    t.parse().unwrap_or_else(|_| panic!("ledger line {l:?}")),
                    (*session).to_owned(),
                    (*id).to_owned(),
                ),
                _ => panic!("malformed ledger line {l:?}"),
            }
        })
        .collect()
}

/// The rows Restate's admin API answers an SQL query with (`sys_invocation`, `sys_journal`...).
pub async fn admin_query(restate: &Restate, query: &str) -> Vec<serde_json::Value> {
    let response = reqwest_client()
        .post(format!("{}/query", restate.admin))
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(serde_json::json!({ "query": query }).to_string())
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    match body["rows"].as_array() {
        Some(rows) => rows.clone(),
        None => panic!("no rows in {body}"),
    }
}

/// The rows of an SQL query as a map: column `key`'s text to column `value`.
pub async fn admin_map(
    restate: &Restate,
    query: &str,
    key: &str,
    value: &str,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    admin_query(restate, query)
        .await
        .into_iter()
        .map(|row| (row[key].as_str().unwrap().to_owned(), row[value].clone()))
        .collect()
}

/// An invocation's status as Restate's admin API reports it (`completed`, `running`,
/// `backing-off`...): answered by the server alone, with no worker serving.
pub async fn invocation_status(restate: &Restate, invocation: &str) -> String {
    let query = format!("SELECT status FROM sys_invocation WHERE id = '{invocation}'");
    let rows = admin_query(restate, &query).await;
    rows.first()
        .and_then(|row| row["status"].as_str())
        .unwrap_or_else(|| panic!("no status in {rows:?}"))
        .to_owned()
}

/// The id of the session's run that has not completed (`run_input` or `resume`), if any.
pub async fn running_run(restate: &Restate, session: &str) -> Option<String> {
    let query = format!(
        "SELECT id FROM sys_invocation WHERE target_service_name = 'ReinAgent' AND \
         target_service_key = '{session}' AND target_handler_name IN ('run_input', 'resume') \
         AND status != 'completed'"
    );
    let rows = admin_query(restate, &query).await;
    rows.first()
        .and_then(|row| row["id"].as_str())
        .map(str::to_owned)
}

/// Kills an invocation through Restate's admin API (what `restate invocations kill` does): it
/// ends at once, wherever it stands, without running anything more of it.
pub async fn kill_invocation(restate: &Restate, invocation: &str) {
    let response = reqwest_client()
        .patch(format!("{}/invocations/{invocation}/kill", restate.admin))
        .send()
        .await
        .unwrap();
    let status = response.status();
    assert!(
        status.is_success(),
        "kill {invocation}: {status} {}",
        response.text().await.unwrap_or_default()
    );
}

/// Waits (up to 60 s) until `ready` holds.
pub async fn wait_until(what: &str, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready().await {
        assert!(Instant::now() < deadline, "waited 60 s for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The answer of a call that must come (within 60 s: a hang fails the test instead of
/// blocking it).
pub async fn answered<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("an answer within 60 s")
}

/// Serves `worker` in this process on a free loopback port, registered with `restate`; the
/// sender stops it.
pub async fn serve_in_process(
    restate: &Restate,
    worker: rein_restate::Worker,
) -> tokio::sync::oneshot::Sender<()> {
    let worker = worker
        .bind("127.0.0.1:0".parse().unwrap())
        .listen()
        .await
        .unwrap();
    let addr = worker.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(worker.serve(async move {
        let _ = stopped.await;
    }));
    rein_restate::register(&restate.admin, &format!("http://{addr}"))
        .await
        .unwrap();
    stop
}
