//! Submitting over HTTP and following the task over SSE: every event once, in order, the
//! same as stored; resuming with Last-Event-ID or `?after=`; 204 past the end; a cancel
//! over HTTP ending the stream.

use std::time::Duration;

use crate::support::gateway::{Gateway, SseEvent, SseStream, expect_json};
use crate::support::harness::TestEnv;
use agentd::scripted_model::{ModelReply, answer_reply, call_tool_reply, plan_reply};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{assert_gapless_from, script_plan_calc_answer};

/// GET /v1/tasks/{id} of a finished script_plan_calc_answer task.
fn assert_plan_calc_answer_trace(detail: &Value) {
    assert_eq!(detail["task"]["status"], "completed");
    assert_eq!(detail["task"]["answer"], "6*7 = 42");
    assert_eq!(detail["task"]["plan"][0]["status"], "done");
    let actions: Vec<&str> = detail["recursions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action_type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(actions, ["RE_PLAN", "CALL_TOOL", "ANSWER"]);
    assert_eq!(detail["recursions"][0]["abstract"], "fake RE_PLAN");
    let tool = &detail["tool_calls"][0];
    assert_eq!(
        (tool["name"].as_str(), tool["result"].clone()),
        (Some("calculate"), json!(42))
    );
    assert_eq!(tool["trace_id"], detail["recursions"][1]["trace_id"]);
    assert_eq!(detail["llm_calls"].as_array().map(Vec::len), Some(3));
}

#[tokio::test]
async fn submit_over_http_streams_every_event_and_serves_the_trace() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let marker = "gw-submit-stream";
    script_plan_calc_answer(&env, marker, Duration::from_millis(50));

    let body = json!({"agent_id": agent, "input": format!("{marker}: 6*7?"),
                      "constraints": ["be brief"], "stream": false});
    let response = gateway.post("/v1/tasks").json(&body).send().await;
    let response = response.expect("POST /v1/tasks");
    let location = response.headers().get("location").cloned();
    let accepted = expect_json(Ok(response), 202).await;
    let task_id: Uuid = accepted["task_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        location.and_then(|l| l.to_str().ok().map(str::to_owned)),
        Some(format!("/v1/tasks/{task_id}"))
    );
    assert_eq!(
        accepted["events_url"],
        format!("/v1/tasks/{task_id}/events")
    );
    // Readable at once, before or while a worker runs it.
    let early = gateway.get_json(&format!("/v1/tasks/{task_id}"), 200).await;
    assert_eq!(early["task"]["input"], format!("{marker}: 6*7?"));

    let mut stream = gateway.events(task_id, None).await;
    let events = stream.until_terminal().await;
    assert_gapless_from(&events, 1);
    assert_eq!(events.len(), 13, "{events:#?}");
    assert_eq!(
        events.last().and_then(|e| e.event.as_deref()),
        Some("task.completed")
    );
    let streamed: Vec<Value> = events.iter().map(SseEvent::json).collect();
    assert_eq!(
        streamed,
        env.stored_events(task_id).await,
        "SSE data = stored events"
    );

    let detail = gateway.get_json(&format!("/v1/tasks/{task_id}"), 200).await;
    assert_plan_calc_answer_trace(&detail);
    let request = &env.fake.requests_for(marker)[0];
    let state = request.system_state().expect("state snapshot");
    assert_eq!(state["context"]["constraints"], json!(["be brief"]));

    // Replaying a finished task: everything, then the end; past the end: 204.
    let replay = gateway.events(task_id, None).await.until_terminal().await;
    assert_eq!(replay, events);
    let after_end = gateway
        .get(&format!("/v1/tasks/{task_id}/events"))
        .header("Last-Event-ID", "13")
        .send()
        .await
        .unwrap();
    assert_eq!(after_end.status(), 204);
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn reconnecting_with_last_event_id_gets_exactly_the_missing_events() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let marker = "gw-reconnect";
    env.fake.script(
        marker,
        vec![
            plan_reply(&[("1", "compute"), ("2", "answer")]).with_delay(Duration::from_millis(300)),
            call_tool_reply(vec![("calculate", json!({"expression": "2+2"}))])
                .with_delay(Duration::from_millis(1500)),
            answer_reply("4").with_delay(Duration::from_millis(300)),
        ],
    );
    let task_id = gateway.submit(agent, &format!("{marker}: 2+2")).await;

    let mut first = gateway.events(task_id, None).await;
    let mut head = Vec::new();
    for _ in 0..4 {
        head.push(first.next().await.expect("an event"));
    }
    drop(first);
    assert_gapless_from(&head, 1);

    // The task is still running (the second reply takes 1.5 s): resume mid-stream.
    let mut second = gateway.events(task_id, Some(4)).await;
    let tail = second.until_terminal().await;
    assert_gapless_from(&tail, 5);
    assert!(
        second.comments >= 1,
        "a heartbeat comment during the 1.5 s pause"
    );
    let all: Vec<Value> = head.iter().chain(&tail).map(SseEvent::json).collect();
    assert_eq!(all, env.stored_events(task_id).await);

    // `?after=` does the same for clients that cannot set headers.
    let response = gateway
        .get(&format!("/v1/tasks/{task_id}/events?after=10"))
        .send()
        .await
        .unwrap();
    let from_eleven = SseStream::new(response).until_terminal().await;
    assert_gapless_from(&from_eleven, 11);
    let bad = gateway
        .get(&format!("/v1/tasks/{task_id}/events"))
        .header("Last-Event-ID", "nope");
    let error = expect_json(bad.send().await, 400).await;
    assert_eq!(error["error"]["code"], "invalid_last_event_id");
    let missing = format!("/v1/tasks/{}/events", Uuid::now_v7());
    let error = gateway.get_json(&missing, 404).await;
    assert_eq!(error["error"]["code"], "task_not_found");
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn cancel_over_http_ends_the_stream_with_task_cancelled() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let agent = env.agent(None, None).await;
    let marker = "gw-cancel";
    env.fake.script(
        marker,
        vec![ModelReply::content("slow").with_delay(Duration::from_secs(4))],
    );
    let task_id = gateway.submit(agent, &format!("{marker}: wait")).await;
    let mut stream = gateway.events(task_id, None).await;
    let started = stream.next().await.expect("task.started");
    assert_eq!(started.event.as_deref(), Some("task.started"));
    let answer = gateway
        .post_json(&format!("/v1/tasks/{task_id}/cancel"), &json!({}), 202)
        .await;
    assert_eq!(answer["outcome"], "cancel_sent");
    let rest = stream.until_terminal().await;
    assert_eq!(
        rest.last().and_then(|e| e.event.as_deref()),
        Some("task.cancelled")
    );
    let again = gateway
        .post_json(&format!("/v1/tasks/{task_id}/cancel"), &json!({}), 409)
        .await;
    assert_eq!(again["error"]["code"], "task_finished");
    // A task no worker has taken yet (here: not even published) ends at once.
    let queued = Uuid::now_v7();
    let answer = gateway
        .post_json(&format!("/v1/tasks/{queued}/cancel"), &json!({}), 200)
        .await;
    assert_eq!(answer["outcome"], "cancelled");
    let events = gateway.events(queued, None).await.until_terminal().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event.as_deref(), Some("task.cancelled"));
    gateway.stop().await;
    env.stop().await;
}

/// Stores an event of `task_id` as the worker would, without publishing it.
async fn store_event(env: &TestEnv, task_id: Uuid, seq: i64, kind: &str) -> Value {
    let event = json!({"event_id": Uuid::now_v7(), "task_id": task_id, "agent_id": null,
                       "seq": seq, "type": kind, "trace_id": null, "iteration": 0,
                       "ts": "2026-11-22T00:00:00Z", "data": {"n": seq}});
    sqlx::query(
        "INSERT INTO events (task_id, seq, event_id, type, payload, task_created_at) \
         SELECT $1, $2, $3, $4, $5, created_at FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .bind(seq)
    .bind(Uuid::parse_str(event["event_id"].as_str().unwrap()).unwrap())
    .bind(kind)
    .bind(&event)
    .execute(&env.pool)
    .await
    .unwrap();
    event
}

/// Publishes a stored event to the events exchange (through the generic `publish`: the
/// gateway reads only the body).
async fn publish_event(env: &TestEnv, event: &Value) {
    let properties = lapin::BasicProperties::default()
        .with_content_type("application/json".into())
        .with_type(event["type"].as_str().unwrap_or_default().into());
    env.publisher
        .publish(
            &env.settings.amqp.events_exchange,
            "",
            event.to_string().as_bytes(),
            properties,
        )
        .await
        .unwrap();
}

async fn running_task(env: &TestEnv) -> Uuid {
    let task_id = Uuid::now_v7();
    sqlx::query("INSERT INTO tasks (task_id, input, status) VALUES ($1, 'manual', 'running')")
        .bind(task_id)
        .execute(&env.pool)
        .await
        .unwrap();
    task_id
}

#[tokio::test]
async fn gaps_duplicates_and_unpublished_events_are_filled_from_the_table() {
    let env = TestEnv::start().await;
    let gateway = Gateway::start(&env, &[]).await;
    let task_id = running_task(&env).await;
    let mut stream = gateway.events(task_id, None).await;
    let first = store_event(&env, task_id, 1, "task.started").await;
    store_event(&env, task_id, 2, "recursion.started").await;
    let third = store_event(&env, task_id, 3, "recursion.completed").await;
    // Only seq 3 is published: the stream must fetch 1 and 2 first.
    publish_event(&env, &third).await;
    let head: Vec<SseEvent> = vec![
        stream.next().await.unwrap(),
        stream.next().await.unwrap(),
        stream.next().await.unwrap(),
    ];
    assert_gapless_from(&head, 1);
    // A duplicate is skipped; a terminal event that was stored but never published
    // arrives by the periodic catch-up (every heartbeat, 1 s here).
    publish_event(&env, &first).await;
    let last = store_event(&env, task_id, 4, "task.completed").await;
    let tail = stream.until_terminal().await;
    assert_eq!(tail.len(), 1, "{tail:#?}");
    assert_eq!(tail[0].json(), last);

    // Stopping the gateway ends open streams instead of waiting for them.
    let endless = running_task(&env).await;
    let mut open = gateway.events(endless, None).await;
    gateway.stop().await;
    assert!(
        open.next().await.is_none(),
        "the open stream ends on shutdown"
    );
    env.stop().await;
}
