//! [`CedarError`]: why Cedar policies or a schema could not be loaded.

use std::fmt;

/// Why Cedar policies or their schema could not be loaded: a syntax error, a policy that does
/// not validate against the schema, a duplicate `@id`, an unreadable file. Its text starts with
/// where the problem is: `policies.cedar:3:12: unexpected token ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CedarError {
    file: String,
    line: Option<usize>,
    column: Option<usize>,
    message: String,
}

impl CedarError {
    pub(crate) fn new(file: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            line: None,
            column: None,
            message: message.into(),
        }
    }

    /// `message` at byte `offset` of `source` (the text of `file`).
    pub(crate) fn at(
        file: impl Into<String>,
        source: &str,
        offset: Option<usize>,
        message: impl Into<String>,
    ) -> Self {
        let mut err = Self::new(file, message);
        if let Some(offset) = offset {
            let before = source.get(..offset.min(source.len())).unwrap_or(source);
            err.line = Some(before.matches('\n').count() + 1);
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            err.column = Some(before[line_start..].chars().count() + 1);
        }
        err
    }

    /// The file (or `<policies>` / `<schema>` for text given in code).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line (1-based), when the problem has a place in the text.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The column (1-based, in characters), when the problem has a place in the text.
    pub fn column(&self) -> Option<usize> {
        self.column
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CedarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for CedarError {}
