//! The gateway (`agentd serve`) end to end: tasks submitted over HTTP run by the real worker
//! against the scripted fake LLM, followed over Server-Sent Events and read back over HTTP
//! (`stream`); auth, errors, agents, pagination, cancel and the OpenAPI document (`api`);
//! the trace page in headless Chromium (`page`); connection, stream and trace bounds
//! (`bounds`); the OpenAPI document checked by schemathesis (`schemathesis`) and against a
//! real task's answers (`documented`).

mod api;
mod bounds;
mod documented;
mod door;
mod page;
mod schemathesis;
mod stream;

use std::time::Duration;

use crate::support::gateway::SseEvent;
use crate::support::harness::TestEnv;
use agentd::scripted_model::{answer_reply, call_tool_reply, plan_reply};
use serde_json::json;

/// Plan (2 steps), calculate 6*7, answer: 13 events.
pub fn script_plan_calc_answer(env: &TestEnv, marker: &str, delay: Duration) {
    env.fake.script(
        marker,
        vec![
            plan_reply(&[("1", "compute 6*7"), ("2", "answer")]).with_delay(delay),
            call_tool_reply(vec![("calculate", json!({"expression": "6*7"}))]).with_delay(delay),
            answer_reply("6*7 = 42").with_delay(delay),
        ],
    );
}

pub fn assert_gapless_from(events: &[SseEvent], first: i64) {
    let ids: Vec<i64> = events.iter().map(SseEvent::seq).collect();
    let expected: Vec<i64> = (first..first + events.len() as i64).collect();
    assert_eq!(ids, expected, "SSE ids are consecutive seqs");
    for event in events {
        let data = event.json();
        assert_eq!(data["seq"], json!(event.seq()), "id is the event's seq");
        assert_eq!(
            event.event.as_deref(),
            data["type"].as_str(),
            "event is the type"
        );
    }
}
