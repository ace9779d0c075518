//! Behaviour of `#[tool]`: specs, schemas, calls, context, errors.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use rein_core::{
    ToolHandle,
    id::InvocationId,
    interrupt::InterruptAnswers,
    message::{ToolResultContent, ToolResultStatus},
    state::{AgentState, InvocationState},
    tool::{ToolContext, ToolError, ToolOutput},
};
use rein_macros::tool;
use serde_json::{Value, json};

/// What the generated code refers to (the facade provides `::rein::__private`).
#[allow(unreachable_pub)]
mod deps {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

/// Drives a future that never waits on anything external (all the tools here).
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn cx() -> ToolContext {
    ToolContext::new(
        "tu-1",
        "tool",
        InvocationId::new(),
        InvocationState::from_value(json!({"user": "ada"})),
        AgentState::new(),
        InterruptAnswers::default(),
    )
}

fn call(tool: &ToolHandle, input: Value) -> Result<ToolOutput, ToolError> {
    block_on(tool.call(input, cx()))
}

fn text(out: &ToolOutput) -> &str {
    match out.content.as_slice() {
        [ToolResultContent::Text(t)] => t,
        other => panic!("expected one text block, got {other:?}"),
    }
}

fn json_of(out: &ToolOutput) -> &Value {
    match out.content.as_slice() {
        [ToolResultContent::Json(v)] => v,
        other => panic!("expected one json block, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema, PartialEq)]
struct Address {
    /// Street and number.
    street: String,
    zip: Option<String>,
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

/// Exercises every kind of parameter.
///
/// Longer explanation for the model.
///
/// # Arguments
/// * `name` - a name
/// * `count` - how many
///   (continued on the next line)
/// * `ratio` - a ratio
/// - flag: a flag
/// * `tags` - some tags
/// * `limit` - an optional limit
///
/// # Examples
/// ```
/// # this heading-like line is code, not a section
/// ```
#[tool(crate = "crate::tool_macro::deps")]
#[allow(clippy::too_many_arguments)]
fn kinds(
    name: String,
    count: i64,
    ratio: f64,
    flag: bool,
    tags: Vec<String>,
    limit: Option<u32>,
    /// where to send it
    address: Address,
    unit: Unit,
) -> Value {
    json!({
        "name": name, "count": count, "ratio": ratio, "flag": flag, "tags": tags,
        "limit": limit, "address": address, "unit": unit,
    })
}

#[test]
fn spec_name_description_and_schema() {
    let h = ToolHandle::new(Kinds);
    let spec = h.spec();
    assert_eq!(spec.name, "kinds");
    assert_eq!(Kinds::NAME, "kinds");
    assert_eq!(
        spec.description,
        "Exercises every kind of parameter.\n\nLonger explanation for the model."
    );
    let s = &spec.input_schema;
    assert_eq!(s["type"], "object");
    assert!(s.get("$schema").is_none(), "{s:#}");
    assert!(s.get("title").is_none(), "{s:#}");
    assert_eq!(s["additionalProperties"], false);
    let p = &s["properties"];
    assert_eq!(p["name"]["type"], "string");
    assert_eq!(p["name"]["description"], "a name");
    assert_eq!(p["count"]["type"], "integer");
    assert_eq!(
        p["count"]["description"],
        "how many (continued on the next line)"
    );
    assert_eq!(p["ratio"]["type"], "number");
    assert_eq!(p["flag"]["type"], "boolean");
    assert_eq!(p["flag"]["description"], "a flag");
    assert_eq!(p["tags"]["type"], "array");
    assert_eq!(p["tags"]["items"]["type"], "string");
    assert_eq!(p["limit"]["type"], json!(["integer", "null"]));
    assert_eq!(p["limit"]["minimum"], 0);
    assert_eq!(p["limit"]["description"], "an optional limit");
    // Parameter doc comment; the user struct is inlined (no $ref).
    assert_eq!(p["address"]["description"], "where to send it");
    assert_eq!(p["address"]["type"], "object");
    assert_eq!(p["address"]["properties"]["street"]["type"], "string");
    assert_eq!(
        p["address"]["properties"]["street"]["description"],
        "Street and number."
    );
    assert_eq!(p["unit"]["enum"], json!(["celsius", "fahrenheit"]));
    assert!(s.get("$defs").is_none(), "{s:#}");
    let mut required: Vec<&str> = s["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(
        required,
        ["address", "count", "flag", "name", "ratio", "tags", "unit"]
    );
}

#[test]
fn call_deserializes_every_kind() {
    let h = ToolHandle::from(Kinds);
    let input = json!({
        "name": "n", "count": -3, "ratio": 0.5, "flag": true, "tags": ["a", "b"],
        "address": {"street": "Main 1"}, "unit": "celsius",
    });
    let out = call(&h, input).unwrap();
    assert_eq!(out.status, ToolResultStatus::Success);
    assert_eq!(
        json_of(&out),
        &json!({
            "name": "n", "count": -3, "ratio": 0.5, "flag": true, "tags": ["a", "b"],
            "limit": null, "address": {"street": "Main 1", "zip": null}, "unit": "celsius",
        })
    );
}

#[test]
fn generated_schema_validates_like_the_deserializer() {
    let spec = ToolHandle::new(Kinds).spec().clone();
    let validator = jsonschema::validator_for(&spec.input_schema).unwrap();
    let valid = json!({
        "name": "n", "count": 1, "ratio": 1.5, "flag": false, "tags": [], "limit": 7,
        "address": {"street": "s", "zip": "75001"}, "unit": "fahrenheit",
    });
    assert!(validator.is_valid(&valid));
    let mut wrong_type = valid.clone();
    wrong_type["count"] = json!("one");
    assert!(!validator.is_valid(&wrong_type));
    let mut missing = valid.clone();
    missing.as_object_mut().unwrap().remove("name");
    assert!(!validator.is_valid(&missing));
    let mut negative = valid.clone();
    negative["limit"] = json!(-1);
    assert!(!validator.is_valid(&negative));
    let mut bad_enum = valid.clone();
    bad_enum["unit"] = json!("kelvin");
    assert!(!validator.is_valid(&bad_enum));
    let mut unknown = valid.clone();
    unknown["extra"] = json!(1);
    assert!(!validator.is_valid(&unknown));

    // The deserializer agrees on each case.
    let h = ToolHandle::new(Kinds);
    assert!(call(&h, valid).is_ok());
    for bad in [wrong_type, missing, negative, bad_enum, unknown] {
        assert!(call(&h, bad).is_err());
    }
}

// ---------------------------------------------------------------------------------------------

/// Adds two numbers.
#[tool(crate = "crate::tool_macro::deps")]
fn add(a: i64, b: i64) -> String {
    (a + b).to_string()
}

/// Adds two numbers, asynchronously.
#[tool(crate = "crate::tool_macro::deps")]
async fn add_async(a: i64, b: i64) -> i64 {
    std::future::ready(()).await;
    a + b
}

#[test]
fn sync_and_async_functions() {
    let out = call(&Add.into(), json!({"a": 2, "b": 3})).unwrap();
    assert_eq!(text(&out), "5");
    let out = call(&AddAsync.into(), json!({"a": 2, "b": 3})).unwrap();
    assert_eq!(json_of(&out), &json!(5));
    // The functions stay callable.
    assert_eq!(add(1, 1), "2");
    assert_eq!(block_on(add_async(1, 1)), 2);
}

#[test]
fn input_errors_are_clear_tool_errors() {
    let h: ToolHandle = Add.into();
    let err = call(&h, json!({"a": "two", "b": 3})).unwrap_err();
    assert!(
        err.message().starts_with("invalid input for tool 'add': "),
        "{}",
        err.message()
    );
    assert!(
        err.message()
            .contains("invalid type: string \"two\", expected i64")
    );

    let err = call(&h, json!({"a": 1})).unwrap_err();
    assert_eq!(
        err.message(),
        "invalid input for tool 'add': missing field `b`"
    );

    let err = call(&h, json!({"a": 1, "b": 2, "c": 3})).unwrap_err();
    assert!(
        err.message().contains("unknown field `c`"),
        "{}",
        err.message()
    );

    let err = call(&h, json!([1, 2])).unwrap_err();
    assert_eq!(
        err.message(),
        "invalid input for tool 'add': expected a JSON object of named arguments, got an array"
    );
    let err = call(&h, json!("nope")).unwrap_err();
    assert!(err.message().starts_with("invalid input for tool 'add'"));
}

/// Takes nothing.
#[tool(crate = "crate::tool_macro::deps")]
fn no_args() -> &'static str {
    "ok"
}

#[test]
fn no_parameters_accepts_empty_and_null_input() {
    let h: ToolHandle = NoArgs.into();
    assert_eq!(h.spec().input_schema["type"], "object");
    assert_eq!(text(&call(&h, json!({})).unwrap()), "ok");
    assert_eq!(text(&call(&h, Value::Null).unwrap()), "ok");
}

// ---------------------------------------------------------------------------------------------

/// Greets the current user.
#[tool(crate = "crate::tool_macro::deps")]
fn greet(greeting: String, cx: &ToolContext, punctuation: Option<String>) -> String {
    let user = cx
        .invocation_state()
        .get("user")
        .and_then(Value::as_str)
        .unwrap_or("?");
    format!(
        "{greeting}, {user}{} ({})",
        punctuation.unwrap_or_default(),
        cx.tool_use_id()
    )
}

/// Counts calls in agent state.
#[tool(crate = "crate::tool_macro::deps")]
async fn count_calls(cx: ToolContext) -> String {
    let n = cx
        .agent_state()
        .get("calls")
        .and_then(|v| v.as_i64())
        .unwrap_or(0)
        + 1;
    cx.agent_state().set("calls", n);
    n.to_string()
}

#[test]
fn context_parameter_is_not_in_the_schema() {
    let h: ToolHandle = Greet.into();
    let props = h.spec().input_schema["properties"].as_object().unwrap();
    let keys: Vec<&String> = props.keys().collect();
    assert_eq!(keys, ["greeting", "punctuation"]);
    assert_eq!(h.spec().input_schema["required"], json!(["greeting"]));
    let out = call(&h, json!({"greeting": "Hello", "punctuation": "!"})).unwrap();
    assert_eq!(text(&out), "Hello, ada! (tu-1)");

    let h: ToolHandle = CountCalls.into();
    assert_eq!(h.spec().input_schema["properties"], json!({}));
    let cx = cx();
    let out = block_on(h.call(json!({}), cx.clone())).unwrap();
    assert_eq!(text(&out), "1");
    let out = block_on(h.call(json!({}), cx.clone())).unwrap();
    assert_eq!(text(&out), "2");
}

/// Asks a human before deleting.
#[tool(crate = "crate::tool_macro::deps")]
fn delete(path: String, cx: &ToolContext) -> Result<String, ToolError> {
    let answer = cx.interrupt("approve", format!("delete {path}?"))?;
    Ok(format!("answer: {answer}"))
}

#[test]
fn interrupts_propagate_as_errors_and_are_recorded() {
    let h: ToolHandle = Delete.into();
    let cx = cx();
    let err = block_on(h.call(json!({"path": "/tmp/x"}), cx.clone())).unwrap_err();
    assert!(
        err.message()
            .starts_with("interrupt raised: v1:tool_call:tu-1:")
    );
    let raised = cx.raised_interrupts();
    assert_eq!(raised.len(), 1);
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct NotFound(String);
impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no such city: {}", self.0)
    }
}
impl std::error::Error for NotFound {}

/// Fails with a std error.
#[tool(crate = "crate::tool_macro::deps")]
async fn std_error(city: String) -> Result<String, NotFound> {
    if city == "Paris" {
        Ok("sunny".into())
    } else {
        Err(NotFound(city))
    }
}

/// Fails with a string.
#[tool(crate = "crate::tool_macro::deps")]
fn string_error(fail: bool) -> Result<Value, String> {
    if fail {
        Err("it failed".to_owned())
    } else {
        Ok(json!({"ok": true}))
    }
}

/// Fails with a boxed error.
#[tool(crate = "crate::tool_macro::deps")]
fn boxed_error() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    Err("boxed failure".into())
}

/// Fails with an io error through `io::Result`.
#[tool(crate = "crate::tool_macro::deps")]
fn io_error(path: String) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// Returns a tool output with explicit status.
#[tool(crate = "crate::tool_macro::deps")]
fn explicit_output() -> ToolOutput {
    ToolOutput::new(
        ToolResultStatus::Error,
        vec![ToolResultContent::Text("self-reported".into())],
    )
}

#[derive(serde::Serialize)]
struct ForecastData {
    city: String,
    celsius: f64,
}

/// Returns a serializable struct.
#[tool(crate = "crate::tool_macro::deps")]
fn forecast(city: String) -> Result<ForecastData, ToolError> {
    Ok(ForecastData {
        city,
        celsius: 21.5,
    })
}

#[test]
fn results_map_to_outputs_and_errors() {
    let h: ToolHandle = StdError.into();
    assert_eq!(text(&call(&h, json!({"city": "Paris"})).unwrap()), "sunny");
    let err = call(&h, json!({"city": "Atlantis"})).unwrap_err();
    assert_eq!(err.message(), "no such city: Atlantis");
    assert!(err.source().is_some(), "std errors keep their source");

    let h: ToolHandle = StringError.into();
    assert_eq!(
        json_of(&call(&h, json!({"fail": false})).unwrap()),
        &json!({"ok": true})
    );
    assert_eq!(
        call(&h, json!({"fail": true})).unwrap_err().message(),
        "it failed"
    );

    let err = call(&BoxedError.into(), json!({})).unwrap_err();
    assert_eq!(err.message(), "boxed failure");

    let err = call(&IoError.into(), json!({"path": "/definitely/not/here"})).unwrap_err();
    assert!(err.message().contains("No such file"), "{}", err.message());

    let out = call(&ExplicitOutput.into(), json!({})).unwrap();
    assert_eq!(out.status, ToolResultStatus::Error);
    assert_eq!(text(&out), "self-reported");

    let out = call(&Forecast.into(), json!({"city": "Oslo"})).unwrap();
    assert_eq!(json_of(&out), &json!({"city": "Oslo", "celsius": 21.5}));
}

/// Returns nothing.
#[tool(crate = "crate::tool_macro::deps")]
fn unit_return(_ignored: Option<bool>) {}

#[test]
fn unit_return_is_json_null() {
    let out = call(&UnitReturn.into(), json!({})).unwrap();
    assert_eq!(json_of(&out), &Value::Null);
}

// ---------------------------------------------------------------------------------------------

/// This doc comment is not used.
#[tool(
    crate = "crate::tool_macro::deps",
    name = "weather-now",
    description = "  Current weather.  ",
    struct_name = "WeatherNow"
)]
fn weather(city: String) -> String {
    city
}

#[tool(
    crate = "crate::tool_macro::deps",
    description = "Undocumented but described."
)]
fn described(#[serde(default)] times: u8, #[schemars(length(max = 3))] code: String) -> String {
    code.repeat(times.into())
}

#[test]
fn attribute_overrides() {
    let h: ToolHandle = WeatherNow.into();
    assert_eq!(h.name(), "weather-now");
    assert_eq!(WeatherNow::NAME, "weather-now");
    assert_eq!(h.spec().description, "Current weather.");
    assert_eq!(weather("x".into()), "x");

    let h: ToolHandle = Described.into();
    assert_eq!(h.spec().description, "Undocumented but described.");
    let s = &h.spec().input_schema;
    assert_eq!(s["required"], json!(["code"]), "{s:#}");
    assert_eq!(s["properties"]["code"]["maxLength"], 3, "{s:#}");
    assert_eq!(text(&call(&h, json!({"code": "ab"})).unwrap()), "");
    assert_eq!(
        text(&call(&h, json!({"code": "ab", "times": 2})).unwrap()),
        "abab"
    );
}

/// Uses a raw identifier and a `mut` parameter.
#[tool(crate = "crate::tool_macro::deps")]
fn r#raw(r#type: String, mut n: u32) -> String {
    n += 1;
    format!("{type}{n}", type = r#type)
}

#[test]
fn raw_identifiers_and_mut_parameters() {
    let h: ToolHandle = Raw.into();
    assert_eq!(h.name(), "raw");
    assert!(h.spec().input_schema["properties"].get("type").is_some());
    assert_eq!(text(&call(&h, json!({"type": "t", "n": 1})).unwrap()), "t2");
}

#[test]
fn tools_are_send_sync_and_the_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let h: ToolHandle = Greet.into();
    let fut = h.call(json!({"greeting": "hi"}), cx());
    assert_send(&fut);
}

#[test]
#[ignore = "prints the schema for a human to read"]
fn print_schema() {
    println!("{:#}", ToolHandle::new(Kinds).spec().input_schema);
}

/// `#[intervention]`: sync and async methods, with and without the context, returning the action
/// or a `Result`; the subscriptions are exactly the methods defined; on_error and mode as given.
mod intervention_macro {
    use rein_interventions::testing::{self, ModelReply, ToolCall};
    use rein_interventions::{
        AfterModelCallAction, AfterModelCallEvent, BeforeToolCallAction, BeforeToolCallEvent,
        DecisionAction, DecisionOutcome, EventSet, HandlerError, InterventionContext,
        InterventionHandler, Mode, OnError, json,
    };
    use rein_macros::intervention;

    struct Budget<const N: u64>;

    #[intervention(
        name = "budget",
        on_error = "proceed",
        mode = "shadow",
        crate = "rein_interventions"
    )]
    impl<const N: u64> Budget<N> {
        async fn before_tool_call(
            &self,
            ev: &BeforeToolCallEvent,
            cx: &InterventionContext,
        ) -> Result<BeforeToolCallAction, HandlerError> {
            let calls = cx
                .run_state()
                .count_once("budget:calls", &ev.tool_use().tool_use_id)?;
            Ok(if calls > N {
                BeforeToolCallAction::deny("budget spent")
            } else {
                BeforeToolCallAction::Proceed
            })
        }

        fn after_model_call(&self, ev: &AfterModelCallEvent) -> AfterModelCallAction {
            match ev.response() {
                Some(r) if r.message.text().is_empty() => {
                    AfterModelCallAction::guide("say something")
                }
                _ => AfterModelCallAction::Proceed,
            }
        }

        /// Not a lifecycle method: left alone.
        #[allow(dead_code)]
        fn limit(&self) -> u64 {
            N
        }
    }

    #[test]
    fn writes_the_handler_from_the_methods() {
        let b = Budget::<0>;
        assert_eq!(b.name(), "budget");
        assert_eq!(b.on_error(), OnError::Proceed);
        assert_eq!(b.mode(), Mode::Shadow);
        assert_eq!(
            b.subscriptions(),
            EventSet::BEFORE_TOOL_CALL | EventSet::AFTER_MODEL_CALL
        );
        let out = testing::run([Budget::<0>], ToolCall::new("search", json!({})).event());
        assert_eq!(out.decisions[0].action, DecisionAction::Deny);
        assert_eq!(out.decisions[0].outcome, DecisionOutcome::Shadowed);
        let out = testing::run([Budget::<0>], ModelReply::text("").event());
        assert_eq!(out.decisions[0].action, DecisionAction::Guide);
    }
}
