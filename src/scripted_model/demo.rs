//! The demo script of `agentd dev`: a deterministic script of the [scripted
//! model](super::ScriptedModel) on 127.0.0.1 so that someone with no LLM account can watch
//! the whole loop work. It is not a language model and says so in every answer.
//!
//! The reply depends on the request alone (a redelivered recursion gets the same one): it
//! reads the task's input (the user message) and the state snapshot at the end of the system
//! message. When the input holds an arithmetic expression, the first recursion makes a
//! two-step plan (RE_PLAN), the next calls the built-in `calculate` tool (CALL_TOOL) and,
//! once the snapshot shows its result, the last one answers (ANSWER) and marks both steps
//! done. Any other input is answered at once with a note on what the demo can do.

use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{ModelReply, ModelRequest, ScriptedModel, Seed, ServeOptions, tool_call};

/// The model name the demo agent uses (any name is answered the same way).
pub const MODEL: &str = "agentd-demo";

/// What every answer that is not a result starts with.
const NOTICE: &str = "[agentd demo model: scripted, not an LLM]";

/// Binds `addr` (port 0 for a free one) and serves the demo script until `shutdown` fires,
/// recording nothing. `latency` is waited before each reply so that the live page shows the
/// steps one by one.
pub async fn serve(
    addr: &str,
    latency: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<ScriptedModel> {
    let model = ScriptedModel::start_with(ServeOptions {
        addr: addr.to_owned(),
        record_requests: false,
        shutdown,
    })
    .await?;
    model.otherwise(move |request| reply_to(request).with_delay(latency));
    Ok(model)
}

/// What to answer to this request; usage is estimated at a quarter token per byte.
pub fn reply_to(request: &ModelRequest) -> ModelReply {
    let (content, tool_call) = script(request);
    let content = content.to_string();
    let tokens = (request.bytes.len() / 4, content.len() / 4);
    ModelReply::completion(Value::String(content), tool_call.map(|call| vec![call]))
        .with_usage(tokens.0 as u64, tokens.1 as u64)
}

/// The seed-002 reply object and, for CALL_TOOL, the native tool call.
fn script(request: &ModelRequest) -> (Value, Option<Value>) {
    let input = request.user_input();
    let snapshot = request.snapshot();
    let iteration = snapshot
        .as_ref()
        .and_then(|s| s.iteration_index())
        .unwrap_or(1);
    let Some(expression) = expression(&input) else {
        let answer = format!(
            "{NOTICE} I only do arithmetic with the calculate tool; try \
             \"What is 17 * 23 + 4?\". You asked: {input}"
        );
        return (
            answer_object(&answer, "the input holds no arithmetic", &[]),
            None,
        );
    };
    if let Some(result) = snapshot.as_ref().and_then(calculate_result) {
        let answer = format!("{expression} = {result}");
        let done = ["1", "2"];
        let object = answer_object(&answer, "the calculate tool gave the result", &done);
        return (object, None);
    }
    if iteration <= 1 {
        let plan = json!({"plan": [
            {"step_id": "1", "description": format!("Compute {expression} with the calculate tool"), "status": "pending"},
            {"step_id": "2", "description": "Answer with the result", "status": "pending"}
        ]});
        let object = seed("RE_PLAN", plan, "the input holds arithmetic", &[]);
        return (object, None);
    }
    if iteration > 6 {
        let answer = format!("{NOTICE} the calculate tool gave no result for {expression}");
        return (answer_object(&answer, "no result came back", &[]), None);
    }
    let observe = "the plan's first step needs the calculate tool";
    let object = seed("CALL_TOOL", json!({}), observe, &[("1", "running")]);
    let arguments = json!({"expression": expression}).to_string();
    let id = format!("call_demo_{iteration}");
    (object, Some(tool_call(&id, "calculate", &arguments)))
}

fn answer_object(answer: &str, observe: &str, done_steps: &[&str]) -> Value {
    let updates: Vec<(&str, &str)> = done_steps.iter().map(|id| (*id, "done")).collect();
    seed("ANSWER", json!({"answer": answer}), observe, &updates)
}

/// A seed-002 reply object as the demo writes it (no trace id).
fn seed(action_type: &str, output: Value, observe: &str, updates: &[(&str, &str)]) -> Value {
    Seed::new(action_type, output)
        .observe(observe)
        .thought(format!("the demo script says {action_type} now"))
        .summary(format!("demo: {action_type}"))
        .step_updates(updates)
        .without_trace_id()
        .object()
}

/// The newest successful `calculate` result anywhere in the snapshot.
fn calculate_result(snapshot: &super::Snapshot) -> Option<String> {
    let results = snapshot.tool_results();
    let result = results
        .iter()
        .filter(|r| r.success && r.name == "calculate")
        .filter_map(|r| r.result.as_ref())
        .next_back()?;
    Some(match result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    })
}

/// The longest run of digits, operators, parentheses, dots and spaces in `input` that holds
/// an operator between two digits, trimmed.
fn expression(input: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_digit() || "+-*/%^(). ".contains(c);
    input
        .split(|c: char| !allowed(c))
        .map(|run| run.trim().trim_end_matches('.').trim())
        .filter(|run| {
            let has_digit = run.chars().any(|c| c.is_ascii_digit());
            let inner = run.trim_start_matches(['-', '(']);
            has_digit && inner.chars().skip(1).any(|c| "+-*/%^".contains(c))
        })
        .max_by_key(|run| run.len())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(input: &str, snapshot: Value) -> ModelRequest {
        let system = format!(
            "prompt with an example ```json\n{{\"x\": 1}}\n```\n## 6\n```json\n{snapshot:#}\n```\nYou must:"
        );
        let body = json!({"model": MODEL, "messages": [
            {"role": "user", "content": input},
            {"role": "system", "content": system}
        ]});
        ModelRequest {
            bytes: body.to_string().into_bytes(),
            body,
            authorization: None,
        }
    }

    fn content(reply: &ModelReply) -> Value {
        let body = reply.body();
        let text = body["choices"][0]["message"]["content"].as_str().unwrap();
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn finds_the_expression_in_a_question() {
        assert_eq!(
            expression("What is 17 * 23 + 4?").as_deref(),
            Some("17 * 23 + 4")
        );
        assert_eq!(expression("compute (2+3)*4.").as_deref(), Some("(2+3)*4"));
        assert_eq!(expression("hello there"), None);
        assert_eq!(expression("in 2026 we"), None);
        assert_eq!(expression("-5 apples"), None);
    }

    #[test]
    fn plans_then_calls_calculate_then_answers() {
        let first = reply_to(&request(
            "What is 17 * 23 + 4?",
            json!({"current_recursion": {"iteration_index": 1}}),
        ));
        let first = content(&first);
        assert_eq!(first["action"]["action_type"], "RE_PLAN");
        assert_eq!(
            first["action"]["output"]["plan"].as_array().map(Vec::len),
            Some(2)
        );

        let second = reply_to(&request(
            "What is 17 * 23 + 4?",
            json!({"current_recursion": {"iteration_index": 2}}),
        ));
        assert_eq!(content(&second)["action"]["action_type"], "CALL_TOOL");
        let call = &second.body()["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "calculate");
        assert_eq!(
            call["function"]["arguments"],
            r#"{"expression":"17 * 23 + 4"}"#
        );

        let with_result = json!({
            "current_recursion": {"iteration_index": 3},
            "history": [{"tool_call_results": [
                {"tool_call_id": "c", "name": "calculate", "arguments": {}, "success": true, "result": 395}
            ]}]
        });
        let third = content(&reply_to(&request("What is 17 * 23 + 4?", with_result)));
        assert_eq!(third["action"]["action_type"], "ANSWER");
        assert_eq!(third["action"]["output"]["answer"], "17 * 23 + 4 = 395");
        assert_eq!(third["step_updates"][1]["status"], "done");
        assert!(third.get("trace_id").is_none(), "{third}");
    }

    #[test]
    fn anything_else_is_answered_with_the_notice() {
        let reply = content(&reply_to(&request(
            "write me a poem",
            json!({"current_recursion": {"iteration_index": 1}}),
        )));
        assert_eq!(reply["action"]["action_type"], "ANSWER");
        let answer = reply["action"]["output"]["answer"].as_str().unwrap();
        assert!(answer.starts_with(NOTICE), "{answer}");
    }

    #[test]
    fn the_completion_carries_the_tool_call_and_usage() {
        let request = request("1+1", json!({"current_recursion": {"iteration_index": 2}}));
        let reply = reply_to(&request);
        let body = reply.body();
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "calculate"
        );
        assert_eq!(body["usage"]["prompt_tokens"], request.bytes.len() / 4);
    }
}
