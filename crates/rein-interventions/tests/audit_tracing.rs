//! Audit records are emitted as `tracing` events (target `rein_interventions::audit`), and
//! handler errors under `OnError::Proceed` are logged as warnings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Its own binary: it reads what tracing hands a scoped subscriber, and tracing caches per
// process whether a callsite is of interest; a test on another thread that reaches a callsite
// first, with no subscriber, can leave it cached as uninteresting (seen in the shared binary).
// The `it` binary's helpers, of which this binary uses a few.
#[allow(dead_code)]
#[path = "it/common/mod.rs"]
mod common;

use std::fmt;
use std::sync::{Arc, Mutex};

use common::*;
use rein_interventions::{BeforeToolCallAction, HandlerError, Intervention, OnError};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// (target, level, fields) of one captured event.
type Captured = (String, Level, Vec<(String, String)>);

#[derive(Default, Clone)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("rein_interventions")
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push((
            event.metadata().target().to_owned(),
            *event.metadata().level(),
            fields.0,
        ));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn decisions_and_errors_are_traced() {
    let capture = Capture::default();
    let events = capture.0.clone();
    tracing::subscriber::with_default(capture, || {
        let mut ev = before_tool();
        run(
            vec![
                Intervention::named("flaky")
                    .on_error(OnError::Proceed)
                    .before_tool_call(|_, _| {
                        Err::<BeforeToolCallAction, _>(HandlerError::new("db down"))
                    })
                    .into(),
                Intervention::named("deny")
                    .before_tool_call(|_, _| BeforeToolCallAction::deny("no"))
                    .into(),
            ],
            &mut ev,
        )
        .unwrap();
    });
    let events = events.lock().unwrap();
    let warn = events
        .iter()
        .find(|(t, l, _)| t == "rein_interventions" && *l == Level::WARN)
        .expect("a warning for the failed handler");
    assert!(warn.2.iter().any(|(k, v)| k == "error" && v == "db down"));
    let audit: Vec<_> = events
        .iter()
        .filter(|(t, l, _)| t == "rein_interventions::audit" && *l == Level::INFO)
        .collect();
    assert_eq!(audit.len(), 2, "one per record");
    let field = |i: usize, name: &str| {
        audit[i]
            .2
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(field(0, "handler").as_deref(), Some("flaky"));
    assert_eq!(field(0, "outcome").as_deref(), Some("Error"));
    assert_eq!(field(1, "handler").as_deref(), Some("deny"));
    assert_eq!(field(1, "action").as_deref(), Some("Deny"));
    assert_eq!(field(1, "text").as_deref(), Some("no"));
    assert_eq!(field(1, "tool_use_id").as_deref(), Some("t1"));
}
