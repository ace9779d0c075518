use rein_interventions::{AfterModelCallAction, Intervention};

fn main() {
    let _ = Intervention::named("x").after_model_call(|_, _| AfterModelCallAction::deny("no"));
}
