//! The statement behind [`super::write_many`]: one array per column of every table it
//! writes, each row tagged with its task, joined with the tasks whose fenced `UPDATE`
//! succeeded. Rows of a step whose fence failed are dropped by that join, and every row
//! takes from it its task's `tenant_id` (row-level security, CONTRACT v3 §15) and its
//! partition key `task_created_at`, the task's `created_at` (`store::partitions`), with no
//! column bound and no round trip more.

use std::collections::HashSet;

use sqlx::PgPool;
use uuid::Uuid;

use super::{Progress, Step, ToolMeta};
use crate::core::call_record::StoredPart;
use crate::core::limits::{trim_json, trim_text};
use crate::core::types::ToolCallResult;

/// `$1..$12` and `$61..$65` the tasks, `$13..$25` recursions, `$26..$32` and `$68..$69`
/// started tool calls (and approval requests), `$33..$46` finished tool calls, `$47..$55`
/// and `$66..$67`, `$70..$71`, `$72..$75` LLM attempts (with their record, CONTRACT §12) and
/// `$76..$78` the parts of their requests, `$56..$60` events.
const WRITE_STEPS: &str = "\
WITH v AS (
    SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::int[], $5::text[],
                         $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                         $11::bigint[], $12::bigint[], $61::bigint[], $62::bigint[],
                         $63::float8[], $64::bigint[], $65::text[])
        AS v (task_id, owner, kind, iterations, plan, checkpoint, status, answer, error,
              fail_reason, confirmed, event_seq, prompt_tokens, completion_tokens, cost_usd,
              tool_call_count, wait_reason)
),
task AS (
    UPDATE tasks t SET
        updated_at = now(),
        iterations = CASE WHEN v.kind = 'touch' THEN t.iterations ELSE v.iterations END,
        plan = CASE WHEN v.kind = 'touch' THEN t.plan ELSE v.plan::jsonb END,
        checkpoint = CASE v.kind WHEN 'touch' THEN t.checkpoint WHEN 'finish' THEN NULL
                     ELSE v.checkpoint END,
        status = CASE v.kind WHEN 'finish' THEN v.status WHEN 'wait' THEN 'waiting'
                 ELSE t.status END,
        wait_reason = CASE WHEN v.kind = 'wait' THEN v.wait_reason ELSE t.wait_reason END,
        prompt_tokens = v.prompt_tokens,
        completion_tokens = v.completion_tokens,
        cost_usd = v.cost_usd,
        tool_call_count = v.tool_call_count,
        answer = CASE WHEN v.kind = 'finish' THEN v.answer ELSE t.answer END,
        error = CASE WHEN v.kind = 'finish' THEN v.error ELSE t.error END,
        fail_reason = CASE WHEN v.kind = 'finish' THEN v.fail_reason ELSE t.fail_reason END,
        finished_at = CASE WHEN v.kind = 'finish' THEN now() ELSE t.finished_at END,
        lease_owner = CASE WHEN v.kind IN ('finish', 'wait') THEN NULL ELSE t.lease_owner END,
        lease_until = CASE WHEN v.kind IN ('finish', 'wait') THEN NULL ELSE t.lease_until END,
        event_seq = GREATEST(t.event_seq, v.event_seq),
        confirmed_seq = GREATEST(t.confirmed_seq, v.confirmed),
        outbox_pending = CASE WHEN v.kind IN ('finish', 'wait') THEN true
                         ELSE t.outbox_pending END
    FROM v
    WHERE t.task_id = v.task_id AND t.lease_owner = v.owner AND t.status = 'running'
    RETURNING t.task_id, t.tenant_id, t.created_at AS task_created_at
),
recursion_rows AS (
    INSERT INTO recursions (trace_id, task_id, iteration, step_id, action_type, observe,
                            thought, abstract, output, status, error_log, started_at,
                            finished_at, tenant_id, task_created_at)
    SELECT r.trace_id, r.task_id, r.iteration, r.step_id, r.action_type, r.observe,
           r.thought, r.abstract, r.output::jsonb, r.status, r.error_log, r.started_at,
           r.finished_at, task.tenant_id, task.task_created_at
    FROM UNNEST($13::uuid[], $14::uuid[], $15::int[], $16::text[], $17::text[],
                $18::text[], $19::text[], $20::text[], $21::text[], $22::text[],
                $23::text[], $24::timestamptz[], $25::timestamptz[])
         AS r (task_id, trace_id, iteration, step_id, action_type, observe, thought,
               abstract, output, status, error_log, started_at, finished_at)
    JOIN task USING (task_id)
),
started_rows AS (
    INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, state, effect,
                            idempotency_key, started_at, tenant_id, task_created_at)
    SELECT s.task_id, s.trace_id, s.tool_call_id, s.name, s.arguments::jsonb, s.state,
           s.effect, s.idempotency_key, now(), task.tenant_id, task.task_created_at
    FROM UNNEST($26::uuid[], $27::uuid[], $28::text[], $29::text[], $30::text[],
                $31::text[], $32::text[], $68::text[]) WITH ORDINALITY
         AS s (task_id, trace_id, tool_call_id, name, arguments, effect, idempotency_key,
               state, ord)
    JOIN task USING (task_id)
    ORDER BY s.ord
    -- A call that waited for its approval starts now, with the arguments it runs with; a
    -- call cut short is held (`unknown`, CONTRACT §14) or, resolved `retry`, starts again.
    ON CONFLICT (trace_id, tool_call_id, task_created_at) DO UPDATE SET
        state = EXCLUDED.state, arguments = EXCLUDED.arguments,
        started_at = CASE WHEN tool_calls.state = 'awaiting_approval'
                          THEN EXCLUDED.started_at ELSE tool_calls.started_at END
        WHERE tool_calls.state IN ('awaiting_approval', 'started', 'unknown')
          AND tool_calls.success IS NULL
),
approval_rows AS (
    INSERT INTO approvals (task_id, tool_call_id, trace_id, name, arguments, effect,
                           expires_at, tenant_id)
    SELECT a.task_id, a.tool_call_id, a.trace_id, a.name, a.arguments::jsonb, a.effect,
           a.expires_at, task.tenant_id
    FROM UNNEST($26::uuid[], $27::uuid[], $28::text[], $29::text[], $30::text[],
                $31::text[], $69::timestamptz[])
         AS a (task_id, trace_id, tool_call_id, name, arguments, effect, expires_at)
    JOIN task USING (task_id)
    WHERE a.expires_at IS NOT NULL
    ON CONFLICT (task_id, tool_call_id) DO NOTHING
),
tool_call_rows AS (
    INSERT INTO tool_calls (task_id, trace_id, tool_call_id, name, arguments, success, result,
                            error, duration_ms, state, effect, idempotency_key, started_at,
                            finished_at, tenant_id, task_created_at)
    SELECT c.task_id, c.trace_id, c.tool_call_id, c.name, c.arguments::jsonb, c.success,
           c.result::jsonb, c.error, c.duration_ms,
           COALESCE(c.state, CASE WHEN c.success THEN 'succeeded' ELSE 'failed' END),
           c.effect, c.idempotency_key, c.started_at, COALESCE(c.finished_at, now()),
           task.tenant_id, task.task_created_at
    FROM UNNEST($33::uuid[], $34::uuid[], $35::text[], $36::text[], $37::text[],
                $38::bool[], $39::text[], $40::text[], $41::bigint[], $42::text[],
                $43::text[], $44::text[], $45::timestamptz[], $46::timestamptz[])
         WITH ORDINALITY
         AS c (task_id, trace_id, tool_call_id, name, arguments, success, result, error,
               duration_ms, state, effect, idempotency_key, started_at, finished_at, ord)
    JOIN task USING (task_id)
    ORDER BY c.ord
    ON CONFLICT (trace_id, tool_call_id, task_created_at) DO UPDATE SET
        success = EXCLUDED.success, result = EXCLUDED.result, error = EXCLUDED.error,
        duration_ms = EXCLUDED.duration_ms, state = EXCLUDED.state,
        finished_at = EXCLUDED.finished_at, arguments = EXCLUDED.arguments,
        -- When it ran (a call that waited for its approval was recorded before it ran).
        started_at = COALESCE(EXCLUDED.started_at, tool_calls.started_at)
),
llm_call_rows AS (
    INSERT INTO llm_calls (task_id, trace_id, iteration, attempt, status, latency_ms,
                           prompt_tokens, completion_tokens, error, model, cost_usd, queued_ms,
                           started_at, request_sha256, request_key, request_parts, response,
                           tenant_id, task_created_at, served_from)
    SELECT l.task_id, l.trace_id, l.iteration, l.attempt, l.status, l.latency_ms,
           l.prompt_tokens, l.completion_tokens, l.error, l.model, l.cost_usd, l.queued_ms,
           l.started_at, l.request_sha256, l.request_key, l.request_parts::uuid[],
           l.response::jsonb, task.tenant_id, task.task_created_at, l.served_from
    FROM UNNEST($47::uuid[], $48::uuid[], $49::int[], $50::int[], $51::text[],
                $52::bigint[], $53::bigint[], $54::bigint[], $55::text[], $66::text[],
                $67::float8[], $70::bigint[], $71::timestamptz[], $72::text[], $73::text[],
                $74::text[], $75::text[], $79::text[]) WITH ORDINALITY
         AS l (task_id, trace_id, iteration, attempt, status, latency_ms, prompt_tokens,
               completion_tokens, error, model, cost_usd, queued_ms, started_at,
               request_sha256, request_key, request_parts, response, served_from, ord)
    JOIN task USING (task_id)
    ORDER BY l.ord
),
llm_part_rows AS (
    INSERT INTO llm_request_parts (task_id, part_id, content, tenant_id, task_created_at)
    SELECT p.task_id, p.part_id, p.content, task.tenant_id, task.task_created_at
    FROM UNNEST($76::uuid[], $77::uuid[], $78::text[]) AS p (task_id, part_id, content)
    JOIN task USING (task_id)
    ON CONFLICT (task_id, part_id, task_created_at) DO NOTHING
),
event_rows AS (
    INSERT INTO events (task_id, seq, event_id, type, payload, tenant_id, task_created_at)
    SELECT e.task_id, e.seq, e.event_id, e.type, e.payload::jsonb, task.tenant_id,
           task.task_created_at
    FROM UNNEST($56::uuid[], $57::bigint[], $58::uuid[], $59::text[], $60::text[])
         AS e (task_id, seq, event_id, type, payload)
    JOIN task USING (task_id)
)
SELECT task_id FROM task";

fn int(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

fn bigint(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The task columns of the statement, one entry per step.
#[derive(Default)]
struct Tasks<'a> {
    task_id: Vec<Uuid>,
    owner: Vec<Uuid>,
    kind: Vec<&'static str>,
    iterations: Vec<i32>,
    plan: Vec<Option<&'a str>>,
    checkpoint: Vec<Option<&'a str>>,
    status: Vec<Option<&'static str>>,
    answer: Vec<Option<&'a str>>,
    error: Vec<Option<&'a str>>,
    fail_reason: Vec<Option<&'static str>>,
    confirmed: Vec<i64>,
    event_seq: Vec<i64>,
    prompt_tokens: Vec<i64>,
    completion_tokens: Vec<i64>,
    cost_usd: Vec<Option<f64>>,
    tool_calls: Vec<i64>,
    wait_reason: Vec<Option<&'static str>>,
}

impl<'a> Tasks<'a> {
    fn push(&mut self, step: &Step<'a>) {
        let write = step.write;
        let mut wait_reason = None;
        let (kind, iterations, plan, checkpoint, finish) = match &write.progress {
            Progress::Touch => ("touch", 0, None, None, None),
            Progress::Wait {
                iterations,
                plan,
                checkpoint,
                reason,
            } => {
                wait_reason = Some(*reason);
                (
                    "wait",
                    *iterations,
                    Some(plan.as_str()),
                    Some(checkpoint.as_str()),
                    None,
                )
            }
            Progress::Checkpoint {
                iterations,
                plan,
                checkpoint,
            } => (
                "checkpoint",
                *iterations,
                Some(plan.as_str()),
                Some(checkpoint.as_str()),
                None,
            ),
            Progress::Finish(end) => (
                "finish",
                end.iterations,
                Some(end.plan.as_str()),
                None,
                Some(end),
            ),
        };
        self.task_id.push(write.task_id);
        self.owner.push(write.owner);
        self.kind.push(kind);
        self.iterations.push(int(iterations));
        self.plan.push(plan);
        self.checkpoint.push(checkpoint);
        self.status.push(finish.map(|f| f.status));
        self.answer.push(finish.and_then(|f| f.answer.as_deref()));
        self.error.push(finish.and_then(|f| f.error.as_deref()));
        self.fail_reason.push(finish.and_then(|f| f.fail_reason));
        self.confirmed.push(write.confirmed_seq);
        self.event_seq
            .push(step.events.iter().map(|e| e.seq).max().unwrap_or(0));
        let totals = write.totals;
        self.prompt_tokens.push(bigint(totals.prompt_tokens));
        self.completion_tokens
            .push(bigint(totals.completion_tokens));
        self.cost_usd.push(totals.cost_usd);
        self.tool_calls.push(bigint(totals.tool_calls));
        self.wait_reason.push(wait_reason);
    }
}

/// One finished tool call with its task, recursion and ledger fields.
struct FinishedCall<'a> {
    task_id: Uuid,
    trace_id: Uuid,
    result: &'a ToolCallResult,
    meta: Option<&'a ToolMeta>,
    max_chars: usize,
}

fn finished_calls<'a>(steps: &[Step<'a>]) -> Vec<FinishedCall<'a>> {
    let mut calls = Vec::new();
    for step in steps {
        let write = step.write;
        let results = write
            .records
            .iter()
            .flat_map(|r| r.tool_call_results.iter().map(move |c| (r.trace_id, c)));
        for (index, (trace_id, result)) in results.enumerate() {
            calls.push(FinishedCall {
                task_id: write.task_id,
                trace_id,
                result,
                meta: write.tool_meta.get(index),
                max_chars: write.max_result_chars,
            });
        }
    }
    calls
}

/// Every item of every step, with the step's write.
fn rows<'a, T: 'a>(
    steps: &[Step<'a>],
    items: impl Fn(&'a super::StepWrite) -> &'a [T],
) -> Vec<(&'a super::StepWrite, &'a T)> {
    steps
        .iter()
        .flat_map(|s| items(s.write).iter().map(move |item| (s.write, item)))
        .collect()
}

/// A uuid[] literal, bound as text: the request parts of each attempt differ in number,
/// which a two-dimensional array cannot hold.
fn uuid_array(ids: &[Uuid]) -> String {
    let mut out = String::with_capacity(ids.len() * 37 + 2);
    out.push('{');
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&id.hyphenated().to_string());
    }
    out.push('}');
    out
}

fn column<'a, T, U>(items: &'a [T], field: impl Fn(&'a T) -> U) -> Vec<U> {
    items.iter().map(field).collect()
}

pub(super) async fn execute(pool: &PgPool, steps: &[Step<'_>]) -> sqlx::Result<HashSet<Uuid>> {
    let mut tasks = Tasks::default();
    steps.iter().for_each(|step| tasks.push(step));
    let records = rows(steps, |w| &w.records);
    let started = rows(steps, |w| &w.started);
    let llm = rows(steps, |w| &w.llm_rows);
    let calls = finished_calls(steps);
    let parts: Vec<(&super::StepWrite, &StoredPart)> = llm
        .iter()
        .flat_map(|(w, l)| {
            let parts = l.record.as_ref().map_or(&[][..], |r| &r.new_parts[..]);
            parts.iter().map(move |p| (*w, p))
        })
        .collect();
    let events: Vec<(Uuid, &super::EventRow<'_>)> = steps
        .iter()
        .flat_map(|s| s.events.iter().map(move |e| (s.write.task_id, e)))
        .collect();
    let written: Vec<Uuid> = sqlx::query_scalar(WRITE_STEPS)
        .bind(&tasks.task_id)
        .bind(&tasks.owner)
        .bind(&tasks.kind)
        .bind(&tasks.iterations)
        .bind(&tasks.plan)
        .bind(&tasks.checkpoint)
        .bind(&tasks.status)
        .bind(&tasks.answer)
        .bind(&tasks.error)
        .bind(&tasks.fail_reason)
        .bind(&tasks.confirmed)
        .bind(&tasks.event_seq)
        // recursions
        .bind(column(&records, |(w, _)| w.task_id))
        .bind(column(&records, |(_, r)| r.trace_id))
        .bind(column(&records, |(_, r)| int(r.iteration)))
        .bind(column(&records, |(_, r)| r.step_id.as_deref()))
        .bind(column(&records, |(_, r)| r.action_type.as_deref()))
        .bind(column(&records, |(_, r)| r.observe.as_str()))
        .bind(column(&records, |(_, r)| r.thought.as_str()))
        .bind(column(&records, |(_, r)| r.abstract_.as_str()))
        .bind(column(&records, |(_, r)| r.output.to_string()))
        .bind(column(&records, |(_, r)| r.status.as_str()))
        .bind(column(&records, |(_, r)| r.error_log.as_deref()))
        .bind(column(&records, |(_, r)| r.started_at))
        .bind(column(&records, |(_, r)| r.finished_at))
        // started tool calls
        .bind(column(&started, |(w, _)| w.task_id))
        .bind(column(&started, |(_, s)| s.trace_id))
        .bind(column(&started, |(_, s)| s.tool_call_id.as_str()))
        .bind(column(&started, |(_, s)| s.name.as_str()))
        .bind(column(&started, |(_, s)| s.arguments.as_str()))
        .bind(column(&started, |(_, s)| s.effect))
        .bind(column(&started, |(_, s)| s.idempotency_key.as_deref()))
        // finished tool calls
        .bind(column(&calls, |c| c.task_id))
        .bind(column(&calls, |c| c.trace_id))
        .bind(column(&calls, |c| c.result.tool_call_id.as_str()))
        .bind(column(&calls, |c| c.result.name.as_str()))
        .bind(column(&calls, |c| {
            trim_json(&c.result.arguments, c.max_chars).to_string()
        }))
        .bind(column(&calls, |c| c.result.success))
        .bind(column(&calls, |c| {
            let value = c.result.result.as_ref();
            value.map(|v| trim_json(v, c.max_chars).to_string())
        }))
        .bind(column(&calls, |c| {
            let error = c.result.error.as_deref();
            error.map(|e| trim_text(e, c.max_chars))
        }))
        .bind(column(&calls, |c| bigint(c.result.duration_ms)))
        .bind(column(&calls, |c| c.meta.map(|m| m.state)))
        .bind(column(&calls, |c| c.meta.map(|m| m.effect)))
        .bind(column(&calls, |c| {
            c.meta.and_then(|m| m.idempotency_key.as_deref())
        }))
        .bind(column(&calls, |c| c.meta.map(|m| m.started_at)))
        .bind(column(&calls, |c| c.meta.map(|m| m.finished_at)))
        // LLM attempts
        .bind(column(&llm, |(w, _)| w.task_id))
        .bind(column(&llm, |(_, l)| l.trace_id))
        .bind(column(&llm, |(_, l)| int(l.iteration)))
        .bind(column(&llm, |(_, l)| int(l.attempt)))
        .bind(column(&llm, |(_, l)| l.status.as_str()))
        .bind(column(&llm, |(_, l)| bigint(l.latency_ms)))
        .bind(column(&llm, |(_, l)| l.prompt_tokens))
        .bind(column(&llm, |(_, l)| l.completion_tokens))
        .bind(column(&llm, |(_, l)| l.error.as_deref()))
        // events
        .bind(column(&events, |(task_id, _)| *task_id))
        .bind(column(&events, |(_, e)| e.seq))
        .bind(column(&events, |(_, e)| e.event_id))
        .bind(column(&events, |(_, e)| e.event_type))
        .bind(column(&events, |(_, e)| e.json))
        // the tasks' spending and wait reasons
        .bind(&tasks.prompt_tokens)
        .bind(&tasks.completion_tokens)
        .bind(&tasks.cost_usd)
        .bind(&tasks.tool_calls)
        .bind(&tasks.wait_reason)
        // the LLM attempts' models and costs
        .bind(column(&llm, |(_, l)| l.model.as_str()))
        .bind(column(&llm, |(_, l)| l.cost_usd))
        // the started calls' states, and the approval requests' expiries
        .bind(column(&started, |(_, s)| s.state))
        .bind(column(&started, |(_, s)| s.approval_expires_at))
        // the LLM attempts' waits for a rate limit
        .bind(column(&llm, |(_, l)| l.queued_ms.map(bigint)))
        .bind(column(&llm, |(_, l)| l.started_at))
        // the LLM attempts' records and the parts of their requests
        .bind(column(&llm, |(_, l)| {
            l.record.as_ref().map(|r| r.request_sha256.as_str())
        }))
        .bind(column(&llm, |(_, l)| {
            l.record.as_ref().map(|r| r.request_key.as_str())
        }))
        .bind(column(&llm, |(_, l)| {
            let parts = l.record.as_ref().and_then(|r| r.parts.as_deref());
            parts.map(uuid_array)
        }))
        .bind(column(&llm, |(_, l)| {
            l.record.as_ref().and_then(|r| r.response.as_deref())
        }))
        .bind(column(&parts, |(w, _)| w.task_id))
        .bind(column(&parts, |(_, p)| p.id))
        .bind(column(&parts, |(_, p)| p.content.as_str()))
        // the LLM attempts answered from a rerun's record
        .bind(column(&llm, |(_, l)| l.served_from))
        .fetch_all(pool)
        .await?;
    Ok(written.into_iter().collect())
}
