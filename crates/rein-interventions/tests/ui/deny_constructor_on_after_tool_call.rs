use rein_interventions::{AfterToolCallAction, Intervention};

fn main() {
    let _ = Intervention::named("x").after_tool_call(|_, _| AfterToolCallAction::deny("no"));
}
