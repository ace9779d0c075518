//! Message templates: `{field}`, `{tool}`, `{state.KEY}`.

use rein_core::state::InvocationState;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// A placeholder: its name (between the braces) and the raw text, kept to be written back
    /// as is when it cannot be resolved.
    Placeholder(String),
}

/// A text with placeholders, parsed once: `{tool}` (the tool name), `{state.KEY}` (an
/// invocation-state value), `{field}` (a top-level tool-input field). A value that is not a
/// string is written as its JSON text; a placeholder that cannot be resolved is left as written.
///
/// ```
/// use rein_interventions::policy::{Template, TemplateVars};
/// use rein_interventions::{InvocationState, json};
/// let t = Template::parse("{tool} to {to} as {state.role} ({nope})");
/// let input = json!({"to": "bob"});
/// let state = InvocationState::from_value(json!({"role": "analyst"}));
/// let vars = TemplateVars::new().tool("send_email", &input).state(&state);
/// assert_eq!(t.render(&vars), "send_email to bob as analyst ({nope})");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// What a [`Template`] is rendered against.
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateVars<'a> {
    tool: Option<&'a str>,
    input: Option<&'a Value>,
    state: Option<&'a InvocationState>,
    extra: &'a [(&'a str, &'a str)],
}

impl<'a> TemplateVars<'a> {
    /// Nothing to resolve placeholders against (every placeholder is left as written).
    pub fn new() -> Self {
        Self::default()
    }

    /// The tool name (`{tool}`) and its input (`{field}`).
    pub fn tool(mut self, name: &'a str, input: &'a Value) -> Self {
        self.tool = Some(name);
        self.input = Some(input);
        self
    }

    /// The invocation state (`{state.KEY}`).
    pub fn state(mut self, state: &'a InvocationState) -> Self {
        self.state = Some(state);
        self
    }

    /// Extra named values, which take precedence over tool-input fields.
    pub fn extra(mut self, extra: &'a [(&'a str, &'a str)]) -> Self {
        self.extra = extra;
        self
    }

    fn resolve(&self, name: &str) -> Option<String> {
        if let Some((_, v)) = self.extra.iter().find(|(k, _)| *k == name) {
            return Some((*v).to_owned());
        }
        if name == "tool" {
            return self.tool.map(str::to_owned);
        }
        if let Some(key) = name.strip_prefix("state.") {
            return self.state.and_then(|s| s.get(key)).map(json_text);
        }
        self.input.and_then(|i| i.get(name)).map(json_text)
    }
}

/// A string as itself, anything else as its JSON text.
pub(crate) fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.')
}

impl Template {
    /// Parses a template. Every text is a valid template: anything that is not a placeholder
    /// (`{` + name characters + `}`) is literal.
    pub fn parse(text: &str) -> Self {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            literal.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            match after.find('}') {
                Some(close) if close > 0 && after[..close].chars().all(is_name_char) => {
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Placeholder(after[..close].to_owned()));
                    rest = &after[close + 1..];
                }
                _ => {
                    literal.push('{');
                    rest = after;
                }
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Self { parts }
    }

    /// Whether the template has no placeholder.
    pub fn is_plain(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Literal(_)))
    }

    /// Renders the template; unresolvable placeholders are left as written.
    pub fn render(&self, vars: &TemplateVars<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Placeholder(name) => match vars.resolve(name) {
                    Some(v) => out.push_str(&v),
                    None => {
                        out.push('{');
                        out.push_str(name);
                        out.push('}');
                    }
                },
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_and_leaves_unknown() {
        let input = json!({"n": 3, "s": "x", "o": {"a": 1}});
        let state = InvocationState::from_value(json!({"role": "admin", "k": true}));
        let vars = TemplateVars::new().tool("t", &input).state(&state);
        let t = Template::parse("{tool}:{n}:{s}:{o}:{state.role}:{state.k}:{state.no}:{no}");
        assert_eq!(
            t.render(&vars),
            r#"t:3:x:{"a":1}:admin:true:{state.no}:{no}"#
        );
        assert_eq!(
            Template::parse("{ } {} {a b} {").render(&vars),
            "{ } {} {a b} {"
        );
        assert_eq!(Template::parse("{{n}}").render(&vars), "{3}");
        assert_eq!(
            Template::parse("{tool}").render(&TemplateVars::new()),
            "{tool}"
        );
        let extra = [("missing", "subject")];
        let vars = TemplateVars::new().extra(&extra);
        assert_eq!(
            Template::parse("add {missing}").render(&vars),
            "add subject"
        );
        assert!(Template::parse("plain").is_plain());
    }
}
