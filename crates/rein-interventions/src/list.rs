//! The one list of intervention events.

/// Calls the macro `$m` with the intervention events, in order: one
/// `(method, async_builder, Event, Action, SET, Kind)` tuple per event, where `method` is the
/// `InterventionHandler` method (and the `Intervention` builder of a sync closure),
/// `async_builder` the `Intervention` builder of an async closure, `Event` and `Action` the
/// event and action types (re-exported at the crate root), `SET` the `EventSet` constant and
/// `Kind` the `EventKind` variant. The order is that of the `EventSet` bits.
///
/// Everything per event that is plumbing rather than semantics derives from this list: the
/// `EventSet` constants, the erased twin of `InterventionHandler` and its blanket impl, the
/// `Arc<H>` impl, how a `SharedHandler` routes a call, the registry's per-event handler lists,
/// `install`, the closure builder `Intervention`, and the policy handler's trait impl.
///
/// To add a lifecycle point:
/// 1. add its entry here;
/// 2. write its method on `InterventionHandler` (`handler.rs`: the docs and the `Proceed`
///    default are its contract);
/// 3. write its action type (`action.rs`: the valid actions, `into_verdict`, and its
///    `IntoHandlerResult` line);
/// 4. write its `PassEvent` impl (`event.rs`): whether it is settled, its draft,
///    commit/restore, and what deny, guide and interrupts do to it, and its hook options;
/// 5. write the policy handler's `Decide` impl for it (`policy/handler.rs`);
/// 6. add its line to `testing.rs` (its `testing::Event` impl) and a builder of the event.
///
/// The compiler points at whichever of 2 to 5 is missing.
macro_rules! for_each_intervention_event {
    ($m:ident) => {
        $m! {
            (before_invocation, before_invocation_async, BeforeInvocationEvent, BeforeInvocationAction, BEFORE_INVOCATION, BeforeInvocation),
            (before_model_call, before_model_call_async, BeforeModelCallEvent, BeforeModelCallAction, BEFORE_MODEL_CALL, BeforeModelCall),
            (after_model_call, after_model_call_async, AfterModelCallEvent, AfterModelCallAction, AFTER_MODEL_CALL, AfterModelCall),
            (model_output, model_output_async, ModelOutputEvent, ModelOutputAction, MODEL_OUTPUT, ModelOutput),
            (before_tool_call, before_tool_call_async, BeforeToolCallEvent, BeforeToolCallAction, BEFORE_TOOL_CALL, BeforeToolCall),
            (after_tool_call, after_tool_call_async, AfterToolCallEvent, AfterToolCallAction, AFTER_TOOL_CALL, AfterToolCall),
        }
    };
}

pub(crate) use for_each_intervention_event;
