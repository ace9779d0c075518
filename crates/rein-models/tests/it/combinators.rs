//! `FallbackModel` and `LimitedModel` (issue 40, item 6), on scripted and probing models.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{FutureExt as _, StreamExt as _, stream};
use rein_models::{
    BlockDelta, BlockStart, FallbackModel, LimitedModel, Model, ModelError, ModelErrorKind,
    ModelInfo, ModelRequest, ModelStream, RateLimiter, Role, ScriptedModel, ScriptedResponse,
    StopReason, StreamEvent, Usage,
};
use tokio::time::Instant;

use crate::common::{assemble, collect};

fn scripted(id: &str) -> rein_models::ScriptedModelBuilder {
    ScriptedModel::builder().model_id(id)
}

#[tokio::test]
async fn a_429_moves_to_the_next_model_and_the_route_says_so() {
    let primary = scripted("primary").throttled().build();
    let backup = scripted("backup").text("from backup").build();
    let chain = FallbackModel::new(primary.clone()).with_fallback(backup.clone());
    assert_eq!(
        chain.info().model_id,
        "primary",
        "the chain names its first model"
    );

    let (events, error) = collect(&chain, ModelRequest::default()).await;
    assert!(error.is_none(), "{error:?}");
    assert!(
        matches!(&events[0], StreamEvent::Fallback(_)),
        "the route comes first"
    );
    let response = assemble(&events);
    assert_eq!(response.message.text(), "from backup");
    let route = response.fallback.unwrap();
    assert_eq!(
        (route.provider.as_str(), route.model_id.as_str()),
        ("scripted", "backup")
    );
    assert_eq!(route.skipped.len(), 1);
    let skipped = &route.skipped[0];
    assert_eq!(skipped.model_id, "primary");
    assert_eq!(
        (skipped.kind, skipped.status),
        (ModelErrorKind::Throttled, Some(429))
    );
    assert_eq!((primary.remaining(), backup.remaining()), (0, 0));
}

#[tokio::test]
async fn the_first_model_answering_is_a_route_with_nothing_skipped() {
    let chain = FallbackModel::new(scripted("primary").text("hi").build())
        .with_fallback(scripted("backup").text("unused").build());
    let (events, _) = collect(&chain, ModelRequest::default()).await;
    let route = assemble(&events).fallback.unwrap();
    assert_eq!(route.model_id, "primary");
    assert!(route.skipped.is_empty());
}

#[tokio::test]
async fn a_400_or_an_auth_error_does_not_move_on() {
    for error in [
        ModelError::bad_request("bad").with_status(400),
        ModelError::auth("no").with_status(401),
        ModelError::context_window_overflow("long"),
    ] {
        let kind = error.kind();
        let backup = scripted("backup").text("unused").build();
        let chain = FallbackModel::new(scripted("primary").error(error).build())
            .with_fallback(backup.clone());
        let (_, error) = collect(&chain, ModelRequest::default()).await;
        assert_eq!(error.unwrap().kind(), kind, "returned as it is");
        assert_eq!(backup.remaining(), 1, "{kind:?}: the backup was not called");
    }
}

#[tokio::test]
async fn the_kinds_that_move_on_are_configurable() {
    let backup = scripted("big-window").text("fits").build();
    let chain = FallbackModel::new(scripted("small-window").context_overflow().build())
        .with_fallback(backup.clone())
        .fallback_on([ModelErrorKind::ContextWindowOverflow]);
    let (events, error) = collect(&chain, ModelRequest::default()).await;
    assert!(error.is_none());
    assert_eq!(assemble(&events).message.text(), "fits");

    // Replaced, not added to: a 429 no longer moves on.
    let backup = scripted("backup").text("unused").build();
    let chain = FallbackModel::new(scripted("primary").throttled().build())
        .with_fallback(backup.clone())
        .fallback_on([ModelErrorKind::ContextWindowOverflow]);
    let (_, error) = collect(&chain, ModelRequest::default()).await;
    assert!(error.unwrap().is_throttled());
    assert_eq!(backup.remaining(), 1);
}

#[tokio::test]
async fn a_failure_after_content_is_returned_as_it_is_never_spliced() {
    let started = vec![
        StreamEvent::MessageStart {
            role: Role::Assistant,
        },
        StreamEvent::BlockStart(BlockStart::Text),
        StreamEvent::BlockDelta(BlockDelta::Text("half an ans".into())),
    ];
    let primary = scripted("primary")
        .response(ScriptedResponse::events_then_error(
            started,
            &ModelError::server("dropped").with_status(503),
        ))
        .build();
    let backup = scripted("backup").text("unused").build();
    let chain = FallbackModel::new(primary).with_fallback(backup.clone());
    let (events, error) = collect(&chain, ModelRequest::default()).await;
    assert_eq!(error.unwrap().status(), Some(503));
    let texts: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::BlockDelta(BlockDelta::Text(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["half an ans"]);
    assert_eq!(backup.remaining(), 1, "the backup was not called");
}

#[tokio::test]
async fn a_failure_after_only_a_message_start_still_moves_on() {
    // Anthropic's `overloaded_error` comes after `message_start`: nothing reached the caller.
    let primary = scripted("primary")
        .response(ScriptedResponse::events_then_error(
            vec![StreamEvent::MessageStart {
                role: Role::Assistant,
            }],
            &ModelError::server("overloaded").with_status(529),
        ))
        .build();
    let chain =
        FallbackModel::new(primary).with_fallback(scripted("backup").text("answer").build());
    let (events, error) = collect(&chain, ModelRequest::default()).await;
    assert!(error.is_none(), "{error:?}");
    let starts = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::MessageStart { .. }))
        .count();
    assert_eq!(starts, 1, "only the backup's message start");
    let response = assemble(&events);
    assert_eq!(response.message.text(), "answer");
    assert_eq!(response.fallback.unwrap().skipped[0].status, Some(529));
}

#[tokio::test]
async fn when_every_model_fails_the_error_names_each_failure() {
    let chain = FallbackModel::new(
        scripted("primary")
            .error(
                ModelError::throttled("quota")
                    .with_status(429)
                    .with_retry_after(Duration::from_secs(7)),
            )
            .build(),
    )
    .with_fallback(
        scripted("second")
            .error(ModelError::server("down").with_status(503))
            .build(),
    )
    .with_fallback(
        scripted("third")
            .error(
                ModelError::timeout("idle")
                    .before_first_byte()
                    .with_retry_after(Duration::from_secs(3)),
            )
            .build(),
    );
    let (events, error) = collect(&chain, ModelRequest::default()).await;
    assert!(events.is_empty());
    let error = error.unwrap();
    let message = error.to_string();
    for part in [
        "scripted/primary: model throttled (HTTP 429): quota",
        "scripted/second: model server error (HTTP 503): down",
        "scripted/third: model timeout: idle",
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
    assert_eq!(
        error.kind(),
        ModelErrorKind::Timeout,
        "the last model's kind"
    );
    assert!(
        error.is_retryable(),
        "the agent's retry may try the chain again"
    );
    assert_eq!(
        error.retry_after(),
        Some(Duration::from_secs(3)),
        "the shortest wait"
    );
}

/// A model that counts its calls in flight (a call is in flight until its stream is dropped)
/// and streams for `stream_for` of tokio's clock.
#[derive(Clone, Default)]
struct Probe {
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    stream_for: Duration,
    tokens: u64,
}

struct InFlight(Arc<AtomicUsize>);
impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Model for Probe {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("probe", "probe-1")
    }

    async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let guard = InFlight(self.in_flight.clone());
        let (stream_for, tokens) = (self.stream_for, self.tokens);
        let events = stream::once(async move {
            tokio::time::sleep(stream_for).await;
            Ok(StreamEvent::MessageStop {
                stop_reason: StopReason::EndTurn,
            })
        })
        .chain(stream::iter([Ok(StreamEvent::Metadata {
            usage: Usage::new(tokens, 0),
            metrics: Default::default(),
        })]))
        .map(move |e| {
            let _in_flight = &guard;
            e
        });
        Ok(Box::pin(events))
    }
}

#[tokio::test(start_paused = true)]
async fn at_most_n_calls_are_in_flight_across_every_model_sharing_the_limiter() {
    let probe = Probe {
        stream_for: Duration::from_secs(1),
        ..Probe::default()
    };
    let limiter = RateLimiter::builder().max_in_flight(2).build();
    // Two "agents", each with its own model, one limiter.
    let a = LimitedModel::new(probe.clone(), limiter.clone());
    let b = LimitedModel::new(probe.clone(), limiter);
    let started = Instant::now();
    let calls = (0..6).map(|i| {
        let model = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move { collect(&model, ModelRequest::default()).await })
    });
    for call in futures_util::future::join_all(calls).await {
        assert!(call.unwrap().1.is_none());
    }
    assert_eq!(probe.most.load(Ordering::SeqCst), 2);
    assert_eq!(probe.calls.load(Ordering::SeqCst), 6);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3),
        "three rounds of two"
    );
}

#[tokio::test(start_paused = true)]
async fn requests_per_minute_wait_for_the_oldest_start_to_age_out() {
    let probe = Probe::default();
    let model = LimitedModel::new(
        probe.clone(),
        RateLimiter::builder().requests_per_minute(2).build(),
    );
    let t0 = Instant::now();
    collect(&model, ModelRequest::default()).await;
    tokio::time::advance(Duration::from_secs(10)).await;
    collect(&model, ModelRequest::default()).await;
    collect(&model, ModelRequest::default()).await;
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(60),
        "the third waits for the first"
    );
    collect(&model, ModelRequest::default()).await;
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(70),
        "the fourth for the second"
    );
    assert_eq!(probe.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn tokens_per_minute_wait_while_the_minutes_reported_usage_is_spent() {
    let probe = Probe {
        stream_for: Duration::from_secs(5),
        tokens: 600,
        ..Probe::default()
    };
    let model = LimitedModel::new(
        probe.clone(),
        RateLimiter::builder().tokens_per_minute(1_000).build(),
    );
    let t0 = Instant::now();
    collect(&model, ModelRequest::default()).await; // 600 reported at 5 s
    collect(&model, ModelRequest::default()).await; // under budget: starts at once; 1200 at 10 s
    assert_eq!(t0.elapsed(), Duration::from_secs(10));
    // Spent: waits until the first call's 600 age out (5 s + 60 s), leaving 600 < 1000.
    collect(&model, ModelRequest::default()).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(65 + 5));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiting_call_holds_no_slot() {
    let probe = Probe {
        stream_for: Duration::from_secs(1),
        ..Probe::default()
    };
    let model = LimitedModel::new(
        probe.clone(),
        RateLimiter::builder().max_in_flight(1).build(),
    );
    let open = model.stream(ModelRequest::default()).await.unwrap();
    // A second call waits for the slot; its future is dropped (a cancelled run).
    assert!(
        model
            .stream(ModelRequest::default())
            .now_or_never()
            .is_none()
    );
    drop(open);
    let next = model.stream(ModelRequest::default()).now_or_never();
    assert!(
        matches!(next, Some(Ok(_))),
        "the slot went back, and no ghost waiter holds it"
    );
    assert_eq!(probe.calls.load(Ordering::SeqCst), 2);

    // Nor does a call waiting for the minute's requests take one.
    let model = LimitedModel::new(
        Probe::default(),
        RateLimiter::builder().requests_per_minute(1).build(),
    );
    collect(&model, ModelRequest::default()).await;
    assert!(
        model
            .stream(ModelRequest::default())
            .now_or_never()
            .is_none()
    );
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(
        model
            .stream(ModelRequest::default())
            .now_or_never()
            .is_some(),
        "the dropped call did not count as started"
    );
}

#[tokio::test(start_paused = true)]
async fn a_limited_fallback_chain_waits_for_its_model_rather_than_moving_on() {
    let limiter = RateLimiter::builder().requests_per_minute(1).build();
    let primary = LimitedModel::new(scripted("primary").text("p").cycle().build(), limiter);
    let chain = FallbackModel::new(primary).with_fallback(scripted("backup").text("b").build());
    let t0 = Instant::now();
    for _ in 0..2 {
        let (events, _) = collect(&chain, ModelRequest::default()).await;
        assert_eq!(assemble(&events).message.text(), "p");
    }
    assert_eq!(t0.elapsed(), Duration::from_secs(60));
}

#[tokio::test]
async fn a_nested_chain_gives_one_route() {
    let inner = FallbackModel::new(scripted("inner-a").server_error().build())
        .with_fallback(scripted("inner-b").text("deep").build());
    let outer = FallbackModel::new(scripted("outer").throttled().build()).with_fallback(inner);
    let (events, error) = collect(&outer, ModelRequest::default()).await;
    assert!(error.is_none());
    let routes = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Fallback(_)))
        .count();
    assert_eq!(routes, 1);
    let route = assemble(&events).fallback.unwrap();
    assert_eq!(route.model_id, "inner-b");
    let skipped: Vec<_> = route.skipped.iter().map(|s| s.model_id.as_str()).collect();
    assert_eq!(skipped, ["outer", "inner-a"]);
}

#[tokio::test]
async fn a_skipped_models_message_is_bounded() {
    let chain = FallbackModel::new(
        scripted("primary")
            .error(ModelError::server("x".repeat(100_000)))
            .build(),
    )
    .with_fallback(scripted("backup").text("ok").build());
    let (events, _) = collect(&chain, ModelRequest::default()).await;
    let route = assemble(&events).fallback.unwrap();
    assert_eq!(route.skipped[0].message.chars().count(), 500);
}

#[tokio::test(start_paused = true)]
async fn a_throttled_call_holds_every_model_sharing_the_limiter_until_its_retry_after() {
    let limiter = RateLimiter::builder().max_in_flight(8).build();
    let throttled = LimitedModel::new(
        scripted("a")
            .error(
                ModelError::throttled("slow down")
                    .with_status(429)
                    .with_retry_after(Duration::from_secs(7)),
            )
            .build(),
        limiter.clone(),
    );
    let probe = Probe::default();
    let other = LimitedModel::new(probe.clone(), limiter.clone());
    let t0 = Instant::now();
    let (_, err) = collect(&throttled, ModelRequest::default()).await;
    assert!(err.is_some_and(|e| e.is_throttled()));
    // The account is throttled, not the one request: the next call through the limiter waits.
    collect(&other, ModelRequest::default()).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(7));
    assert_eq!(probe.calls.load(Ordering::SeqCst), 1);

    // A hostile retry-after holds calls back for a minute at most.
    let hostile = LimitedModel::new(
        scripted("b")
            .error(
                ModelError::throttled("go away")
                    .with_status(429)
                    .with_retry_after(Duration::from_secs(86_400)),
            )
            .build(),
        limiter,
    );
    let t1 = Instant::now();
    collect(&hostile, ModelRequest::default()).await;
    collect(&other, ModelRequest::default()).await;
    assert_eq!(t1.elapsed(), Duration::from_secs(60));
}
