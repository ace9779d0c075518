//! Serve a Rein agent to browsers over [AG-UI](https://docs.ag-ui.com) (protocol 1.0, as
//! `@ag-ui/client` 1.0.0 speaks it): a run request streams the run's events over SSE, every
//! pending `Confirm` becomes an AG-UI interrupt with a response schema, and a resume answers
//! them and continues the run from the session store — so any server process sharing the store
//! can take it.
//!
//! ```no_run
//! use rein_agent::Agent;
//! use rein_agui::AguiServer;
//! use rein_models::{ScriptedModel, SharedModel};
//! use rein_sessions::MemorySessionStore;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = SharedModel::new(ScriptedModel::builder().text("Hello from Rein!").build());
//! let server = AguiServer::new(MemorySessionStore::new(), move |_thread_id| {
//!     Agent::builder().shared_model(model.clone())
//! });
//! let bound = server.bind("127.0.0.1:8080").await?;
//! // http://127.0.0.1:8080/?token=<a token the server made up>; the AG-UI endpoint is
//! // POST http://127.0.0.1:8080/agent with `Authorization: Bearer <token>`.
//! println!("console: {}", bound.url());
//! bound.serve().await?;
//! # Ok(()) }
//! ```
//!
//! # Routes
//! - `POST /agent`: a `RunAgentInput` (JSON); the answer is the run's events as
//!   `text/event-stream` (`data: <event JSON>` frames), or a protocol error as HTTP 4xx JSON
//!   `{"code", "message", "details"?}` — then nothing ran and the session is unchanged.
//! - `GET /threads/{threadId}`: what the store holds for a thread (pending interrupts, message
//!   count, state); the console uses it after a reload.
//! - `GET /`, `GET /console.js` and `GET /console.css`: the approval console (turn off with
//!   [`AguiServer::console`]).
//!
//! # Choices where the protocol leaves room
//! - **Threads are sessions.** `threadId` is the Rein session id (1–128 characters of
//!   `A-Z a-z 0-9 . _ -`; others are `400 INVALID_THREAD_ID`). The server's session holds the
//!   history: the client's `messages` are not replayed into it. A run's input is the **last
//!   message, which must be a user message with text** (`400 NO_USER_MESSAGE` otherwise);
//!   `state`, `tools` (frontend tools), `context` and `forwardedProps` are ignored.
//! - **Events.** `RUN_STARTED`; `TEXT_MESSAGE_START/CONTENT/END` for the model's text (role
//!   `assistant`); `TOOL_CALL_START/ARGS/END` when the model's tool calls are stored (the
//!   arguments in one `TOOL_CALL_ARGS`), `TOOL_CALL_RESULT` for each result; `CUSTOM` events
//!   for what AG-UI has no event for: `rein.decision` (an intervention decision record, SPEC §3.6,
//!   plus `answeredBy` on an answered confirm), `rein.injection_queued` / `_consumed` /
//!   `_rejected` / `_awaiting_approval`, `rein.response_discarded`, `rein.response_replaced`,
//!   `rein.message_updated`, `rein.handoff`, `rein.output_partial` (a typed agent's answer
//!   parsed so far, `{attempt, value}`), `rein.tool_progress` (a running tool's progress,
//!   `{toolCallId, name, progress, total, message}`, at most 256 per tool call); a `STATE_SNAPSHOT` of the agent state before the
//!   end; `RUN_FINISHED` with `outcome` `interrupt` (with the interrupts), `cancelled` or
//!   `success` (then `result: {text, stopReason}`, plus `output`, the checked typed answer,
//!   when the agent has an output type and gave one), or `RUN_ERROR {message, code}`.
//! - **Interrupts.** Each pending interrupt is an AG-UI interrupt with Rein's id, `toolCallId`
//!   when it is about a tool call, `message` the prompt text and `metadata.rein` the handler
//!   name, lifecycle point and raw reason. An intervention `Confirm` (at any lifecycle point)
//!   has reason `confirm` and the response schema of an approval `{approved: boolean, edit?,
//!   note?}`: approve, reject, or approve with an edit (SPEC §3.10); a hook's own interrupt keeps
//!   its name as the reason and takes any JSON.
//! - **Resume.** A run request with `resume` must answer every open interrupt of the thread,
//!   each once, by id (`404 UNKNOWN_INTERRUPT`, `422 INTERRUPTS_UNANSWERED`,
//!   `422 DUPLICATE_RESUME_ENTRY`); a `resolved` payload must match the interrupt's response
//!   schema (`422 INVALID_RESUME_PAYLOAD`); `cancelled` is a rejection. The messages of a resume
//!   request are ignored. An edit Rein refuses (it fails the tool's schema) ends the run with
//!   `RUN_ERROR` code `INVALID_ANSWER` and the interrupts stay pending. Repeating the last
//!   resume after it was applied is a no-op run (`RUN_FINISHED`, `result.alreadyApplied`), so
//!   a retried request never runs a tool twice. The authenticated principal is reported as who
//!   answered (`answeredBy`); a resume entry's `metadata.answeredBy` is only a claim, reported
//!   beside it as `claimedAnsweredBy`.
//! - **Pending interrupts block new input**: a run request without `resume` on a thread that
//!   waits is `409 INTERRUPTS_PENDING` (the interrupts are in `details`).
//! - **A message while a run is going** (same thread, same process) is injected through the
//!   agent's `TurnInterceptor` ([`WhileRunning::Inject`], the default; SPEC §5): the request
//!   gets a short run of its own (`RUN_STARTED`, `CUSTOM rein.injection_queued`,
//!   `RUN_FINISHED`) and the running run reports `rein.injection_consumed` when the model
//!   takes it in. [`WhileRunning::Refuse`] answers `409 RUN_IN_PROGRESS` instead. A resume
//!   while a run is going may only answer injected messages parked on a confirm (announced by
//!   `CUSTOM rein.injection_awaiting_approval`); they are answered through the interceptor and
//!   the run goes on; any other resume then is `409 RUN_IN_PROGRESS`. Across processes the session version decides: the loser's
//!   run ends with `RUN_ERROR` code `SESSION_ERROR`.
//! - **A client that disconnects** cancels its run (noticed at the next event or keep-alive
//!   write): what was stored stays a valid history, and pending approvals stay pending.
//!
//! # Security (every caller is assumed hostile; docs/security.md)
//! - **A token, always.** The AG-UI routes require `Authorization: Bearer <token>`:
//!   [`AguiServer::token`], your own check ([`AguiServer::bearer_auth`]), or — with neither — a
//!   256-bit token the server makes up at bind and puts in [`BoundServer::url`], as Jupyter
//!   does. Compared in constant time.
//! - **Browsers.** A run request must be `application/json` (`415` otherwise: no cross-site
//!   "simple" request), a request with an `Origin` must come from the server's own origin or
//!   one given to [`AguiServer::cors`] (`403 ORIGIN_NOT_ALLOWED`), and a server bound to a
//!   loopback address answers only to its loopback names (`403 HOST_NOT_ALLOWED`: DNS
//!   rebinding; more with [`AguiServer::allow_hosts`]).
//! - **Per thread.** [`AguiServer::authorize`] decides what each [`Principal`] may do to each
//!   thread ([`ThreadAction`]); `403 FORBIDDEN` otherwise.
//! - **Bounds.** Header and request timeouts, connections, runs, new threads, injections, body
//!   size and model calls per run are capped ([`ServerLimits`]); past a cap, `413` / `429`.
//! - **Headers and errors.** The console is served with a strict Content-Security-Policy
//!   (`frame-ancestors 'none'`), every answer with `nosniff`; a store's or provider's error
//!   text stays in the log (`tracing`), the client gets a code and an error id.

mod auth;
mod console;
mod error;
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub mod fuzzing;
mod inbox;
mod interrupts;
mod limits;
mod run;
mod server;
mod wire;

pub use auth::{Principal, ThreadAction};
pub use error::AguiError;
pub use limits::ServerLimits;
pub use server::{AguiServer, BoundServer, Cors, ServerHandle, WhileRunning};
pub use wire::PROTOCOL_VERSION;
