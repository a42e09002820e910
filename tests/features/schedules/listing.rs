//! Listing tasks across agents (CONTRACT v3 §14 "Listing"): `GET /v1/tasks` newest first
//! with status, agent and age filters, a cursor that pages through every task exactly once
//! while new tasks arrive, and a 400 for what it cannot read; `agentd tasks` as a table and
//! as JSON lines.

use std::collections::HashSet;
use std::path::Path;

use crate::support::gateway::Gateway;
use crate::support::harness::TestEnv;
use crate::support::process::env_for;
use chrono::{TimeDelta, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::faces::assert_documented;

/// A task the test made: id, agent, status, minutes since it was created.
type Made = (Uuid, Uuid, &'static str, i64);

/// Inserts a task of `agent` with `status`, created `minutes_ago`.
async fn task(env: &TestEnv, agent: Uuid, status: &str, minutes_ago: i64) -> Uuid {
    let task_id = Uuid::now_v7();
    let created = Utc::now() - TimeDelta::minutes(minutes_ago);
    sqlx::query(
        "INSERT INTO tasks (task_id, agent_id, input, status, created_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(task_id)
    .bind(agent)
    .bind(format!("{status} task, {minutes_ago} min ago"))
    .bind(status)
    .bind(created)
    .execute(&env.pool)
    .await
    .expect("insert task");
    task_id
}

fn ids(page: &Value) -> Vec<Uuid> {
    page["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn the_api_lists_tasks_newest_first_with_filters_and_a_stable_cursor() {
    let env = TestEnv::without_worker(|_| {}).await;
    let gateway = Gateway::start(&env, &[]).await;
    let doc = gateway.get_json("/openapi.json", 200).await;
    let (a, b) = (env.agent(None, None).await, env.agent(None, None).await);
    let mut made: Vec<Made> = Vec::new();
    for (i, status) in [
        "completed",
        "failed",
        "rejected",
        "failed",
        "waiting",
        "completed",
        "failed",
    ]
    .into_iter()
    .enumerate()
    {
        let agent = if i % 2 == 0 { a } else { b };
        let minutes_ago = 10 * (i as i64 + 1);
        made.push((
            task(&env, agent, status, minutes_ago).await,
            agent,
            status,
            minutes_ago,
        ));
    }
    let newest_first: Vec<Uuid> = made.iter().map(|m| m.0).collect();

    let all = gateway.get_json("/v1/tasks", 200).await;
    assert_documented(&doc, "TaskList", &all);
    assert_eq!(ids(&all), newest_first);
    assert_eq!(all["next_cursor"], Value::Null);

    let expect = |keep: &dyn Fn(&Made) -> bool| -> Vec<Uuid> {
        made.iter().filter(|m| keep(m)).map(|m| m.0).collect()
    };
    let failed = gateway.get_json("/v1/tasks?status=failed", 200).await;
    assert_eq!(ids(&failed), expect(&|m| m.2 == "failed"));
    let ended_badly = gateway
        .get_json("/v1/tasks?status=failed,rejected", 200)
        .await;
    assert_eq!(
        ids(&ended_badly),
        expect(&|m| matches!(m.2, "failed" | "rejected"))
    );
    let of_b = gateway
        .get_json(&format!("/v1/tasks?agent_id={b}&status=failed"), 200)
        .await;
    assert_eq!(ids(&of_b), expect(&|m| m.1 == b && m.2 == "failed"));
    let recent = gateway.get_json("/v1/tasks?since=35m", 200).await;
    assert_eq!(ids(&recent), expect(&|m| m.3 <= 35));
    let since = (Utc::now() - TimeDelta::minutes(25)).to_rfc3339();
    let recent = gateway
        .get("/v1/tasks")
        .query(&[("since", since.as_str())])
        .send()
        .await
        .expect("request");
    let recent: Value = recent.json().await.expect("json");
    assert_eq!(ids(&recent), expect(&|m| m.3 <= 25));

    // Pages of two, while a newer task arrives between pages: every older task once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/v1/tasks?limit=2&cursor={cursor}"),
            None => "/v1/tasks?limit=2".to_owned(),
        };
        let page = gateway.get_json(&path, 200).await;
        seen.extend(ids(&page));
        if seen.len() == 2 {
            task(&env, a, "pending", 0).await;
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, newest_first, "each task once, newest first");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), seen.len());

    for (query, problem) in [
        ("cursor=nonsense", "cursor: "),
        ("cursor=0000000000000000zz", "cursor: "),
        ("status=done", "status: unknown status \"done\""),
        ("since=yesterday", "since: "),
        ("limit=0", "limit: 0 is out of range"),
        ("limit=501", "limit: 501 is out of range"),
    ] {
        let refused = gateway.get_json(&format!("/v1/tasks?{query}"), 400).await;
        assert_eq!(refused["error"]["code"], "invalid_query", "{query}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(problem), "{query}: {message}");
    }
    gateway.get_json("/v1/tasks?agent_id=not-a-uuid", 400).await;
    gateway.stop().await;
    env.stop().await;
}

#[tokio::test]
async fn agentd_tasks_prints_the_failed_ones() {
    let env = TestEnv::without_worker(|_| {}).await;
    let agent = env.agent(None, None).await;
    let failed = task(&env, agent, "failed", 5).await;
    let completed = task(&env, agent, "completed", 1).await;
    let run = |args: Vec<&str>| {
        let settings = env.settings.clone();
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
                .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
                .envs(env_for(&settings))
                .args(&args)
                .kill_on_drop(true)
                .output()
                .await
                .expect("agentd runs")
        }
    };
    let output = run(vec!["tasks", "--status", "failed"]).await;
    assert!(output.status.success());
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(table.starts_with("task_id"), "{table}");
    assert!(
        table.contains(&failed.to_string()) && table.contains("test-agent"),
        "{table}"
    );
    assert!(!table.contains(&completed.to_string()), "{table}");

    let output = run(vec!["tasks", "--json", "--agent", &agent.to_string()]).await;
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let listed: Vec<&str> = lines
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [completed.to_string(), failed.to_string()]);

    let output = run(vec!["tasks", "--status", "finished"]).await;
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("unknown status \"finished\""), "{err}");
    env.stop().await;
}
