use rein_interventions::{
    AfterToolCallEvent, BeforeToolCallAction, HandlerError, InterventionContext,
    InterventionHandler,
};

struct H;

impl InterventionHandler for H {
    fn name(&self) -> &str {
        "h"
    }

    // A before_tool_call action (which may deny) returned from after_tool_call.
    async fn after_tool_call(
        &self,
        _event: &AfterToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        Ok(BeforeToolCallAction::deny("too late"))
    }
}

fn main() {}
