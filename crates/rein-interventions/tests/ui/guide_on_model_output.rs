use rein_interventions::{Intervention, ModelOutputAction};

fn main() {
    let _ = Intervention::named("x").model_output(|_, _| ModelOutputAction::guide("hm"));
}
