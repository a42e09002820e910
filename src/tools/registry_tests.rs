//! Unit tests of [`ToolRegistry`], with a scripted tool source beside the built-ins.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::*;

/// A source offering `slow` (sleeps, then echoes), `boom` (panics), `fails` (errors) and a
/// second `calculate` that must lose to the built-in one.
struct TestSource;

#[async_trait]
impl ToolSource for TestSource {
    fn list_tools(&self) -> Vec<ToolSpec> {
        let spec = |name: &str| ToolSpec {
            name: name.to_owned(),
            description: format!("test {name}"),
            parameters: json!({"type": "object"}),
        };
        ["calculate", "slow", "boom", "fails"].map(spec).to_vec()
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        _context: ToolCallContext<'_>,
    ) -> Result<ToolOutput, String> {
        match name {
            "slow" => {
                tokio::time::sleep(Duration::from_millis(30)).await;
                Ok(ToolOutput {
                    result: arguments,
                    memo: None,
                })
            }
            "boom" => panic!("test tool panics"),
            _ => Err(format!("{name} always fails")),
        }
    }
}

fn registry() -> ToolRegistry {
    ToolRegistry::new(vec![Arc::new(BuiltinTools), Arc::new(TestSource)])
}

fn request(name: &str, arguments: &str) -> ToolCallRequest {
    ToolCallRequest {
        id: "call_7".to_owned(),
        name: name.to_owned(),
        arguments: arguments.to_owned(),
    }
}

fn grants(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn names_and_specs_follow_registration_order_first_wins() {
    let registry = registry();
    let names = registry.all_tool_names();
    assert_eq!(
        names,
        [
            "calculate",
            "take_memo",
            "current_time",
            "slow",
            "boom",
            "fails"
        ]
    );
    let calculate = &registry.specs_for(None)[0];
    assert!(
        calculate.description.starts_with("Evaluate"),
        "{}",
        calculate.description
    );
    let granted = grants(&["slow", "calculate", "no_such_tool"]);
    let specs: Vec<String> = registry
        .specs_for(Some(&granted))
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(specs, ["calculate", "slow"]);
    assert!(registry.specs_for(Some(&[])).is_empty());
    assert_eq!(
        ToolRegistry::builtin().all_tool_names(),
        BuiltinTools::names()
    );
    assert!(format!("{registry:?}").contains("take_memo"));
}

#[tokio::test]
async fn success_carries_result_ids_and_parsed_arguments() {
    let result = registry()
        .call(
            None,
            &request("calculate", r#"{"expression":"6*7"}"#),
            ToolCallContext::default(),
        )
        .await;
    assert!(result.success, "{result:?}");
    assert_eq!(result.tool_call_id, "call_7");
    assert_eq!(result.name, "calculate");
    assert_eq!(result.arguments, json!({"expression": "6*7"}));
    assert_eq!(result.result, Some(json!(42)));
    assert_eq!((result.error, result.memo), (None, None));
}

#[tokio::test]
async fn take_memo_returns_its_memo() {
    let result = registry()
        .call(
            None,
            &request("take_memo", r#"{"note":"n1"}"#),
            ToolCallContext::default(),
        )
        .await;
    assert!(result.success);
    assert_eq!(result.memo.as_deref(), Some("n1"));
}

#[tokio::test]
async fn duration_is_measured() {
    let result = registry()
        .call(
            None,
            &request("slow", r#"{"x":1}"#),
            ToolCallContext::default(),
        )
        .await;
    assert!(result.success);
    assert_eq!(result.result, Some(json!({"x": 1})));
    assert!(result.duration_ms >= 30, "{}", result.duration_ms);
}

#[tokio::test]
async fn unknown_tool_lists_the_available_ones() {
    let granted = grants(&["calculate"]);
    let result = registry()
        .call(
            Some(&granted),
            &request("nope", "{}"),
            ToolCallContext::default(),
        )
        .await;
    assert!(!result.success);
    assert_eq!(result.result, None);
    assert_eq!(
        result.error.as_deref(),
        Some("unknown tool 'nope'; available tools: calculate")
    );
    let none = registry()
        .call(
            Some(&[]),
            &request("nope", "{}"),
            ToolCallContext::default(),
        )
        .await;
    assert_eq!(
        none.error.as_deref(),
        Some("unknown tool 'nope'; no tools are available")
    );
}

#[tokio::test]
async fn ungranted_tool_is_refused_before_running() {
    let granted = grants(&["calculate"]);
    let result = registry()
        .call(
            Some(&granted),
            &request("slow", "{}"),
            ToolCallContext::default(),
        )
        .await;
    assert!(!result.success);
    assert_eq!(
        result.error.as_deref(),
        Some("tool 'slow' is not granted to this agent")
    );
    assert!(result.duration_ms < 30);
}

#[tokio::test]
async fn invalid_json_arguments_are_kept_raw() {
    let result = registry()
        .call(
            None,
            &request("calculate", "{expression: 1+1"),
            ToolCallContext::default(),
        )
        .await;
    assert!(!result.success);
    assert_eq!(
        result.arguments,
        Value::String("{expression: 1+1".to_owned())
    );
    let error = result.error.unwrap_or_default();
    assert!(
        error.starts_with("arguments are not valid JSON: "),
        "{error}"
    );
}

#[tokio::test]
async fn empty_arguments_count_as_an_empty_object() {
    let result = registry()
        .call(
            None,
            &request("current_time", "  "),
            ToolCallContext::default(),
        )
        .await;
    assert!(result.success, "{result:?}");
    assert_eq!(result.arguments, json!({}));
}

#[tokio::test]
async fn schema_mismatches_are_precise() {
    let registry = registry();
    let wrong_type = registry
        .call(
            None,
            &request("calculate", r#"{"expression":12}"#),
            ToolCallContext::default(),
        )
        .await;
    assert_eq!(
        wrong_type.error.as_deref(),
        Some("arguments.expression: expected string, got integer")
    );
    assert_eq!(wrong_type.arguments, json!({"expression": 12}));
    let missing = registry
        .call(
            None,
            &request("take_memo", "{}"),
            ToolCallContext::default(),
        )
        .await;
    assert_eq!(
        missing.error.as_deref(),
        Some("arguments: missing required property 'note'")
    );
    let not_object = registry
        .call(
            None,
            &request("calculate", "[1]"),
            ToolCallContext::default(),
        )
        .await;
    assert_eq!(
        not_object.error.as_deref(),
        Some("arguments: expected object, got array")
    );
}

#[tokio::test]
async fn tool_errors_and_panics_become_error_values() {
    let registry = registry();
    let divide = registry
        .call(
            None,
            &request("calculate", r#"{"expression":"1/0"}"#),
            ToolCallContext::default(),
        )
        .await;
    assert_eq!(divide.error.as_deref(), Some("division by zero"));
    let fails = registry
        .call(None, &request("fails", "{}"), ToolCallContext::default())
        .await;
    assert_eq!(fails.error.as_deref(), Some("fails always fails"));
    let boom = registry
        .call(None, &request("boom", "{}"), ToolCallContext::default())
        .await;
    assert!(!boom.success);
    assert_eq!(
        boom.error.as_deref(),
        Some("tool 'boom' failed unexpectedly (panicked)")
    );
}

/// A source added like an MCP server: granted by name only.
fn registry_with_remote() -> ToolRegistry {
    let mut registry = ToolRegistry::builtin();
    registry.add(Arc::new(TestSource), "mcp:test", false);
    registry
}

#[test]
fn sources_not_granted_by_default_need_a_grant_by_name() {
    let registry = registry_with_remote();
    let default: Vec<String> = registry
        .specs_for(None)
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(default, BuiltinTools::names());
    let granted = grants(&["slow", "take_memo"]);
    let named: Vec<String> = registry
        .specs_for(Some(&granted))
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(named, ["take_memo", "slow"]);
    let catalog = registry.catalog();
    let slow = catalog
        .iter()
        .find(|t| t.spec.name == "slow")
        .expect("slow");
    assert_eq!(
        (slow.source.as_str(), slow.granted_by_default),
        ("mcp:test", false)
    );
    assert_eq!(catalog[0].source, BUILTIN_SOURCE);
}

#[tokio::test]
async fn a_null_grant_does_not_reach_remote_tools() {
    let registry = registry_with_remote();
    let refused = registry
        .call(None, &request("slow", "{}"), ToolCallContext::default())
        .await;
    assert_eq!(
        refused.error.as_deref(),
        Some("tool 'slow' is not granted to this agent")
    );
    let granted = grants(&["slow"]);
    let ran = registry
        .call(
            Some(&granted),
            &request("slow", "{}"),
            ToolCallContext::default(),
        )
        .await;
    assert!(ran.success, "{ran:?}");
}
