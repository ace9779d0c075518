//! Cedar authorization: allow, deny, no decision, policy ids in reasons, fail-closed principal,
//! validation errors with file, line and column, counts per run and per session, hot reload,
//! a resource from the tool input, the time in the context, the policy kind's principal.
#![cfg(feature = "cedar")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_interventions::cedar::{CedarAuthorizer, Entity, Principal};
use rein_interventions::testing::{self, ToolCall};
use rein_interventions::*;

const POLICIES: &str = r#"
@id("analysts-search")
permit(principal in Role::"analyst", action == Action::"search", resource);

@id("admins")
permit(principal in Role::"admin", action, resource);

@id("no-prod")
forbid(principal, action, resource) when { context.input has db && context.input.db == "prod" };
"#;

fn analyst() -> Value {
    json!({"principal": {"type": "User", "id": "ann", "parents": [{"type": "Role", "id": "analyst"}]}})
}

fn authz() -> CedarAuthorizer {
    CedarAuthorizer::builder("authz")
        .policies(POLICIES)
        .build()
        .unwrap()
}

fn denial(out: &testing::Outcome<BeforeToolCallEvent>) -> Option<String> {
    match &out.event.cancel_tool {
        Cancel::Message(m) => Some(m.clone()),
        _ => None,
    }
}

#[test]
fn allow_deny_and_no_decision() {
    let out = testing::run(
        [authz()],
        ToolCall::new("search", json!({"q": "x"}))
            .state(analyst())
            .event(),
    );
    assert_eq!(denial(&out), None);
    assert!(out.decisions.is_empty());

    let out = testing::run(
        [authz()],
        ToolCall::new("search", json!({"db": "prod"}))
            .state(analyst())
            .event(),
    );
    assert_eq!(
        denial(&out).as_deref(),
        Some("DENIED: cedar: 'search' denied by policy no-prod")
    );

    let out = testing::run(
        [authz()],
        ToolCall::new("delete", json!({})).state(analyst()).event(),
    );
    assert_eq!(
        denial(&out).as_deref(),
        Some("DENIED: cedar: no policy permits 'delete'")
    );
}

#[test]
fn unresolved_principal_fails_closed() {
    let out = testing::run([authz()], ToolCall::new("search", json!({})).event());
    assert_eq!(
        denial(&out).as_deref(),
        Some("DENIED: cedar: no principal for this invocation")
    );
    // A resolver of one's own: here from a `user` key, with a role attribute.
    let custom = CedarAuthorizer::builder("authz")
        .policies(r#"permit(principal, action, resource) when { principal.level >= 3 };"#)
        .principal(|cx| {
            let user = cx.invocation_state().get("user")?.as_str()?;
            Some(Principal::new("User", user).attr("level", 3))
        })
        .build()
        .unwrap();
    let out = testing::run(
        [custom],
        ToolCall::new("x", json!({}))
            .state(json!({"user": "bo"}))
            .event(),
    );
    assert_eq!(denial(&out), None);
}

#[test]
fn ids_default_to_position_and_duplicates_are_errors() {
    let a = CedarAuthorizer::builder("a")
        .policies("permit(principal, action, resource);\nforbid(principal, action == Action::\"rm\", resource);")
        .build()
        .unwrap();
    assert_eq!(a.policy_ids(), ["policy0", "policy1"]);
    let out = testing::run(
        [a],
        ToolCall::new("rm", json!({}))
            .state(json!({"principal": "ann"}))
            .event(),
    );
    assert_eq!(
        denial(&out).as_deref(),
        Some("DENIED: cedar: 'rm' denied by policy policy1")
    );
    let err = CedarAuthorizer::builder("a")
        .policies("@id(\"x\")\npermit(principal, action, resource);\n@id(\"x\")\nforbid(principal, action, resource);")
        .build()
        .unwrap_err();
    assert_eq!((err.line(), err.column()), (Some(3), Some(1)), "{err}");
}

#[test]
fn syntax_errors_name_file_line_and_column() {
    let dir = std::env::temp_dir().join(format!("rein-cedar-syntax-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.cedar");
    std::fs::write(
        &path,
        "permit(principal, action, resource);\npermit(principal, action resource);\n",
    )
    .unwrap();
    let err = CedarAuthorizer::builder("a")
        .policies_file(&path)
        .build()
        .unwrap_err();
    assert_eq!(err.file(), path.display().to_string());
    assert_eq!(err.line(), Some(2), "{err}");
    assert!(err.column().is_some(), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("{}:2:", path.display())),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

const SCHEMA: &str = r#"
entity Role;
entity User in [Role] { level?: Long };
entity Tool;
action "search" appliesTo {
    principal: [User],
    resource: [Tool],
    context: {
        tool: String,
        input: { q?: String, db?: String },
        time: Long,
        calls_in_invocation: Long,
        calls_in_session: Long,
        tool_calls_in_invocation: Long,
        tool_calls_in_session: Long,
    }
};
"#;

#[test]
fn schema_violations_fail_the_build() {
    let ok = CedarAuthorizer::builder("a")
        .policies(r#"@id("s") permit(principal in Role::"analyst", action == Action::"search", resource) when { context.input has q };"#)
        .schema(SCHEMA)
        .build()
        .unwrap();
    let out = testing::run(
        [ok],
        ToolCall::new("search", json!({"q": "x"}))
            .state(analyst())
            .event(),
    );
    assert_eq!(denial(&out), None);

    // `principal.name` is not in the schema.
    let err = CedarAuthorizer::builder("a")
        .policies("permit(principal, action == Action::\"search\", resource)\n  when { principal.name == \"ann\" };")
        .schema(SCHEMA)
        .build()
        .unwrap_err();
    assert_eq!(err.file(), "<policies>");
    assert_eq!(err.line(), Some(2), "{err}");
    assert!(err.message().starts_with("policy policy0:"), "{err}");

    // An action the schema does not know.
    let err = CedarAuthorizer::builder("a")
        .policies("permit(principal, action == Action::\"delete\", resource);")
        .schema(SCHEMA)
        .build()
        .unwrap_err();
    assert!(err.to_string().starts_with("<policies>:1:"), "{err}");

    let err = CedarAuthorizer::builder("a")
        .policies("permit(principal, action, resource);")
        .schema("entity User in [")
        .build()
        .unwrap_err();
    assert_eq!(err.file(), "<schema>");
}

#[test]
fn counts_per_invocation_and_per_session() {
    let policies = r#"
        @id("all") permit(principal, action, resource);
        @id("three-per-run") forbid(principal, action, resource) when { context.calls_in_invocation >= 3 };
        @id("two-searches-per-session") forbid(principal, action == Action::"search", resource)
            when { context.tool_calls_in_session >= 2 };
    "#;
    let a = std::sync::Arc::new(
        CedarAuthorizer::builder("authz")
            .policies(policies)
            .build()
            .unwrap(),
    );
    let session = AgentState::new();
    let run = |cx: &InvocationContext, tool: &str, id: &str| {
        let event = BeforeToolCallEvent::new(cx.clone(), ToolUse::new(id, tool, json!({})));
        let out = testing::run([SharedHandler::new(a.clone())], event);
        denial(&out)
    };
    let state = InvocationState::from_value(json!({"principal": "ann"}));
    let first = InvocationContext::new(state.clone()).with_agent_state(session.clone());
    assert_eq!(run(&first, "search", "t1"), None);
    assert_eq!(
        run(&first, "search", "t1"),
        None,
        "the same call asked again is not counted"
    );
    assert_eq!(run(&first, "read", "t2"), None);
    assert_eq!(run(&first, "search", "t3"), None);
    assert_eq!(
        run(&first, "read", "t4").as_deref(),
        Some("DENIED: cedar: 'read' denied by policy three-per-run")
    );
    // A new run of the same session: the run's count starts again, the session's goes on.
    let second = InvocationContext::new(state).with_agent_state(session.clone());
    assert_eq!(run(&second, "read", "t5"), None);
    assert_eq!(
        run(&second, "search", "t6").as_deref(),
        Some("DENIED: cedar: 'search' denied by policy two-searches-per-session")
    );
    assert_eq!(session.get("authz:calls").unwrap()["total"], 4);
}

#[test]
fn hot_reload_swaps_policies_and_keeps_them_on_a_bad_edit() {
    let dir = std::env::temp_dir().join(format!("rein-cedar-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.cedar");
    std::fs::write(&path, r#"@id("open") permit(principal, action, resource);"#).unwrap();
    let a = std::sync::Arc::new(
        CedarAuthorizer::builder("authz")
            .policies_file(&path)
            .hot_reload(true)
            .build()
            .unwrap(),
    );
    let call = || {
        let out = testing::run(
            [SharedHandler::new(a.clone())],
            ToolCall::new("rm", json!({}))
                .state(json!({"principal": "ann"}))
                .event(),
        );
        denial(&out)
    };
    assert_eq!(call(), None);
    // File systems with coarse timestamps: make sure the change is visible as one.
    let set_mtime = |secs: u64| {
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
            .unwrap();
    };
    std::fs::write(
        &path,
        r#"@id("closed") forbid(principal, action, resource);"#,
    )
    .unwrap();
    set_mtime(1_000);
    assert_eq!(
        call().as_deref(),
        Some("DENIED: cedar: 'rm' denied by policy closed")
    );
    assert_eq!(a.policy_ids(), ["closed"]);
    // A bad edit: the policies in force stay.
    std::fs::write(&path, "forbid(principal, action resource);").unwrap();
    set_mtime(2_000);
    assert_eq!(
        call().as_deref(),
        Some("DENIED: cedar: 'rm' denied by policy closed")
    );
    assert!(a.reload().is_err());
    std::fs::write(
        &path,
        r#"@id("open-again") permit(principal, action, resource);"#,
    )
    .unwrap();
    set_mtime(3_000);
    assert_eq!(call(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "policy")]
#[test]
fn policy_kind_cedar() {
    use rein_interventions::policy::Policy;
    let dir = std::env::temp_dir().join(format!("rein-cedar-kind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("authz.cedar"), POLICIES).unwrap();
    std::fs::write(
        dir.join("policy.toml"),
        "[[policy]]\nname = \"authz\"\nkind = \"cedar\"\npolicies_file = \"authz.cedar\"\n",
    )
    .unwrap();
    let policy = Policy::from_path(dir.join("policy.toml")).unwrap();
    let h = policy.into_handlers().remove(0);
    assert_eq!((h.kind_name(), h.on_error()), ("cedar", OnError::Deny));
    let out = testing::run(
        [SharedHandler::new(h)],
        ToolCall::new("delete", json!({})).state(analyst()).event(),
    );
    assert_eq!(
        denial(&out).as_deref(),
        Some("DENIED: cedar: no policy permits 'delete'")
    );
    std::fs::write(
        dir.join("authz.cedar"),
        "permit(principal, action, resource)\nforbid(",
    )
    .unwrap();
    let err = Policy::from_path(dir.join("policy.toml"))
        .unwrap_err()
        .to_string();
    let file = dir.join("authz.cedar").display().to_string();
    assert!(
        err.starts_with(&format!("policy[0].policies: {file}:2:")),
        "{err}"
    );
    let err = Policy::from_json_str(r#"[{"name": "a", "kind": "cedar"}]"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy[0].policies: exactly one of `policies` and `policies_file` is needed (handler 'a')"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn policies_scoped_to_actions_apply_to_those_tools_only() {
    let a = std::sync::Arc::new(CedarAuthorizer::builder("a")
        .policies(
            r#"
            @id("all") permit(principal, action, resource);
            @id("no-a-b") forbid(principal, action in [Action::"a", Action::"b", Action::"a"], resource);
            @id("no-c") forbid(principal, action == Action::"c", resource) when { context.input.n > 1 };
            "#,
        )
        .build()
        .unwrap());
    let run = |tool: &str, n: i64| {
        let out = testing::run(
            [SharedHandler::new(a.clone())],
            ToolCall::new(tool, json!({"n": n}))
                .state(json!({"principal": "ann"}))
                .event(),
        );
        denial(&out)
    };
    assert_eq!(
        run("a", 0).as_deref(),
        Some("DENIED: cedar: 'a' denied by policy no-a-b")
    );
    assert_eq!(
        run("b", 0).as_deref(),
        Some("DENIED: cedar: 'b' denied by policy no-a-b")
    );
    assert_eq!(run("c", 0), None);
    assert_eq!(
        run("c", 2).as_deref(),
        Some("DENIED: cedar: 'c' denied by policy no-c")
    );
    assert_eq!(run("d", 2), None);
    assert_eq!(a.policy_count(), 3);
}

#[test]
fn a_resource_from_the_tool_input() {
    let authz = SharedHandler::new(CedarAuthorizer::builder("authz")
        .policies(
            r#"
            @id("public-reads") permit(principal, action == Action::"read_file", resource in Folder::"/srv/public");
            @id("no-secrets") forbid(principal, action, resource) when { resource.secret };
            "#,
        )
        .resource(|call, _| {
            let path = call.input.get("path")?.as_str()?;
            let folder = path.rsplit_once('/').map_or("/", |(dir, _)| dir);
            Some(
                Entity::new("File", path)
                    .parent("Folder", folder)
                    .attr("secret", path.ends_with(".key")),
            )
        })
        .build()
        .unwrap());
    let read = |input: Value| {
        let call = ToolCall::new("read_file", input).state(json!({"principal": "ann"}));
        denial(&testing::run([authz.clone()], call.event()))
    };
    assert_eq!(read(json!({"path": "/srv/public/a.txt"})), None);
    assert_eq!(
        read(json!({"path": "/etc/passwd"})).as_deref(),
        Some("DENIED: cedar: no policy permits 'read_file'")
    );
    assert_eq!(
        read(json!({"path": "/srv/public/tls.key"})).as_deref(),
        Some("DENIED: cedar: 'read_file' denied by policy no-secrets")
    );
    // No path, no resource: fail closed.
    assert_eq!(
        read(json!({})).as_deref(),
        Some("DENIED: cedar: no resource for this call")
    );
}

#[test]
fn a_policy_on_the_time_of_the_call() {
    // `context.time` is the call's Unix time: after 2020, and not before 1971.
    let authz = SharedHandler::new(CedarAuthorizer::builder("authz")
        .policies(
            r#"
            @id("since-2020") permit(principal, action == Action::"search", resource) when { context.time > 1577836800 };
            @id("in-1970") permit(principal, action == Action::"delete", resource) when { context.time < 31536000 };
            "#,
        )
        .build()
        .unwrap());
    let call = |tool: &str| {
        let call = ToolCall::new(tool, json!({})).state(json!({"principal": "ann"}));
        denial(&testing::run([authz.clone()], call.event()))
    };
    assert_eq!(call("search"), None);
    assert_eq!(
        call("delete").as_deref(),
        Some("DENIED: cedar: no policy permits 'delete'")
    );
}

#[cfg(feature = "policy")]
#[test]
fn policy_kind_cedar_principal() {
    use rein_interventions::policy::Policy;
    let spec = |principal: &str| {
        format!(
            "[[policy]]\nname = \"authz\"\nkind = \"cedar\"\nprincipal = '{principal}'\n\
             policies = 'permit(principal == User::\"alice\", action, resource);'\n"
        )
    };
    let policy = Policy::from_toml_str(&spec(r#"User::"alice""#)).unwrap();
    let h = SharedHandler::new(policy.into_handlers().remove(0));
    let call = || ToolCall::new("search", json!({}));
    // No principal in the invocation: the configured one.
    assert_eq!(denial(&testing::run([h.clone()], call().event())), None);
    // The invocation's principal wins.
    assert_eq!(
        denial(&testing::run(
            [h],
            call().state(json!({"principal": "bob"})).event()
        ))
        .as_deref(),
        Some("DENIED: cedar: no policy permits 'search'")
    );
    let err = Policy::from_toml_str(&spec("alice"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("policy[0].principal: invalid principal `alice`:"),
        "{err}"
    );
}
