//! The sessions of the release fixtures: one agent per scenario, built alike by the process
//! that wrote the fixture and by the one that loads it, with a scripted model that holds only
//! what its process is asked. Shared by rein-sessions' stores and rein-restate's object state
//! (`#[path]`-included there), so both stores hold the same sessions.
#![allow(unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rein_agent::{Agent, AgentBuilder, AgentTool, Input, SlidingWindow, TurnInterceptor};
use rein_core::{
    Message, Role, ToolHandle,
    event::{BeforeToolCallEvent, Cancel},
    interrupt::Approval,
    tool::ToolOutput,
};
use rein_interventions::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, Intervention,
};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};

/// Every scenario, by session id. `parked_injection` parks an injected message through the
/// agent's interceptor, which only rein-sessions' stores persist across processes.
pub const SCENARIOS: &[&str] = &[
    "finished",
    "handed_off",
    "before_tool_call",
    "hook_interrupt",
    "tool_interrupt",
    "before_model_call",
    "after_model_call",
    "before_invocation",
    "after_tool_call",
    "nested",
    "handoff_pending",
    "parked_injection",
];

/// Which process builds the agent: the one that wrote the fixture, or one that loads it and
/// goes on (its models hold only what comes next).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Write,
    Resume,
}

/// What the tools of one process did, in order.
pub type Log = Arc<Mutex<Vec<String>>>;

/// One process's side of a scenario: what its tools did, the interceptor its `note` tool
/// injects through, and its models (one script per agent for all its invocations: a durable
/// engine builds the agent anew for each).
#[derive(Clone, Default)]
pub struct Proc {
    pub log: Log,
    pub slot: Arc<Mutex<Option<TurnInterceptor>>>,
    models: Arc<Mutex<HashMap<&'static str, ScriptedModel>>>,
}

impl Proc {
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The model of the agent `agent`: the script of `phase`, made on first use.
    fn model(
        &self,
        agent: &'static str,
        phase: Phase,
        write: Vec<ScriptedResponse>,
        resume: Vec<ScriptedResponse>,
    ) -> ScriptedModel {
        let mut models = self.models.lock().unwrap();
        let script = if phase == Phase::Write { write } else { resume };
        models
            .entry(agent)
            .or_insert_with(|| {
                script
                    .into_iter()
                    .fold(ScriptedModel::builder(), |b, r| b.response(r))
                    .build()
            })
            .clone()
    }

    fn push(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }
}

/// What a loading process does with the session, and what must come of it.
#[derive(Debug, Clone)]
pub struct Resume {
    pub label: &'static str,
    /// The answer to every interrupt the writing process handed out; `None`: the session is
    /// at rest and gets `next` as new input.
    pub answer: Option<Value>,
    pub next: &'static str,
    /// The final text of the resumed run.
    pub text: &'static str,
    /// What the loading process's tools did: each paused tool ran once, nothing ran again.
    pub log: Vec<String>,
    /// The agent in control afterwards.
    pub agent: &'static str,
    /// The text of the history's last tool result afterwards.
    pub tool_result: Option<&'static str>,
    /// Injected texts the history holds once each afterwards.
    pub delivered: &'static [&'static str],
    /// Where the stored history starts afterwards.
    pub history_start: Option<u64>,
    /// A tool use (id) and the input the history holds for it afterwards.
    pub call: Option<(&'static str, Value)>,
}

fn resume(label: &'static str, answer: Value, text: &'static str, log: &[&str]) -> Resume {
    Resume {
        label,
        answer: Some(answer),
        next: "",
        text,
        log: log.iter().map(|s| (*s).to_owned()).collect(),
        agent: "",
        tool_result: None,
        delivered: &[],
        history_start: None,
        call: None,
    }
}

/// How each scenario is resumed (each from its own copy of the fixture).
pub fn resumes(name: &str) -> Vec<Resume> {
    let yes = || json!("yes");
    match name {
        "finished" => vec![Resume {
            next: "count again",
            answer: None,
            // The window (6) keeps the new turn only: the 6 messages restored go too.
            tool_result: Some("count=4"),
            history_start: Some(12),
            ..resume("next", Value::Null, "Counted again: count=4.", &["count"])
        }],
        "handed_off" => vec![Resume {
            next: "and the shipping?",
            answer: None,
            agent: "refunds",
            ..resume("next", Value::Null, "Shipping refunded.", &[])
        }],
        "before_tool_call" => vec![
            Resume {
                tool_result: Some("deleted draft.txt"),
                call: Some(("d1", json!({"path": "draft.txt"}))),
                ..resume(
                    "yes",
                    yes(),
                    "Tidied.",
                    &["budget:3", "delete draft.txt by ann"],
                )
            },
            Resume {
                tool_result: Some("deleted draft-old.txt"),
                call: Some(("d1", json!({"path": "draft-old.txt"}))),
                ..resume(
                    "edit",
                    Approval::approve()
                        .with_edit(json!({"path": "draft-old.txt"}))
                        .into(),
                    "Tidied.",
                    &["budget:3", "delete draft-old.txt by ann"],
                )
            },
        ],
        "hook_interrupt" => vec![resume("yes", yes(), "Counted.", &["count"])],
        "tool_interrupt" => vec![Resume {
            tool_result: Some("sent"),
            ..resume("yes", yes(), "Paid.", &["transfer \"yes\""])
        }],
        "before_model_call" => vec![resume("yes", yes(), "Counted.", &[])],
        "after_model_call" => vec![resume("yes", yes(), "Counted.", &["count"])],
        "before_invocation" => vec![resume("yes", yes(), "Wired.", &["count"])],
        "after_tool_call" => vec![resume("yes", yes(), "Counted.", &[])],
        "nested" => vec![resume("yes", yes(), "Done.", &["delete draft.txt by ?"])],
        "handoff_pending" => vec![Resume {
            agent: "b",
            ..resume("yes", yes(), "b here", &["delete x.txt by ?"])
        }],
        "parked_injection" => vec![Resume {
            delivered: &["spend $9", "and the logs"],
            ..resume("yes", yes(), "Done.", &["count"])
        }],
        _ => unreachable!("unknown scenario {name}"),
    }
    .into_iter()
    .map(|mut r| {
        if r.agent.is_empty() {
            r.agent = agent_name(name);
        }
        r
    })
    .collect()
}

/// The agent in control when the writing process is done.
pub fn agent_name(name: &str) -> &'static str {
    match name {
        "finished" => "clerk",
        "handed_off" => "refunds",
        "nested" => "lead",
        "handoff_pending" => "a",
        _ => "agent",
    }
}

/// The inputs of the writing process (text, invocation state), one invocation each; all
/// but `finished` and `handed_off` stop on interrupts at the last.
pub fn input_texts(name: &str) -> Vec<(&'static str, Option<Value>)> {
    let texts: &[&str] = match name {
        "finished" => &["count twice", "hello", "count once"],
        "handed_off" => &["I want my money back"],
        "before_tool_call" => return vec![("tidy up", Some(json!({"user": "ann"})))],
        "hook_interrupt" | "before_model_call" | "after_model_call" | "after_tool_call" => {
            &["count"]
        }
        "tool_interrupt" => &["pay"],
        "before_invocation" => &["hi", "wire $5 to bob"],
        "nested" => &["clean up"],
        "handoff_pending" => &["go"],
        "parked_injection" => &["note, then count"],
        _ => unreachable!("unknown scenario {name}"),
    };
    texts.iter().map(|t| (*t, None)).collect()
}

/// The writing process's inputs as agent inputs.
pub fn inputs(name: &str) -> Vec<Input> {
    input_texts(name)
        .into_iter()
        .map(|(text, state)| match state {
            Some(state) => Input::text(text).with_state(state),
            None => Input::text(text),
        })
        .collect()
}

/// Whether the session is paused when the writing process is done.
pub fn paused(name: &str) -> bool {
    !matches!(name, "finished" | "handed_off")
}

fn text(t: &str) -> ScriptedResponse {
    ScriptedResponse::new().text(t)
}

fn call(id: &str, tool: &str, input: Value) -> ScriptedResponse {
    ScriptedResponse::new().tool_use(id, tool, input)
}

/// `count`: counts in the agent state (`count`) and answers `count=N`.
fn count_tool(p: &Proc) -> ToolHandle {
    let p = p.clone();
    ToolHandle::from_sync_fn(
        "count",
        "Counts.",
        json!({"type": "object"}),
        move |_, cx| {
            p.push("count".into());
            let n = cx.agent_state().with(|m| {
                let n = m.get("count").and_then(Value::as_u64).unwrap_or(0) + 1;
                m.insert("count".into(), json!(n));
                n
            });
            Ok(ToolOutput::text(format!("count={n}")))
        },
    )
}

/// `delete {path}`: says who asked (the invocation state's `user`).
fn delete_tool(p: &Proc) -> ToolHandle {
    let p = p.clone();
    ToolHandle::from_sync_fn(
        "delete",
        "Deletes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        move |input, cx| {
            let user = cx.invocation_state().get("user").cloned();
            let user = user.as_ref().and_then(Value::as_str).unwrap_or("?");
            let path = input["path"].as_str().unwrap_or_default();
            p.push(format!("delete {path} by {user}"));
            Ok(ToolOutput::text(format!("deleted {path}")))
        },
    )
}

/// `transfer`: asks a human itself (a tool's interrupt).
fn transfer_tool(p: &Proc) -> ToolHandle {
    let p = p.clone();
    ToolHandle::from_fn(
        "transfer",
        "Moves money.",
        json!({"type": "object"}),
        move |input, cx| {
            let p = p.clone();
            async move {
                let answer =
                    cx.interrupt("confirm-transfer", format!("Send {}?", input["amount"]))?;
                p.push(format!("transfer {answer}"));
                Ok(ToolOutput::text("sent"))
            }
        },
    )
}

/// `note`: injects "spend $9" through the process's interceptor.
fn note_tool(p: &Proc) -> ToolHandle {
    let p = p.clone();
    ToolHandle::from_sync_fn(
        "note",
        "Takes a note.",
        json!({"type": "object"}),
        move |_, _| {
            p.push("note".into());
            let i = p.slot.lock().unwrap().clone().unwrap();
            i.inject(Message::user("spend $9")).unwrap();
            Ok(ToolOutput::text("noted"))
        },
    )
}

/// A `Confirm` before calls to `tool` (an approval that takes an edit).
fn ask_before(tool: &'static str, prompt: &'static str) -> Intervention {
    Intervention::named("approval").before_tool_call(move |ev, _| {
        if ev.tool_use().name == tool {
            BeforeToolCallAction::confirm(prompt)
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

/// Counts its passes in the run state and logs the count: a resumed pass that logs
/// `budget:3` after two passes before the pause got the run state back.
fn budget(p: &Proc) -> Intervention {
    let p = p.clone();
    Intervention::named("budget").before_tool_call(move |_, cx| {
        let n = cx
            .run_state()
            .update("budget:calls", |n: &mut u32| {
                *n += 1;
                *n
            })
            .unwrap();
        p.push(format!("budget:{n}"));
        BeforeToolCallAction::Proceed
    })
}

/// The agent of `name` for the process `p` in `phase`.
pub fn builder(name: &str, phase: Phase, p: &Proc) -> AgentBuilder {
    let pick = |w, r| p.model("main", phase, w, r);
    let base = Agent::builder().name(agent_name(name));
    match name {
        "finished" => {
            let mut state = rein_core::Map::new();
            state.insert("user".into(), json!({"name": "ann", "tier": 2}));
            base.model(pick(
                vec![
                    call("c1", "count", json!({})),
                    call("c2", "count", json!({})),
                    text("Counted twice."),
                    text("Hi."),
                    call("c3", "count", json!({})),
                    text("Counted."),
                ],
                vec![
                    call("c4", "count", json!({})),
                    text("Counted again: count=4."),
                ],
            ))
            .tool(count_tool(p))
            .state(state)
            .conversation_manager(SlidingWindow::new(6))
        }
        "handed_off" => {
            let refunds = Agent::builder()
                .name("refunds")
                .system_prompt("You handle refunds.")
                .model(p.model(
                    "refunds",
                    phase,
                    vec![text("Refund issued.")],
                    vec![text("Shipping refunded.")],
                ))
                .build()
                .unwrap();
            // `refunds` is in control once the writing process is done.
            base.name("triage")
                .model(pick(
                    vec![call("h1", "transfer_to_refunds", json!({}))],
                    vec![],
                ))
                .handoff(refunds)
        }
        "before_tool_call" => base
            .model(pick(
                vec![
                    ScriptedResponse::new()
                        .tool_use("c1", "count", json!({}))
                        .tool_use("d1", "delete", json!({"path": "draft.txt"})),
                ],
                vec![text("Tidied.")],
            ))
            .tool(count_tool(p))
            .tool(delete_tool(p))
            .intervention(budget(p))
            .intervention(ask_before("delete", "Delete the draft?")),
        "hook_interrupt" => base
            .model(pick(
                vec![call("c1", "count", json!({}))],
                vec![text("Counted.")],
            ))
            .tool(count_tool(p))
            .hook(|e: &mut BeforeToolCallEvent| {
                if e.tool_use().name == "count"
                    && e.interrupt("approval", "Count?")
                        .is_some_and(|a| a != "yes")
                {
                    e.cancel_tool = Cancel::Yes;
                }
            }),
        "tool_interrupt" => base
            .model(pick(
                vec![call("t1", "transfer", json!({"amount": 100}))],
                vec![text("Paid.")],
            ))
            .tool(transfer_tool(p)),
        "before_model_call" => base
            .model(pick(
                vec![call("c1", "count", json!({}))],
                vec![text("Counted.")],
            ))
            .tool(count_tool(p))
            .intervention(Intervention::named("egress").before_model_call(|ev, _| {
                if ev.model_call_index() >= 1 {
                    BeforeModelCallAction::confirm("Send the result to the provider?")
                } else {
                    BeforeModelCallAction::Proceed
                }
            })),
        "after_model_call" => base
            .model(pick(
                vec![ScriptedResponse::new().text("I will count.").tool_use(
                    "c1",
                    "count",
                    json!({}),
                )],
                vec![text("Counted.")],
            ))
            .tool(count_tool(p))
            .intervention(Intervention::named("review").after_model_call(|ev, _| {
                if ev.response().is_some_and(|r| r.message.has_tool_use()) {
                    AfterModelCallAction::confirm("Go ahead?")
                } else {
                    AfterModelCallAction::Proceed
                }
            })),
        "before_invocation" => base
            .model(pick(
                vec![text("Hello.")],
                vec![call("c1", "count", json!({})), text("Wired.")],
            ))
            .tool(count_tool(p))
            .intervention(Intervention::named("gate").before_invocation(|ev, _| {
                if ev.messages.iter().any(|m| m.text().contains("wire")) {
                    BeforeInvocationAction::confirm("Let this in?")
                } else {
                    BeforeInvocationAction::Proceed
                }
            })),
        "after_tool_call" => base
            .model(pick(
                vec![call("c1", "count", json!({}))],
                vec![text("Counted.")],
            ))
            .tool(count_tool(p))
            .intervention(
                Intervention::named("review")
                    .after_tool_call(|_, _| AfterToolCallAction::confirm("Send it?")),
            ),
        "nested" => {
            let child = p.model(
                "researcher",
                phase,
                vec![call("d1", "delete", json!({"path": "draft.txt"}))],
                vec![text("Cleaned up.")],
            );
            let cp = p.clone();
            let researcher = AgentTool::new("researcher", "Researches and tidies.", move || {
                Agent::builder()
                    .name("researcher")
                    .model(child.clone())
                    .tool(delete_tool(&cp))
                    .intervention(ask_before("delete", "Delete the draft?"))
                    .build()
            });
            base.model(pick(
                vec![call("r1", "researcher", json!({"input": "clean up"}))],
                vec![text("Done.")],
            ))
            .tool(researcher)
        }
        "handoff_pending" => {
            let b = Agent::builder()
                .name("b")
                .model(p.model("b", phase, vec![], vec![text("b here")]))
                .build()
                .unwrap();
            base.model(pick(
                vec![
                    ScriptedResponse::new()
                        .tool_use("h1", "transfer_to_b", json!({}))
                        .tool_use("d1", "delete", json!({"path": "x.txt"})),
                ],
                vec![],
            ))
            .tool(delete_tool(p))
            .handoff(b)
            .intervention(ask_before("delete", "Delete x.txt?"))
        }
        "parked_injection" => base
            .model(pick(
                vec![
                    call("n1", "note", json!({})),
                    call("c1", "count", json!({})),
                ],
                vec![text("Done.")],
            ))
            .tool(note_tool(p))
            .tool(count_tool(p))
            .intervention(Intervention::named("steering").before_invocation(|ev, _| {
                let spends = ev.messages.iter().any(|m| m.text().contains('$'));
                if ev.is_injected() && spends {
                    BeforeInvocationAction::confirm("Allow this steering message?")
                } else {
                    BeforeInvocationAction::Proceed
                }
            }))
            .intervention(ask_before("count", "Count?")),
        _ => unreachable!("unknown scenario {name}"),
    }
}

/// Builds the agent and gives the `note` tool its interceptor.
pub fn build(p: &Proc, b: AgentBuilder) -> Agent {
    let agent = b.build().unwrap();
    *p.slot.lock().unwrap() = Some(agent.interceptor());
    agent
}

/// What `resume` says of the history it leaves: valid, its last tool result, the injected
/// texts it delivered, the input a tool use holds.
pub fn assert_resumed_history(messages: &[Message], resume: &Resume, what: &str) {
    assert_history_valid(messages, what);
    if let Some(want) = resume.tool_result {
        let last = messages
            .iter()
            .rev()
            .find_map(|m| m.tool_results().last().map(|r| r.text()));
        assert_eq!(last.as_deref(), Some(want), "{what}: the last tool result");
    }
    for text in resume.delivered {
        let n = messages
            .iter()
            .filter(|m| m.role == Role::User && m.text().contains(text))
            .count();
        assert_eq!(n, 1, "{what}: {text:?} delivered once");
    }
    if let Some((id, input)) = &resume.call {
        let call = messages
            .iter()
            .flat_map(|m| m.tool_uses())
            .find(|u| u.tool_use_id == *id);
        assert_eq!(call.map(|u| &u.input), Some(input), "{what}: the call {id}");
    }
}

/// No two messages of one role in a row; every tool use answered in the next message.
pub fn assert_history_valid(messages: &[Message], what: &str) {
    for (i, m) in messages.iter().enumerate() {
        if let Some(next) = messages.get(i + 1) {
            assert_ne!(m.role, next.role, "{what}: same role twice: {messages:#?}");
        }
        let uses: Vec<String> = m.tool_uses().map(|u| u.tool_use_id.clone()).collect();
        if !uses.is_empty() {
            let answered: Vec<String> = messages
                .get(i + 1)
                .map(|n| n.tool_results().map(|r| r.tool_use_id.clone()).collect())
                .unwrap_or_default();
            assert_eq!(
                uses, answered,
                "{what}: unanswered tool uses: {messages:#?}"
            );
        }
    }
    if let Some(first) = messages.first() {
        assert_eq!(first.role, Role::User, "{what}: starts with the user");
    }
}
