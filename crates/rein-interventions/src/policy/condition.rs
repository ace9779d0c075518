//! A policy's `when`: a condition on the tool call, in CEL (the Common Expression Language of
//! Kubernetes admission rules, Envoy and Google Cloud IAM conditions): small, side-effect free,
//! always terminating, and it compares JSON numbers as numbers (`input.amount > 100` holds for
//! `150.5`).

use std::sync::{Arc, OnceLock};

use cel::{Context, Env, Program};
use serde_json::{Map, Value};

use super::error::PolicyError;

/// The longest condition accepted: a policy file's rule, not a program.
const MAX_LEN: usize = 4096;

/// A compiled condition. Its variables: `input` (the tool's input), `tool` (its name) and
/// `state` (the invocation state).
#[derive(Debug)]
pub(super) struct Condition {
    source: String,
    program: Program,
}

/// The standard environment (functions and macros), built once per process.
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib())).clone()
}

impl Condition {
    pub(super) fn compile(source: &str, handler: &str) -> Result<Self, PolicyError> {
        let invalid = |message: String| PolicyError::new(message).field("when").handler(handler);
        if source.len() > MAX_LEN {
            return Err(invalid(format!(
                "the condition is {} bytes long; at most {MAX_LEN} are accepted",
                source.len()
            )));
        }
        let program = Program::compile(source)
            .map_err(|e| invalid(format!("invalid condition `{source}`: {e}")))?;
        Ok(Self {
            source: source.to_owned(),
            program,
        })
    }

    /// Whether the policy applies to this call. A condition that cannot be decided — a field
    /// the input lacks, a type it cannot compare, a result that is not a boolean — counts as
    /// true: the policy applies, the closed way for a deny or a confirm (write
    /// `has(input.amount) && input.amount > 100` to say otherwise).
    pub(super) fn holds(
        &self,
        handler: &str,
        tool: &str,
        input: &Value,
        state: &Map<String, Value>,
    ) -> bool {
        let mut cx = Context::with_env(env());
        let decided = cx
            .add_variable("input", input)
            .and_then(|()| cx.add_variable("state", state))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                cx.add_variable_from_value("tool", tool);
                self.program.execute(&cx).map_err(|e| e.to_string())
            });
        match decided {
            Ok(cel::Value::Bool(b)) => b,
            Ok(other) => {
                tracing::warn!(
                    handler,
                    condition = %self.source,
                    "the policy's condition gave {:?}, not a boolean: the policy applies",
                    other.type_of()
                );
                true
            }
            Err(error) => {
                tracing::warn!(
                    handler,
                    condition = %self.source,
                    %error,
                    "the policy's condition could not be decided: the policy applies"
                );
                true
            }
        }
    }
}
