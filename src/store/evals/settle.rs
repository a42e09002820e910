//! Filling the items whose rerun has ended: each is compared with its source
//! (`core::eval::compare`) and takes the rerun's end as its status; a run whose items are
//! all final becomes `completed`. Any worker's sweep, `agentd eval report` and
//! `GET /v1/evals/{id}` run it; the items a pass takes are locked with SKIP LOCKED, so
//! passes running at once never fill one item twice.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::core::eval::{self, Action, TaskFacts, Verdict};

/// Items one pass fills in one transaction.
pub const BATCH: i64 = 200;

#[derive(Debug, sqlx::FromRow)]
struct Ended {
    eval_run_id: Uuid,
    source_task_id: Uuid,
    rerun_task_id: Uuid,
}

#[derive(Debug, sqlx::FromRow)]
struct FactsRow {
    task_id: Uuid,
    status: String,
    answer: Option<String>,
    iterations: i32,
    tokens: i64,
    cost_usd: Option<f64>,
}

#[derive(Debug, sqlx::FromRow)]
struct ActionRow {
    task_id: Uuid,
    iteration: i32,
    action_type: Option<String>,
    calls: Value,
}

/// Fills every item of `run` (of every run when `None`) whose rerun has ended, then marks
/// the runs whose items are all final `completed`. Returns the items filled.
pub async fn settle(pool: &PgPool, run: Option<Uuid>) -> sqlx::Result<u64> {
    let mut filled = 0;
    loop {
        let batch = settle_batch(pool, run).await?;
        filled += batch;
        if batch < BATCH as u64 {
            break;
        }
    }
    complete_runs(pool, run).await?;
    Ok(filled)
}

/// One batch of at most [`BATCH`] items, in one transaction.
async fn settle_batch(pool: &PgPool, run: Option<Uuid>) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    let ended: Vec<Ended> = sqlx::query_as(
        "SELECT i.eval_run_id, i.source_task_id, i.rerun_task_id \
         FROM eval_items i JOIN tasks t ON t.task_id = i.rerun_task_id \
         WHERE i.status IN ('pending', 'published') AND t.status = ANY($1) \
           AND ($2::uuid IS NULL OR i.eval_run_id = $2) \
         LIMIT $3 FOR UPDATE OF i SKIP LOCKED",
    )
    .bind(
        eval::FINAL
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>(),
    )
    .bind(run)
    .bind(BATCH)
    .fetch_all(&mut *tx)
    .await?;
    if ended.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = ended
        .iter()
        .flat_map(|item| [item.source_task_id, item.rerun_task_id])
        .collect();
    let facts = load_facts(&mut tx, &ids).await?;
    for item in &ended {
        // A source pruned meanwhile compares as a task that left nothing.
        let source = facts.get(&item.source_task_id).cloned().unwrap_or_default();
        let rerun = facts.get(&item.rerun_task_id).cloned().unwrap_or_default();
        let verdict = eval::compare(&source, &rerun);
        record(&mut tx, item, &rerun.status, &verdict).await?;
    }
    tx.commit().await?;
    Ok(ended.len() as u64)
}

/// The facts of `ids`' tasks, with their recursions' actions.
async fn load_facts(
    tx: &mut Transaction<'_, Postgres>,
    ids: &[Uuid],
) -> sqlx::Result<HashMap<Uuid, TaskFacts>> {
    let rows: Vec<FactsRow> = sqlx::query_as(
        "SELECT task_id, status, answer, iterations, \
                (prompt_tokens + completion_tokens)::bigint AS tokens, cost_usd \
         FROM tasks WHERE task_id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await?;
    let mut facts: HashMap<Uuid, TaskFacts> = rows
        .into_iter()
        .map(|row| {
            let task = TaskFacts {
                status: row.status,
                answer: row.answer,
                iterations: row.iterations,
                tokens: row.tokens,
                cost_usd: row.cost_usd,
                actions: Vec::new(),
            };
            (row.task_id, task)
        })
        .collect();
    let actions: Vec<ActionRow> = sqlx::query_as(
        "SELECT r.task_id, r.iteration, r.action_type, \
                coalesce((SELECT jsonb_agg(jsonb_build_array(c.name, c.arguments) ORDER BY c.id) \
                          FROM tool_calls c \
                          WHERE c.trace_id = r.trace_id AND c.task_id = r.task_id \
                            AND c.task_created_at = r.task_created_at), \
                         '[]'::jsonb) AS calls \
         FROM recursions r WHERE r.task_id = ANY($1) ORDER BY r.task_id, r.iteration",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await?;
    for row in actions {
        if let Some(task) = facts.get_mut(&row.task_id) {
            task.actions.push(Action {
                iteration: row.iteration,
                action_type: row.action_type,
                calls: calls(row.calls),
            });
        }
    }
    Ok(facts)
}

/// `[[name, arguments], …]` as pairs.
fn calls(value: Value) -> Vec<(String, Value)> {
    let Value::Array(calls) = value else {
        return Vec::new();
    };
    calls
        .into_iter()
        .filter_map(|call| match call {
            Value::Array(mut pair) if pair.len() == 2 => {
                let arguments = pair.pop().unwrap_or(Value::Null);
                let name = pair.pop()?.as_str()?.to_owned();
                Some((name, arguments))
            }
            _ => None,
        })
        .collect()
}

async fn record(
    tx: &mut Transaction<'_, Postgres>,
    item: &Ended,
    status: &str,
    verdict: &Verdict,
) -> sqlx::Result<()> {
    // A rerun row always has one of FINAL here; anything else would break the check.
    let status = if eval::FINAL.contains(&status) {
        status
    } else {
        "failed"
    };
    sqlx::query(
        "UPDATE eval_items SET status = $3, answer_equal = $4, actions_equal = $5, \
                first_divergence_iteration = $6, iterations_delta = $7, tokens_delta = $8, \
                cost_delta_usd = $9, passed = $10, finished_at = now() \
         WHERE eval_run_id = $1 AND source_task_id = $2",
    )
    .bind(item.eval_run_id)
    .bind(item.source_task_id)
    .bind(status)
    .bind(verdict.answer_equal)
    .bind(verdict.actions_equal)
    .bind(verdict.first_divergence_iteration)
    .bind(verdict.iterations_delta)
    .bind(verdict.tokens_delta)
    .bind(verdict.cost_delta_usd)
    .bind(verdict.passed)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Marks `completed` the running runs (of `run`, or all) whose items are all final.
async fn complete_runs(pool: &PgPool, run: Option<Uuid>) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE eval_runs r SET status = 'completed', finished_at = now() \
         WHERE r.status = 'running' AND ($1::uuid IS NULL OR r.eval_run_id = $1) \
           AND NOT EXISTS (SELECT 1 FROM eval_items i WHERE i.eval_run_id = r.eval_run_id \
                           AND i.status IN ('pending', 'published'))",
    )
    .bind(run)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
