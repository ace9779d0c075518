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
//! println!("console: {}", bound.url()); // AG-UI endpoint: POST {url}agent
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
//! - `GET /` and `GET /console.js`: the approval console (turn off with
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
//!   `rein.message_updated`, `rein.handoff`; a `STATE_SNAPSHOT` of the agent state before the
//!   end; `RUN_FINISHED` with `outcome` `interrupt` (with the interrupts), `cancelled` or
//!   `success` (then `result: {text, stopReason}`), or `RUN_ERROR {message, code}`.
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
//!   a retried request never runs a tool twice. `resume[].metadata.answeredBy` (else the
//!   authenticated principal) is reported as who answered.
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
//! - **A client that disconnects** does not stop the run: it finishes and is stored.
//! - **Security.** Bind `127.0.0.1` (the examples and `rein serve` do). CORS is off unless
//!   [`AguiServer::cors`] is set; [`AguiServer::bearer_auth`] plugs in a token check.

mod console;
mod error;
mod interrupts;
mod run;
mod server;
mod wire;

pub use error::AguiError;
pub use server::{AguiServer, BoundServer, Cors, ServerHandle, WhileRunning};
pub use wire::PROTOCOL_VERSION;
