//! A suite as JUnit XML: the subset CI servers read (GitLab, Jenkins, GitHub test reporters).
//! Hand-written: the one maintained JUnit crate (quick-junit) brings chrono, uuid and an ANSI
//! stripper for what is a dozen lines here; every text goes through [`escape`].

use super::{Outcome, Suite};

pub(super) fn write(suite: &Suite) -> String {
    let tests = suite.cases.len();
    let errors = suite
        .cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Invalid { .. } | Outcome::Failed { .. }))
        .count();
    let failures = suite
        .cases
        .iter()
        .filter(|c| !c.outcome.is_success())
        .count()
        - errors;
    let name = escape(&suite.dir.display().to_string());
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml.push_str(&format!(
        "<testsuites name=\"rein replay\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\">\n"
    ));
    xml.push_str(&format!(
        "  <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\">\n"
    ));
    for c in &suite.cases {
        xml.push_str(&format!(
            "    <testcase name=\"{}\" classname=\"{name}\" file=\"{}\"",
            escape(c.name()),
            escape(&c.scenario().display().to_string())
        ));
        let (element, kind, message) = match c.outcome() {
            Outcome::Passed | Outcome::Blessed => {
                xml.push_str("/>\n");
                continue;
            }
            Outcome::Differs { .. } => (
                "failure",
                "differs",
                "the transcript differs from the expected one",
            ),
            Outcome::NoExpected => ("failure", "no_expected", "no expected transcript"),
            Outcome::Invalid { .. } => ("error", "invalid", "invalid scenario"),
            Outcome::Failed { .. } => ("error", "failed", "the scenario could not run"),
        };
        xml.push_str(&format!(
            ">\n      <{element} message=\"{message}\" type=\"{kind}\">{}</{element}>\n    </testcase>\n",
            escape(&c.details())
        ));
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

/// Text for XML character data and attribute values: the five special characters as entities,
/// and characters XML 1.0 cannot carry (control characters other than tab, line feed and
/// carriage return, the non-characters U+FFFE and U+FFFF) as U+FFFD.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' => out.push(ch),
            // A literal CR in an attribute would be normalized away by the reader.
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_markup_and_drops_what_xml_cannot_carry() {
        assert_eq!(
            escape(r#"<a href="x">Tom & 'Jerry'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &apos;Jerry&apos;&lt;/a&gt;"
        );
        assert_eq!(escape("a\tb\nc\rd"), "a\tb\nc&#13;d");
        assert_eq!(
            escape("bell\u{7} nul\u{0} \u{FFFF}"),
            "bell\u{FFFD} nul\u{FFFD} \u{FFFD}"
        );
        assert_eq!(escape("]]> stays text"), "]]&gt; stays text");
        assert_eq!(escape("héllo ✓"), "héllo ✓");
    }
}
