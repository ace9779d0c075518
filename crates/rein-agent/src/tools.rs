//! The agent's tools and their input checks; how a tool phase runs them.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use rein_core::{
    Error, ToolHandle,
    error::BuildError,
    tool::{ToolSource, ToolSpec},
};

use crate::schema_cache::{self, SchemaCheck};

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
    check: Arc<SchemaCheck>,
}

impl ToolEntry {
    fn new(handle: ToolHandle) -> Result<Self, BuildError> {
        let check = schema_cache::check_for(&handle.spec().input_schema).map_err(|e| {
            BuildError::InvalidToolSchema {
                tool: handle.name().to_owned(),
                reason: e,
            }
        })?;
        Ok(Self { handle, check })
    }
}

/// The agent's tools, with their input checks: those given at build, and those
/// of its tool sources as last listed.
#[derive(Default)]
pub(crate) struct ToolSet {
    by_name: HashMap<String, ToolEntry>,
    /// An agent without tools shares one empty list (no allocation per agent).
    specs: Arc<Vec<ToolSpec>>,
    /// `None` for most agents (no tool source): nothing of it is allocated or touched then, so
    /// an idle agent stays small (issue 44).
    sourced: Option<Box<Sourced>>,
}

/// The tool sources of an agent that has some.
struct Sourced {
    sources: Vec<Source>,
    /// The sources' tools as last listed, and every spec (built ones first).
    listed: RwLock<Listed>,
}

/// The spec list of every agent built without tools.
static NO_SPECS: std::sync::LazyLock<Arc<Vec<ToolSpec>>> = std::sync::LazyLock::new(Arc::default);

/// A tool source and the version of its list the agent holds.
struct Source {
    source: Arc<dyn ToolSource>,
    version: RwLock<Option<u64>>,
    tools: RwLock<Vec<ToolHandle>>,
}

#[derive(Default)]
struct Listed {
    by_name: HashMap<String, ToolEntry>,
    specs: Arc<Vec<ToolSpec>>,
}

impl ToolSet {
    pub(crate) fn new(
        tools: Vec<ToolHandle>,
        sources: Vec<Arc<dyn ToolSource>>,
    ) -> Result<Self, Error> {
        let mut by_name = HashMap::with_capacity(tools.len());
        let mut specs = Vec::with_capacity(tools.len());
        for handle in tools {
            let name = handle.name().to_owned();
            specs.push(handle.spec().clone());
            if by_name
                .insert(name.clone(), ToolEntry::new(handle)?)
                .is_some()
            {
                return Err(BuildError::DuplicateTool(name).into());
            }
        }
        let specs = if specs.is_empty() {
            NO_SPECS.clone()
        } else {
            Arc::new(specs)
        };
        let sourced = (!sources.is_empty()).then(|| {
            Box::new(Sourced {
                sources: sources
                    .into_iter()
                    .map(|source| Source {
                        source,
                        version: RwLock::new(None),
                        tools: RwLock::new(Vec::new()),
                    })
                    .collect(),
                listed: RwLock::new(Listed {
                    by_name: HashMap::new(),
                    specs: specs.clone(),
                }),
            })
        });
        Ok(Self {
            by_name,
            specs,
            sourced,
        })
    }

    /// Every tool's spec: the built ones, then the sources' as last listed.
    pub(crate) fn specs(&self) -> Arc<Vec<ToolSpec>> {
        match &self.sourced {
            None => self.specs.clone(),
            Some(s) => read(&s.listed).specs.clone(),
        }
    }

    /// The built tools' specs (what a request carries when the agent has no tool source).
    pub(crate) fn specs_ref(&self) -> &Arc<Vec<ToolSpec>> {
        &self.specs
    }

    /// The specs of the sources' tools alone (what a typed-output request adds to its own).
    pub(crate) fn listed_specs(&self) -> Vec<ToolSpec> {
        match &self.sourced {
            None => Vec::new(),
            Some(s) => read(&s.listed).specs[self.specs.len()..].to_vec(),
        }
    }

    pub(crate) fn has_sources(&self) -> bool {
        self.sourced.is_some()
    }

    /// Lists again the sources whose version changed (before a model call). A source that
    /// fails keeps its last list (its tools check with their server when called); a listed
    /// tool named like a built tool, another source's or `reserved` is left out: a source
    /// never shadows a tool the agent was built with.
    pub(crate) async fn refresh(&self, reserved: Option<&str>) {
        let Some(sourced) = &self.sourced else {
            return;
        };
        let mut changed = false;
        for s in &sourced.sources {
            let version = s.source.version();
            if *read(&s.version) == Some(version) {
                continue;
            }
            match s.source.tools().await {
                Ok(tools) => {
                    *write(&s.tools) = tools;
                    *write(&s.version) = Some(version);
                    changed = true;
                }
                Err(e) => tracing::warn!(error = %e, "a tool source could not list its tools"),
            }
        }
        if !changed {
            return;
        }
        let mut by_name = HashMap::new();
        let mut specs = self.specs.as_ref().clone();
        for s in &sourced.sources {
            for handle in read(&s.tools).iter() {
                let name = handle.name();
                if self.by_name.contains_key(name)
                    || by_name.contains_key(name)
                    || reserved == Some(name)
                {
                    tracing::warn!(tool = %name, "a tool source's tool is named like another tool: left out");
                    continue;
                }
                match ToolEntry::new(handle.clone()) {
                    Ok(entry) => {
                        specs.push(handle.spec().clone());
                        by_name.insert(name.to_owned(), entry);
                    }
                    Err(e) => tracing::warn!(error = %e, "a tool source's tool left out"),
                }
            }
        }
        *write(&sourced.listed) = Listed {
            by_name,
            specs: Arc::new(specs),
        };
    }

    pub(crate) fn get(&self, name: &str) -> Option<ToolHandle> {
        if let Some(e) = self.by_name.get(name) {
            return Some(e.handle.clone());
        }
        read(&self.sourced.as_ref()?.listed)
            .by_name
            .get(name)
            .map(|e| e.handle.clone())
    }

    /// A tool given at build.
    pub(crate) fn get_built(&self, name: &str) -> Option<&ToolHandle> {
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
        let invalid_schema = |e: String| format!("the tool's input schema is invalid: {e}");
        let listed = self.sourced.as_ref().and_then(|s| {
            read(&s.listed)
                .by_name
                .get(tool.name())
                .map(|e| e.check.clone())
        });
        let owned;
        let check = match (self.by_name.get(tool.name()), listed) {
            (Some(e), _) if e.handle == *tool => &*e.check,
            (_, Some(c)) => {
                owned = c;
                &*owned
            }
            _ => {
                owned =
                    schema_cache::check_for(&tool.spec().input_schema).map_err(invalid_schema)?;
                &*owned
            }
        };
        let Some(validator) = check
            .validator_unless_accepted(input)
            .map_err(invalid_schema)?
        else {
            return Ok(());
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

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}
