use rein_interventions::{BeforeModelCallAction, Confirm, Intervention};

fn main() {
    let _ = Intervention::named("x")
        .before_model_call(|_, _| BeforeModelCallAction::Confirm(Confirm::new("really?")));
}
