//! The `/v1` JSON API and `/healthz`, as an [`OpenApiRouter`] so that every route carries
//! its OpenAPI description. Authentication is a route layer per group: `/v1` needs the
//! bearer header, the event stream also accepts `?access_token=`, health needs nothing;
//! inside it, `access` checks the route's scope and the tenant of the object it names.

pub mod agents;
pub mod approvals;
mod budget;
pub mod evals;
pub mod fork;
pub mod llm_calls;
pub mod overview;
pub mod rerun;
pub mod resolve;
pub mod schedules;
pub mod steering;
pub mod task_list;
pub mod tasks;
pub mod versions;

use axum::Json;
use axum::middleware::from_fn_with_state;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::openapi::ApiDoc;
use super::{AppState, access, auth, sse};

/// Every documented route, with its authentication layer.
pub fn api(state: &AppState) -> OpenApiRouter<AppState> {
    let protected = OpenApiRouter::new()
        .routes(routes!(tasks::create_task, task_list::list_tasks))
        .routes(routes!(tasks::get_task))
        .routes(routes!(tasks::cancel_task))
        .routes(routes!(llm_calls::task_llm_calls))
        .routes(routes!(steering::pause_task))
        .routes(routes!(steering::resume_task))
        .routes(routes!(steering::inject_task))
        .routes(routes!(steering::task_state))
        .routes(routes!(fork::fork))
        .routes(routes!(rerun::rerun_task))
        .routes(routes!(approvals::decide_call))
        .routes(routes!(approvals::list_approvals))
        .routes(routes!(resolve::resolve_call))
        .routes(routes!(resolve::list_tool_calls))
        .routes(routes!(agents::list_agents, agents::create_agent))
        .routes(routes!(agents::get_agent))
        .routes(routes!(agents::agent_tasks))
        .routes(routes!(versions::publish_version, versions::list_versions))
        .routes(routes!(versions::set_channel))
        .routes(routes!(overview::agent_overview))
        .routes(routes!(
            schedules::list_schedules,
            schedules::create_schedule
        ))
        .routes(routes!(
            schedules::get_schedule,
            schedules::actions::update_schedule,
            schedules::actions::delete_schedule
        ))
        .routes(routes!(schedules::actions::trigger_schedule))
        .routes(routes!(schedules::actions::schedule_fires))
        .routes(routes!(evals::create_eval))
        .routes(routes!(evals::get_eval))
        .routes(routes!(evals::cancel_eval))
        .route_layer(from_fn_with_state(state.clone(), access::authorize))
        .route_layer(from_fn_with_state(state.clone(), auth::require_token));
    let stream = OpenApiRouter::new()
        .routes(routes!(sse::task_events))
        .route_layer(from_fn_with_state(state.clone(), access::authorize))
        .route_layer(from_fn_with_state(
            state.clone(),
            auth::require_token_or_query,
        ));
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health))
        .merge(protected)
        .merge(stream)
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always "ok".
    pub status: &'static str,
}

/// Liveness: the process serves HTTP. Needs no token.
#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}
