use rein_interventions::{Confirm, Intervention, ModelOutputAction};

fn main() {
    // Streamed text cannot wait for a human: model_output admits no Confirm.
    let _ = Intervention::named("x")
        .model_output(|_, _| ModelOutputAction::Confirm(Confirm::new("really?")));
}
