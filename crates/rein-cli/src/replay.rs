//! Scenario replays as tests: a scenario's transcript compared with its expected (blessed) one,
//! a directory of scenarios run as a suite, a policy file as shipped in place of the scenarios'
//! own (docs/replay.md). What `rein replay` does, for `cargo test`:
//!
//! ```no_run
//! # fn main() {
//! use rein_cli::replay::Replay;
//!
//! // Every `NAME.json` under tests/scenarios against its `NAME.expected.json`, each run with
//! // the policy file the app ships; `REIN_BLESS=1 cargo test` rewrites the expected files.
//! Replay::new()
//!     .policy("policy.toml")
//!     .bless(std::env::var_os("REIN_BLESS").is_some())
//!     .suite("tests/scenarios")
//!     .expect("the scenario directory is readable")
//!     .assert_passed();
//! # }
//! ```
//!
//! The suite builds its own single-threaded runtime per scenario: call it from a plain `#[test]`,
//! not from inside a `#[tokio::test]`.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod junit;
pub(crate) mod run;

/// Why a replay could not be run at all (a suite records each scenario's failure in its
/// [`Case`] instead).
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplayError {
    /// The scenario, or the policy it runs with, is invalid; the message names the file and the
    /// JSON path of the problem (`rein replay` exits 2).
    Invalid(String),
    /// Anything else: a file that cannot be read or written, a directory that cannot be listed
    /// (`rein replay` exits 1).
    Failed(String),
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(m) => write!(f, "invalid scenario {m}"),
            Self::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ReplayError {}

/// How scenarios are replayed: with the policy file that replaces theirs, and whether expected
/// transcripts are compared with or rewritten (blessed).
#[derive(Debug, Clone, Default)]
pub struct Replay {
    policy: Option<PathBuf>,
    bless: bool,
}

impl Replay {
    /// Replays with each scenario's own policy (its `policy` or `policy_file`), comparing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs every scenario with this policy file (TOML or JSON, read by
    /// `rein_interventions::policy::Policy::read_specs`, built as an app builds it) in place of
    /// the scenario's `policy` or `policy_file`. The other agents of a scenario keep theirs.
    pub fn policy(mut self, file: impl Into<PathBuf>) -> Self {
        self.policy = Some(file.into());
        self
    }

    /// `true`: write each transcript as the expected one instead of comparing (review the
    /// change with `git diff` afterwards).
    pub fn bless(mut self, bless: bool) -> Self {
        self.bless = bless;
        self
    }

    /// The transcript of a scenario, as `rein replay SCENARIO` prints it.
    pub fn transcript(&self, scenario: impl AsRef<Path>) -> Result<Value, ReplayError> {
        let scenario = scenario.as_ref();
        run::replay_file(scenario, self.policy.as_deref()).map_err(|e| match e {
            run::RunError::Invalid(e) => {
                ReplayError::Invalid(format!("{}: {e}", scenario.display()))
            }
            run::RunError::Internal(e) => ReplayError::Failed(e),
        })
    }

    /// Replays `scenario` and compares its transcript with the one in `expected` (random ids
    /// ignored), or, blessing, writes it there.
    pub fn check(&self, scenario: impl AsRef<Path>, expected: impl AsRef<Path>) -> Case {
        let (scenario, expected) = (scenario.as_ref(), expected.as_ref());
        let outcome = match self.transcript(scenario) {
            Err(ReplayError::Invalid(message)) => Outcome::Invalid { message },
            Err(ReplayError::Failed(message)) => Outcome::Failed { message },
            Ok(transcript) => self.compare(normalize(transcript), expected),
        };
        Case {
            name: scenario_name(scenario),
            scenario: scenario.to_path_buf(),
            expected: expected.to_path_buf(),
            outcome,
        }
    }

    fn compare(&self, got: Value, expected: &Path) -> Outcome {
        let got_text = canonical_text(&got);
        if self.bless {
            return match std::fs::write(expected, &got_text) {
                Ok(()) => Outcome::Blessed,
                Err(e) => Outcome::Failed {
                    message: format!("cannot write {}: {e}", expected.display()),
                },
            };
        }
        let text = match std::fs::read_to_string(expected) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Outcome::NoExpected,
            Err(e) => {
                return Outcome::Failed {
                    message: format!("cannot read {}: {e}", expected.display()),
                };
            }
        };
        let want = match serde_json::from_str::<Value>(&text) {
            Ok(v) => normalize(v),
            Err(e) => {
                return Outcome::Failed {
                    message: format!("{} is not JSON: {e}", expected.display()),
                };
            }
        };
        if want == got {
            return Outcome::Passed;
        }
        let want_text = canonical_text(&want);
        let diff = similar::TextDiff::from_lines(&want_text, &got_text)
            .unified_diff()
            .context_radius(3)
            .header(&format!("{} (expected)", expected.display()), "replayed")
            .to_string();
        Outcome::Differs { diff }
    }

    /// Runs every scenario of `dir` (each `NAME.json`, in name order, not `*.expected.json`)
    /// against its `NAME.expected.json` beside it. Fails only when the directory cannot be
    /// listed; each scenario's outcome is in the [`Suite`].
    pub fn suite(&self, dir: impl AsRef<Path>) -> Result<Suite, ReplayError> {
        let dir = dir.as_ref();
        let entries = std::fs::read_dir(dir)
            .map_err(|e| ReplayError::Failed(format!("cannot list {}: {e}", dir.display())))?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|e| ReplayError::Failed(format!("cannot list {}: {e}", dir.display())))?
                .path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if path.is_file()
                && name.is_some_and(|n| n.ends_with(".json") && !n.ends_with(".expected.json"))
            {
                files.push(path);
            }
        }
        files.sort();
        let cases = files
            .iter()
            .map(|file| self.check(file, expected_path(file)))
            .collect();
        Ok(Suite {
            dir: dir.to_path_buf(),
            cases,
        })
    }
}

/// Where a scenario's expected transcript is by default: `NAME.expected.json` beside
/// `NAME.json`.
pub fn expected_path(scenario: &Path) -> PathBuf {
    scenario.with_extension("expected.json")
}

fn scenario_name(scenario: &Path) -> String {
    scenario
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// One scenario replayed against its expected transcript.
#[derive(Debug, Clone)]
pub struct Case {
    name: String,
    scenario: PathBuf,
    expected: PathBuf,
    outcome: Outcome,
}

impl Case {
    /// The scenario's file name without `.json`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scenario file.
    pub fn scenario(&self) -> &Path {
        &self.scenario
    }

    /// The expected transcript's file.
    pub fn expected(&self) -> &Path {
        &self.expected
    }

    /// What happened.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// A readable account of a case that did not pass (empty for one that did).
    pub fn details(&self) -> String {
        let scenario = self.scenario.display();
        match &self.outcome {
            Outcome::Passed | Outcome::Blessed => String::new(),
            Outcome::Differs { diff } => {
                format!("{scenario}: the transcript differs from the expected one\n{diff}")
            }
            Outcome::NoExpected => format!(
                "{scenario}: no expected transcript {} (bless it: rein replay --bless)",
                self.expected.display()
            ),
            Outcome::Invalid { message } => format!("invalid scenario {message}"),
            Outcome::Failed { message } => format!("{scenario}: {message}"),
        }
    }
}

/// The outcome of one scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The transcript is the expected one.
    Passed,
    /// The transcript was written as the expected one.
    Blessed,
    /// The transcript differs: `diff` is a unified diff, expected (`-`) to replayed (`+`).
    Differs {
        /// The unified diff of the two transcripts (pretty JSON, keys sorted).
        diff: String,
    },
    /// There is no expected transcript to compare with.
    NoExpected,
    /// The scenario or its policy is invalid (the message names the file and JSON path).
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// Something else failed (a file that cannot be read or written).
    Failed {
        /// What failed.
        message: String,
    },
}

impl Outcome {
    /// Passed or blessed.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Passed | Self::Blessed)
    }
}

/// The scenarios of a directory, replayed.
#[derive(Debug, Clone)]
pub struct Suite {
    dir: PathBuf,
    cases: Vec<Case>,
}

impl Suite {
    /// A suite of one scenario (`rein replay FILE --expect ..`), named after its directory.
    pub(crate) fn of_one(case: Case) -> Self {
        Self {
            dir: case
                .scenario
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            cases: vec![case],
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Each scenario's case, in name order.
    pub fn cases(&self) -> &[Case] {
        &self.cases
    }

    /// Every case passed (or was blessed).
    pub fn is_success(&self) -> bool {
        self.cases.iter().all(|c| c.outcome.is_success())
    }

    /// Any scenario invalid (`rein replay DIR` then exits 2).
    pub fn has_invalid(&self) -> bool {
        self.cases
            .iter()
            .any(|c| matches!(c.outcome, Outcome::Invalid { .. }))
    }

    /// One line: `replay: N passed, N failed`, and `(N blessed)` when blessing. A failed
    /// scenario is one that differs, has no expected transcript, is invalid or could not run.
    pub fn summary(&self) -> String {
        let blessed = self
            .cases
            .iter()
            .filter(|c| c.outcome == Outcome::Blessed)
            .count();
        let passed = self
            .cases
            .iter()
            .filter(|c| c.outcome == Outcome::Passed)
            .count();
        let failed = self.cases.len() - passed - blessed;
        let mut line = format!("replay: {passed} passed, {failed} failed");
        if blessed > 0 {
            line.push_str(&format!(" ({blessed} blessed)"));
        }
        line
    }

    /// Each failed case's details, then the summary line.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for c in &self.cases {
            let details = c.details();
            if !details.is_empty() {
                out.push_str(&details);
                if !details.ends_with('\n') {
                    out.push('\n');
                }
                out.push('\n');
            }
        }
        out.push_str(&self.summary());
        out
    }

    /// The suite as JUnit XML (one `testsuite` named after the directory; a differing or
    /// missing transcript is a `failure`, an invalid or failed scenario an `error`), for CI.
    pub fn junit_xml(&self) -> String {
        junit::write(self)
    }

    /// Panics with [`Suite::report`] unless every case passed (or was blessed); for tests.
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(self.is_success(), "{}", self.report());
    }
}

/// Replaces random ids (injection ids, the message ids a summary block names) with a fixed
/// marker.
fn normalize(mut transcript: Value) -> Value {
    /// A summary block's message ids, wherever messages appear.
    fn summary_ids(v: &mut Value) {
        match v {
            Value::Object(o) => {
                if let Some(Value::Object(s)) = o.get_mut("summary") {
                    for key in ["firstMessageId", "lastMessageId"] {
                        if let Some(id) = s.get_mut(key) {
                            *id = Value::String("<random>".into());
                        }
                    }
                }
                o.values_mut().for_each(summary_ids);
            }
            Value::Array(a) => a.iter_mut().for_each(summary_ids),
            _ => {}
        }
    }
    if let Some(steps) = transcript["steps"].as_array_mut() {
        for step in steps {
            if let Some(injections) = step["injections"].as_array_mut() {
                for i in injections {
                    i["id"] = Value::String("<random>".into());
                }
            }
        }
    }
    summary_ids(&mut transcript);
    transcript
}

/// Pretty JSON with keys in sorted order, whatever serde_json's `preserve_order` (which
/// cedar-policy turns on when the `cedar` feature is in the build), so blessed files do not
/// churn and diffs line up.
fn canonical_text(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let mut entries: Vec<(&String, &Value)> = o.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sorted(v)))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    // Cannot fail: a Value always serializes.
    serde_json::to_string_pretty(&sorted(v)).unwrap_or_default() + "\n"
}
