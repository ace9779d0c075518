//! Deploys (issue #37): a new revision of the agent is a new deployment at a new address, and
//! registering never overwrites the deployment runs are pinned to. A run paused on revision 1
//! resumes on revision 2; a run in flight across the deploy finishes on revision 1, or — revision
//! 1 gone — is abandoned with its finished steps saved. SKIPPED without `REIN_RESTATE_SERVER`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_core::stream::StopReason;
use rein_restate::{
    Client,
    wire::{InvokeRequest, ResumeRequest},
};
use serde_json::{Value, json};

/// The admin API's deployments: (id, uri).
async fn deployments(restate: &Restate) -> Vec<(String, String)> {
    let response = reqwest_client()
        .get(format!("{}/deployments", restate.admin))
        .send()
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    body["deployments"]
        .as_array()
        .unwrap_or_else(|| panic!("no deployments in {body}"))
        .iter()
        .map(|d| {
            let uri = d["uri"].as_str().unwrap_or_default().to_owned();
            (d["id"].as_str().unwrap().to_owned(), uri)
        })
        .collect()
}

async fn deployment_of(restate: &Restate, port: u16) -> String {
    let uri = format!("http://127.0.0.1:{port}/");
    deployments(restate)
        .await
        .into_iter()
        .find(|(_, u)| u.trim_end_matches('/') == uri.trim_end_matches('/'))
        .unwrap_or_else(|| panic!("no deployment at {uri}"))
        .0
}

/// The deployment the session's latest call of `handler` ran on.
async fn pinned(restate: &Restate, session: &str, handler: &str) -> String {
    let query = format!(
        "SELECT pinned_deployment_id FROM sys_invocation WHERE target_service_name = \
         'ReinAgent' AND target_service_key = '{session}' AND target_handler_name = '{handler}' \
         ORDER BY created_at DESC LIMIT 1"
    );
    let response = reqwest_client()
        .post(format!("{}/query", restate.admin))
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(json!({ "query": query }).to_string())
        .send()
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    body["rows"][0]["pinned_deployment_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no deployment in {body}"))
        .to_owned()
}

/// The guide's last rollout step: revision 1 removed once its runs have ended.
async fn remove_deployment(restate: &Restate, id: &str) {
    let response = reqwest_client()
        .delete(format!("{}/deployments/{id}?force=true", restate.admin))
        .send()
        .await
        .unwrap();
    let status = response.status();
    assert!(
        status.is_success(),
        "remove {id}: {status} {}",
        response.text().await.unwrap_or_default()
    );
}

/// A run paused on an approval on revision 1; revision 2 (one more intervention) starts at a
/// new address and is registered — beside revision 1, not over it — and revision 1, with no run
/// left, is removed and stopped. The resume runs on revision 2 from revision 1's checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_on_revision_1_resumes_on_revision_2() {
    let Some((restate, mut first, client)) =
        durable("deploy-paused", WorkerOptions::default()).await
    else {
        return;
    };
    let paused = client
        .invoke("p", InvokeRequest::text("delete /srv/old"))
        .await
        .unwrap();
    assert_eq!(paused.stop_reason, StopReason::Interrupt);
    let revision_1 = deployment_of(&restate, first.port).await;

    let second = Worker::start(
        &restate,
        WorkerOptions {
            revision: 2,
            ..Default::default()
        },
    )
    .await;
    let revision_2 = deployment_of(&restate, second.port).await;
    assert_ne!(revision_1, revision_2);
    assert_eq!(deployments(&restate).await.len(), 2, "revision 1 is kept");

    remove_deployment(&restate, &revision_1).await;
    first.kill();
    let resumed = answered(client.resume(
        "p",
        ResumeRequest::new(vec![paused.interrupts[0].answer(json!({"approved": true}))]),
    ))
    .await
    .unwrap();
    assert_eq!(resumed.text, "Deleted.", "{resumed:?}");
    assert_eq!(pinned(&restate, "p", "resume").await, revision_2);
    let view = client.session("p").await.unwrap();
    let history = serde_json::to_string(&view.messages).unwrap();
    assert!(history.contains("delete /srv/old"), "{history}");
    assert!(view.pending.is_empty());
}

/// Two runs in flight when revision 2 is registered stay on revision 1 (kept serving): one
/// finishes there, all its ledger steps recorded — which revision 2 (the ledger frozen) would
/// deny — and the next run goes to revision 2. Then revision 1 goes for good under the other
/// run: `abandon` ends it with a saved outcome, its finished steps kept and a report saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_flight_across_a_deploy_finishes_on_its_revision_or_is_abandoned_when_it_is_gone()
{
    let Some((restate, mut first, client)) = durable(
        "deploy-in-flight",
        WorkerOptions {
            tool_delay_ms: 30,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let ledger = restate.ledger();
    let ran = |session: &'static str| {
        let ledger = ledger.clone();
        move || {
            ledger_lines(&ledger)
                .into_iter()
                .filter(|(_, s, _)| s == session)
                .count()
        }
    };
    let (ran_f, ran_h) = (ran("f"), ran("h"));
    // Long enough (≈ 1.8 s of tool time) that revision 2, a new worker process, registers
    // while it goes even on a loaded machine (12 steps were not, once).
    let f = client
        .start("f", InvokeRequest::text("steps 60"))
        .await
        .unwrap();
    client
        .start("h", InvokeRequest::text("steps 400"))
        .await
        .unwrap();
    wait_until("2 steps of each run", async || ran_f() >= 2 && ran_h() >= 2).await;
    let _second = Worker::start(
        &restate,
        WorkerOptions {
            revision: 2,
            ledger: Some(&ledger),
            ..Default::default()
        },
    )
    .await;
    assert!(ran_f() < 60, "revision 2 came while the run went");
    let report = answered(client.attach(&f)).await.unwrap();
    assert_eq!(report.text, "Finished 60 steps.", "{report:?}");
    assert_eq!(ran_f(), 60);
    let revision_1 = deployment_of(&restate, first.port).await;
    assert_eq!(pinned(&restate, "f", "run_input").await, revision_1);

    // New runs go to revision 2: the ledger is frozen there.
    answered(client.invoke("g", InvokeRequest::text("steps 1")))
        .await
        .unwrap();
    assert_eq!(ran("g")(), 0, "revision 2 denies the ledger");
    assert_ne!(pinned(&restate, "g", "run_input").await, revision_1);

    // Revision 1 goes before its other run drained: the run cannot go on anywhere.
    first.kill();
    let done = ran_h();
    assert!(done < 400, "killed before its end");
    let abandoned = answered(client.abandon("h")).await.unwrap();
    assert_eq!(
        abandoned.stop_reason,
        StopReason::Cancelled,
        "{abandoned:?}"
    );
    assert!(
        abandoned
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("abandoned"),
        "{abandoned:?}"
    );
    let view = client.session("h").await.unwrap();
    let history = serde_json::to_string(&view.messages).unwrap();
    let recorded = history.matches("recorded").count();
    // Every call the ledger saw has its result; the one in flight at the kill may have run
    // before its step was journaled.
    assert!(
        recorded + 1 >= done && recorded <= done,
        "{recorded} results for {done} ledger lines"
    );
    assert_eq!(view.last_run.unwrap().error, abandoned.error);
}

/// Another service than the agent's, to hold an address with other services.
struct Other;

#[restate_sdk::service]
impl Other {
    #[handler]
    async fn hello(&self, _ctx: Context<'_>) -> Result<String, HandlerError> {
        Ok("hello".into())
    }
}

use restate_sdk::prelude::{Context, Endpoint, HandlerError};

/// Serves `Other` on `port` (HTTP/2 without TLS, as Restate calls) until dropped.
async fn serve_other(port: u16) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let endpoint = restate_sdk::hyper::HyperEndpoint::new(Endpoint::builder().bind(Other).build());
    tokio::spawn(async move {
        // The connections go with the server (Restate keeps its connection open otherwise,
        // and would go on talking to this one).
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let endpoint = endpoint.clone();
            connections.spawn(async move {
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let _ = builder
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), endpoint)
                    .await;
            });
        }
    })
}

/// Issue #37: `register` sent `force: true` and overwrote whatever Restate held at the address —
/// the deployment runs were pinned to among it. Now an address Restate holds with other services
/// is refused, saying what to do, and the deployment there stays; `register_replacing`
/// overwrites it when asked; an address registered already with the agent's objects (a worker
/// restarted) is accepted as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_never_overwrites_a_deployment_unless_asked() {
    let Some(restate) = Restate::start("deploy-register").await else {
        return;
    };
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let other = serve_other(port).await;
    let response = reqwest_client()
        .post(format!("{}/deployments", restate.admin))
        .header("content-type", "application/json")
        .body(json!({ "uri": url }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let held = deployment_of(&restate, port).await;
    other.abort();
    let _ = other.await;

    // The agent's worker at the same address: Restate holds other services there.
    let _worker = Worker::start(
        &restate,
        WorkerOptions {
            port,
            register: false,
            ..Default::default()
        },
    )
    .await;
    let e = rein_restate::register(&restate.admin, &url)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, rein_restate::Error::DeploymentExists { url: u, .. } if *u == url),
        "{e}"
    );
    assert!(e.to_string().contains("new address"), "{e}");
    assert_eq!(
        deployments(&restate).await,
        vec![(held.clone(), format!("{url}/"))]
    );

    // Overwritten when asked; then registered again as it is, accepted and unchanged.
    let replaced = rein_restate::register_replacing(&restate.admin, &url)
        .await
        .unwrap();
    let again = rein_restate::register(&restate.admin, &url).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.id, replaced.id);
    assert_eq!(deployments(&restate).await.len(), 1);
    let client = Client::new(&restate.ingress).unwrap();
    let report = answered(client.invoke("r", InvokeRequest::text("say hi")))
        .await
        .unwrap();
    assert_eq!(report.text, "You said: say hi");

    // A new address is a new deployment beside it.
    let second = Worker::start(
        &restate,
        WorkerOptions {
            register: false,
            ..Default::default()
        },
    )
    .await;
    let new = rein_restate::register(&restate.admin, &format!("http://127.0.0.1:{}", second.port))
        .await
        .unwrap();
    assert!(new.created);
    assert_eq!(deployments(&restate).await.len(), 2);
}
