//! [`PolicyError`]: why a policy could not be built.

use std::fmt;

/// Why a policy (or one handler of it) could not be built. Its text starts with the JSON path
/// of the problem (`policy[2].pattern: invalid regex in handler 'no-prod': ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    index: Option<usize>,
    handler: Option<String>,
    field: Option<String>,
    message: String,
}

impl PolicyError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            index: None,
            handler: None,
            field: None,
            message: message.into(),
        }
    }

    pub(crate) fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub(crate) fn handler(mut self, name: impl Into<String>) -> Self {
        self.handler = Some(name.into());
        self
    }

    pub(super) fn at(mut self, index: usize) -> Self {
        self.index = Some(index);
        self
    }

    /// The index of the spec in the policy, when loaded from a file.
    pub fn index(&self) -> Option<usize> {
        self.index
    }

    /// The handler's name, when known.
    pub fn handler_name(&self) -> Option<&str> {
        self.handler.as_deref()
    }

    /// The field at fault (a path inside the spec, e.g. `pattern` or `allowed.admin[0]`).
    pub fn field_name(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The JSON path of the problem: `policy[2].pattern`, `policy[0]`, `pattern`, or empty.
    pub fn path(&self) -> String {
        let mut path = match self.index {
            Some(i) => format!("policy[{i}]"),
            None => String::new(),
        };
        if let Some(f) = &self.field {
            if !path.is_empty() && !f.starts_with('[') {
                path.push('.');
            }
            path.push_str(f);
        }
        path
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path();
        if !path.is_empty() {
            write!(f, "{path}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(h) = &self.handler {
            write!(f, " (handler '{h}')")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyError {}
