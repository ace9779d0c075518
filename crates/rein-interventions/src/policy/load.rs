//! Loading policy files: TOML `[[policy]]` tables or a JSON array of specs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rein_core::{
    audit::{EventKind, OnError},
    error::BuildError,
};
use serde_json::Value;

use super::config::PolicyKind;
use super::error::PolicyError;
use super::handler::PolicyHandler;
use crate::handler::Mode;

/// How a policy is loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    allow_fail: bool,
    base_dir: Option<PathBuf>,
}

impl LoadOptions {
    /// Production policies: the built-in kinds only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Scenario files (`rein replay`): also accept `kind: "fail"` (`event`, `message`), a
    /// handler whose method for that event returns an error — for testing error policies.
    pub fn scenario() -> Self {
        Self {
            allow_fail: true,
            base_dir: None,
        }
    }

    /// Relative file names in specs (a `cedar` kind's `policies_file`, `schema_file`) are
    /// relative to `dir` (default: the policy file's directory with `Policy::from_path`, else
    /// the current directory).
    pub fn base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }
}

/// An ordered list of policy handlers, loaded from a policy file.
///
/// A file is a JSON array of specs (or an object whose `policy` key holds one), or TOML
/// `[[policy]]` tables. Each spec has `name` (unique), `kind`, the kind's fields, and optional
/// `on_error` (`throw` | `proceed` | `deny`), `mode` (`enforce` | `shadow`), `parallel`
/// (a boolean; default `false`) and, for kinds that act on tool calls, `when` (a CEL condition
/// on the call: [`PolicyHandler::with_condition`]).
///
/// ```
/// use rein_interventions::policy::Policy;
/// let err = Policy::from_json_str(r#"[{"name": "a", "kind": "deny_prompt_match", "pattern": "("}]"#)
///     .unwrap_err();
/// assert!(err.to_string().starts_with("policy[0].pattern: invalid regex"));
/// ```
#[derive(Debug, Default)]
pub struct Policy {
    handlers: Vec<PolicyHandler>,
}

impl Policy {
    /// Loads a JSON policy.
    pub fn from_json_str(text: &str) -> Result<Self, PolicyError> {
        Self::from_json_str_with(text, LoadOptions::new())
    }

    /// Loads a JSON policy with options.
    pub fn from_json_str_with(text: &str, options: LoadOptions) -> Result<Self, PolicyError> {
        Self::from_values(specs_from_json(text)?, options)
    }

    /// Loads a TOML policy (`[[policy]]` tables).
    pub fn from_toml_str(text: &str) -> Result<Self, PolicyError> {
        Self::from_toml_str_with(text, LoadOptions::new())
    }

    /// Loads a TOML policy with options.
    pub fn from_toml_str_with(text: &str, options: LoadOptions) -> Result<Self, PolicyError> {
        Self::from_values(specs_from_toml(text)?, options)
    }

    /// Loads a policy file: TOML when the extension is `.toml`, JSON otherwise.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, PolicyError> {
        Self::from_path_with(path, LoadOptions::new())
    }

    /// Loads a policy file with options.
    pub fn from_path_with(
        path: impl AsRef<Path>,
        mut options: LoadOptions,
    ) -> Result<Self, PolicyError> {
        let path = path.as_ref();
        if options.base_dir.is_none() {
            options.base_dir = path.parent().map(Path::to_path_buf);
        }
        Self::from_values(Self::read_specs(path)?, options)
    }

    /// The handler specs of a policy file, read and checked exactly as [`Policy::from_path`]
    /// reads them (TOML for a `.toml` extension, JSON otherwise; an array of specs, or a
    /// `policy` key alone), not built yet: for a loader that adds kinds of its own before
    /// handing the rest to [`Policy::from_values`] (as `rein` does for `llm_judge`), so that a
    /// policy file has one reader.
    pub fn read_specs(path: impl AsRef<Path>) -> Result<Vec<Value>, PolicyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| PolicyError::new(format!("cannot read {}: {e}", path.display())))?;
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
        {
            specs_from_toml(&text)
        } else {
            specs_from_json(&text)
        }
    }

    /// Builds the handlers from specs (JSON values), in order. Errors name the index in the
    /// list (`policy[i]`), the handler and the field.
    pub fn from_values(specs: Vec<Value>, options: LoadOptions) -> Result<Self, PolicyError> {
        let mut names = HashSet::new();
        let mut handlers = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let handler = load_one(spec, &options).map_err(|e| e.at(i))?;
            if !names.insert(handler.name().to_owned()) {
                // The one text of SPEC §3.1, as when the handlers are given in code.
                let duplicate = BuildError::DuplicateHandler(handler.name().to_owned());
                return Err(PolicyError::new(duplicate.to_string()).field("name").at(i));
            }
            handlers.push(handler);
        }
        Ok(Self { handlers })
    }

    /// The handlers, in order.
    pub fn handlers(&self) -> &[PolicyHandler] {
        &self.handlers
    }

    /// The handlers, in order, to give to an agent builder (`.interventions(..)`).
    pub fn into_handlers(self) -> Vec<PolicyHandler> {
        self.handlers
    }

    /// How many handlers.
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// Whether there is no handler.
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }
}

fn specs_from_document(value: Value) -> Result<Vec<Value>, PolicyError> {
    Ok(match value {
        Value::Array(a) => a,
        Value::Object(mut o) => match o.remove("policy") {
            Some(Value::Array(a)) if o.is_empty() => a,
            Some(Value::Array(_)) => {
                let key = o.keys().next().cloned().unwrap_or_default();
                return Err(PolicyError::new(format!("unknown top-level key `{key}`")));
            }
            Some(_) => {
                return Err(PolicyError::new(
                    "`policy` must be an array of handler specs",
                ));
            }
            None => {
                return Err(PolicyError::new(
                    "expected an array of handler specs (or `policy` tables)",
                ));
            }
        },
        _ => {
            return Err(PolicyError::new("expected an array of handler specs"));
        }
    })
}

fn specs_from_json(text: &str) -> Result<Vec<Value>, PolicyError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| PolicyError::new(format!("invalid JSON: {e}")))?;
    specs_from_document(value)
}

fn specs_from_toml(text: &str) -> Result<Vec<Value>, PolicyError> {
    let table: toml::Table = toml::from_str(text)
        .map_err(|e| PolicyError::new(format!("invalid TOML: {}", e.message())))?;
    let value =
        serde_json::to_value(table).map_err(|e| PolicyError::new(format!("invalid TOML: {e}")))?;
    specs_from_document(value)
}

fn take_string(
    obj: &mut serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<String>, PolicyError> {
    match obj.remove(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(PolicyError::new(format!(
            "invalid type: {}, expected a string",
            type_name(&other)
        ))
        .field(key)),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn parse_enum<T: serde::de::DeserializeOwned>(
    value: Option<String>,
    field: &str,
    name: &str,
) -> Result<Option<T>, PolicyError> {
    match value {
        None => Ok(None),
        Some(s) => serde_json::from_value(Value::String(s))
            .map(Some)
            .map_err(|e| PolicyError::new(e.to_string()).field(field).handler(name)),
    }
}

fn load_one(spec: Value, options: &LoadOptions) -> Result<PolicyHandler, PolicyError> {
    let Value::Object(mut obj) = spec else {
        return Err(PolicyError::new(format!(
            "invalid type: {}, expected a handler spec (an object)",
            type_name(&spec)
        )));
    };
    let name = take_string(&mut obj, "name")?
        .ok_or_else(|| PolicyError::new("missing field `name`").field("name"))?;
    if name.is_empty() {
        return Err(PolicyError::new("the name must not be empty").field("name"));
    }
    let kind = take_string(&mut obj, "kind")
        .map_err(|e| e.handler(&name))?
        .ok_or_else(|| {
            PolicyError::new("missing field `kind`")
                .field("kind")
                .handler(&name)
        })?;
    let on_error: Option<OnError> = parse_enum(
        take_string(&mut obj, "on_error").map_err(|e| e.handler(&name))?,
        "on_error",
        &name,
    )?;
    let mode = match take_string(&mut obj, "mode").map_err(|e| e.handler(&name))? {
        None => Mode::Enforce,
        Some(m) if m == "enforce" => Mode::Enforce,
        Some(m) if m == "shadow" => Mode::Shadow,
        Some(m) => {
            return Err(PolicyError::new(format!(
                "unknown variant `{m}`, expected `enforce` or `shadow`"
            ))
            .field("mode")
            .handler(&name));
        }
    };
    let when = take_string(&mut obj, "when").map_err(|e| e.handler(&name))?;
    let parallel = match obj.remove("parallel") {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(other) => {
            return Err(PolicyError::new(format!(
                "invalid type: {}, expected a boolean",
                type_name(&other)
            ))
            .field("parallel")
            .handler(&name));
        }
    };
    let handler = if kind == "fail" {
        if !options.allow_fail {
            return Err(
                PolicyError::new("kind `fail` is only accepted in scenario files")
                    .field("kind")
                    .handler(&name),
            );
        }
        let event_name = take_string(&mut obj, "event")
            .map_err(|e| e.handler(&name))?
            .ok_or_else(|| {
                PolicyError::new("missing field `event`")
                    .field("event")
                    .handler(&name)
            })?;
        let message = take_string(&mut obj, "message")
            .map_err(|e| e.handler(&name))?
            .unwrap_or_else(|| "scripted handler failure".to_owned());
        if let Some(key) = obj.keys().next() {
            return Err(PolicyError::new(format!("unknown field `{key}`"))
                .field(key.clone())
                .handler(&name));
        }
        let event = parse_event(&event_name).ok_or_else(|| {
            PolicyError::new(format!(
                "unknown event `{event_name}`, expected one of before_invocation, \
                     before_model_call, after_model_call, before_tool_call, after_tool_call"
            ))
            .field("event")
            .handler(&name)
        })?;
        PolicyHandler::failing(name.clone(), event, message)?
    } else {
        if kind == "cedar" && cfg!(not(feature = "cedar")) {
            return Err(PolicyError::new(
                "kind `cedar` needs the `cedar` feature of rein-interventions",
            )
            .field("kind")
            .handler(&name));
        }
        if let Some(dir) = &options.base_dir {
            for key in ["policies_file", "schema_file"] {
                if let Some(Value::String(file)) = obj.get_mut(key)
                    && Path::new(file.as_str()).is_relative()
                {
                    *file = dir.join(file.as_str()).display().to_string();
                }
            }
        }
        let parsed = PolicyKind::from_value(&kind, Value::Object(obj)).ok_or_else(|| {
            PolicyError::new(format!(
                "unknown kind `{kind}`, expected one of {}",
                PolicyKind::KIND_NAMES.join(", ")
            ))
            .field("kind")
            .handler(&name)
        })?;
        let config = parsed.map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            let field = if path == "." {
                missing_field(&inner).unwrap_or_default()
            } else {
                path
            };
            let err = PolicyError::new(strip_position(&inner)).handler(&name);
            if field.is_empty() {
                err
            } else {
                err.field(field)
            }
        })?;
        PolicyHandler::new(name.clone(), config)?
    };
    let mut handler = handler.with_mode(mode).with_parallel(parallel);
    if let Some(on_error) = on_error {
        handler = handler.with_on_error(on_error);
    }
    if let Some(condition) = when {
        handler = handler.with_condition(&condition)?;
    }
    Ok(handler)
}

/// `missing field `x`` (or `unknown field `x``) → `x`, so the path names the field.
fn missing_field(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("missing field `")
        .or_else(|| message.strip_prefix("unknown field `"))?;
    Some(rest.split('`').next()?.to_owned())
}

/// serde_json adds "at line L column C" to errors from text; values have none, but be safe.
fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

pub(crate) fn parse_event(name: &str) -> Option<EventKind> {
    Some(match name {
        "before_invocation" => EventKind::BeforeInvocation,
        "before_model_call" => EventKind::BeforeModelCall,
        "after_model_call" => EventKind::AfterModelCall,
        "before_tool_call" => EventKind::BeforeToolCall,
        "after_tool_call" => EventKind::AfterToolCall,
        _ => return None,
    })
}
