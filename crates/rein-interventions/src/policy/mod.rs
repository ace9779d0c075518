//! Built-in declarative policy handlers (feature `policy`).
//!
//! Many guardrails are the same few shapes; this module ships them as one handler type,
//! [`PolicyHandler`], built in code from a typed configuration ([`DenyTools`], [`Redact`], ...)
//! or loaded from a policy file ([`Policy`]: TOML `[[policy]]` tables or a JSON array of specs,
//! evaluated in order). Patterns are compiled once, when the handler is built; an invalid spec
//! is a [`PolicyError`] that names the handler and the field.
//!
//! ```
//! use rein_interventions::policy::{DenyTools, Policy, PolicyHandler};
//! use rein_interventions::OnError;
//!
//! // In code:
//! let no_shell = PolicyHandler::new("no-shell", DenyTools {
//!     tools: vec!["shell".into()],
//!     reason: Some("shell is disabled".into()),
//! })?
//! .with_on_error(OnError::Deny);
//! assert_eq!(no_shell.kind_name(), "deny_tools");
//!
//! // From a file:
//! let policy = Policy::from_toml_str(r#"
//!     [[policy]]
//!     name = "no-prod"
//!     kind = "deny_input_match"
//!     field = "database"
//!     pattern = "^prod"
//!     reason = "{tool} may not touch {database}"
//! "#)?;
//! assert_eq!(policy.handlers()[0].name(), "no-prod");
//! # Ok::<(), rein_interventions::policy::PolicyError>(())
//! ```
//!
//! See `docs/policies.md` in the repository for every kind.

mod condition;
mod config;
pub(crate) mod decide;
mod error;
pub(crate) mod handler;
mod load;
mod template;

pub use config::{
    AllowToolsByRole, ConfirmInput, ConfirmRequest, ConfirmResponse, ConfirmToolOutput,
    ConfirmTools, DenyInputMatch, DenyPromptMatch, DenyStreamMatch, DenyTools, GuideModelCall,
    GuideOutputMatch, GuidePromptMatch, HumanApprovalConfig, MaxModelCalls, MaxToolCalls, Pii,
    PolicyKind, Redact, RedactStream, RedactTarget, RequireFields, Scope,
};
pub use error::PolicyError;
pub use handler::PolicyHandler;
pub use load::{LoadOptions, Policy};
pub use template::{Template, TemplateVars};
