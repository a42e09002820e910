//! Criterion micro-benchmarks of the pure core, at recursion 1 and 30 of a task, so that a
//! regression in the per-recursion CPU cost shows up without RabbitMQ or PostgreSQL:
//!
//! - `snapshot/render`: the state snapshot rendered into the shipped system prompt and the
//!   message layout (what every LLM call starts with, compaction check included);
//! - `reply/parse`: one model reply (seed-002 JSON plus a native tool call) parsed;
//! - `reply/apply`: the whole machine step for that reply (parse, close the recursion,
//!   history, events);
//! - `checkpoint/to_value`: the machine serialized as the driver checkpoints it;
//! - `record/request_key`: the canonical key of the recursion's request (CONTRACT v3 §12),
//!   what `llm.record = hash | full` adds to every model call besides the SHA-256 of the
//!   bytes sent (`record/request_sha256`, over the request's JSON text);
//!   `record/request_key_kept_head` the same key as a worker makes it for a task's later
//!   requests (the hash state after the input and the template's head kept).
//!
//! Run with `cargo bench --bench core` (add `-- --quick` for a fast pass).

use std::hint::black_box;

use chrono::{DateTime, TimeZone, Utc};
use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;
use uuid::Uuid;

use agentd::core::action::parse_reply;
use agentd::core::limits::Limits;
use agentd::core::machine::{Machine, Next, TaskInfo};
use agentd::core::outcome::LlmCall;
use agentd::core::prompt::PromptTemplate;
use agentd::core::request_key::{KeyHead, request_key, request_key_with, sha256_hex};
use agentd::core::types::{LlmReply, ToolCallRequest, ToolCallResult, ToolSpec};

/// The recursions the benchmarks look at.
const ITERATIONS: [u32; 2] = [1, 30];

fn at(second: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, second % 60)
        .single()
        .unwrap_or_default()
}

fn template() -> PromptTemplate {
    let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/system.md"));
    PromptTemplate::new(text).expect("the shipped prompt template is valid")
}

fn task() -> TaskInfo {
    TaskInfo {
        task_id: Uuid::from_u128(1),
        agent_id: Uuid::from_u128(2),
        objective: "Add the numbers 1 to 40 one at a time with the calculate tool.".into(),
        constraints: vec!["use the calculate tool".into()],
        max_iteration: 40,
        created_at: at(0),
        limits: Limits::default(),
        conversation: Vec::new(),
        budget: None,
        stall: Default::default(),
    }
}

/// The reply a model would give at recursion `n`: a plan first, then CALL_TOOL.
fn reply(n: u32) -> LlmReply {
    if n == 1 {
        let plan: Vec<_> = (1..=3)
            .map(|i| json!({"step_id": i.to_string(), "description": format!("add batch {i}")}))
            .collect();
        let content = json!({"observe": "a new task", "thought": "plan it first",
            "action": {"action_type": "RE_PLAN", "output": {"plan": plan}},
            "abstract": "planned three batches"});
        return LlmReply {
            content: content.to_string(),
            ..LlmReply::default()
        };
    }
    let content = json!({"observe": format!("the running sum after {} additions", n - 2),
        "thought": "add the next number", "action": {"action_type": "CALL_TOOL", "output": {}},
        "abstract": format!("adding {n}"), "short_term_memory_append": format!("sum step {n}")});
    LlmReply {
        content: content.to_string(),
        tool_calls: vec![ToolCallRequest {
            id: format!("call_{n}"),
            name: "calculate".into(),
            arguments: json!({"expression": format!("{}+{n}", n * 10)}).to_string(),
        }],
        ..LlmReply::default()
    }
}

fn tool_result(call: &ToolCallRequest) -> ToolCallResult {
    ToolCallResult {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: serde_json::from_str(&call.arguments).unwrap_or_default(),
        success: true,
        result: Some(json!({"value": 42})),
        error: None,
        memo: None,
        duration_ms: 0,
    }
}

/// A machine whose recursion `n` is open and waiting for the LLM reply: recursion 1 made
/// a plan, every later one called `calculate`.
fn machine_at(n: u32, template: &PromptTemplate) -> Machine {
    let mut machine = Machine::new(task());
    for i in 1..=n {
        let next = machine.begin_recursion(Uuid::from_u128(u128::from(i) + 100), at(i), template);
        assert!(
            matches!(next, Next::CallLlm(_)),
            "recursion {i} did not start"
        );
        if i == n {
            break;
        }
        if let Next::RunTools(calls) = machine.on_llm_reply(&reply(i), at(i)) {
            let results = calls.iter().map(tool_result).collect();
            machine.on_tool_results(results, at(i));
        }
        machine.take_events();
    }
    machine.take_events();
    machine
}

fn snapshot(c: &mut Criterion) {
    let template = template();
    let mut group = c.benchmark_group("snapshot");
    for n in ITERATIONS {
        let machine = machine_at(n, &template);
        group.bench_with_input(BenchmarkId::new("render", n), &n, |b, _| {
            b.iter_batched(
                || machine.clone(),
                |mut m| black_box(m.resume(at(59), &template)),
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn replies(c: &mut Criterion) {
    let template = template();
    let mut group = c.benchmark_group("reply");
    for n in ITERATIONS {
        let reply = reply(n);
        group.bench_with_input(BenchmarkId::new("parse", n), &reply, |b, reply| {
            b.iter(|| black_box(parse_reply(black_box(reply))));
        });
        let machine = machine_at(n, &template);
        group.bench_with_input(BenchmarkId::new("apply", n), &reply, |b, reply| {
            b.iter_batched(
                || machine.clone(),
                |mut m| {
                    let next = m.on_llm_reply(reply, at(59));
                    black_box((next, m.take_events()))
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn checkpoint(c: &mut Criterion) {
    let template = template();
    let mut group = c.benchmark_group("checkpoint");
    for n in ITERATIONS {
        let machine = machine_at(n, &template);
        group.bench_with_input(BenchmarkId::new("to_value", n), &machine, |b, machine| {
            b.iter(|| black_box(serde_json::to_value(black_box(machine))));
        });
    }
    group.finish();
}

/// The `calculate` tool as the scripted loads offer it.
fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "calculate".into(),
        description: "Evaluates an arithmetic expression.".into(),
        parameters: json!({"type": "object", "required": ["expression"],
            "properties": {"expression": {"type": "string"}}}),
    }]
}

fn record(c: &mut Criterion) {
    let template = template();
    let tools = tools();
    let mut group = c.benchmark_group("record");
    for n in ITERATIONS {
        let Next::CallLlm(LlmCall { messages, .. }) =
            machine_at(n, &template).resume(at(59), &template)
        else {
            panic!("recursion {n} does not call the model");
        };
        group.bench_with_input(
            BenchmarkId::new("request_key", n),
            &messages,
            |b, messages| {
                b.iter(|| black_box(request_key("bench-model", black_box(messages), &tools)));
            },
        );
        let mut head = KeyHead::default();
        request_key_with(&mut head, "bench-model", &messages, &tools);
        group.bench_with_input(
            BenchmarkId::new("request_key_kept_head", n),
            &messages,
            |b, messages| {
                b.iter(|| {
                    black_box(request_key_with(
                        &mut head,
                        "bench-model",
                        black_box(messages),
                        &tools,
                    ))
                });
            },
        );
        let body: String = messages.iter().map(|m| m.content.to_string()).collect();
        group.bench_with_input(BenchmarkId::new("request_sha256", n), &body, |b, body| {
            b.iter(|| black_box(sha256_hex([black_box(body.as_bytes())])));
        });
    }
    group.finish();
}

criterion_group!(benches, snapshot, replies, checkpoint, record);
criterion_main!(benches);
