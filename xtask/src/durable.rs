//! The `durable_*` rows: the cost of journaling on Restate against the in-process driver and
//! against the floor (a bare Restate handler journaling empty steps through the same server),
//! and 1 000 concurrent durable sessions across two worker processes on a 100 ms model, beside
//! as many bare invocations of the same steps.
//!
//! Needs `REIN_RESTATE_SERVER` (`bash .ci/peers-restate.sh DIR`, then source `DIR/env`):
//! without it the rows are skipped. Starts its own restate-server (127.0.0.1, data under
//! `target/bench/restate`) and two release builds of `rein-restate-worker`, and stops them.
//! `REIN_BENCH_WORKER=<path>` runs another build's worker instead (before/after comparisons).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rein::prelude::*;
use rein_restate::{Client, wire::InvokeRequest};
use serde_json::json;

use crate::measure::Recorder;

/// Killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU time (user + system) a process has used so far, from `/proc/<pid>/stat`; `None` off
/// Linux.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces), from the third on.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // The kernel's USER_HZ is 100 on every Linux ABI Rust targets.
    Some(ticks / 100.0)
}

fn free_port() -> Option<u16> {
    Some(
        TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port(),
    )
}

fn worker_binary() -> Option<PathBuf> {
    // Another build's worker (to compare two builds against one server and one bench).
    if let Some(worker) = std::env::var_os("REIN_BENCH_WORKER") {
        return Some(PathBuf::from(worker));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            // With xtask selected too, its dependencies' features are unified as in this
            // build: the worker reuses this build's artifacts instead of rebuilding the tree.
            "-p",
            "xtask",
            "-p",
            "rein-restate",
            "--bin",
            "rein-restate-worker",
        ])
        .status()
        .ok()?;
    let dir =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    status
        .success()
        .then(|| dir.join("release/rein-restate-worker"))
}

pub(crate) fn run(rec: &Recorder, rt: &tokio::runtime::Runtime, quick: bool) {
    let Ok(server) = std::env::var("REIN_RESTATE_SERVER") else {
        eprintln!("durable: skipped (REIN_RESTATE_SERVER not set: bash .ci/peers-restate.sh DIR)");
        return;
    };
    let Some(worker) = worker_binary() else {
        eprintln!("durable: skipped (rein-restate-worker did not build)");
        return;
    };
    let (Some(ingress), Some(admin), Some(node), Some(port)) =
        (free_port(), free_port(), free_port(), free_port())
    else {
        eprintln!("durable: skipped (no free ports)");
        return;
    };
    let dir = PathBuf::from("target/bench/restate");
    let _ = std::fs::remove_dir_all(&dir);
    // The server makes a scratch directory per partition in TMPDIR and leaves them: keep them
    // in its own directory.
    let _ = std::fs::create_dir_all(dir.join("tmp"));
    let started = Command::new(&server)
        .arg("--no-logo")
        // Its data beside the scratch directory, not above it: restate-server reads a
        // directory in its base directory as an earlier node's data (and refuses to start).
        .env("RESTATE_BASE_DIR", dir.join("data"))
        .env("TMPDIR", dir.join("tmp"))
        .env("RESTATE_LISTEN_MODE", "tcp")
        .env(
            "RESTATE_INGRESS__BIND_ADDRESS",
            format!("127.0.0.1:{ingress}"),
        )
        .env("RESTATE_ADMIN__BIND_ADDRESS", format!("127.0.0.1:{admin}"))
        .env("RESTATE_BIND_ADDRESS", format!("127.0.0.1:{node}"))
        .env(
            "RESTATE_ADVERTISED_ADDRESS",
            format!("http://127.0.0.1:{node}"),
        )
        .env("RESTATE_LOG_FILTER", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(server) = started.map(Proc) else {
        eprintln!("durable: skipped (restate-server did not start)");
        return;
    };
    let ingress = format!("http://127.0.0.1:{ingress}");
    let admin = format!("http://127.0.0.1:{admin}");
    rt.block_on(async {
        if let Err(e) = measure(rec, &worker, &ingress, &admin, port, quick, server.0.id()).await {
            eprintln!("durable: {e}");
        }
    });
    drop(server);
}

async fn start_worker(
    binary: &PathBuf,
    admin: &str,
    port: u16,
    register: bool,
    delay: u64,
) -> Result<Proc, String> {
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(binary);
    cmd.args(["--bind", &addr, "--reuse-port"])
        .env("REIN_MODEL_DELAY_MS", delay.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if register {
        cmd.args(["--register", admin, &format!("http://{addr}")]);
    }
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead as _;
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        line
    })
    .await
    .map_err(|e| e.to_string())?;
    if !line.starts_with("listening") {
        return Err(format!("the worker said {line:?}"));
    }
    Ok(Proc(child))
}

/// The physical limit of a journaled step: a bare Restate service whose handler journals `n`
/// empty `ctx.run` steps, served from this process.
mod floor {
    use restate_sdk::prelude::*;

    /// What a session of the 1 000-session row journals at least: two steps of 100 ms (the
    /// model calls) and an empty one (the tool). (A macro: the SDK's contexts share no trait a
    /// function could take here.)
    macro_rules! session_steps {
        ($ctx:expr) => {
            for _ in 0..2 {
                $ctx.run(|| async {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    Ok(())
                })
                .name("model")
                .await?;
            }
            $ctx.run(|| async { Ok(()) }).name("tool").await?;
        };
    }

    pub(crate) struct StepFloor;

    #[restate_sdk::service]
    impl StepFloor {
        #[handler]
        async fn steps(&self, ctx: Context<'_>, n: u32) -> Result<u32, HandlerError> {
            for i in 0..n {
                ctx.run(|| async move { Ok(i) }).name("step").await?;
            }
            Ok(n)
        }

        /// The session's steps alone (`session_steps!`), one invocation.
        #[handler]
        async fn session(&self, ctx: Context<'_>) -> Result<(), HandlerError> {
            session_steps!(ctx);
            Ok(())
        }
    }

    /// The least a durable *session* of the 1 000-session row costs on Restate, whatever SDK
    /// runs it: a keyed object whose shared `invoke` refuses a second invoke at once (409) while
    /// a run goes — it reads the object's state — and otherwise calls the exclusive `run` and
    /// waits for it; the run marks itself going, journals the session's three steps, saves the
    /// session's history and marks itself ended. Two invocations, as a Rein run is.
    pub(crate) struct SessionFloor;

    /// The history the floor's run saves: about what a one-step Rein session's is.
    const HISTORY: &str = r#"[{"role":"user","content":"steps 1"},{"role":"assistant","content":[{"type":"tool_use","id":"step-0","name":"ledger","input":{"step":0}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"step-0","content":"recorded"}]},{"role":"assistant","content":"Finished 1 steps."}]"#;

    #[restate_sdk::object]
    impl SessionFloor {
        #[handler]
        async fn invoke(&self, ctx: SharedObjectContext<'_>) -> Result<(), HandlerError> {
            let going: Option<bool> = ctx.get("going").await?;
            if going == Some(true) {
                return Err(TerminalError::new_with_code(409, "a run goes").into());
            }
            let key = ctx.key().to_owned();
            ctx.object_client::<SessionFloorClient>(key)
                .run()
                .call()
                .await?;
            Ok(())
        }

        #[handler]
        async fn run(&self, ctx: ObjectContext<'_>) -> Result<(), HandlerError> {
            ctx.set("going", true);
            session_steps!(ctx);
            ctx.set("history", HISTORY.to_owned());
            ctx.set("going", false);
            Ok(())
        }
    }

    /// Serves the floors on `listener` until dropped (the task is aborted with the runtime).
    pub(crate) fn serve(listener: tokio::net::TcpListener) {
        let endpoint = restate_sdk::hyper::HyperEndpoint::new(
            restate_sdk::endpoint::Endpoint::builder()
                .bind(StepFloor)
                .bind(SessionFloor)
                .build(),
        );
        tokio::spawn(async move {
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            while let Ok((stream, _)) = listener.accept().await {
                // As the worker: Restate's small writes must not wait for a delayed ACK.
                let _ = stream.set_nodelay(true);
                let conn = builder
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), endpoint.clone())
                    .into_owned();
                tokio::spawn(conn);
            }
        });
    }
}

/// Wall and restate-server CPU per step of the floor: `rounds` runs of `steps` empty steps.
async fn floor_per_step(
    ingress: &str,
    admin: &str,
    steps: u32,
    rounds: usize,
    server: u32,
) -> Result<(f64, f64), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    floor::serve(listener);
    let http = rein::models::http::client(Duration::from_secs(60)).map_err(|e| e.to_string())?;
    // Restate's admin API directly: `rein_restate::register` checks for Rein's objects.
    let registered = http
        .post(format!("{admin}/deployments"))
        .header("content-type", "application/json")
        .body(json!({"uri": format!("http://{addr}")}).to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !registered.status().is_success() {
        return Err(format!("registering the floor: {}", registered.status()));
    }
    let call = || async {
        let answer = http
            .post(format!("{ingress}/StepFloor/steps"))
            .header("content-type", "application/json")
            .body(steps.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        if answer.trim() == steps.to_string() {
            Ok(())
        } else {
            Err(format!("the floor answered {answer:?}"))
        }
    };
    call().await?; // warm
    let server_before = cpu_seconds(server).unwrap_or(f64::NAN);
    let mut walls = Vec::new();
    for _ in 0..rounds {
        let t0 = Instant::now();
        call().await?;
        walls.push(t0.elapsed().as_secs_f64());
    }
    let server_cpu = cpu_seconds(server).unwrap_or(f64::NAN) - server_before;
    walls.sort_by(f64::total_cmp);
    let n = f64::from(steps);
    Ok((walls[walls.len() / 2] / n, server_cpu / (n * rounds as f64)))
}

async fn wait_for(url: &str) -> Result<(), String> {
    let http = rein::models::http::client(Duration::from_secs(2)).map_err(|e| e.to_string())?;
    for _ in 0..600 {
        if http
            .get(url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{url} did not answer"))
}

async fn measure(
    rec: &Recorder,
    binary: &PathBuf,
    ingress: &str,
    admin: &str,
    port: u16,
    quick: bool,
    server: u32,
) -> Result<(), String> {
    wait_for(&format!("{admin}/health")).await?;
    wait_for(&format!("{ingress}/restate/health")).await?;
    let client = Client::new(ingress).map_err(|e| e.to_string())?;

    // Per journaled step: a sequential run of N tool turns, durable vs in-process.
    {
        let worker = start_worker(binary, admin, port, true, 0).await?;
        let steps = 50;
        client
            .invoke("warm", InvokeRequest::text("say hi"))
            .await
            .map_err(|e| e.to_string())?;
        let rounds = if quick { 3 } else { 10 };
        let mut durable = Vec::new();
        let cpu = || {
            (
                cpu_seconds(worker.0.id()).unwrap_or(f64::NAN),
                cpu_seconds(server).unwrap_or(f64::NAN),
            )
        };
        let (worker_before, server_before) = cpu();
        for r in 0..rounds {
            let t0 = Instant::now();
            let report = client
                .invoke(
                    &format!("steps-{r}"),
                    InvokeRequest::text(format!("steps {steps}")),
                )
                .await
                .map_err(|e| e.to_string())?;
            if report.text != format!("Finished {steps} steps.") {
                return Err(format!("unexpected answer {:?}", report.text));
            }
            durable.push(t0.elapsed().as_secs_f64());
        }
        let (worker_after, server_after) = cpu();
        let mut local = Vec::new();
        for _ in 0..rounds {
            let mut script = ScriptedModel::builder().record_requests(false);
            for i in 0..steps {
                script = script.tool_use(format!("step-{i}"), "ledger", json!({"step": i}));
            }
            let ledger = ToolHandle::from_sync_fn(
                "ledger",
                "Records.",
                json!({"type": "object"}),
                |_, _| Ok(ToolOutput::text("recorded")),
            );
            let mut agent = Agent::builder()
                .model(script.text("done").build())
                .tool(ledger)
                .tool_executor(ToolExecutor::Sequential)
                .build()
                .map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            agent.invoke("go").await.map_err(|e| e.to_string())?;
            local.push(t0.elapsed().as_secs_f64());
        }
        let median = |xs: &mut Vec<f64>| {
            xs.sort_by(f64::total_cmp);
            xs[xs.len() / 2]
        };
        let (d, l) = (median(&mut durable), median(&mut local));
        // A step is a model call or a tool call (2 per tool turn, and the last answer): what
        // the run does, each journaled. What durability adds around them — the turn boundaries'
        // inbox checks, the history written as it grows, the save — is spread over them.
        let journaled = (2 * steps + 1) as f64;
        let note = json!({"note": "(durable run - in-process run) / steps (model and tool calls, each journaled; the run's other overhead spread over them); one worker, 50 tool turns"});
        rec.record(
            "durable_step",
            "per_journaled_step",
            (d - l) / journaled * 1e6,
            "us",
            note,
        );
        // CPU per journaled step, the worker's and restate-server's apart (what sizing needs).
        let all_steps = journaled * rounds as f64;
        let note = json!({"note": "CPU (user + system) over the durable runs / steps"});
        rec.record(
            "durable_step",
            "worker_cpu_per_step",
            (worker_after - worker_before) / all_steps * 1e6,
            "us",
            note.clone(),
        );
        rec.record(
            "durable_step",
            "server_cpu_per_step",
            (server_after - server_before) / all_steps * 1e6,
            "us",
            note,
        );
        rec.record("durable_step", "in_process_run", l * 1e6, "us", json!({}));
        rec.record("durable_step", "durable_run", d * 1e6, "us", json!({}));

        // The floor through the same server, minutes apart at most: the physical limit of a
        // journaled step here, and how far Rein's step is from it.
        let floor_steps = u32::try_from(2 * steps + 1).unwrap_or(u32::MAX);
        let (floor_wall, floor_cpu) =
            floor_per_step(ingress, admin, floor_steps, rounds, server).await?;
        let note = json!({"note": "a bare Restate handler journaling empty ctx.run steps through the same restate-server, served in-process: wall per step (median run) and restate-server CPU per step", "steps": floor_steps});
        rec.record(
            "durable_step",
            "floor_per_step",
            floor_wall * 1e6,
            "us",
            note.clone(),
        );
        rec.record(
            "durable_step",
            "floor_server_cpu_per_step",
            floor_cpu * 1e6,
            "us",
            note,
        );
        rec.record(
            "durable_step",
            "per_step_vs_floor",
            (d - l) / journaled / floor_wall,
            "x",
            json!({"note": "per_journaled_step / floor_per_step"}),
        );
    }

    // 1 000 concurrent sessions across two workers, 2 model calls of 100 ms and a tool each.
    {
        let scale_port = free_port().ok_or("no free port")?;
        let first = start_worker(binary, admin, scale_port, true, 100).await?;
        let second = start_worker(binary, admin, scale_port, false, 100).await?;
        let sessions = if quick { 200 } else { 1_000 };
        // CPU over the row, restate-server's and the two workers' apart: wall alone cannot say
        // whether Rein's sessions cost the engine more or only wait longer.
        let cpu = || {
            (
                cpu_seconds(server).unwrap_or(f64::NAN),
                cpu_seconds(first.0.id()).unwrap_or(f64::NAN)
                    + cpu_seconds(second.0.id()).unwrap_or(f64::NAN),
            )
        };
        let (server_before, workers_before) = cpu();
        let t0 = Instant::now();
        // All start at once inside Restate; at most 100 HTTP requests open here.
        let http = std::sync::Arc::new(tokio::sync::Semaphore::new(100));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..sessions {
            let (client, http) = (client.clone(), http.clone());
            tasks.spawn(async move {
                let _slot = http.acquire().await.ok();
                client
                    .start(&format!("scale-{i}"), InvokeRequest::text("steps 1"))
                    .await
            });
        }
        let mut ids = Vec::new();
        while let Some(id) = tasks.join_next().await {
            if let Ok(Ok(id)) = id {
                ids.push(id);
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for id in ids {
            let (client, http) = (client.clone(), http.clone());
            tasks.spawn(async move {
                let _slot = http.acquire().await.ok();
                client.attach(&id).await
            });
        }
        let mut ok = 0;
        while let Some(done) = tasks.join_next().await {
            if done.is_ok_and(|r| r.is_ok_and(|r| r.text == "Finished 1 steps.")) {
                ok += 1;
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        let (server_after, workers_after) = cpu();
        if ok != sessions {
            return Err(format!("{} of {sessions} sessions failed", sessions - ok));
        }
        let note = json!({"note": "N sessions at once, 2 workers, each: 2 model calls of 100 ms + 1 tool; in-process the same takes ~0.2 s", "sessions": sessions});
        let row = format!("durable_{sessions}");
        rec.record(&row, "wall", wall, "s", note);
        let per_session = |cpu: f64| cpu / sessions as f64 * 1e6;
        let note = json!({"note": "CPU (user + system) over the row / sessions"});
        rec.record(
            &row,
            "server_cpu_per_session",
            per_session(server_after - server_before),
            "us",
            note.clone(),
        );
        rec.record(
            &row,
            "workers_cpu_per_session",
            per_session(workers_after - workers_before),
            "us",
            note,
        );
        // Its floors, through the same server (the floor services are still served), started
        // and attached as the sessions are: as many bare invocations of the same three steps;
        // and as many bare sessions — what any SDK's durable session with an immediate 409 and
        // a saved history costs at least (two invocations, the state a session needs).
        let floors = [
            (
                "floor",
                "StepFloor/session",
                "N bare Restate invocations at once, each journaling two ctx.run steps of 100 ms and an empty one; one endpoint in the bench process",
            ),
            (
                "session_floor",
                "SessionFloor/floor-{i}/invoke",
                "N bare Restate sessions at once: a keyed object's shared invoke (reads whether a run goes: a second invoke is a 409 at once) calling its exclusive run (marks itself going, the same three steps, saves a history, marks itself ended) — two invocations, as a Rein run",
            ),
        ];
        for (name, target, note) in floors {
            let before = cpu_seconds(server).unwrap_or(f64::NAN);
            let floor =
                floor_sessions(ingress, sessions, |i| target.replace("{i}", &i.to_string()))
                    .await?;
            rec.record(
                &row,
                &format!("{name}_server_cpu_per_session"),
                per_session(cpu_seconds(server).unwrap_or(f64::NAN) - before),
                "us",
                json!({"note": "restate-server's CPU (user + system) over the floor's sessions / sessions"}),
            );
            rec.record(
                &row,
                &format!("{name}_wall"),
                floor,
                "s",
                json!({"note": note}),
            );
            rec.record(
                &row,
                &format!("wall_vs_{name}"),
                wall / floor,
                "x",
                json!({"note": format!("wall / {name}_wall")}),
            );
        }
    }
    Ok(())
}

/// Wall time of `n` bare invocations of a floor handler (`target(i)`: its path under the
/// ingress) started at once (one-way sends, then attached), at most 100 HTTP requests open, as
/// the 1 000-session row does.
async fn floor_sessions(
    ingress: &str,
    n: usize,
    target: impl Fn(usize) -> String,
) -> Result<f64, String> {
    let http = rein::models::http::client(Duration::from_secs(120)).map_err(|e| e.to_string())?;
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(100));
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (http, slots, url) = (
            http.clone(),
            slots.clone(),
            format!("{ingress}/{}/send", target(i)),
        );
        tasks.spawn(async move {
            let _slot = slots.acquire().await.ok();
            let sent = http.post(url).send().await.ok()?.text().await.ok()?;
            let sent: serde_json::Value = serde_json::from_str(&sent).ok()?;
            sent["invocationId"].as_str().map(str::to_owned)
        });
    }
    let mut ids = Vec::new();
    while let Some(id) = tasks.join_next().await {
        if let Ok(Some(id)) = id {
            ids.push(id);
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids {
        let (http, slots, url) = (
            http.clone(),
            slots.clone(),
            format!("{ingress}/restate/invocation/{id}/attach"),
        );
        tasks.spawn(async move {
            let _slot = slots.acquire().await.ok();
            http.get(url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        });
    }
    let mut ok = 0;
    while let Some(done) = tasks.join_next().await {
        if done.is_ok_and(|d| d) {
            ok += 1;
        }
    }
    if ok != n {
        return Err(format!("{} of {n} floor invocations failed", n - ok));
    }
    Ok(t0.elapsed().as_secs_f64())
}
