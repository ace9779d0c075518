//! Durable Rein agents on [Restate](https://restate.dev): a worker that dies in the middle of
//! a run loses nothing — Restate replays the run from its journal on another worker, where no
//! completed model call or tool call runs again — and approvals, injected messages and cancels
//! reach a run from any process through Restate's ingress.
//!
//! Each session is a Restate virtual object keyed by its id (one run at a time per session,
//! across the cluster). Its agent is built by your factory on whichever worker Restate calls,
//! restored from the object's state, and run with a [`Journal`](rein_agent::journal::Journal)
//! that records every model call and tool call as a Restate step. Interventions, hooks and
//! the audit run unchanged inside.
//!
//! ```no_run
//! use rein_agent::Agent;
//! use rein_models::{ConversationModel, ScriptedResponse};
//! use rein_core::state::InvocationState;
//! use rein_restate::{Client, Worker, wire::InvokeRequest};
//!
//! # async fn run() -> Result<(), rein_restate::Error> {
//! // A worker process (run several; each registers the same address or its own). On
//! // loopback, for anyone who reaches the ingress (see `Worker` for a signed, authenticated one).
//! let worker = Worker::new(|_session| Ok(Agent::builder().model(ConversationModel::new([ScriptedResponse::new().text("Hi.")]))))
//!     .authenticate(|_caller| Ok(InvocationState::new()))
//!     .bind("127.0.0.1:9080".parse().unwrap())
//!     .listen()
//!     .await?;
//! tokio::spawn(worker.serve(rein_restate::shutdown_signal()));
//! rein_restate::register("http://127.0.0.1:9070", "http://127.0.0.1:9080").await?;
//!
//! // Any process: a run, its pending approvals, injected messages, a cancel.
//! let client = Client::new("http://127.0.0.1:8080")?;
//! let report = client.invoke("session-1", InvokeRequest::text("Hello")).await?;
//! assert_eq!(report.text, "Hi.");
//! # Ok(()) }
//! ```
//!
//! See `docs/durable-execution.md` for the operations' JSON, what is journaled and what is not.

mod caller;
mod client;
mod drain;
mod error;
mod inbox;
mod object;
mod tail;
pub mod wire;
mod worker;

pub use caller::{Caller, Operation, Refusal};
pub use client::Client;
pub use error::Error;
pub use worker::{BoundWorker, Deployment, Worker, register, register_replacing, shutdown_signal};

// docs/durable-execution.md is compiled as the facade's doc test (feature `restate`), against
// `rein::restate`.
