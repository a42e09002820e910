//! The OpenAPI document served at `/openapi.json`. Paths come from the handlers themselves
//! (`#[utoipa::path]`, registered with `utoipa_axum::routes!`, so a route cannot exist
//! without its documentation); this file adds the title, the security schemes and the
//! schemas of the store rows the API returns as they are (`Task`, `Recursion`, `ToolCall`,
//! `LlmCall`, `Agent`), which live in `store/` without utoipa. A unit test keeps those
//! schemas equal to the rows' JSON.
//!
//! [`complete`] then adds to every operation the error answers its extractors can give
//! (a JSON body: 400, 413, 415, 422; a path parameter: 400; a query: 400; a bearer token:
//! 401), so the document never lacks a status the server sends. schemathesis checks it
//! against the running gateway (`tests/faces/gateway/schemathesis.rs`).

use serde_json::Value;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};
use uuid::Uuid;

use super::errors::{ErrorBody, ErrorDetail};

/// The document's fixed parts; `routes::api` adds every path.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentd gateway",
        description = "Submit chat tasks to agentd workers, follow their progress as Server-Sent Events, read their traces, manage agents. Errors are always {\"error\": {\"code\", \"message\"}}."
    ),
    tags(
        (name = "tasks", description = "Submit, follow, inspect and cancel tasks"),
        (name = "agents", description = "Agents and their task history"),
        (name = "schedules", description = "Agents that run on a clock: schedules and their fires"),
        (name = "evals", description = "Evaluation runs: rerun an agent's ended tasks against a version and compare"),
        (name = "meta", description = "Health")
    ),
    components(schemas(Task, Recursion, ToolCall, LlmCall, Agent, ErrorBody, ErrorDetail)),
    modifiers(&SecuritySchemes)
)]
pub struct ApiDoc;

/// Adds `bearer` (Authorization header) and `access_token` (query; event stream only).
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token of gateway.tokens (not needed when none is configured)",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "access_token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "access_token",
                "The bearer token as a query parameter; accepted on the event stream only",
            ))),
        );
    }
}

/// Adds the error answers every operation's extractors can give (see the module doc).
pub fn complete(openapi: &mut utoipa::openapi::OpenApi) {
    for item in openapi.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ];
        for operation in operations.into_iter().flatten() {
            add_standard_errors(operation);
        }
    }
}

fn add_standard_errors(operation: &mut Operation) {
    let params = operation.parameters.as_deref().unwrap_or_default();
    let located = |place: ParameterIn| {
        params
            .iter()
            .any(|p| matches!(p, RefOr::T(p) if p.parameter_in == place))
    };
    let mut errors: Vec<(&str, &str)> = Vec::new();
    if operation.request_body.is_some() {
        errors.extend([
            ("400", "The body is not JSON (invalid_json)"),
            (
                "413",
                "The body is larger than gateway.max_body_bytes (payload_too_large)",
            ),
            (
                "415",
                "The body is not application/json (unsupported_media_type)",
            ),
            (
                "422",
                "The JSON breaks a rule of the body's schema (invalid_body)",
            ),
        ]);
    }
    if located(ParameterIn::Path) {
        errors.push(("400", "A path parameter is malformed (invalid_path)"));
    }
    if located(ParameterIn::Query) {
        errors.push(("400", "The query cannot be read (invalid_query)"));
    }
    if operation.security.as_ref().is_some_and(|s| !s.is_empty()) {
        errors.push((
            "401",
            "Missing, unknown, revoked or expired token (unauthorized)",
        ));
        errors.push((
            "403",
            "The token lacks the scope this route needs (missing_scope, CONTRACT v3 §15)",
        ));
    }
    let responses = &mut operation.responses.responses;
    for (status, description) in errors {
        responses.entry(status.to_owned()).or_insert_with(|| {
            let body = ContentBuilder::new()
                .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "ErrorBody",
                ))))
                .build();
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content("application/json", body)
                    .build(),
            )
        });
    }
}

/// A task row (`store::tasks::TaskRow`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Task {
    task_id: Uuid,
    agent_id: Option<Uuid>,
    conversation_id: Option<Uuid>,
    input: Option<String>,
    /// pending, running, waiting, completed, failed, cancelled or rejected.
    status: String,
    /// Recursions run.
    iterations: i32,
    answer: Option<String>,
    error: Option<String>,
    /// max_iteration, llm_error, rejected, internal, delivery_limit, budget or
    /// approval_expired.
    fail_reason: Option<String>,
    /// The plan steps (step_id, description, status).
    #[schema(value_type = Option<Vec<Object>>)]
    plan: Option<Value>,
    created_at: chrono::DateTime<chrono::Utc>,
    started_at: Option<chrono::DateTime<chrono::Utc>>,
    finished_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Why a waiting task waits (paused, budget, approval, conversation, child, stalled,
    /// unknown_outcome, tenant_limit).
    wait_reason: Option<String>,
    /// Tokens and cost summed over every LLM attempt (cost null without a price).
    prompt_tokens: i64,
    completion_tokens: i64,
    cost_usd: Option<f64>,
    /// Tool calls run.
    tool_call_count: i64,
    /// The task this one was forked or replayed from (`agentd replay`), if any.
    forked_from_task_id: Option<Uuid>,
    /// The recursion it starts from (0 for a replay).
    forked_from_iteration: Option<i32>,
    /// The task that delegated this one, if any, and the root of its tree (its own id for
    /// a task nobody delegated).
    parent_task_id: Option<Uuid>,
    root_task_id: Option<Uuid>,
    /// The schedule whose fire made this task, and that fire's time (null for any other
    /// task).
    schedule_id: Option<Uuid>,
    fire_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The agent version the task is pinned to (CONTRACT §11); null until it starts.
    agent_version: Option<i32>,
    /// The tenant it belongs to: its agent's (CONTRACT v3 §15).
    tenant_id: String,
    /// `high` or `normal`: its place among its tenant's tasks held by `max_running`.
    priority: String,
}

/// One recursion of a task (`store::trace::RecursionRow`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Recursion {
    trace_id: Uuid,
    iteration: i32,
    step_id: Option<String>,
    /// CALL_TOOL, RE_PLAN, REFLECT or ANSWER.
    action_type: Option<String>,
    observe: String,
    thought: String,
    #[schema(rename = "abstract")]
    abstract_: String,
    /// The action's output (any JSON; a string with a truncation marker when longer than
    /// `gateway.max_field_chars`).
    output: Option<Value>,
    /// done or error.
    status: String,
    error_log: Option<String>,
    started_at: chrono::DateTime<chrono::Utc>,
    finished_at: chrono::DateTime<chrono::Utc>,
}

/// One tool call of a recursion (`store::trace::ToolCallRow`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ToolCall {
    trace_id: Uuid,
    tool_call_id: String,
    name: String,
    /// The arguments (any JSON; a string with a truncation marker when longer than
    /// `gateway.max_field_chars`).
    arguments: Option<Value>,
    /// Null while the call runs or when its outcome is unknown.
    success: Option<bool>,
    /// What the tool returned: any JSON value (a number, a string, an object, ...).
    result: Option<Value>,
    error: Option<String>,
    duration_ms: Option<i64>,
    /// started, succeeded, failed, unknown, awaiting_approval or rejected.
    state: Option<String>,
    /// read_only, idempotent or side_effect.
    effect: Option<String>,
    /// `<task_id>:<tool_call_id>` for tools that are not read-only.
    idempotency_key: Option<String>,
    /// When the call started and ended.
    started_at: Option<chrono::DateTime<chrono::Utc>>,
    finished_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// One LLM attempt of a recursion (`store::trace::LlmCallRecord`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct LlmCall {
    trace_id: Uuid,
    attempt: i32,
    /// "200", or the error class (http_429, timeout, ...).
    status: String,
    latency_ms: i64,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    error: Option<String>,
    model: Option<String>,
    /// USD from the price table; null without a price or reported usage.
    cost_usd: Option<f64>,
    /// When the attempt started (its end is started_at + latency_ms).
    started_at: Option<chrono::DateTime<chrono::Utc>>,
    /// How long it waited for a provider rate limit before (null without a limit).
    queued_ms: Option<i64>,
}

/// An agent (`store::agents::Agent`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Agent {
    agent_id: Uuid,
    name: String,
    model: String,
    max_iteration: i32,
    /// Granted tool names; null means every built-in tool.
    tools: Option<Vec<String>>,
    /// Context budget in estimated tokens; null means the global `limits` one.
    context_budget_tokens: Option<i32>,
    created_at: chrono::DateTime<chrono::Utc>,
    /// What the agent's tasks may spend when their message names none (CONTRACT §8).
    #[schema(value_type = Option<Object>)]
    budget: Option<Value>,
    /// Tools (names or globs such as `mail__*`) whose calls need a person's decision.
    approval_tools: Option<Vec<String>>,
    /// How long an approval request waits (null: 86400 s).
    approval_timeout_secs: Option<i32>,
    /// `reject` (null: the default) or `fail` when a request expires.
    on_approval_expiry: Option<String>,
    /// `enqueue` (null: the default; a new turn of a conversation waits for the running
    /// one) or `reject`.
    conversation_policy: Option<String>,
    /// The agents it may delegate to (the `delegate` tool).
    delegates: Option<Vec<Uuid>>,
    /// The agent's own brief, rendered verbatim once in the system message (CONTRACT §11).
    instructions: Option<String>,
    /// The version this is: the stable one for an agent, the pinned one for a task.
    version: Option<i32>,
    /// Request parameters sent with every LLM request of the version.
    #[schema(value_type = Option<Object>)]
    params: Option<Value>,
    /// Stall detection (CONTRACT §14): `{"repeat", "action"}`; null: the default.
    #[schema(value_type = Option<Object>)]
    stall: Option<Value>,
    /// `tell_model` or `hold` (CONTRACT §14).
    on_unknown: String,
    /// The tenant the agent and its tasks belong to (CONTRACT v3 §15).
    tenant_id: String,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use chrono::Utc;
    use serde_json::json;

    use super::*;
    use crate::store::{agents, tasks, trace};

    fn schema_fields(name: &str) -> BTreeSet<String> {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
        doc.pointer(&format!("/components/schemas/{name}/properties"))
            .and_then(Value::as_object)
            .map(|props| props.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn json_fields(row: impl serde::Serialize) -> BTreeSet<String> {
        serde_json::to_value(row)
            .ok()
            .and_then(|value| value.as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_default()
    }

    #[test]
    fn row_schemas_match_the_rows_json() {
        let (id, now) = (Uuid::now_v7(), Utc::now());
        let task = tasks::TaskRow {
            task_id: id,
            agent_id: None,
            conversation_id: None,
            input: None,
            status: "pending".into(),
            iterations: 0,
            answer: None,
            error: None,
            fail_reason: None,
            plan: None,
            created_at: now,
            started_at: None,
            finished_at: None,
            wait_reason: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: None,
            tool_call_count: 0,
            forked_from_task_id: None,
            forked_from_iteration: None,
            parent_task_id: None,
            root_task_id: None,
            schedule_id: None,
            fire_at: None,
            agent_version: None,
            tenant_id: "default".into(),
            priority: "normal".into(),
        };
        assert_eq!(schema_fields("Task"), json_fields(&task));
        let recursion = trace::RecursionRow {
            trace_id: id,
            iteration: 1,
            step_id: None,
            action_type: None,
            observe: String::new(),
            thought: String::new(),
            abstract_: String::new(),
            output: None,
            status: "done".into(),
            error_log: None,
            started_at: now,
            finished_at: now,
        };
        assert_eq!(schema_fields("Recursion"), json_fields(&recursion));
        let tool_call = trace::ToolCallRow {
            trace_id: id,
            tool_call_id: "call_1".into(),
            name: "calculate".into(),
            arguments: Some(json!({})),
            success: Some(true),
            result: None,
            error: None,
            duration_ms: Some(1),
            state: Some("succeeded".into()),
            effect: Some("read_only".into()),
            idempotency_key: None,
            started_at: None,
            finished_at: None,
        };
        assert_eq!(schema_fields("ToolCall"), json_fields(&tool_call));
        let llm_call = trace::LlmCallRecord {
            trace_id: id,
            attempt: 1,
            status: "200".into(),
            latency_ms: 1,
            prompt_tokens: None,
            completion_tokens: None,
            error: None,
            model: None,
            cost_usd: None,
            started_at: None,
            queued_ms: None,
        };
        assert_eq!(schema_fields("LlmCall"), json_fields(&llm_call));
        let agent = agents::Agent {
            agent_id: id,
            name: "a".into(),
            model: "m".into(),
            max_iteration: 30,
            tools: None,
            context_budget_tokens: None,
            created_at: now,
            budget: None,
            approval_tools: None,
            approval_timeout_secs: None,
            on_approval_expiry: None,
            conversation_policy: None,
            delegates: None,
            instructions: None,
            version: None,
            params: None,
            stall: None,
            on_unknown: "tell_model".into(),
            tenant_id: "default".into(),
        };
        assert_eq!(schema_fields("Agent"), json_fields(&agent));
    }
}
