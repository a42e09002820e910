//! Structured logs: with `log.format = "json"` (installed exactly as the binary does, but
//! writing into a buffer), every log line a task produces carries its task_id, and every
//! line produced inside a recursion (LLM attempts and retries, tool calls, MCP calls) also
//! carries the recursion's trace_id. The subscriber is the process's global one, so the test
//! runs alone (the `serial` tier): another test's worker would log lines of its own tasks
//! into the buffer.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use crate::support::harness::{self, TestEnv};
use agentd::config::{LogFormat, LogSettings};
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply};
use serde_json::{Value, json};

/// A log writer appending to a shared buffer.
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The value of `key` in the line's fields or in any of its spans.
fn field(line: &Value, key: &str) -> Option<String> {
    let spans = line["spans"].as_array().cloned().unwrap_or_default();
    std::iter::once(&line["fields"])
        .chain(spans.iter())
        .find_map(|scope| scope.get(key).and_then(Value::as_str).map(str::to_owned))
}

fn target(line: &Value) -> &str {
    line["target"].as_str().unwrap_or("")
}

fn message(line: &Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

#[tokio::test]
async fn task_lines_carry_task_id_and_recursion_lines_trace_id() {
    let _alone = crate::alone().await;
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buffer);
    let log = LogSettings {
        level: "agentd=debug".to_owned(),
        format: LogFormat::Json,
    };
    agentd::cli::telemetry::init_with_writer(&log, move || Capture(Arc::clone(&sink)));
    let task_id = run_task().await.to_string();
    let text = String::from_utf8_lossy(&buffer.lock().unwrap_or_else(PoisonError::into_inner))
        .into_owned();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let of_task = |l: &Value| field(l, "task_id").as_deref() == Some(task_id.as_str());
    let (Some(first), Some(last)) = (
        lines.iter().position(of_task),
        lines.iter().rposition(of_task),
    ) else {
        panic!("no line carries the task_id:\n{text}");
    };
    for line in &lines[first..=last] {
        check_line(line, &task_id);
    }
    for expected in [
        "LLM call failed, retrying",
        "tool call",
        "MCP tool call failed",
    ] {
        let line = lines
            .iter()
            .find(|l| of_task(l) && message(l) == expected)
            .unwrap_or_else(|| panic!("no '{expected}' line of the task:\n{text}"));
        assert!(field(line, "trace_id").is_some(), "{line}");
        assert_eq!(line["span"]["name"], "recursion", "{line}");
    }
}

/// One task with an LLM retry, a built-in and a failing MCP tool call, then an answer.
async fn run_task() -> uuid::Uuid {
    let env =
        TestEnv::start_with(|s| s.tools.mcp = vec![harness::test_mcp_server("srv", &[])]).await;
    let agent = env.agent(None, Some(&["calculate", "srv__fail"])).await;
    env.fake.script(
        "json-logs",
        vec![
            ModelReply::status(503, "busy"),
            call_tool_reply(vec![
                ("calculate", json!({"expression": "1+1"})),
                ("srv__fail", json!({"message": "boom"})),
            ]),
            answer_reply("2"),
        ],
    );
    let task_id = env.submit(agent, "json-logs").await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    env.stop().await;
    task_id
}

/// Lines of the task's modules carry its task_id; lines of a recursion also its trace_id.
fn check_line(line: &Value, task_id: &str) {
    let in_recursion = [
        "agentd::tools",
        "agentd::llm",
        "agentd::worker::llm_call",
        "agentd::worker::tool_calls",
    ]
    .iter()
    .any(|prefix| target(line).starts_with(prefix));
    let of_task = in_recursion
        || target(line).starts_with("agentd::worker::delivery")
        || target(line).starts_with("agentd::worker::task_run");
    if of_task {
        assert_eq!(field(line, "task_id").as_deref(), Some(task_id), "{line}");
    }
    if in_recursion {
        assert!(field(line, "trace_id").is_some(), "no trace_id: {line}");
    }
}
