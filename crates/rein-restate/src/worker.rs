//! A worker process: serves the durable agents to Restate over HTTP/2, registers itself, and
//! shuts down gracefully.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use rein_agent::AgentBuilder;
use rein_core::state::InvocationState;
use restate_sdk::hyper::HyperEndpoint;
use tokio::net::TcpListener;

use crate::Error;
use crate::caller::{Authenticate, Caller, Callers, Refusal};
use crate::drain::{InFlight, Tracked};
use crate::object::{Factory, endpoint};

/// Serves a session's agent to Restate: Restate calls the worker for every step of every
/// durable run, on whichever worker it reaches.
///
/// Two things are required before it listens: who may call the sessions' operations through
/// Restate's ingress ([`authenticate`](Self::authenticate)), and, on any address but
/// loopback, the public key Restate signs its requests with
/// ([`identity_key`](Self::identity_key)), so that only that Restate can drive the worker.
///
/// ```no_run
/// use rein_agent::Agent;
/// use rein_models::{ConversationModel, ScriptedResponse};
/// use rein_restate::{Refusal, Worker};
///
/// # async fn run() -> Result<(), rein_restate::Error> {
/// let worker = Worker::new(|_session: &str| {
///     // Answers from the conversation alone: the factory runs for every invocation.
///     Ok(Agent::builder().model(ConversationModel::new([ScriptedResponse::new().text("Hello.")])))
/// })
/// // Restate's public request-identity key (it logs it at start).
/// .identity_key("publickeyv1_w7YHemBctH5Ck2nQRQ47iBBqhNHy4FV7t2Usbye2A6f")
/// // The principal comes from a token your gateway issued, never from the request body.
/// .authenticate(|caller| match caller.bearer_token() {
///     Some("token-of-ann") => Ok(serde_json::json!({"principal": "ann"}).into()),
///     _ => Err(Refusal::Unauthenticated("a valid bearer token is required".into())),
/// })
/// .bind("0.0.0.0:9080".parse().unwrap())
/// .listen()
/// .await?;
/// // Restate asks the worker what it serves while registering it: serve first.
/// let serving = tokio::spawn(worker.serve(rein_restate::shutdown_signal()));
/// rein_restate::register("http://127.0.0.1:9070", "http://127.0.0.1:9080").await?;
/// # let _ = serving.await;
/// # Ok(())
/// # }
/// ```
pub struct Worker {
    factory: Factory,
    addr: SocketAddr,
    reuse_port: bool,
    grace: Duration,
    identity_keys: Vec<String>,
    authenticate: Option<Arc<Authenticate>>,
    state_keys: BTreeSet<String>,
    admin: Option<Arc<str>>,
}

impl Worker {
    /// A worker whose sessions' agents `factory` builds (given the session id). The factory
    /// runs for every invocation; its agent must behave the same on every worker.
    pub fn new(
        factory: impl Fn(&str) -> Result<AgentBuilder, rein_core::Error> + Send + Sync + 'static,
    ) -> Self {
        Self {
            factory: Arc::new(factory),
            addr: SocketAddr::from(([127, 0, 0, 1], 9080)),
            reuse_port: false,
            grace: Duration::from_secs(10),
            identity_keys: Vec::new(),
            authenticate: None,
            state_keys: BTreeSet::new(),
            admin: None,
        }
    }

    /// Accepts only requests signed by the Restate server holding this key's private half
    /// (Restate's request identity: an Ed25519 key, `publickeyv1_...`, which restate-server
    /// logs at start when given `request-identity-private-key-pem-file`). Call it again to
    /// accept several (a key rotation). Required unless the worker listens on loopback only;
    /// a request without a valid signature is refused (401) before any handler runs.
    pub fn identity_key(mut self, public_key: impl Into<String>) -> Self {
        self.identity_keys.push(public_key.into());
        self
    }

    /// Who may call the sessions' operations (required): `authenticate` is asked about every
    /// call of `invoke`, `resume`, `session`, `inject`, `status` and `cancel`, with the
    /// request's headers as Restate's ingress received them and the session, and returns the
    /// invocation state it vouches for (the `principal` Cedar authorizes, say) or a
    /// [`Refusal`]. The request body never names the principal. To let anyone who reaches the
    /// ingress call everything, say so:
    /// `.authenticate(|_| Ok(InvocationState::new()))`.
    pub fn authenticate(
        mut self,
        authenticate: impl Fn(&Caller<'_>) -> Result<InvocationState, Refusal> + Send + Sync + 'static,
    ) -> Self {
        self.authenticate = Some(Arc::new(authenticate));
        self
    }

    /// The keys of an `invoke`'s `state` taken from callers (default: none). A caller's
    /// `state` with another key is refused (400); the authenticator's keys win over the
    /// caller's.
    pub fn caller_state_keys(mut self, keys: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.state_keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Restate's admin API (`http://restate:9070`): `abandon` kills a stuck run through it.
    /// Without it, the operator kills the run (`restate invocations kill <id>`) and `abandon`
    /// waits for its end.
    pub fn admin_url(mut self, url: impl Into<String>) -> Self {
        self.admin = Some(url.into().into());
        self
    }

    /// The address to listen on (default `127.0.0.1:9080`; port 0 picks one).
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Lets several worker processes listen on one address (`SO_REUSEPORT`), so one Restate
    /// deployment reaches all of them and another takes over when one dies.
    pub fn reuse_port(mut self, on: bool) -> Self {
        self.reuse_port = on;
        self
    }

    /// How long a shutdown waits for the runs in progress (default 10 s); Restate retries what
    /// is cut off on another worker, from its journal.
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Binds the address. Refused ([`Error::Config`]) without an authenticator, with an
    /// identity key that does not parse, or on an address other than loopback without an
    /// identity key.
    pub async fn listen(self) -> Result<BoundWorker, Error> {
        let Some(authenticate) = self.authenticate else {
            return Err(Error::Config(
                "say who may call the sessions' operations: Worker::authenticate".into(),
            ));
        };
        if self.identity_keys.is_empty() && !self.addr.ip().to_canonical().is_loopback() {
            return Err(Error::Config(format!(
                "{} is reachable from other machines: give the worker Restate's request-identity \
                 key (Worker::identity_key), or bind a loopback address",
                self.addr
            )));
        }
        let mut builder = restate_sdk::endpoint::Endpoint::builder();
        for key in &self.identity_keys {
            builder = builder
                .identity_key(key)
                .map_err(|e| Error::Config(format!("identity key `{key}`: {e}")))?;
        }
        if self.identity_keys.is_empty() {
            tracing::warn!(
                "the worker accepts unsigned requests from anyone who reaches {} (loopback); \
                 give it Restate's request-identity key to accept only Restate's",
                self.addr
            );
        } else {
            // The verifier's crypto backend, chosen rather than inferred: inference fails (a
            // panic per request) when another crate enables jsonwebtoken's other backend. An
            // application's own choice, made earlier, stays.
            let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        }
        let callers = Arc::new(Callers {
            authenticate,
            state_keys: self.state_keys,
        });
        let domain = socket2::Domain::for_address(self.addr);
        let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        #[cfg(unix)]
        if self.reuse_port {
            socket.set_reuse_port(true)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&self.addr.into())?;
        socket.listen(1024)?;
        let listener = TcpListener::from_std(socket.into())?;
        Ok(BoundWorker {
            listener,
            service: Tracked {
                endpoint: HyperEndpoint::new(endpoint(builder, self.factory, callers, self.admin)),
                in_flight: InFlight::default(),
            },
            grace: self.grace,
        })
    }
}

/// A worker listening, not yet serving.
pub struct BoundWorker {
    listener: TcpListener,
    service: Tracked,
    grace: Duration,
}

impl BoundWorker {
    /// The address it listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        Ok(self.listener.local_addr()?)
    }

    /// Serves until `shutdown` completes, then stops accepting and lets the runs in progress
    /// finish (up to the grace period) before it closes the connections: new runs meanwhile
    /// are refused (503; Restate retries them on another worker), the calls the runs in
    /// progress make are served.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let graceful = GracefulShutdown::new();
        let builder = auto::Builder::new(TokioExecutor::new());
        tokio::pin!(shutdown);
        loop {
            let (stream, _) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    // A connection that failed before it was accepted (reset, no fds): go on.
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            // Restate's short steps are small writes: without this each waits for a delayed ACK
            // (≈40 ms).
            let _ = stream.set_nodelay(true);
            let conn = builder.serve_connection(TokioIo::new(stream), self.service.clone());
            let conn = graceful.watch(conn.into_owned());
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!("connection: {e}");
                }
            });
        }
        drop(self.listener);
        // Closing a connection (GOAWAY) makes Restate drop its runs: wait for them first.
        let deadline = tokio::time::Instant::now() + self.grace;
        let in_flight = self.service.in_flight;
        in_flight.drain();
        let finished = tokio::time::timeout_at(deadline, in_flight.idle()).await;
        if finished.is_err()
            || tokio::time::timeout_at(deadline, graceful.shutdown())
                .await
                .is_err()
        {
            tracing::warn!("runs still in progress after the grace period; Restate retries them");
        }
        Ok(())
    }
}

/// Completes on SIGTERM or Ctrl-C: the usual `shutdown` for [`BoundWorker::serve`].
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A deployment Restate holds: what [`register`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deployment {
    /// Restate's id of the deployment (`dp_...`): what `restate deployments remove` and the
    /// `pinned_deployment_id` of `sys_invocation` name.
    pub id: String,
    /// Restate registered it now; `false`: the address was registered already and Restate kept
    /// that registration (a worker restarted at its address).
    pub created: bool,
}

/// Registers a deployment — the workers' address, as Restate reaches it — with Restate's admin
/// API, and returns it. New invocations of the sessions go to it, while every invocation that
/// started on an earlier deployment stays there, retries included (Restate pins it): a new
/// release of the agent (another tool, intervention or model) is a new deployment at a new
/// address, registered beside the old one (the guide's rollout, under "Deploys").
///
/// It never overwrites a deployment. An address registered already is kept as Restate holds it
/// (`created: false`): accepted when that registration serves the agent's objects, refused
/// ([`Error::DeploymentExists`]) when Restate holds other services there. Restate calls the
/// address while registering: a worker must be serving there.
pub async fn register(admin_url: &str, deployment_url: &str) -> Result<Deployment, Error> {
    send_registration(admin_url, deployment_url, false).await
}

/// Registers a deployment, overwriting what Restate holds at that address (Restate's
/// `force`): the invocations in flight or paused on it continue on whatever code now serves
/// there — a journal mismatch, retried for ever, if that code takes another path (the guide's
/// "Deploys"). For development, or to repair a registration; a rollout registers a new address
/// with [`register`].
pub async fn register_replacing(
    admin_url: &str,
    deployment_url: &str,
) -> Result<Deployment, Error> {
    send_registration(admin_url, deployment_url, true).await
}

async fn send_registration(
    admin_url: &str,
    deployment_url: &str,
    force: bool,
) -> Result<Deployment, Error> {
    let http = rein_models::http::client(Duration::from_secs(10))?;
    let url = format!("{}/deployments", admin_url.trim_end_matches('/'));
    let body = serde_json::json!({"uri": deployment_url, "force": force});
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(Error::unreachable)?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(Error::unreachable)?;
    let exists = |message: String| Error::DeploymentExists {
        url: deployment_url.to_owned(),
        message,
    };
    if status >= 300 {
        let message = String::from_utf8_lossy(&bytes).into_owned();
        // Restate's META0004 (an address registered with other services), as some releases
        // answer it.
        if status == 409 && !force {
            return Err(exists(message));
        }
        return Err(Error::Refused { status, message });
    }
    #[derive(serde::Deserialize)]
    struct Registered {
        id: String,
        services: Vec<Served>,
    }
    #[derive(serde::Deserialize)]
    struct Served {
        name: String,
        handlers: Vec<Named>,
    }
    #[derive(serde::Deserialize)]
    struct Named {
        name: String,
    }
    let registered: Registered =
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()))?;
    let held: BTreeSet<(String, BTreeSet<String>)> = registered
        .services
        .into_iter()
        .map(|s| (s.name, s.handlers.into_iter().map(|h| h.name).collect()))
        .collect();
    // Restate answers an address it holds already with that registration, unchanged (200).
    if held != served() {
        let names: Vec<&str> = held.iter().map(|(name, _)| name.as_str()).collect();
        return Err(exists(format!(
            "Restate holds deployment {} there, serving {}",
            registered.id,
            names.join(", ")
        )));
    }
    let created = status == 201;
    if !created {
        tracing::info!(
            deployment = %registered.id,
            "{deployment_url} was registered already: Restate keeps that registration (new code \
             there replaces the old under its runs)"
        );
    }
    Ok(Deployment {
        id: registered.id,
        created,
    })
}

/// The services and handlers a worker serves, as Restate's discovery reads them.
fn served() -> BTreeSet<(String, BTreeSet<String>)> {
    use restate_sdk::service::Discoverable as _;
    [
        crate::object::ReinAgent::discover(),
        crate::inbox::ReinInbox::discover(),
    ]
    .into_iter()
    .map(|s| {
        let handlers = s.handlers.iter().map(|h| h.name.to_string()).collect();
        (s.name.to_string(), handlers)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_agent::Agent;
    use rein_models::ScriptedModel;

    fn worker() -> Worker {
        Worker::new(|_| Ok(Agent::builder().model(ScriptedModel::repeating_text("hi"))))
    }

    fn anyone(_: &Caller<'_>) -> Result<InvocationState, Refusal> {
        Ok(InvocationState::new())
    }

    // Restate's documented example key (a valid `publickeyv1_`).
    const KEY: &str = "publickeyv1_w7YHemBctH5Ck2nQRQ47iBBqhNHy4FV7t2Usbye2A6f";

    fn refused(result: Result<BoundWorker, Error>) -> String {
        match result {
            Err(Error::Config(message)) => message,
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("the worker listens"),
        }
    }

    #[tokio::test]
    async fn a_worker_is_refused_without_an_authenticator_or_off_loopback_without_a_key() {
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap_or_else(|_| unreachable!());
        let message = refused(worker().bind(loopback).listen().await);
        assert!(message.contains("authenticate"), "{message}");

        // Refused before binding: these addresses are never listened on.
        for addr in ["0.0.0.0:0", "[::]:0", "192.0.2.1:9080"] {
            let addr: SocketAddr = addr.parse().unwrap_or_else(|_| unreachable!());
            let message = refused(worker().authenticate(anyone).bind(addr).listen().await);
            assert!(message.contains("identity key"), "{addr}: {message}");
        }
        let message = refused(
            worker()
                .authenticate(anyone)
                .identity_key("publickeyv1_not-base58!")
                .bind(loopback)
                .listen()
                .await,
        );
        assert!(message.contains("identity key"), "{message}");

        // On loopback, with or without a key.
        assert!(
            worker()
                .authenticate(anyone)
                .bind(loopback)
                .listen()
                .await
                .is_ok()
        );
        let signed = worker()
            .authenticate(anyone)
            .identity_key(KEY)
            .bind(loopback)
            .listen()
            .await;
        assert!(signed.is_ok());
    }
}
