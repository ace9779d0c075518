//! The agent's tools and their compiled input validators; how a tool phase runs them.

use std::collections::HashMap;
use std::sync::Arc;

use rein_core::{Error, ToolHandle, error::BuildError, tool::ToolSpec};

use crate::schema_cache;

/// How the tool uses of one model response are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolExecutor {
    /// All at once, at most `max` at a time (default 16). Results keep tool-use order.
    Concurrent {
        /// The bound.
        max: usize,
    },
    /// One after another, in order; stops at the first interrupted tool.
    Sequential,
}

impl Default for ToolExecutor {
    fn default() -> Self {
        Self::Concurrent { max: 16 }
    }
}

struct ToolEntry {
    handle: ToolHandle,
    validator: Arc<jsonschema::Validator>,
}

/// The agent's tools, with their compiled input validators.
#[derive(Default)]
pub(crate) struct ToolSet {
    by_name: HashMap<String, ToolEntry>,
    specs: Arc<Vec<ToolSpec>>,
}

impl ToolSet {
    pub(crate) fn new(tools: Vec<ToolHandle>) -> Result<Self, Error> {
        let mut by_name = HashMap::with_capacity(tools.len());
        let mut specs = Vec::with_capacity(tools.len());
        for handle in tools {
            let name = handle.name().to_owned();
            let validator =
                schema_cache::validator_for(&handle.spec().input_schema).map_err(|e| {
                    BuildError::InvalidToolSchema {
                        tool: name.clone(),
                        reason: e.to_string(),
                    }
                })?;
            specs.push(handle.spec().clone());
            let entry = ToolEntry { handle, validator };
            if by_name.insert(name.clone(), entry).is_some() {
                return Err(BuildError::DuplicateTool(name).into());
            }
        }
        Ok(Self {
            by_name,
            specs: Arc::new(specs),
        })
    }

    pub(crate) fn specs(&self) -> Arc<Vec<ToolSpec>> {
        self.specs.clone()
    }

    pub(crate) fn specs_ref(&self) -> &Arc<Vec<ToolSpec>> {
        &self.specs
    }

    pub(crate) fn get(&self, name: &str) -> Option<&ToolHandle> {
        self.by_name.get(name).map(|e| &e.handle)
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.specs.iter().map(|s| s.name.as_str())
    }

    /// Validates `input` against the schema of `tool` (compiling one for a tool a hook swapped in).
    pub(crate) fn validate(
        &self,
        tool: &ToolHandle,
        input: &serde_json::Value,
    ) -> Result<(), String> {
        let owned;
        let validator = match self.by_name.get(tool.name()) {
            Some(e) if e.handle == *tool => &*e.validator,
            _ => {
                owned = schema_cache::validator_for(&tool.spec().input_schema)
                    .map_err(|e| format!("the tool's input schema is invalid: {e}"))?;
                &*owned
            }
        };
        validator.validate(input).map_err(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{e} (at {path})")
            }
        })
    }
}
