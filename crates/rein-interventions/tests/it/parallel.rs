//! Parallel handlers (SPEC §3.7): a group's outcome and audit equal the sequential ones, a
//! short-circuit cancels the members still running, and the earliest stop wins whatever the
//! timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rein_hooks::HookRegistry;
use rein_interventions::{
    BeforeToolCallAction, BeforeToolCallEvent, Cancel, Confirm, DecisionAction, DecisionOutcome,
    DecisionRecord, Error, HandlerError, Intervention, InterventionContext, InterventionHandler,
    InterventionRegistry, InvocationContext, Mode, ModelOutputAction, ModelOutputEvent, OnError,
    SharedHandler, ToolUse, json,
};
use tokio::time::{Instant, sleep};

/// A tiny deterministic PRNG (splitmix64), so every case can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What a generated handler decides. None of them reads the event, so none depends on another's
/// transform: the precondition under which parallel equals sequential (SPEC §3.7).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Proceed,
    Deny,
    Guide,
    /// Sets `input["h<i>"] = i` and `input["last"] = i`: the second shows the order in which
    /// transforms are staged.
    Transform,
    /// A transform whose edit fails (a handler error found only when the result is applied).
    FailingTransform,
    Error,
    Panic,
    ConfirmUnanswered,
    ConfirmApproved,
    ConfirmRejected,
}

const KINDS: [Kind; 10] = [
    Kind::Proceed,
    Kind::Deny,
    Kind::Guide,
    Kind::Transform,
    Kind::FailingTransform,
    Kind::Error,
    Kind::Panic,
    Kind::ConfirmUnanswered,
    Kind::ConfirmApproved,
    Kind::ConfirmRejected,
];

#[derive(Debug, Clone, Copy)]
struct Spec {
    kind: Kind,
    on_error: OnError,
    shadow: bool,
    /// Milliseconds slept before deciding (0: decides on first poll, after one yield).
    delay: u64,
}

fn action(i: usize, kind: Kind) -> Result<BeforeToolCallAction, HandlerError> {
    Ok(match kind {
        Kind::Proceed => BeforeToolCallAction::Proceed,
        Kind::Deny => BeforeToolCallAction::deny(format!("no from h{i}")),
        Kind::Guide => BeforeToolCallAction::guide(format!("hint {i}")),
        Kind::Transform => BeforeToolCallAction::transform(move |t| {
            t.input[format!("h{i}")] = json!(i);
            t.input["last"] = json!(i);
        }),
        Kind::FailingTransform => BeforeToolCallAction::try_transform(move |_| {
            Err(HandlerError::new(format!("edit {i}")))
        }),
        Kind::Error => return Err(HandlerError::new(format!("boom {i}"))),
        Kind::Panic => panic!("panic {i}"),
        Kind::ConfirmUnanswered => BeforeToolCallAction::confirm(format!("ok {i}?")),
        Kind::ConfirmApproved => {
            BeforeToolCallAction::Confirm(Confirm::new(format!("ok {i}?")).with_response(true))
        }
        Kind::ConfirmRejected => {
            BeforeToolCallAction::Confirm(Confirm::new(format!("ok {i}?")).with_response(false))
        }
    })
}

fn handler(i: usize, spec: Spec, parallel: bool) -> SharedHandler {
    let mut h = Intervention::named(format!("h{i}"))
        .on_error(spec.on_error)
        .mode(if spec.shadow {
            Mode::Shadow
        } else {
            Mode::Enforce
        })
        .before_tool_call_async(move |_, _| {
            Box::pin(async move {
                if spec.delay == 0 {
                    tokio::task::yield_now().await;
                } else {
                    sleep(Duration::from_millis(spec.delay)).await;
                }
                action(i, spec.kind)
            })
        });
    if parallel {
        h = h.parallel();
    }
    h.into()
}

fn event() -> BeforeToolCallEvent {
    BeforeToolCallEvent::new(
        InvocationContext::default(),
        ToolUse::new("t1", "write", json!({"path": "/tmp/a"})),
    )
}

/// What a pass left behind, in a comparable form.
#[derive(Debug, PartialEq)]
struct Seen {
    result: Result<(), String>,
    cancel: Cancel,
    input: serde_json::Value,
    interrupts: Vec<(String, String, Option<String>)>,
    decisions: Vec<DecisionRecord>,
    not_run: Vec<String>,
}

async fn dispatch(hooks: &HookRegistry) -> Seen {
    let mut ev = event();
    let result = hooks.dispatch(&mut ev).await.map_err(|e| e.to_string());
    let (not_run, decisions): (Vec<_>, Vec<_>) = ev
        .decisions()
        .iter()
        .cloned()
        .map(|mut d| {
            d.duration = None;
            d
        })
        .partition(|d| d.outcome == DecisionOutcome::NotRun);
    for d in &not_run {
        assert_eq!(d.action, DecisionAction::None);
        assert_eq!(d.text, None);
        assert_eq!(d.tool_use_id.as_deref(), Some("t1"));
    }
    Seen {
        result,
        cancel: ev.cancel_tool.clone(),
        input: ev.tool_use().input.clone(),
        interrupts: ev
            .interrupts()
            .iter()
            .map(|i| (i.id.clone(), i.name.clone(), i.fingerprint.clone()))
            .collect(),
        decisions,
        not_run: not_run.into_iter().map(|d| d.handler).collect(),
    }
}

fn hooks(handlers: Vec<SharedHandler>, timing: bool) -> HookRegistry {
    InterventionRegistry::builder()
        .handlers(handlers)
        .audit_timing(timing)
        .build()
        .unwrap()
        .to_hooks()
}

/// The property: random handlers, outcomes, error policies, modes and delays, some or all of
/// them parallel, give the sequential outcome and audit (minus the `not_run` records), and the
/// `not_run` records are exactly the group members after the one that stopped the pass.
#[tokio::test(start_paused = true)]
async fn parallel_outcome_equals_sequential_outcome() {
    // Panics inside handlers are expected here; keep the output readable.
    std::panic::set_hook(Box::new(|_| {}));
    let mut groups = 0;
    let mut stops_in_a_group = 0;
    for seed in 0..1500u64 {
        let mut rng = Rng(seed);
        let n = 1 + rng.below(7) as usize;
        let specs: Vec<Spec> = (0..n)
            .map(|_| Spec {
                kind: KINDS[rng.below(KINDS.len() as u64) as usize],
                on_error: [OnError::Throw, OnError::Proceed, OnError::Deny][rng.below(3) as usize],
                shadow: rng.chance(15),
                delay: if rng.chance(20) { 0 } else { 1 + rng.below(50) },
            })
            .collect();
        // Half the cases: everything parallel (one group); otherwise a random mix.
        let all = rng.chance(50);
        let parallel: Vec<bool> = (0..n).map(|_| all || rng.chance(60)).collect();
        groups += usize::from(parallel.windows(2).any(|w| w[0] && w[1]));
        let timing = rng.chance(30);

        let sequential = hooks(
            specs
                .iter()
                .enumerate()
                .map(|(i, s)| handler(i, *s, false))
                .collect(),
            timing,
        );
        let concurrent = hooks(
            specs
                .iter()
                .enumerate()
                .map(|(i, s)| handler(i, *s, parallel[i]))
                .collect(),
            timing,
        );
        let expected = dispatch(&sequential).await;
        let started = Instant::now();
        let seen = dispatch(&concurrent).await;
        let took = started.elapsed();
        let context = format!("seed {seed}: {specs:?}, parallel {parallel:?}");
        assert!(expected.not_run.is_empty(), "{context}");
        assert_eq!(
            Seen {
                not_run: Vec::new(),
                ..seen
            },
            Seen {
                not_run: Vec::new(),
                ..expected
            },
            "{context}"
        );
        // Not run: the members of the stopping member's group after it, in order.
        let stopper = expected_stopper(&specs);
        let mut want = Vec::new();
        if let Some(s) = stopper
            && parallel[s]
        {
            let end = (s..n).take_while(|&j| parallel[j]).last().unwrap_or(s);
            let start = (0..=s)
                .rev()
                .take_while(|&j| parallel[j])
                .last()
                .unwrap_or(s);
            if end > start {
                want = ((s + 1)..=end).map(|j| format!("h{j}")).collect();
            }
        }
        assert_eq!(seen.not_run, want, "{context}");
        stops_in_a_group += usize::from(!want.is_empty());
        // Never slower than the sequential sum of delays (1 ms slack per handler for yields).
        let sum: u64 = specs.iter().map(|s| s.delay).sum();
        assert!(
            took <= Duration::from_millis(sum + n as u64),
            "{context}: {took:?}"
        );
    }
    let _ = std::panic::take_hook();
    assert!(groups > 700, "only {groups} cases had a parallel group");
    assert!(
        stops_in_a_group > 200,
        "only {stops_in_a_group} cases stopped inside a group"
    );
}

/// The index of the handler whose result stops the sequential pass, if any (mirrors §3.3/§3.4).
fn expected_stopper(specs: &[Spec]) -> Option<usize> {
    specs.iter().position(|s| {
        let failing = matches!(s.kind, Kind::Error | Kind::Panic | Kind::FailingTransform);
        if s.shadow {
            return false;
        }
        match s.kind {
            Kind::Deny | Kind::ConfirmRejected => true,
            _ if failing => s.on_error != OnError::Proceed,
            _ => false,
        }
    })
}

/// Sets its flag when dropped: shows whether a future was dropped before it completed.
struct DropGuard(Arc<AtomicBool>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn delayed(name: &str, ms: u64, decide: BeforeToolCallAction) -> Intervention {
    let decide = Arc::new(std::sync::Mutex::new(Some(decide)));
    Intervention::named(name)
        .parallel()
        .before_tool_call_async(move |_, _| {
            let decide = decide.clone();
            Box::pin(async move {
                sleep(Duration::from_millis(ms)).await;
                decide
                    .lock()
                    .unwrap()
                    .take()
                    .unwrap_or(BeforeToolCallAction::Proceed)
            })
        })
}

#[tokio::test(start_paused = true)]
async fn a_deny_cancels_the_members_still_running() {
    let completed = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let (c, d) = (completed.clone(), dropped.clone());
    let slow = Intervention::named("slow-judge")
        .parallel()
        .before_tool_call_async(move |_, _| {
            let (c, d) = (c.clone(), d.clone());
            Box::pin(async move {
                let _guard = DropGuard(d);
                sleep(Duration::from_secs(10)).await;
                c.store(true, Ordering::SeqCst);
                BeforeToolCallAction::guide("slow")
            })
        });
    let registry = InterventionRegistry::new([
        SharedHandler::from(delayed("fast-deny", 1, BeforeToolCallAction::deny("no"))),
        slow.into(),
    ])
    .unwrap();
    let mut ev = event();
    let started = Instant::now();
    registry.to_hooks().dispatch(&mut ev).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(100));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the slow future was dropped"
    );
    assert!(!completed.load(Ordering::SeqCst), "and never completed");
    assert_eq!(ev.cancel_tool, Cancel::Message("DENIED: no".into()));
    let audit: Vec<_> = ev
        .decisions()
        .iter()
        .map(|d| (d.handler.as_str(), d.action, d.outcome))
        .collect();
    assert_eq!(
        audit,
        [
            ("fast-deny", DecisionAction::Deny, DecisionOutcome::Applied),
            ("slow-judge", DecisionAction::None, DecisionOutcome::NotRun),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_earlier_slow_deny_wins_over_a_later_fast_one() {
    let registry = InterventionRegistry::new([
        delayed("slow-deny", 5_000, BeforeToolCallAction::deny("slow")),
        delayed("fast-deny", 1, BeforeToolCallAction::deny("fast")),
        delayed("guide", 2, BeforeToolCallAction::guide("g")),
    ])
    .unwrap();
    let mut ev = event();
    let started = Instant::now();
    registry.to_hooks().dispatch(&mut ev).await.unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(5) && took < Duration::from_millis(5_100));
    assert_eq!(ev.cancel_tool, Cancel::Message("DENIED: slow".into()));
    let audit: Vec<_> = ev
        .decisions()
        .iter()
        .map(|d| (d.handler.as_str(), d.outcome))
        .collect();
    assert_eq!(
        audit,
        [
            ("slow-deny", DecisionOutcome::Applied),
            ("fast-deny", DecisionOutcome::NotRun),
            ("guide", DecisionOutcome::NotRun),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_group_takes_as_long_as_its_slowest_member() {
    let registry = InterventionRegistry::new((0..5).map(|i| {
        delayed(
            &format!("judge{i}"),
            20,
            BeforeToolCallAction::guide(format!("{i}")),
        )
    }))
    .unwrap();
    let mut ev = event();
    let started = Instant::now();
    registry.to_hooks().dispatch(&mut ev).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(25));
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message(
            "GUIDANCE: [judge0] 0\n[judge1] 1\n[judge2] 2\n[judge3] 3\n[judge4] 4".into()
        )
    );
}

/// Members see the event as it stood when the group started; the handler after the group sees
/// their transforms.
#[tokio::test(start_paused = true)]
async fn members_do_not_see_each_others_transforms() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let watcher = |name: &str,
                   seen: Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>>,
                   parallel: bool| {
        let name = name.to_owned();
        let h = Intervention::named(name.clone()).before_tool_call(move |ev, _| {
            seen.lock()
                .unwrap()
                .push((name.clone(), ev.tool_use().input.clone()));
            let key = name.clone();
            BeforeToolCallAction::transform(move |t| t.input[key] = json!(true))
        });
        if parallel { h.parallel() } else { h }
    };
    let registry = InterventionRegistry::new([
        watcher("a", seen.clone(), true),
        watcher("b", seen.clone(), true),
        watcher("c", seen.clone(), false),
    ])
    .unwrap();
    let mut ev = event();
    registry.to_hooks().dispatch(&mut ev).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            ("a".into(), json!({"path": "/tmp/a"})),
            ("b".into(), json!({"path": "/tmp/a"})),
            ("c".into(), json!({"path": "/tmp/a", "a": true, "b": true})),
        ]
    );
    assert_eq!(
        ev.tool_use().input,
        json!({"path": "/tmp/a", "a": true, "b": true, "c": true})
    );
}

/// A trait handler says it is parallel through `parallel()`; `Arc<H>` keeps it.
#[tokio::test(start_paused = true)]
async fn trait_handlers_run_in_parallel_too() {
    struct Judge(&'static str, Arc<AtomicUsize>);
    impl InterventionHandler for Judge {
        fn name(&self) -> &str {
            self.0
        }
        fn parallel(&self) -> bool {
            true
        }
        async fn before_tool_call(
            &self,
            _event: &BeforeToolCallEvent,
            _cx: &InterventionContext,
        ) -> Result<BeforeToolCallAction, HandlerError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            sleep(Duration::from_millis(30)).await;
            Ok(BeforeToolCallAction::Proceed)
        }
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let registry = InterventionRegistry::new([
        SharedHandler::from(Judge("j1", calls.clone())),
        Arc::new(Judge("j2", calls.clone())).into(),
        Judge("j3", calls.clone()).into(),
    ])
    .unwrap();
    assert!(InterventionHandler::parallel(&Arc::new(Judge(
        "x",
        calls.clone()
    ))));
    let mut ev = event();
    let started = Instant::now();
    registry.to_hooks().dispatch(&mut ev).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(40));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// A `Throw` error stops the pass and fails the invocation; the members after it are recorded as
/// not run even so.
#[tokio::test(start_paused = true)]
async fn a_throwing_member_fails_the_dispatch_and_cancels_the_rest() {
    let registry = InterventionRegistry::new([
        Intervention::named("throws")
            .parallel()
            .before_tool_call_async(|_, _| {
                Box::pin(async {
                    sleep(Duration::from_millis(1)).await;
                    Err::<BeforeToolCallAction, _>(HandlerError::new("down"))
                })
            }),
        delayed("slow", 10_000, BeforeToolCallAction::Proceed),
    ])
    .unwrap();
    let mut ev = event();
    let started = Instant::now();
    let err = registry.to_hooks().dispatch(&mut ev).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(100));
    assert!(matches!(err, Error::Handler { ref handler, .. } if handler == "throws"));
    let audit: Vec<_> = ev
        .decisions()
        .iter()
        .map(|d| (d.handler.as_str(), d.outcome))
        .collect();
    assert_eq!(
        audit,
        [
            ("throws", DecisionOutcome::Error),
            ("slow", DecisionOutcome::NotRun)
        ]
    );
}

/// `"parallel": true` on a policy spec makes its handler a group member; anything but a boolean
/// is refused with its place.
#[cfg(feature = "policy")]
#[test]
fn a_policy_spec_may_mark_its_handler_parallel() {
    use rein_interventions::policy::Policy;
    let p = Policy::from_json_str(
        r#"[{"name": "a", "kind": "deny_tools", "tools": ["x"], "parallel": true},
            {"name": "b", "kind": "require_fields", "tools": ["*"], "fields": ["y"]}]"#,
    )
    .unwrap();
    assert!(p.handlers()[0].parallel());
    assert!(!p.handlers()[1].parallel(), "sequential by default");
    let err = Policy::from_toml_str(
        "[[policy]]\nname = \"a\"\nkind = \"deny_tools\"\ntools = [\"x\"]\nparallel = \"yes\"\n",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy[0].parallel: invalid type: string, expected a boolean (handler 'a')"
    );
}

#[tokio::test(start_paused = true)]
async fn each_member_keeps_the_detail_it_attached() {
    // `a` finishes last, `b` first: each record still carries its own handler's detail.
    let member = |name: &'static str, ms: u64, guide: bool| {
        Intervention::named(name)
            .parallel()
            .before_tool_call_async(move |_, cx| {
                cx.record_detail(json!({ "who": name }));
                Box::pin(async move {
                    sleep(Duration::from_millis(ms)).await;
                    if guide {
                        BeforeToolCallAction::guide("g")
                    } else {
                        BeforeToolCallAction::Proceed
                    }
                })
            })
    };
    let registry = InterventionRegistry::new([
        SharedHandler::from(member("a", 5, false)),
        member("b", 1, true).into(),
        Intervention::named("quiet")
            .before_tool_call(|_, _| BeforeToolCallAction::Proceed)
            .into(),
        Intervention::named("d")
            .before_tool_call(|_, cx| {
                cx.record_detail(json!({"who": "d"}));
                BeforeToolCallAction::deny("no")
            })
            .into(),
    ])
    .unwrap();
    let mut ev = event();
    registry.to_hooks().dispatch(&mut ev).await.unwrap();
    let audit: Vec<_> = ev
        .decisions()
        .iter()
        .map(|d| {
            (
                d.handler.as_str(),
                d.action,
                d.outcome,
                d.detail.as_deref().cloned(),
            )
        })
        .collect();
    assert_eq!(
        audit,
        [
            // A proceed is recorded only for its detail, and a later deny overrides it.
            (
                "a",
                DecisionAction::Proceed,
                DecisionOutcome::Overridden,
                Some(json!({"who": "a"}))
            ),
            (
                "b",
                DecisionAction::Guide,
                DecisionOutcome::Overridden,
                Some(json!({"who": "b"}))
            ),
            (
                "d",
                DecisionAction::Deny,
                DecisionOutcome::Applied,
                Some(json!({"who": "d"}))
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_guard_deny_cancels_its_peers_too() {
    // A deny is read from the verdict, for every action type alike: a `model_output` group is
    // cut short by an early deny as a `before_tool_call` group is, and no member that ran is
    // audited `not_run`.
    let completed = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let (c, d) = (completed.clone(), dropped.clone());
    let fast = Intervention::named("fast-deny")
        .parallel()
        .model_output_async(|_, _| {
            Box::pin(async {
                sleep(Duration::from_millis(1)).await;
                ModelOutputAction::deny("no")
            })
        });
    let slow = Intervention::named("slow-judge")
        .parallel()
        .model_output_async(move |_, _| {
            let (c, d) = (c.clone(), d.clone());
            Box::pin(async move {
                let _guard = DropGuard(d);
                sleep(Duration::from_secs(10)).await;
                c.store(true, Ordering::SeqCst);
                ModelOutputAction::Proceed
            })
        });
    let registry = InterventionRegistry::new([fast, slow]).unwrap();
    let mut ev = ModelOutputEvent::new(InvocationContext::default());
    ev.push_text("secret");
    let started = Instant::now();
    registry.to_hooks().dispatch(&mut ev).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(100));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the slow future was dropped"
    );
    assert!(!completed.load(Ordering::SeqCst), "and never completed");
    assert_eq!(ev.withheld(), Some("DENIED: no"));
    let audit: Vec<_> = ev
        .decisions()
        .iter()
        .map(|d| (d.handler.as_str(), d.action, d.outcome))
        .collect();
    assert_eq!(
        audit,
        [
            ("fast-deny", DecisionAction::Deny, DecisionOutcome::Applied),
            ("slow-judge", DecisionAction::None, DecisionOutcome::NotRun),
        ]
    );
}
