//! A fallback chain's hops (`rein_models::FallbackModel`): a `rein:fallback` decision per model
//! it skipped, and on the model call's span the model that answered.

use rein_core::{
    Error,
    audit::{DecisionAction, DecisionOutcome, DecisionRecord, EventKind},
    stream::FallbackRoute,
};

use super::Driver;
use super::model::Called;
use crate::telemetry::model_error_kind;

/// The handler name of a fallback hop's audit record.
pub(crate) const FALLBACK: &str = "rein:fallback";

impl Driver<'_> {
    /// Records the route of a response a fallback chain gave: `gen_ai.response.model` and a
    /// `rein.fallback` event per hop on `span` (the call's), and a decision per hop.
    pub(super) fn record_fallback(&mut self, called: &Result<Called, Error>, span: &tracing::Span) {
        let (Ok(Called::Done(Ok(response))) | Ok(Called::Withheld { response, .. })) = called
        else {
            return;
        };
        let Some(route) = &response.fallback else {
            return;
        };
        span.record("gen_ai.response.model", route.model_id.as_str());
        let decisions = hops(route)
            .map(|hop| {
                tracing::event!(
                    target: "rein::model",
                    parent: span,
                    tracing::Level::INFO,
                    rein.fallback.from = hop.from,
                    rein.fallback.to = hop.to,
                    "error.type" = hop.kind,
                    rein.fallback.status = hop.status,
                    "rein.fallback"
                );
                let text = format!(
                    "{} failed ({}{}): moved on to {}",
                    hop.from,
                    hop.kind,
                    hop.status
                        .map(|s| format!(", HTTP {s}"))
                        .unwrap_or_default(),
                    hop.to
                );
                let detail = serde_json::json!({
                    "from": hop.from,
                    "to": hop.to,
                    "kind": hop.kind,
                    "status": hop.status,
                    "message": hop.message,
                });
                let mut record = DecisionRecord::new(
                    FALLBACK,
                    EventKind::AfterModelCall,
                    DecisionAction::Fallback,
                    DecisionOutcome::Applied,
                )
                .with_text(text);
                record.detail = Some(Box::new(detail));
                record
            })
            .collect();
        self.record(decisions);
    }
}

/// One move of a chain: from a failed model to the next one tried.
struct Hop<'a> {
    from: String,
    to: String,
    kind: &'static str,
    status: Option<i64>,
    message: &'a str,
}

/// Each move of `route`, in order (the last one to the model that answered).
fn hops(route: &FallbackRoute) -> impl Iterator<Item = Hop<'_>> {
    let answered = format!("{}/{}", route.provider, route.model_id);
    route
        .skipped
        .iter()
        .enumerate()
        .map(move |(i, skipped)| Hop {
            from: format!("{}/{}", skipped.provider, skipped.model_id),
            to: route.skipped.get(i + 1).map_or_else(
                || answered.clone(),
                |next| format!("{}/{}", next.provider, next.model_id),
            ),
            kind: model_error_kind(skipped.kind),
            status: skipped.status.map(i64::from),
            message: &skipped.message,
        })
}
