//! Cedar authorization of tool calls (feature `cedar`), on the official `cedar-policy` engine.
//!
//! [`CedarAuthorizer`] is an intervention handler on `before_tool_call`: each tool call is a
//! Cedar request — principal from the invocation (a [`Principal`] resolver you can replace),
//! action `Action::"<tool>"`, resource `Tool::"<tool>"` (or what a resource resolver makes of
//! the call, such as `File::"<path>"`), and a context with the tool input and facts of the
//! session (time, call counts) — decided against your policies. Allowed calls
//! proceed; denied ones are denied with the ids of the policies that decided. Policies (and an
//! optional schema they are validated against) are checked when the handler is built: a bad
//! policy is a [`CedarError`] naming the file, line and column.
//!
//! ```
//! use rein_interventions::cedar::CedarAuthorizer;
//! use rein_interventions::testing::{self, ToolCall};
//! use rein_interventions::*;
//!
//! let authz = CedarAuthorizer::builder("authz")
//!     .policies(r#"
//!         @id("analysts-search")
//!         permit(principal in Role::"analyst", action == Action::"search", resource);
//!         @id("no-prod")
//!         forbid(principal, action, resource) when { context.input.db == "prod" };
//!     "#)
//!     .build()?;
//! let state = json!({"principal": {"type": "User", "id": "ann", "parents": [{"type": "Role", "id": "analyst"}]}});
//! let call = ToolCall::new("search", json!({"db": "prod"})).state(state);
//! let out = testing::run([authz], call.event());
//! assert_eq!(
//!     out.event.cancel_tool,
//!     Cancel::Message("DENIED: cedar: 'search' denied by policy no-prod".into())
//! );
//! # Ok::<(), rein_interventions::cedar::CedarError>(())
//! ```

mod error;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use cedar_policy::{
    ActionConstraint, AuthorizationError, Authorizer, Context, Decision, Entities, EntityId,
    EntityTypeName, EntityUid, PolicyId, PolicySet, Request, Schema, ValidationMode, Validator,
};
use miette::Diagnostic;
use rein_core::{ToolUse, audit::OnError, event::BeforeToolCallEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub use error::CedarError;

use crate::action::BeforeToolCallAction;
use crate::error::HandlerError;
use crate::handler::{InterventionContext, InterventionHandler, Mode};
use crate::set::EventSet;

/// A Cedar entity (`User::"ann"`, `File::"/srv/a.txt"`) with attributes and parents (the
/// groups it is `in`, such as roles or folders): the principal of a request, resolved from the
/// invocation, or its resource, resolved from the tool call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Entity {
    type_name: String,
    id: String,
    attrs: Map<String, Value>,
    parents: Vec<(String, String)>,
}

/// Who is calling: an [`Entity`] resolved from the invocation by the authorizer's principal
/// resolver.
pub type Principal = Entity;

impl Entity {
    /// The entity `<type_name>::"<id>"`.
    pub fn new(type_name: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            type_name: type_name.into(),
            id: id.into(),
            ..Self::default()
        }
    }

    /// With an attribute (`principal.<key>` in a policy).
    pub fn attr(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.attrs.insert(key.into(), value.into());
        self
    }

    /// A member of `<type_name>::"<id>"` (`principal in Role::"admin"`,
    /// `resource in Folder::"/srv"`).
    pub fn parent(mut self, type_name: impl Into<String>, id: impl Into<String>) -> Self {
        self.parents.push((type_name.into(), id.into()));
        self
    }

    /// The default resolver: the invocation state's `principal` — a string (the id of a
    /// `User`) or an object `{"type", "id", "attrs"?, "parents"?: [{"type", "id"}]}`. `None`
    /// when it is absent or malformed (and the call is then denied).
    pub fn from_invocation(cx: &InterventionContext) -> Option<Entity> {
        match cx.invocation_state().get("principal")? {
            Value::String(id) => Some(Entity::new("User", id.clone())),
            Value::Object(o) => {
                let text = |v: &Value| v.as_str().map(str::to_owned);
                let mut p = Entity::new(text(o.get("type")?)?, text(o.get("id")?)?);
                if let Some(Value::Object(attrs)) = o.get("attrs") {
                    p.attrs = attrs.clone();
                }
                if let Some(Value::Array(parents)) = o.get("parents") {
                    for parent in parents {
                        p = p.parent(text(parent.get("type")?)?, text(parent.get("id")?)?);
                    }
                }
                Some(p)
            }
            _ => None,
        }
    }

    /// An entity from its Cedar uid, `Type::"id"` (no attributes, no parents).
    #[cfg(feature = "policy")]
    pub(crate) fn parse_uid(text: &str) -> Result<Entity, String> {
        let uid = EntityUid::from_str(text.trim()).map_err(|e| e.to_string())?;
        Ok(Entity::new(
            uid.type_name().to_string(),
            uid.id().unescaped().to_owned(),
        ))
    }

    /// The default resource: `Tool::"<tool>"`.
    pub fn tool(call: &ToolUse) -> Option<Entity> {
        Some(Entity::new("Tool", call.name.clone()))
    }

    fn uid(&self) -> Result<EntityUid, HandlerError> {
        uid(&self.type_name, &self.id)
    }
}

fn uid(type_name: &str, id: &str) -> Result<EntityUid, HandlerError> {
    let ty = EntityTypeName::from_str(type_name)
        .map_err(|e| HandlerError::new(format!("invalid entity type `{type_name}`: {e}")))?;
    Ok(EntityUid::from_type_name_and_id(ty, EntityId::new(id)))
}

type Resolver = dyn Fn(&InterventionContext) -> Option<Entity> + Send + Sync;
type ResourceResolver = dyn Fn(&ToolUse, &InterventionContext) -> Option<Entity> + Send + Sync;

/// Where policies or a schema come from.
#[derive(Debug, Clone)]
enum Source {
    Text(String),
    File(PathBuf),
}

impl Source {
    fn read(&self, label: &str) -> Result<(String, String, Option<SystemTime>), CedarError> {
        match self {
            Source::Text(t) => Ok((label.to_owned(), t.clone(), None)),
            Source::File(p) => {
                let name = p.display().to_string();
                let text = std::fs::read_to_string(p)
                    .map_err(|e| CedarError::new(&name, format!("cannot read: {e}")))?;
                Ok((name, text, modified(p)))
            }
        }
    }

    fn stamp(&self) -> Option<SystemTime> {
        match self {
            Source::Text(_) => None,
            Source::File(p) => modified(p),
        }
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Policies and schema as loaded, with the modification times they were read at.
struct Loaded {
    policies: PolicySet,
    /// Per tool, the policies whose action scope can match `Action::"<tool>"`; `general` (those
    /// scoped to any action, or to what may be an action group) for other tools. Cedar
    /// evaluates every policy of the set it is given, and a policy whose scope cannot match is
    /// never satisfied and never evaluated further, so the decision (and its reasons) is the
    /// same on the smaller set.
    by_tool: HashMap<String, PolicySet>,
    general: PolicySet,
    schema: Option<Schema>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
}

impl Loaded {
    fn for_tool(&self, tool: &str) -> &PolicySet {
        self.by_tool.get(tool).unwrap_or(&self.general)
    }
}

/// Splits `set` by the tools its policies' action scopes name (see [`Loaded::by_tool`]).
fn partition(
    set: &PolicySet,
    has_schema: bool,
) -> Result<(HashMap<String, PolicySet>, PolicySet), String> {
    let action_tool = |uid: &EntityUid| {
        (uid.type_name().to_string() == "Action").then(|| uid.id().unescaped().to_owned())
    };
    let mut general = Vec::new();
    let mut specific: HashMap<String, Vec<&cedar_policy::Policy>> = HashMap::new();
    for p in set.policies() {
        let tools: Option<Vec<String>> = match p.action_constraint() {
            ActionConstraint::Eq(uid) => action_tool(&uid).map(|t| vec![t]),
            // With a schema, `in` may name an action group: keep such policies general.
            ActionConstraint::In(uids) if !has_schema => uids.iter().map(action_tool).collect(),
            _ => None,
        };
        match tools {
            Some(mut tools) => {
                tools.sort();
                tools.dedup();
                for t in tools {
                    specific.entry(t).or_default().push(p);
                }
            }
            None => general.push(p),
        }
    }
    let make = |extra: &[&cedar_policy::Policy]| -> Result<PolicySet, String> {
        let mut s = PolicySet::new();
        for p in general.iter().chain(extra) {
            s.add((*p).clone()).map_err(|e| e.to_string())?;
        }
        Ok(s)
    };
    let mut by_tool = HashMap::with_capacity(specific.len());
    for (tool, policies) in &specific {
        by_tool.insert(tool.clone(), make(policies)?);
    }
    Ok((by_tool, make(&[])?))
}

/// The byte offset of a diagnostic's first label.
fn offset(d: &dyn Diagnostic) -> Option<usize> {
    d.labels().and_then(|mut l| l.next()).map(|l| l.offset())
}

fn load(policies: &Source, schema: Option<&Source>) -> Result<Loaded, CedarError> {
    let (file, text, policy_stamp) = policies.read("<policies>")?;
    let parsed = PolicySet::from_str(&text).map_err(|e| {
        let first = e.iter().next();
        let at = first.and_then(|p| offset(p));
        let message = first.map_or_else(|| e.to_string(), ToString::to_string);
        CedarError::at(&file, &text, at, message)
    })?;
    // `@id("...")` names a policy (in deny reasons); otherwise `policy<N>` by its position.
    let mut set = PolicySet::new();
    for p in parsed.policies() {
        let renamed = match p.annotation("id") {
            Some(id) => p.new_id(PolicyId::new(id)),
            None => p.clone(),
        };
        let id = renamed.id().to_string();
        set.add(renamed).map_err(|e| {
            // A duplicate `@id`: point at its second use.
            let at = text.match_indices(&format!("@id(\"{id}\")")).nth(1);
            CedarError::at(&file, &text, at.map(|(i, _)| i), e.to_string())
        })?;
    }
    let (schema, schema_stamp) = match schema {
        None => (None, None),
        Some(source) => {
            let (sfile, stext, stamp) = source.read("<schema>")?;
            let schema = if stext.trim_start().starts_with('{') {
                Schema::from_json_str(&stext)
                    .map_err(|e| CedarError::at(&sfile, &stext, offset(&e), e.to_string()))?
            } else {
                Schema::from_cedarschema_str(&stext)
                    .map(|(s, _warnings)| s)
                    .map_err(|e| CedarError::at(&sfile, &stext, offset(&e), e.to_string()))?
            };
            let result = Validator::new(schema.clone()).validate(&set, ValidationMode::Strict);
            if let Some(e) = result.validation_errors().next() {
                return Err(CedarError::at(
                    &file,
                    &text,
                    offset(e),
                    format!("policy {}: {e}", e.policy_id()),
                ));
            }
            (Some(schema), stamp)
        }
    };
    let (by_tool, general) =
        partition(&set, schema.is_some()).map_err(|e| CedarError::new(&file, e))?;
    Ok(Loaded {
        policies: set,
        by_tool,
        general,
        schema,
        stamps: (policy_stamp, schema_stamp),
    })
}

/// Builds a [`CedarAuthorizer`]; [`build`](Self::build) loads and validates the policies.
pub struct CedarAuthorizerBuilder {
    name: String,
    policies: Option<Source>,
    schema: Option<Source>,
    resolver: Arc<Resolver>,
    resource: Arc<ResourceResolver>,
    hot_reload: bool,
    on_error: OnError,
    mode: Mode,
}

impl fmt::Debug for CedarAuthorizerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CedarAuthorizerBuilder")
            .field("name", &self.name)
            .field("policies", &self.policies)
            .field("schema", &self.schema)
            .field("hot_reload", &self.hot_reload)
            .finish_non_exhaustive()
    }
}

impl CedarAuthorizerBuilder {
    /// The policies, as Cedar text.
    pub fn policies(mut self, text: impl Into<String>) -> Self {
        self.policies = Some(Source::Text(text.into()));
        self
    }

    /// The policies, from a file (reloadable: [`hot_reload`](Self::hot_reload)).
    pub fn policies_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.policies = Some(Source::File(path.into()));
        self
    }

    /// A schema the policies are validated against (strict mode), and requests too: Cedar
    /// schema syntax, or JSON when the text starts with `{`.
    pub fn schema(mut self, text: impl Into<String>) -> Self {
        self.schema = Some(Source::Text(text.into()));
        self
    }

    /// A schema from a file (Cedar syntax, or JSON when the text starts with `{`).
    pub fn schema_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.schema = Some(Source::File(path.into()));
        self
    }

    /// Replaces the principal resolver (default [`Principal::from_invocation`]). A call whose
    /// principal resolves to `None` is denied: authorization fails closed.
    pub fn principal(
        mut self,
        resolver: impl Fn(&InterventionContext) -> Option<Principal> + Send + Sync + 'static,
    ) -> Self {
        self.resolver = Arc::new(resolver);
        self
    }

    /// Replaces the resource resolver (default [`Entity::tool`]: `Tool::"<tool>"`), to
    /// authorize what a call touches — `File::"<path>"` from its input, say. A call whose
    /// resource resolves to `None` is denied: authorization fails closed.
    ///
    /// ```
    /// use rein_interventions::cedar::{CedarAuthorizer, Entity};
    /// use rein_interventions::testing::{self, ToolCall};
    /// use rein_interventions::*;
    ///
    /// let authz = CedarAuthorizer::builder("authz")
    ///     .policies(r#"permit(principal, action, resource in Folder::"public");"#)
    ///     .resource(|call, _cx| {
    ///         let path = call.input.get("path")?.as_str()?;
    ///         let folder = if path.starts_with("/srv/public/") { "public" } else { "private" };
    ///         Some(Entity::new("File", path).parent("Folder", folder))
    ///     })
    ///     .build()?;
    /// let call = |path: &str| ToolCall::new("read_file", json!({"path": path})).state(json!({"principal": "ann"}));
    /// let out = testing::run([authz], call("/etc/passwd").event());
    /// assert_eq!(
    ///     out.event.cancel_tool,
    ///     Cancel::Message("DENIED: cedar: no policy permits 'read_file'".into())
    /// );
    /// # Ok::<(), rein_interventions::cedar::CedarError>(())
    /// ```
    pub fn resource(
        mut self,
        resolver: impl Fn(&ToolUse, &InterventionContext) -> Option<Entity> + Send + Sync + 'static,
    ) -> Self {
        self.resource = Arc::new(resolver);
        self
    }

    /// Reload the policy (and schema) file when it changes: before each tool call the files'
    /// modification times are compared with those loaded (one `stat` each). A change that
    /// does not load keeps the policies in force and is logged (`warn!`), once per change.
    pub fn hot_reload(mut self, on: bool) -> Self {
        self.hot_reload = on;
        self
    }

    /// What the handler's errors do (default [`OnError::Deny`]: authorization fails closed).
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// The mode (default [`Mode::Enforce`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Loads, parses and validates the policies (against the schema, if any).
    pub fn build(self) -> Result<CedarAuthorizer, CedarError> {
        let policies = self
            .policies
            .ok_or_else(|| CedarError::new("<policies>", "no policies given"))?;
        let loaded = load(&policies, self.schema.as_ref())?;
        Ok(CedarAuthorizer {
            name: self.name,
            on_error: self.on_error,
            mode: self.mode,
            resolver: self.resolver,
            resource: self.resource,
            hot_reload: self.hot_reload,
            policies,
            schema: self.schema,
            loaded: RwLock::new(Arc::new(loaded)),
            failed: RwLock::new(None),
            authorizer: Authorizer::new(),
        })
    }
}

/// Calls a handler let through, counted per tool: kept in the run's state (per invocation)
/// and in the agent's state (per session).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Calls {
    total: u64,
    #[serde(default)]
    tools: BTreeMap<String, u64>,
}

impl Calls {
    fn of(&self, tool: &str) -> u64 {
        self.tools.get(tool).copied().unwrap_or(0)
    }

    fn add(&mut self, tool: &str) {
        self.total += 1;
        *self.tools.entry(tool.to_owned()).or_default() += 1;
    }
}

/// The run's record: its counts and the tool-use ids counted (a call asked about again on
/// resume is not counted twice).
#[derive(Debug, Default, Serialize, Deserialize)]
struct RunCalls {
    #[serde(flatten)]
    calls: Calls,
    #[serde(default)]
    seen: Vec<String>,
}

/// An intervention handler authorizing each tool call with Cedar policies.
///
/// The request of a call of tool `t`:
///
/// - principal: the resolver's [`Principal`] (default: the invocation state's `principal`);
///   unresolved → `DENIED: cedar: no principal for this invocation`;
/// - action `Action::"t"`; resource: the resource resolver's [`Entity`] (default `Tool::"t"`);
///   unresolved → `DENIED: cedar: no resource for this call`;
/// - context: `tool` (the name), `input` (the tool input; `null`s and keys starting with `__`
///   dropped, floats and integers beyond 64 bits as strings), `time` (Unix seconds),
///   `calls_in_invocation` / `calls_in_session` (tool calls this handler let through before
///   this one, in this run / in the agent's session), `tool_calls_in_invocation` /
///   `tool_calls_in_session` (the same, of tool `t`).
///
/// Allowed → `Proceed`. Denied by `forbid` policies → `DENIED: cedar: 't' denied by policy
/// <ids>`; no `permit` applies → `DENIED: cedar: no policy permits 't'`; when policies failed
/// to evaluate, `(errors in policy <ids>)` is appended. Errors building the request (an
/// invalid entity type, a context the schema rejects) follow `on_error`, default `Deny`.
pub struct CedarAuthorizer {
    name: String,
    on_error: OnError,
    mode: Mode,
    resolver: Arc<Resolver>,
    resource: Arc<ResourceResolver>,
    hot_reload: bool,
    policies: Source,
    schema: Option<Source>,
    loaded: RwLock<Arc<Loaded>>,
    /// The stamps of a change that failed to load (not retried until the files change again).
    failed: RwLock<Option<(Option<SystemTime>, Option<SystemTime>)>>,
    authorizer: Authorizer,
}

impl fmt::Debug for CedarAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CedarAuthorizer")
            .field("name", &self.name)
            .field("policies", &self.policies)
            .field("hot_reload", &self.hot_reload)
            .field("policy_count", &self.policy_count())
            .finish_non_exhaustive()
    }
}

impl CedarAuthorizer {
    /// A builder for a handler named `name`.
    pub fn builder(name: impl Into<String>) -> CedarAuthorizerBuilder {
        CedarAuthorizerBuilder {
            name: name.into(),
            policies: None,
            schema: None,
            resolver: Arc::new(Principal::from_invocation),
            resource: Arc::new(|call, _| Entity::tool(call)),
            hot_reload: false,
            on_error: OnError::Deny,
            mode: Mode::Enforce,
        }
    }

    /// How many policies are in force.
    pub fn policy_count(&self) -> usize {
        self.current().policies.policies().count()
    }

    /// The ids of the policies in force, sorted.
    pub fn policy_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .current()
            .policies
            .policies()
            .map(|p| p.id().to_string())
            .collect();
        ids.sort();
        ids
    }

    /// Loads the policies (and schema) again now; on error the policies in force stay.
    pub fn reload(&self) -> Result<(), CedarError> {
        let loaded = load(&self.policies, self.schema.as_ref())?;
        *self.loaded.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(loaded);
        Ok(())
    }

    fn current(&self) -> Arc<Loaded> {
        self.loaded
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// With hot reload, reloads when a file changed since it was loaded (or since a change
    /// failed to load).
    fn refresh(&self) {
        if !self.hot_reload {
            return;
        }
        let stamps = (
            self.policies.stamp(),
            self.schema.as_ref().and_then(Source::stamp),
        );
        if stamps == self.current().stamps
            || *self.failed.read().unwrap_or_else(PoisonError::into_inner) == Some(stamps)
        {
            return;
        }
        match self.reload() {
            Ok(()) => {
                tracing::info!(handler = %self.name, "cedar policies reloaded");
            }
            Err(e) => {
                tracing::warn!(handler = %self.name, error = %e, "cedar policies not reloaded; the previous ones stay in force");
                *self.failed.write().unwrap_or_else(PoisonError::into_inner) = Some(stamps);
            }
        }
    }

    pub(crate) fn decide(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        self.refresh();
        let loaded = self.current();
        let call = ev.tool_use();
        let tool = call.name.as_str();
        let Some(principal) = (self.resolver)(cx) else {
            return Ok(BeforeToolCallAction::deny(
                "cedar: no principal for this invocation",
            ));
        };
        let Some(resource) = (self.resource)(call, cx) else {
            return Ok(BeforeToolCallAction::deny(
                "cedar: no resource for this call",
            ));
        };
        let run_key = format!("{}:calls", self.name);
        let run: RunCalls = cx.run_state().load(&run_key)?.unwrap_or_default();
        let session: Calls = cx
            .agent_state()
            .get(&run_key)
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let context = json!({
            "tool": tool,
            "input": cedar_value(&call.input).unwrap_or_else(|| json!({})),
            "time": now,
            "calls_in_invocation": run.calls.total,
            "calls_in_session": session.total,
            "tool_calls_in_invocation": run.calls.of(tool),
            "tool_calls_in_session": session.of(tool),
        });
        let schema = loaded.schema.as_ref();
        let principal_uid = principal.uid()?;
        let action = uid("Action", tool)?;
        let resource_uid = resource.uid()?;
        let context = Context::from_json_value(context, schema.map(|s| (s, &action)))
            .map_err(|e| HandlerError::new(format!("cedar context: {e}")))?;
        let entities = Entities::from_json_value(entities_json(&principal, &resource), schema)
            .map_err(|e| HandlerError::new(format!("cedar entities: {e}")))?;
        let request = Request::new(principal_uid, action, resource_uid, context, schema)
            .map_err(|e| HandlerError::new(format!("cedar request: {e}")))?;
        let response = self
            .authorizer
            .is_authorized(&request, loaded.for_tool(tool), &entities);
        let diagnostics = response.diagnostics();
        if response.decision() == Decision::Allow {
            self.count(cx, &run_key, &call.tool_use_id, tool)?;
            return Ok(BeforeToolCallAction::Proceed);
        }
        let mut ids: Vec<String> = diagnostics.reason().map(ToString::to_string).collect();
        ids.sort();
        let mut reason = if ids.is_empty() {
            format!("cedar: no policy permits '{tool}'")
        } else {
            let plural = if ids.len() == 1 { "policy" } else { "policies" };
            format!("cedar: '{tool}' denied by {plural} {}", ids.join(", "))
        };
        let mut failed: Vec<String> = diagnostics
            .errors()
            .map(|e| match e {
                AuthorizationError::PolicyEvaluationError(e) => e.policy_id().to_string(),
            })
            .collect();
        if !failed.is_empty() {
            failed.sort();
            failed.dedup();
            reason.push_str(&format!(" (errors in policy {})", failed.join(", ")));
        }
        Ok(BeforeToolCallAction::deny(reason))
    }

    /// Counts an allowed call, once per tool-use id in the run.
    fn count(
        &self,
        cx: &InterventionContext,
        key: &str,
        id: &str,
        tool: &str,
    ) -> Result<(), HandlerError> {
        let new = cx.run_state().update(key, |run: &mut RunCalls| {
            if run.seen.iter().any(|s| s == id) {
                return false;
            }
            run.seen.push(id.to_owned());
            run.calls.add(tool);
            true
        })?;
        if new {
            cx.agent_state().with(|map| {
                let mut session: Calls = map
                    .get(key)
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default();
                session.add(tool);
                if let Ok(v) = serde_json::to_value(&session) {
                    map.insert(key.to_owned(), v);
                }
            });
        }
        Ok(())
    }
}

/// The principal, the resource and their parents as Cedar JSON entities, each once (the
/// first mention wins: Cedar rejects a uid given twice).
fn entities_json(principal: &Entity, resource: &Entity) -> Value {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    let mut list = Vec::new();
    for e in [principal, resource] {
        if seen.contains(&(e.type_name.as_str(), e.id.as_str())) {
            continue;
        }
        seen.push((&e.type_name, &e.id));
        let attrs = cedar_value(&Value::Object(e.attrs.clone())).unwrap_or_else(|| json!({}));
        let parents: Vec<Value> = e
            .parents
            .iter()
            .map(|(t, id)| json!({"type": t, "id": id}))
            .collect();
        list.push(
            json!({"uid": {"type": e.type_name, "id": e.id}, "attrs": attrs, "parents": parents}),
        );
    }
    for (t, id) in principal.parents.iter().chain(&resource.parents) {
        if seen.contains(&(t.as_str(), id.as_str())) {
            continue;
        }
        seen.push((t, id));
        list.push(json!({"uid": {"type": t, "id": id}, "attrs": {}, "parents": []}));
    }
    Value::Array(list)
}

/// A JSON value as Cedar takes it: no `null`s, no escapes (`__entity`, `__extn` keys are
/// dropped, so a tool input cannot name entities), floats and integers beyond `i64` as text.
fn cedar_value(v: &Value) -> Option<Value> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) | Value::String(_) => v.clone(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::String(n.to_string()),
        },
        Value::Array(a) => Value::Array(a.iter().filter_map(cedar_value).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !k.starts_with("__"))
                .filter_map(|(k, v)| Some((k.clone(), cedar_value(v)?)))
                .collect(),
        ),
    })
}

impl InterventionHandler for CedarAuthorizer {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_error(&self) -> OnError {
        self.on_error
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL
    }

    async fn before_tool_call(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        self.decide(ev, cx)
    }
}
