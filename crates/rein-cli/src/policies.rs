//! Policy specs as `rein` loads them: the kinds of `rein-interventions`, plus `llm_judge`, which
//! needs a model and so is built here (`rein_agent::judge::LlmJudge`).

use std::collections::HashSet;
use std::path::Path;

use rein_agent::judge::{LlmJudge, ScriptedJudge, Verdict};
use rein_core::audit::OnError;
use rein_interventions::policy::{LoadOptions, Policy};
use rein_interventions::{Mode, SharedHandler};
use rein_models::SharedModel;
use serde::Deserialize;
use serde_json::Value;

/// `llm_judge`: a model judges tool calls (and, with `responses`, responses).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeSpec {
    name: String,
    #[allow(dead_code)] // `kind`, read before
    kind: String,
    #[serde(default)]
    criteria: Option<String>,
    #[serde(default)]
    tool_calls: Option<bool>,
    #[serde(default)]
    responses: Option<bool>,
    #[serde(default)]
    budget: Option<u64>,
    /// The verdict past the budget (`confirm` unless set).
    #[serde(default)]
    over_budget: Option<Verdict>,
    #[serde(default)]
    ledger: Option<usize>,
    #[serde(default)]
    on_error: Option<OnError>,
    #[serde(default)]
    mode: Option<String>,
    /// A judge always runs in parallel (`false` is refused).
    #[serde(default)]
    parallel: Option<bool>,
    /// Scenario files only: the judge's answers, in order (a scripted judge model; `{nonce}` in
    /// an answer is the nonce of the call, which a verdict must echo).
    #[serde(default)]
    script: Option<Vec<String>>,
}

/// Builds the handlers of `specs` in order. `judge_model` is the model an `llm_judge` asks (in
/// a scenario file, `script` gives it scripted answers instead).
pub(crate) fn load(
    specs: Vec<Value>,
    options: &LoadOptions,
    judge_model: Option<&SharedModel>,
) -> Result<Vec<SharedHandler>, String> {
    let mut handlers = Vec::with_capacity(specs.len());
    let mut names = HashSet::new();
    for (i, spec) in specs.into_iter().enumerate() {
        let handler = if spec.get("kind").and_then(Value::as_str) == Some("llm_judge") {
            SharedHandler::new(judge(spec, judge_model).map_err(|e| format!("policy[{i}]: {e}"))?)
        } else {
            let mut one = Policy::from_values(vec![spec], options.clone())
                .map_err(|e| {
                    e.to_string()
                        .replacen("policy[0]", &format!("policy[{i}]"), 1)
                })?
                .into_handlers();
            SharedHandler::new(one.remove(0))
        };
        if !names.insert(handler.name().to_owned()) {
            return Err(format!(
                "policy[{i}].name: duplicate intervention handler name: '{}'",
                handler.name()
            ));
        }
        handlers.push(handler);
    }
    Ok(handlers)
}

/// Reads a policy file with the reader an app uses (`Policy::read_specs`, as `Policy::from_path`:
/// TOML `[[policy]]` tables for `.toml`, else JSON) and builds its handlers as an app would
/// (`LoadOptions::new()`, no `fail` kind); relative files in specs are relative to its directory.
pub(crate) fn load_file(
    path: &Path,
    judge_model: Option<&SharedModel>,
) -> Result<Vec<SharedHandler>, String> {
    let specs = Policy::read_specs(path).map_err(|e| e.to_string())?;
    let mut options = LoadOptions::new();
    if let Some(dir) = path.parent() {
        options = options.base_dir(dir);
    }
    load(specs, &options, judge_model)
}

fn judge(spec: Value, model: Option<&SharedModel>) -> Result<LlmJudge, String> {
    let name = spec
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let spec: JudgeSpec =
        serde_json::from_value(spec).map_err(|e| format!("{e} (handler '{name}')"))?;
    if spec.parallel == Some(false) {
        return Err(format!(
            "parallel: an llm_judge always runs in parallel (handler '{}')",
            spec.name
        ));
    }
    let model = match (spec.script, model) {
        (Some(answers), _) => SharedModel::new(ScriptedJudge::new(answers)),
        (None, Some(m)) => m.clone(),
        (None, None) => {
            return Err(format!(
                "llm_judge needs `script` (its answers) in a scenario file (handler '{}')",
                spec.name
            ));
        }
    };
    let mut j = LlmJudge::new(spec.name.clone(), model);
    if let Some(c) = spec.criteria {
        j = j.criteria(c);
    }
    if let Some(t) = spec.tool_calls {
        j = j.judge_tool_calls(t);
    }
    if let Some(r) = spec.responses {
        j = j.judge_responses(r);
    }
    if let Some(b) = spec.budget {
        j = j.budget(b);
    }
    if let Some(v) = spec.over_budget {
        j = j.over_budget(v);
    }
    if let Some(l) = spec.ledger {
        j = j.ledger(l);
    }
    if let Some(o) = spec.on_error {
        j = j.on_error(o);
    }
    match spec.mode.as_deref() {
        None | Some("enforce") => {}
        Some("shadow") => j = j.mode(Mode::Shadow),
        Some(m) => {
            return Err(format!(
                "mode: unknown variant `{m}`, expected `enforce` or `shadow` (handler '{}')",
                spec.name
            ));
        }
    }
    Ok(j)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_spec_index_and_judges_need_a_model() {
        let specs = vec![
            json!({"name": "a", "kind": "deny_tools", "tools": ["x"]}),
            json!({"name": "b", "kind": "deny_prompt_match", "pattern": "("}),
        ];
        let err = load(specs, &LoadOptions::scenario(), None).unwrap_err();
        assert!(err.starts_with("policy[1].pattern: invalid regex"), "{err}");
        let specs = vec![json!({"name": "j", "kind": "llm_judge"})];
        let err = load(specs, &LoadOptions::scenario(), None).unwrap_err();
        assert_eq!(
            err,
            "policy[0]: llm_judge needs `script` (its answers) in a scenario file (handler 'j')"
        );
        let specs = vec![
            json!({"name": "j", "kind": "llm_judge", "script": []}),
            json!({"name": "j", "kind": "deny_tools", "tools": ["x"]}),
        ];
        let err = load(specs, &LoadOptions::scenario(), None).unwrap_err();
        assert_eq!(
            err,
            "policy[1].name: duplicate intervention handler name: 'j'"
        );
        let specs = vec![json!({"name": "j", "kind": "llm_judge", "script": [], "budgit": 1})];
        let err = load(specs, &LoadOptions::scenario(), None).unwrap_err();
        assert!(err.contains("unknown field `budgit`"), "{err}");
    }

    #[test]
    fn a_judge_is_parallel_and_says_so() {
        use rein_interventions::InterventionHandler as _;
        let spec = |parallel: bool| json!({"name": "j", "kind": "llm_judge", "script": [], "parallel": parallel});
        assert!(judge(spec(true), None).unwrap().parallel());
        let err = load(vec![spec(false)], &LoadOptions::scenario(), None).unwrap_err();
        assert_eq!(
            err,
            "policy[0]: parallel: an llm_judge always runs in parallel (handler 'j')"
        );
    }
}
