//! Budgets and cost (CONTRACT §8) and steering (§2: pause, resume, inject; the gateway's
//! routes and task state) with the real worker, the fake LLM over HTTP, RabbitMQ and
//! PostgreSQL. Every fake reply reports 11 prompt and 7 completion tokens: 18 per LLM call.

use std::time::{Duration, Instant};

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::wait::{self, NEXT_STEP_WITHIN};
use agentd::amqp::control::send_control;
use agentd::contract::ControlMessage;
use agentd::contract::control::{Inject, Pause, Resume};
use agentd::core::budget::{Budget, Price};
use agentd::scripted_model::{answer_reply, call_tool_reply, reflect_reply};
use serde_json::{Value, json};
use uuid::Uuid;

/// How long a paused task is watched for a request it must not make: the test is about
/// nothing happening while it waits, so this is a stretch of time, not an event.
const PAUSED_FOR: Duration = Duration::from_millis(1500);

/// A resumed task's next recursion (one scripted reply, no delay) is answered within this.
const RESUMED_ANSWERS_WITHIN: Duration = Duration::from_secs(2);

/// How often the burst test sends guidance while the task goes from running to waiting.
const INJECT_EVERY: Duration = Duration::from_millis(3);

/// USD per million tokens for the test agent's model: 11 × 1000 + 7 × 2000 = 0.025 $/call.
fn priced(settings: &mut agentd::config::Settings) {
    settings.prices.insert(
        "fake-model".into(),
        Price {
            input_per_mtok: 1000.0,
            output_per_mtok: 2000.0,
        },
    );
}

async fn submit_with_budget(env: &TestEnv, agent: Uuid, input: &str, budget: Value) -> Uuid {
    let task_id = Uuid::now_v7();
    let body = json!({"task_id": task_id, "agent_id": agent, "input": input, "budget": budget});
    env.publish_raw(body.to_string().as_bytes()).await;
    task_id
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

pub(super) async fn control(env: &TestEnv, message: ControlMessage) {
    send_control(&env.publisher, &env.settings.amqp, &message)
        .await
        .expect("control message");
}

#[tokio::test]
async fn a_token_budget_warns_then_asks_for_the_answer_and_cost_is_recorded() {
    let mut env = TestEnv::start_with(priced).await;
    let agent = env.agent(None, None).await;
    let marker = "budget-answer";
    env.fake.script(
        marker,
        vec![
            reflect_reply("one"),
            reflect_reply("two"),
            reflect_reply("three"),
            answer_reply("done within budget"),
        ],
    );
    // 18 tokens per call: 36 of 40 (90 %) before call 3, 54 before call 4.
    let task_id = submit_with_budget(&env, agent, marker, json!({"max_tokens": 40})).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed", "{:?}", types(&events));
    let warnings = of_type(&events, "budget.warning");
    assert_eq!(warnings.len(), 1, "{:?}", types(&events));
    assert_eq!(warnings[0]["iteration"], 3);
    assert_eq!(
        warnings[0]["data"],
        json!({"limit": "tokens", "used": 36.0, "max": 40.0})
    );
    let exceeded = of_type(&events, "budget.exceeded");
    assert_eq!(exceeded.len(), 1);
    assert_eq!(
        exceeded[0]["data"],
        json!({"limit": "tokens", "used": 54.0, "max": 40.0, "action": "answer"})
    );
    // The last request tells the model to answer; the earlier ones show what is used.
    let requests = env.fake.requests_for(marker);
    assert_eq!(requests.len(), 4);
    let budget = |i: usize| requests[i].system_state().expect("state")["global"]["budget"].clone();
    assert_eq!(budget(1)["used"]["tokens"], 18);
    assert_eq!(budget(1)["max"]["tokens"], 40);
    assert!(budget(2).get("exceeded").is_none());
    assert_eq!(budget(3)["exceeded"], true);
    assert_eq!(budget(3)["limit"], "tokens");
    assert!(
        budget(3)["instruction"]
            .as_str()
            .unwrap()
            .contains("ANSWER")
    );
    // Tokens and cost per attempt and summed on the task.
    let (prompt, completion, cost, stored_budget): (i64, i64, Option<f64>, Value) = sqlx::query_as(
        "SELECT prompt_tokens, completion_tokens, cost_usd, budget FROM tasks \
             WHERE task_id = $1",
    )
    .bind(task_id)
    .fetch_one(&env.pool)
    .await
    .expect("task spending");
    assert_eq!((prompt, completion), (44, 28));
    assert!((cost.expect("priced") - 0.1).abs() < 1e-9, "{cost:?}");
    assert_eq!(stored_budget["max_tokens"], 40);
    let rows: Vec<(String, Option<f64>)> = sqlx::query_as(
        "SELECT model, cost_usd FROM llm_calls WHERE task_id = $1 ORDER BY iteration",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("llm_calls");
    assert_eq!(rows.len(), 4);
    for (model, cost) in rows {
        assert_eq!(model, "fake-model");
        assert!((cost.expect("priced") - 0.025).abs() < 1e-9);
    }
    env.stop().await;
}

#[tokio::test]
async fn a_fail_breach_ends_the_task_without_another_llm_call() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "budget-fail";
    env.fake.script(
        marker,
        vec![reflect_reply("a"), reflect_reply("b"), reflect_reply("c")],
    );
    let budget = json!({"max_tokens": 20, "on_breach": "fail"});
    let task_id = submit_with_budget(&env, agent, marker, budget).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "failed");
    assert_eq!(task.fail_reason.as_deref(), Some("budget"));
    let failed = events.last().unwrap();
    assert_eq!(failed["data"]["reason"], "budget");
    assert_eq!(
        failed["data"]["partial"], "b",
        "the last REFLECT is the partial"
    );
    assert_eq!(
        env.fake.requests_for(marker).len(),
        2,
        "no call past the limit"
    );
    assert_eq!(
        of_type(&events, "budget.exceeded")[0]["data"]["action"],
        "fail"
    );
    // Without a price the cost is unknown (null), the tokens are still summed.
    let (tokens, cost): (i64, Option<f64>) = sqlx::query_as(
        "SELECT prompt_tokens + completion_tokens, cost_usd FROM tasks WHERE task_id = $1",
    )
    .bind(task_id)
    .fetch_one(&env.pool)
    .await
    .expect("spending");
    assert_eq!((tokens, cost), (36, None));
    env.stop().await;
}

#[tokio::test]
async fn a_tool_call_past_max_tool_calls_is_not_run_and_the_agent_budget_applies() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    sqlx::query("UPDATE agents SET budget = $2 WHERE agent_id = $1")
        .bind(agent)
        .bind(json!({"max_tool_calls": 1}))
        .execute(&env.pool)
        .await
        .expect("agent budget");
    let marker = "budget-tools";
    env.fake.script(
        marker,
        vec![
            call_tool_reply(vec![
                ("calculate", json!({"expression": "1+1"})),
                ("calculate", json!({"expression": "2+2"})),
            ]),
            answer_reply("2"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    let events = env.published_events(task_id).await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let calls: Vec<(String, bool, Option<String>)> = sqlx::query_as(
        "SELECT tool_call_id, success, error FROM tool_calls WHERE task_id = $1 \
         ORDER BY tool_call_id",
    )
    .bind(task_id)
    .fetch_all(&env.pool)
    .await
    .expect("tool calls");
    assert_eq!(calls.len(), 2);
    assert!(calls[0].1, "the first call ran");
    assert!(!calls[1].1);
    assert!(calls[1].2.as_deref().unwrap().contains("max_tool_calls"));
    let count: i64 = sqlx::query_scalar("SELECT tool_call_count FROM tasks WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("count");
    assert_eq!(count, 1);
    let exceeded = of_type(&events, "budget.exceeded");
    assert_eq!(exceeded[0]["data"]["limit"], "tool_calls");
    env.stop().await;
}

#[tokio::test]
async fn a_cost_limit_without_a_price_is_rejected_at_intake() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "budget-no-price";
    let task_id = submit_with_budget(&env, agent, marker, json!({"max_cost_usd": 1.0})).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "rejected");
    assert!(task.error.as_deref().unwrap().contains("price"), "{task:?}");
    assert_eq!(types(&events), ["task.failed"]);
    assert!(env.fake.requests_for(marker).is_empty());
    // A malformed budget is refused too, naming the problem.
    let bad = submit_with_budget(&env, agent, marker, json!({"max_tokens": -5})).await;
    let task = env.wait_terminal(bad).await;
    assert_eq!(task.status, "rejected");
    assert!(
        task.error.as_deref().unwrap().contains("budget"),
        "{task:?}"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_paused_task_makes_no_llm_request_until_it_is_resumed() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "steer-pause";
    env.fake.script(
        marker,
        vec![
            reflect_reply("first").with_delay(Duration::from_millis(400)),
            answer_reply("after the pause"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_asked(marker, 1).await;
    // Paused while its first LLM call runs: the call is finished and committed first.
    control(&env, ControlMessage::Pause(Pause { task_id })).await;
    env.wait_status(task_id, "waiting").await;
    let (reason, owner, iterations): (Option<String>, Option<Uuid>, i32) =
        sqlx::query_as("SELECT wait_reason, lease_owner, iterations FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("waiting row");
    assert_eq!(
        (reason.as_deref(), owner, iterations),
        (Some("paused"), None, 1)
    );
    tokio::time::sleep(PAUSED_FOR).await;
    assert_eq!(
        env.fake.requests_for(marker).len(),
        1,
        "no request while paused"
    );
    let sent = Instant::now();
    control(
        &env,
        ControlMessage::Resume(Resume {
            task_id,
            budget: None,
        }),
    )
    .await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!(task.answer.as_deref(), Some("after the pause"));
    let waiting = of_type(&events, "task.waiting");
    assert_eq!(waiting[0]["data"]["reason"], "paused");
    let resumed = of_type(&events, "task.resumed");
    assert_eq!(
        resumed[0]["data"],
        json!({"iteration": 1, "reason": "resumed"})
    );
    assert!(
        sent.elapsed() < RESUMED_ANSWERS_WITHIN,
        "resumed and answered in {:?}",
        sent.elapsed()
    );
    // One gapless stream with one terminal event, whatever happened in between.
    let seqs: Vec<i64> = events.iter().filter_map(|e| e["seq"].as_i64()).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    env.stop().await;
}

#[tokio::test]
async fn a_pause_breach_waits_for_a_resume_with_a_larger_budget() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "budget-pause";
    env.fake.script(
        marker,
        vec![
            reflect_reply("a"),
            reflect_reply("b"),
            answer_reply("more budget helped"),
        ],
    );
    let budget = json!({"max_tokens": 30, "on_breach": "pause"});
    let task_id = submit_with_budget(&env, agent, marker, budget).await;
    env.wait_status(task_id, "waiting").await;
    let reason: Option<String> =
        sqlx::query_scalar("SELECT wait_reason FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("reason");
    assert_eq!(reason.as_deref(), Some("budget"));
    assert_eq!(env.fake.requests_for(marker).len(), 2);
    // A resume that brings no more budget leaves it waiting.
    control(
        &env,
        ControlMessage::Resume(Resume {
            task_id,
            budget: None,
        }),
    )
    .await;
    // It is taken up again, finds the budget still spent and waits again, asking nothing.
    wait::until_true("waiting again", NEXT_STEP_WITHIN, || async {
        of_type(&env.stored_events(task_id).await, "task.waiting").len() >= 2
    })
    .await;
    env.wait_status(task_id, "waiting").await;
    assert_eq!(env.fake.requests_for(marker).len(), 2);
    let larger = Budget {
        max_tokens: Some(100),
        ..Budget::default()
    };
    let resume = Resume {
        task_id,
        budget: Some(larger),
    };
    control(&env, ControlMessage::Resume(resume)).await;
    let events = env.published_events(task_id).await;
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    let resumed: Vec<&Value> = of_type(&events, "task.resumed");
    assert_eq!(resumed.last().unwrap()["data"]["reason"], "budget");
    let stored: Value = sqlx::query_scalar("SELECT budget FROM tasks WHERE task_id = $1")
        .bind(task_id)
        .fetch_one(&env.pool)
        .await
        .expect("budget");
    assert_eq!(stored["max_tokens"], 100);
    assert_eq!(
        of_type(&events, "budget.exceeded").len(),
        1,
        "announced once"
    );
    env.stop().await;
}

/// The guidance the request's state snapshot shows.
fn guidance(request: &agentd::scripted_model::ModelRequest) -> Value {
    let state = request.system_state().expect("state");
    state["context"]
        .get("user_guidance")
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn injected_guidance_reaches_the_next_snapshot_running_or_waiting() {
    let mut env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "steer-inject";
    env.fake.script(
        marker,
        vec![
            reflect_reply("first").with_delay(Duration::from_millis(300)),
            reflect_reply("second").with_delay(Duration::from_millis(300)),
            answer_reply("metric it is"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_asked(marker, 1).await;
    // While the first LLM call runs: the second request shows it.
    let text = "answer in metric units";
    let inject = Inject {
        task_id,
        text: text.into(),
    };
    control(&env, ControlMessage::Inject(inject)).await;
    env.wait_asked(marker, 2).await;
    // While it waits (paused after the second call): kept for the worker that resumes it.
    control(&env, ControlMessage::Pause(Pause { task_id })).await;
    env.wait_status(task_id, "waiting").await;
    let later = Inject {
        task_id,
        text: "and be brief".into(),
    };
    control(&env, ControlMessage::Inject(later)).await;
    let what = "the waiting task's guidance stored";
    wait::until_true(what, NEXT_STEP_WITHIN, || async {
        of_type(&env.stored_events(task_id).await, "input.injected").len() >= 2
    })
    .await;
    control(
        &env,
        ControlMessage::Resume(Resume {
            task_id,
            budget: None,
        }),
    )
    .await;
    let events = env.published_events(task_id).await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let requests = env.fake.requests_for(marker);
    assert_eq!(requests.len(), 3);
    assert_eq!(guidance(&requests[0]), Value::Null, "nothing injected yet");
    assert_eq!(guidance(&requests[1]), json!([text]));
    assert_eq!(guidance(&requests[2]), json!([text, "and be brief"]));
    let injected: Vec<&Value> = of_type(&events, "input.injected");
    assert_eq!(injected.len(), 2);
    assert_eq!(injected[0]["data"]["text"], text);
    let order = types(&events);
    let position = |kind: &str| order.iter().position(|t| *t == kind).unwrap();
    assert!(position("task.waiting") < order.iter().rposition(|t| *t == "input.injected").unwrap());
    assert!(order.iter().rposition(|t| *t == "input.injected").unwrap() < position("task.resumed"));
    env.stop().await;
}

#[tokio::test]
async fn the_gateway_pauses_resumes_injects_and_shows_the_task_state() {
    let env = TestEnv::start_with(priced).await;
    let agent = env.agent(None, None).await;
    let gateway = Gateway::start(&env, &["t0ken"]).await;
    let marker = "steer-gateway";
    env.fake.script(
        marker,
        vec![
            reflect_reply("first").with_delay(Duration::from_millis(300)),
            answer_reply("steered"),
        ],
    );
    let budget = json!({"max_tokens": 1000});
    let task_id = submit_with_budget(&env, agent, marker, budget).await;
    env.wait_asked(marker, 1).await;
    let path = |action: &str| format!("/v1/tasks/{task_id}/{action}");
    let sent = gateway.post_json(&path("pause"), &json!({}), 202).await;
    assert_eq!(sent["sent"], "pause");
    env.wait_status(task_id, "waiting").await;
    let injected = gateway
        .post_json(&path("inject"), &json!({"text": "cite sources"}), 202)
        .await;
    assert_eq!(injected["sent"], "inject");
    gateway
        .post_json(&path("inject"), &json!({"text": "  "}), 422)
        .await;
    let state = wait::until("the state shows the guidance", NEXT_STEP_WITHIN, || async {
        let state = gateway.get_json(&path("state"), 200).await;
        (state["user_guidance"] == json!(["cite sources"])).then_some(state)
    })
    .await;
    assert_eq!(state["status"], "waiting");
    assert_eq!(state["wait_reason"], "paused");
    assert_eq!(state["iteration"], 1);
    assert_eq!(state["budget"]["max_tokens"], 1000);
    assert_eq!(state["used"]["prompt_tokens"], 11);
    assert_eq!(state["used"]["completion_tokens"], 7);
    assert!((state["used"]["cost_usd"].as_f64().unwrap() - 0.025).abs() < 1e-9);
    gateway
        .post_json(&path("resume"), &json!({"budget": {"max_tokens": 0}}), 422)
        .await;
    let resumed = gateway.post_json(&path("resume"), &json!({}), 202).await;
    assert_eq!(resumed["sent"], "resume");
    let task = env.wait_terminal(task_id).await;
    assert_eq!(task.status, "completed");
    assert_eq!((task.prompt_tokens, task.completion_tokens), (22, 14));
    gateway.post_json(&path("pause"), &json!({}), 409).await;
    let missing = format!("/v1/tasks/{}/state", Uuid::now_v7());
    gateway.get_json(&missing, 404).await;
    gateway.stop().await;
    env.stop().await;
}

/// Guidance sent while a task goes from running to waiting (the pause is applied, the wait
/// is committed, the run lets go) reaches the task whichever side of that moment it lands
/// on: none is lost, each has its `input.injected` event, the next recursion shows them all.
#[tokio::test]
async fn guidance_sent_while_a_task_pauses_is_never_lost() {
    let env = TestEnv::start().await;
    let agent = env.agent(None, None).await;
    let marker = "steer-inject-burst";
    env.fake.script(
        marker,
        vec![
            reflect_reply("first").with_delay(Duration::from_millis(300)),
            answer_reply("all of it"),
        ],
    );
    let task_id = env.submit(agent, marker).await;
    env.wait_asked(marker, 1).await;
    control(&env, ControlMessage::Pause(Pause { task_id })).await;
    // One inject every few ms from before the LLM call ends until after the wait is stored.
    let status = || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM tasks WHERE task_id = $1")
            .bind(task_id)
            .fetch_one(&env.pool)
            .await
            .expect("status")
    };
    let mut sent: Vec<String> = Vec::new();
    let mut after_wait = 0;
    while after_wait < 10 {
        assert!(sent.len() < 2000, "the task never reached waiting");
        let text = format!("hint {}", sent.len());
        let inject = Inject {
            task_id,
            text: text.clone(),
        };
        control(&env, ControlMessage::Inject(inject)).await;
        sent.push(text);
        if status().await == "waiting" {
            after_wait += 1;
        }
        tokio::time::sleep(INJECT_EVERY).await;
    }
    let what = format!("{} injects stored", sent.len());
    wait::until_true(what, NEXT_STEP_WITHIN, || async {
        of_type(&env.stored_events(task_id).await, "input.injected").len() == sent.len()
    })
    .await;
    control(
        &env,
        ControlMessage::Resume(Resume {
            task_id,
            budget: None,
        }),
    )
    .await;
    assert_eq!(env.wait_terminal(task_id).await.status, "completed");
    let requests = env.fake.requests_for(marker);
    let mut shown: Vec<String> = serde_json::from_value(guidance(&requests[1])).expect("texts");
    shown.sort();
    sent.sort();
    assert_eq!(shown, sent);
    env.stop().await;
}

/// POSTs `body` to `path` expecting 400 `no_price`, the message naming the price.
async fn refused_for_no_price(gateway: &Gateway, path: &str, body: &Value) {
    let refused = gateway.post_json(path, body, 400).await;
    assert_eq!(refused["error"]["code"], "no_price", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("[prices.\"fake-model\"]"), "{message}");
}

/// A cost limit the worker would reject at intake (its model has no price) is refused by
/// the gateway at once, wherever a request brings one: a new task (its own budget or its
/// agent's), a resume with a new budget, a fork of a task that had one.
#[tokio::test]
async fn the_gateway_refuses_a_cost_limit_without_a_price() {
    let mut env = TestEnv::start_with(priced).await;
    let agent = env.agent(None, None).await;
    let marker = "priced-original";
    env.fake
        .script(marker, vec![reflect_reply("look"), answer_reply("priced")]);
    let budget = json!({"max_cost_usd": 10.0});
    let original = submit_with_budget(&env, agent, marker, budget.clone()).await;
    env.published_events(original).await;
    assert_eq!(env.wait_terminal(original).await.status, "completed");
    // The gateway's configuration no longer prices the model.
    let mut unpriced = env.settings.clone();
    unpriced.prices.clear();
    let gateway = Gateway::start_with(unpriced, &[]).await;
    let task = json!({"agent_id": agent, "input": "costly", "budget": budget});
    refused_for_no_price(&gateway, "/v1/tasks", &task).await;
    let fork = format!("/v1/tasks/{original}/fork");
    refused_for_no_price(&gateway, &fork, &json!({"from_iteration": 2})).await;
    let paused = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, status, wait_reason) \
         VALUES ($1, $2, 'paused', 'waiting', 'paused')",
    )
    .bind(paused)
    .bind(agent)
    .execute(&env.pool)
    .await
    .expect("paused task");
    let resume = format!("/v1/tasks/{paused}/resume");
    refused_for_no_price(&gateway, &resume, &json!({"budget": budget})).await;
    sqlx::query("UPDATE agents SET budget = $2 WHERE agent_id = $1")
        .bind(agent)
        .bind(&budget)
        .execute(&env.pool)
        .await
        .expect("agent budget");
    let plain = json!({"agent_id": agent, "input": "costly by default"});
    refused_for_no_price(&gateway, "/v1/tasks", &plain).await;
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&env.pool)
        .await
        .expect("count");
    assert_eq!(tasks, 2, "nothing was recorded or published");
    // Priced, the same requests are taken.
    env.fake.script("costly", vec![answer_reply("taken")]);
    let priced_gateway = Gateway::start(&env, &[]).await;
    let accepted = priced_gateway.post_json("/v1/tasks", &task, 202).await;
    let taken = accepted["task_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(env.wait_terminal(taken).await.status, "completed");
    priced_gateway.stop().await;
    gateway.stop().await;
    env.stop().await;
}
