//! A task run through the real step statement (`store::step`): each step a recursion with a
//! tool result, an LLM attempt recorded in full (a request part), a tool call started for
//! the next recursion (the ledger's upsert), and two events.

use agentd::core::call_record::StoredPart;
use agentd::core::machine::RecursionRecord;
use agentd::core::state::RecursionStatus;
use agentd::core::types::ToolCallResult;
use agentd::store::llm_record::CallRecord;
use agentd::store::step::{self, EventRow, Finish, Progress, StartedCall, StepWrite, Totals};
use agentd::store::tasks::{self, NewTask};
use agentd::store::trace::LlmCallRow;
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

/// A task taken under a lease, created at a chosen time.
pub struct TaskRun {
    pub task_id: Uuid,
    owner: Uuid,
    /// The trace id of each recursion, known ahead so a step can start the next one's call.
    traces: [Uuid; 3],
}

impl TaskRun {
    /// Records and takes a new task whose message arrived at `created` (its created_at).
    pub async fn start(pool: &PgPool, created: DateTime<Utc>) -> Self {
        let agent_id = Uuid::now_v7();
        sqlx::query("INSERT INTO agents (agent_id, name, model) VALUES ($1, 'a', 'm')")
            .bind(agent_id)
            .execute(pool)
            .await
            .expect("agent");
        let task_id = Uuid::now_v7();
        let owner = Uuid::now_v7();
        let task = NewTask {
            task_id,
            agent_id: Some(agent_id),
            conversation_id: None,
            input: Some("across midnight"),
            constraints: &[],
            stream: false,
            reply: None,
            received_at: Some(created),
            tenant_id: None,
            priority: Default::default(),
            rerun: None,
        };
        let intake = tasks::take_new(pool, &task, agent_id, owner, 30.0, None)
            .await
            .expect("take_new")
            .expect("the agent exists");
        assert!(intake.inserted);
        Self {
            task_id,
            owner,
            traces: [Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7()],
        }
    }

    /// Writes recursion `iteration` (1 or 2); `last` ends the task.
    pub async fn step(&self, pool: &PgPool, iteration: u32, last: bool) {
        let index = usize::try_from(iteration).expect("small") - 1;
        let trace_id = self.traces[index];
        let call_id = format!("call_{iteration}");
        let record = RecursionRecord {
            trace_id,
            iteration,
            step_id: Some("1".into()),
            action_type: Some("CALL_TOOL".into()),
            observe: "o".into(),
            thought: "t".into(),
            abstract_: "a".into(),
            output: json!({"action": {"type": "CALL_TOOL"}}),
            status: RecursionStatus::Done,
            error_log: None,
            tool_call_results: vec![ToolCallResult {
                tool_call_id: call_id.clone(),
                name: "calculate".into(),
                arguments: json!({"expression": "1+1"}),
                success: true,
                result: Some(json!(2)),
                error: None,
                memo: None,
                duration_ms: 1,
            }],
            started_at: Utc::now(),
            finished_at: Utc::now(),
        };
        let part = StoredPart {
            id: Uuid::now_v7(),
            content: format!("{{\"part\":{iteration}}}"),
        };
        let next = StartedCall {
            trace_id: self.traces[index + 1],
            tool_call_id: format!("call_{}", iteration + 1),
            name: "calculate".into(),
            arguments: "{}".into(),
            effect: "side_effect",
            idempotency_key: None,
            state: "started",
            approval_expires_at: None,
        };
        let progress = if last {
            Progress::Finish(Finish {
                status: "completed",
                iterations: iteration,
                plan: "[]".into(),
                answer: Some("done".into()),
                error: None,
                fail_reason: None,
            })
        } else {
            Progress::Checkpoint {
                iterations: iteration,
                plan: "[]".into(),
                checkpoint: "{}".into(),
            }
        };
        let write = StepWrite {
            task_id: self.task_id,
            owner: self.owner,
            progress,
            records: vec![record],
            tool_meta: Vec::new(),
            started: if last { Vec::new() } else { vec![next] },
            llm_rows: vec![LlmCallRow {
                task_id: self.task_id,
                trace_id,
                iteration,
                attempt: 1,
                status: "200".into(),
                latency_ms: 3,
                prompt_tokens: Some(1),
                completion_tokens: Some(1),
                error: None,
                model: "m".into(),
                cost_usd: None,
                queued_ms: None,
                started_at: Utc::now(),
                served_from: None,
                record: Some(Box::new(CallRecord {
                    request_sha256: "0".repeat(64),
                    request_key: "1".repeat(64),
                    parts: Some(vec![part.id]),
                    new_parts: vec![part],
                    response: Some("{}".into()),
                })),
            }],
            max_result_chars: 1000,
            confirmed_seq: 0,
            totals: Totals::default(),
        };
        let seq = i64::from(iteration) * 2;
        let ids = [Uuid::now_v7(), Uuid::now_v7()];
        let events = [
            EventRow {
                seq: seq - 1,
                event_id: ids[0],
                event_type: "recursion.started",
                json: "{}",
            },
            EventRow {
                seq,
                event_id: ids[1],
                event_type: "recursion.completed",
                json: "{}",
            },
        ];
        assert!(
            step::write(pool, &write, &events).await.expect("step"),
            "the step is written under the lease"
        );
    }
}
