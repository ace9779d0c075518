//! Dispatch cost of the interventions bridge through `HookRegistry::dispatch`.
//!
//! - `proceed/closure/N`: N sync closure handlers that all proceed (the hot path: no allocation
//!   per handler).
//! - `proceed/async_trait/N`: N trait handlers written with `async fn` that all proceed (one
//!   boxed future per handler call).
//! - `action/*`: one handler deciding each action kind (fresh event per iteration).
//! - `wait/{sequential,parallel}/5`: 5 async handlers each awaiting a 20 ms timer, one after
//!   the other (≈100 ms) or as one parallel group (≈20 ms), on a current-thread tokio runtime.
//!
//! Except for `wait/*`, futures are polled with a no-op waker (every handler there completes on
//! first poll), so the numbers measure dispatch only, not an executor.

use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use rein_hooks::{HookEvent, HookRegistry};
use rein_interventions::{
    BeforeToolCallAction, BeforeToolCallEvent, Confirm, Error, EventSet, HandlerError,
    Intervention, InterventionContext, InterventionHandler, InterventionRegistry,
    InvocationContext, SharedHandler, ToolUse, json,
};

fn poll_ready<E: HookEvent>(hooks: &HookRegistry, event: &mut E) -> Result<(), Error> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = pin!(hooks.dispatch(event));
    loop {
        if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
            return r;
        }
    }
}

fn event() -> BeforeToolCallEvent {
    BeforeToolCallEvent::new(
        InvocationContext::default(),
        ToolUse::new("t1", "read_file", json!({"path": "/tmp/a"})),
    )
}

fn hooks_of(handlers: Vec<SharedHandler>) -> HookRegistry {
    match InterventionRegistry::new(handlers) {
        Ok(r) => r.to_hooks(),
        Err(e) => panic!("{e}"),
    }
}

struct AsyncProceed(String);

impl InterventionHandler for AsyncProceed {
    fn name(&self) -> &str {
        &self.0
    }
    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL
    }
    async fn before_tool_call(
        &self,
        event: &BeforeToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        if event.tool_use().name == "rm" {
            return Ok(BeforeToolCallAction::deny("no"));
        }
        Ok(BeforeToolCallAction::Proceed)
    }
}

fn closure_proceed(i: usize) -> SharedHandler {
    Intervention::named(format!("h{i}"))
        .before_tool_call(|ev, _| {
            if ev.tool_use().name == "rm" {
                BeforeToolCallAction::deny("no")
            } else {
                BeforeToolCallAction::Proceed
            }
        })
        .into()
}

fn proceed(c: &mut Criterion) {
    let mut group = c.benchmark_group("proceed");
    let empty = HookRegistry::new();
    let mut ev = event();
    group.bench_function("no_hooks", |b| {
        b.iter(|| poll_ready(black_box(&empty), black_box(&mut ev)))
    });
    for n in [1usize, 5, 20] {
        let hooks = hooks_of((0..n).map(closure_proceed).collect());
        group.bench_function(format!("closure/{n}"), |b| {
            b.iter(|| poll_ready(black_box(&hooks), black_box(&mut ev)))
        });
        let hooks = hooks_of(
            (0..n)
                .map(|i| AsyncProceed(format!("h{i}")).into())
                .collect(),
        );
        group.bench_function(format!("async_trait/{n}"), |b| {
            b.iter(|| poll_ready(black_box(&hooks), black_box(&mut ev)))
        });
    }
    group.finish();
}

fn actions(c: &mut Criterion) {
    let mut group = c.benchmark_group("action");
    let cases: Vec<(&str, SharedHandler)> = vec![
        (
            "deny",
            Intervention::named("a")
                .before_tool_call(|_, _| BeforeToolCallAction::deny("no"))
                .into(),
        ),
        (
            "guide",
            Intervention::named("a")
                .before_tool_call(|_, _| BeforeToolCallAction::guide("use trash"))
                .into(),
        ),
        (
            "confirm_asked",
            Intervention::named("a")
                .before_tool_call(|_, _| BeforeToolCallAction::confirm("ok?"))
                .into(),
        ),
        (
            "confirm_preapproved",
            Intervention::named("a")
                .before_tool_call(|_, _| {
                    BeforeToolCallAction::Confirm(Confirm::new("ok?").with_response(true))
                })
                .into(),
        ),
        (
            "transform",
            Intervention::named("a")
                .before_tool_call(|_, _| {
                    BeforeToolCallAction::transform(|t| t.input["dry_run"] = json!(true))
                })
                .into(),
        ),
        (
            "error_proceed",
            Intervention::named("a")
                .on_error(rein_interventions::OnError::Proceed)
                .before_tool_call(|_, _| Err::<BeforeToolCallAction, _>(HandlerError::new("down")))
                .into(),
        ),
    ];
    for (name, handler) in cases {
        let hooks = hooks_of(vec![handler]);
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                event,
                |ev| poll_ready(black_box(&hooks), ev),
                BatchSize::SmallInput,
            )
        });
    }
    // Baseline for the action cases: a fresh event with one proceeding handler.
    let hooks = hooks_of(vec![closure_proceed(0)]);
    group.bench_function("proceed", |b| {
        b.iter_batched_ref(
            event,
            |ev| poll_ready(black_box(&hooks), ev),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// An async handler that waits 20 ms (a remote policy service, say) and proceeds.
fn waiting(i: usize, parallel: bool) -> SharedHandler {
    let handler = Intervention::named(format!("h{i}")).before_tool_call_async(|_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            BeforeToolCallAction::Proceed
        })
    });
    if parallel {
        handler.parallel().into()
    } else {
        handler.into()
    }
}

fn wait(c: &mut Criterion) {
    let mut group = c.benchmark_group("wait");
    // Each iteration takes 20 to 100 ms: a few samples say enough.
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => panic!("{e}"),
    };
    for (name, parallel) in [("sequential", false), ("parallel", true)] {
        let hooks = hooks_of((0..5).map(|i| waiting(i, parallel)).collect());
        let mut ev = event();
        group.bench_function(format!("{name}/5"), |b| {
            b.iter(|| runtime.block_on(hooks.dispatch(black_box(&mut ev))))
        });
    }
    group.finish();
}

criterion_group!(benches, proceed, actions, wait);
criterion_main!(benches);
