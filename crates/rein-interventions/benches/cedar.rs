//! Cedar authorization per tool call (`CedarAuthorizer`, feature `cedar`), with 10 and 1 000
//! policies: the whole handler call — principal resolution, run- and session-state counts,
//! request and entities built from JSON, Cedar's evaluation — on an allowed call (counted, so
//! each iteration gets a fresh run state) and on a denied one.
//!
//! `cargo bench -p rein-interventions --features cedar --bench cedar`

use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use rein_interventions::cedar::CedarAuthorizer;
use rein_interventions::{
    BeforeToolCallAction, BeforeToolCallEvent, HandlerError, InterventionContext,
    InterventionHandler, InvocationContext, InvocationState, ToolUse, json,
};

/// `n` policies: one permit per (user, tool) pair with a condition on the input, one
/// forbid per tenth, and the rule the benchmark's principal is allowed by.
fn policies(n: usize) -> String {
    let mut text = String::from(
        "@id(\"analysts\") permit(principal in Role::\"analyst\", action == Action::\"search\", resource) when { context.calls_in_invocation < 100 };\n",
    );
    for i in 1..n {
        if i % 10 == 0 {
            text.push_str(&format!(
                "@id(\"f{i}\") forbid(principal == User::\"u{i}\", action, resource) when {{ context.input has db && context.input.db == \"prod{i}\" }};\n"
            ));
        } else {
            text.push_str(&format!(
                "@id(\"p{i}\") permit(principal == User::\"u{i}\", action == Action::\"tool{}\", resource) when {{ context.tool_calls_in_session < {i} }};\n",
                i % 50
            ));
        }
    }
    text
}

fn decide(
    authz: &CedarAuthorizer,
    ev: &BeforeToolCallEvent,
    cx: &InterventionContext,
) -> Result<BeforeToolCallAction, HandlerError> {
    let mut task = Context::from_waker(Waker::noop());
    let mut fut = pin!(authz.before_tool_call(ev, cx));
    loop {
        if let Poll::Ready(r) = fut.as_mut().poll(&mut task) {
            return r;
        }
    }
}

fn bench(c: &mut Criterion) {
    let state = InvocationState::from_value(json!({
        "principal": {"type": "User", "id": "ann", "parents": [{"type": "Role", "id": "analyst"}]}
    }));
    for n in [10, 1_000] {
        let authz = match CedarAuthorizer::builder("authz")
            .policies(policies(n))
            .build()
        {
            Ok(a) => a,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(authz.policy_count(), n);
        let allowed = BeforeToolCallEvent::new(
            InvocationContext::new(state.clone()),
            ToolUse::new("t1", "search", json!({"q": "rust", "db": "staging"})),
        );
        let denied = BeforeToolCallEvent::new(
            InvocationContext::new(state.clone()),
            ToolUse::new("t2", "delete", json!({"path": "/tmp/a"})),
        );
        c.bench_function(&format!("cedar/allow/{n}"), |b| {
            b.iter_batched(
                || InterventionContext::from(&InvocationContext::new(state.clone())),
                |cx| {
                    let r = decide(&authz, black_box(&allowed), &cx);
                    assert!(matches!(r, Ok(BeforeToolCallAction::Proceed)));
                },
                BatchSize::SmallInput,
            );
        });
        let cx = InterventionContext::from(&InvocationContext::new(state.clone()));
        c.bench_function(&format!("cedar/deny/{n}"), |b| {
            b.iter(|| {
                let r = decide(&authz, black_box(&denied), &cx);
                assert!(matches!(r, Ok(BeforeToolCallAction::Deny { .. })));
            });
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
