//! The `mcp_call` rows (issue 44, item 3): the CPU and time of one MCP tool call through Rein
//! against its floor, the same call through a bare rmcp client, in the same process run. The
//! server is the reference server (`@modelcontextprotocol/server-everything`, its `echo` tool)
//! over stdio, one process per client, started from `REIN_MCP_EVERYTHING` (a command line); the
//! rows are skipped when it is not set.
//!
//! Process CPU is this process's (client side); the server's own CPU per call is read from its
//! `/proc/<pid>/stat` (clock ticks, so only the batch totals are meaningful). Rounds interleave
//! the variants, so load drift hits them alike; the judged numbers are the ratios. Run it pinned
//! to one CPU (`taskset -c 1`, the servers inherit it): each variant has a server process of its
//! own, and unpinned, where the scheduler puts each one decides what waking it costs the client.

use std::time::Instant;

use cpu_time::ProcessTime;
use rein::Agent;
use rein::mcp::McpClient;
use rein::models::ScriptedModel;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::bench::{agent_builder, build};
use crate::measure::{Config, Recorder, Samples};

/// Calls per batch.
const PER_BATCH: usize = 50;

/// The rows, or a message saying why not.
pub(crate) fn rows(rec: &Recorder, cfg: &Config, rt: &tokio::runtime::Runtime) {
    let Ok(line) = std::env::var("REIN_MCP_EVERYTHING") else {
        eprintln!(
            "mcp_call: REIN_MCP_EVERYTHING is not set (the reference server's command, e.g. \
             `node .../server-everything/dist/index.js stdio`); no rows"
        );
        return;
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((program, args)) = words.split_first() else {
        eprintln!("mcp_call: REIN_MCP_EVERYTHING is empty; no rows");
        return;
    };
    if let Err(e) = rt.block_on(run(rec, cfg, program, args)) {
        eprintln!("mcp_call: {e}; no rows");
    }
}

async fn run(
    rec: &Recorder,
    cfg: &Config,
    program: &str,
    args: &[&str],
) -> Result<(), Box<dyn std::error::Error>> {
    let command = || {
        let mut c = tokio::process::Command::new(program);
        c.args(args);
        c
    };
    // The floor: rmcp's own client, no handler of ours.
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(command())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let floor_pid = transport.id();
    let floor = ().serve(transport).await?;
    let params = CallToolRequestParams::new("echo").with_arguments(
        json!({"message": "hi"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    // Rein's client, its server found as the child that appears.
    let before = child_pids();
    let client = McpClient::builder()
        .no_prefix()
        .quiet(true)
        .command(command())
        .await?;
    let rein_pid = child_pids().into_iter().find(|p| !before.contains(p));
    let tools = client.tools().await?;
    let asks_echo = ScriptedModel::builder()
        .cycle()
        .record_requests(false)
        .tool_use("c0", "echo", json!({"message": "hi"}))
        .text("Hello! How can I help you today?")
        .build();
    let mut mcp_agent = build(
        Agent::builder()
            .model(asks_echo)
            .tools(tools)
            .no_conversation_manager(),
    );
    // The same run with a local tool instead: the difference is the MCP call.
    let mut local_agent = build(agent_builder(1, 1));

    // Each variant: (process samples, server ticks, calls).
    // Variant 4, the in-run floor: a bare rmcp call, then the local-tool run. Each iteration
    // waits for the server once, as a run calling the MCP tool does, so the run's own code runs
    // after that wait in both (with the caches the wait left): subtracting the local run timed
    // in a loop of its own (variant 3) charges the MCP call with the run's slower code after a
    // wait, which is no part of the call.
    let mut s: [(Samples, u64, usize); 5] = Default::default();
    let servers = [floor_pid, rein_pid, rein_pid, None, floor_pid];
    // `REIN_MCP_ONLY=i`: variant i alone (0 floor, 1 call_tool, 2 in a run, 3 local tool), to
    // profile one under perf or callgrind; no rows then.
    let only: Option<usize> = std::env::var("REIN_MCP_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    for round in 0..=cfg.batches(40) {
        for (i, sample) in s.iter_mut().enumerate() {
            if only.is_some_and(|o| o != i) {
                continue;
            }
            let ticks0 = servers[i].and_then(cpu_ticks);
            let (t0, c0) = (Instant::now(), ProcessTime::now());
            for _ in 0..PER_BATCH {
                match i {
                    0 => drop(floor.call_tool(params.clone()).await?),
                    1 => drop(
                        client
                            .call_tool("echo", json!({"message": "hi"}))
                            .await
                            .map_err(|e| e.to_string())?,
                    ),
                    2 => {
                        mcp_agent.truncate_messages(0);
                        drop(mcp_agent.invoke("hi").await?);
                    }
                    3 => {
                        local_agent.truncate_messages(0);
                        drop(local_agent.invoke("hi").await?);
                    }
                    _ => {
                        drop(floor.call_tool(params.clone()).await?);
                        local_agent.truncate_messages(0);
                        drop(local_agent.invoke("hi").await?);
                    }
                }
            }
            let (wall, cpu) = (t0.elapsed(), c0.elapsed());
            // Round 0 warms up (the server's JIT, the validators) and is not kept.
            if round > 0 {
                sample.0.push(wall, cpu, PER_BATCH);
                if let (Some(a), Some(b)) = (ticks0, servers[i].and_then(cpu_ticks)) {
                    sample.1 += b - a;
                    sample.2 += PER_BATCH;
                }
            }
        }
    }
    if only.is_some() {
        floor.cancel().await?;
        return Ok(());
    }
    let med = |x: &Samples| (x.summarize(&x.wall, 1.0).0, x.summarize(&x.cpu, 1.0).0);
    let [floor_s, client_s, agent_s, local_s, both_s] =
        [&s[0].0, &s[1].0, &s[2].0, &s[3].0, &s[4].0];
    let extra = |note: &str| json!({"n": floor_s.wall.len(), "per_batch": PER_BATCH, "note": note});
    let floor_r = rec.summary(
        "mcp_call",
        "rmcp_floor",
        floor_s,
        1.0,
        extra("the floor: one `echo` tools/call through a bare rmcp client (RunningService::call_tool), stdio"),
    );
    let client_r = rec.summary(
        "mcp_call",
        "client_call",
        client_s,
        1.0,
        extra("McpClient::call_tool(\"echo\"): Rein's client, the result mapped to a ToolOutput"),
    );
    let (agent_m, local_m) = (med(agent_s), med(local_s));
    let agent_r = (agent_m.0 - local_m.0, agent_m.1 - local_m.1);
    let note = "(an agent run whose one tool call is the MCP server's echo) - (the same run with a local sync tool): the MCP call inside a run (its events, interventions, validation, mapping)";
    rec.record("mcp_call", "agent_call", agent_r.0, "us", extra(note));
    rec.record("mcp_call", "agent_call_cpu", agent_r.1, "us", extra(note));
    // The same, with the local run timed after a wait for the server (variant 4 - the floor).
    let both_m = med(both_s);
    let after_wait = (
        agent_m.0 - (both_m.0 - floor_r.0),
        agent_m.1 - (both_m.1 - floor_r.1),
    );
    let note = "(an agent run whose one tool call is the MCP server's echo) - ((a bare rmcp call, then the same run with a local sync tool) - (a bare rmcp call)): the MCP call inside a run, the run's own code timed after a wait for the server on both sides";
    rec.record(
        "mcp_call",
        "agent_call_after_wait",
        after_wait.0,
        "us",
        extra(note),
    );
    rec.record(
        "mcp_call",
        "agent_call_after_wait_cpu",
        after_wait.1,
        "us",
        extra(note),
    );
    for (metric, v, f) in [
        ("client_ratio", client_r.0, floor_r.0),
        ("client_ratio_cpu", client_r.1, floor_r.1),
        ("agent_ratio", agent_r.0, floor_r.0),
        ("agent_ratio_cpu", agent_r.1, floor_r.1),
        ("agent_after_wait_ratio", after_wait.0, floor_r.0),
        ("agent_after_wait_ratio_cpu", after_wait.1, floor_r.1),
    ] {
        rec.record(
            "mcp_call",
            metric,
            v / f,
            "x",
            json!({"note": "to the rmcp floor of the same run (medians)"}),
        );
    }
    for (metric, (_, ticks, calls)) in [("server_floor_cpu", &s[0]), ("server_rein_cpu", &s[1])] {
        if *calls > 0 {
            // Clock ticks are 1/100 s on Linux (USER_HZ).
            let us = *ticks as f64 * 10_000.0 / *calls as f64;
            rec.record(
                "mcp_call",
                metric,
                us,
                "us",
                json!({"calls": calls, "note": "the server process's own CPU per call (/proc/PID/stat utime+stime), for the floor's client or Rein's McpClient::call_tool"}),
            );
        }
    }
    floor.cancel().await?;
    Ok(())
}

/// The pids of this process's children.
fn child_pids() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat_fields(*pid).and_then(|f| f.get(1)?.parse().ok()) == Some(me))
        .collect()
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let f = stat_fields(pid)?;
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The fields of `/proc/PID/stat` after the command name (the 3rd field, `state`, first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name is in parentheses and may hold spaces: the fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}
