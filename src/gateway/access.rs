//! What a caller may reach (CONTRACT v3 §15): every `/v1` route needs a scope (`read` for
//! GET routes and the event stream, `submit`, `decide`, `operate` or `admin` for the others:
//! [`scope_for`]), and a route that names a task, an agent or a schedule by id answers 404
//! when the object belongs to another tenant than the caller's, exactly as for one that
//! does not exist. A missing scope is 403 `missing_scope`.
//!
//! Lists and new objects are the routes' own: a list shows the caller's tenant's rows, a new
//! task or schedule belongs to its agent's tenant (which the caller must see), a new agent
//! to the caller's.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::errors::ApiError;
use crate::core::scopes::{self, Scope};
use crate::core::tenancy;
use crate::store::owners::{self, Owned};

/// The scope a route needs. A write route this table does not name needs `admin`: a new
/// route is closed until someone says who may use it.
pub fn scope_for(method: &Method, template: &str) -> Scope {
    if method == Method::GET || method == Method::HEAD {
        return Scope::Read;
    }
    let last = template.rsplit('/').next().unwrap_or("");
    match template {
        "/v1/tasks" | "/v1/tasks/{task_id}/fork" => Scope::Submit,
        "/v1/tasks/{task_id}/approvals/{tool_call_id}"
        | "/v1/tasks/{task_id}/tool_calls/{tool_call_id}/resolve" => Scope::Decide,
        _ if template.starts_with("/v1/tasks/{task_id}/")
            && matches!(last, "cancel" | "pause" | "resume" | "inject") =>
        {
            Scope::Operate
        }
        _ if template.contains("rerun") => Scope::Submit,
        _ if template.starts_with("/v1/schedules") || template.contains("eval") => Scope::Operate,
        _ => Scope::Admin,
    }
}

/// The object a route names by id, read from the request's path (`None`: it names none, or
/// its id is no UUID, which the route answers itself).
pub fn named_object(template: &str, path: &str) -> Option<Owned> {
    let mut template = template.split('/').skip(2);
    let mut path = path.split('/').skip(2);
    let (kind, param) = (template.next()?, template.next()?);
    let (_, id) = (path.next()?, path.next()?);
    let id = Uuid::parse_str(id).ok()?;
    match (kind, param) {
        ("tasks", "{task_id}") => Some(Owned::Task(id)),
        ("agents", "{agent_id}") => Some(Owned::Agent(id)),
        ("schedules", "{schedule_id}") => Some(Owned::Schedule(id)),
        ("evals", "{eval_run_id}") => Some(Owned::EvalRun(id)),
        _ => None,
    }
}

/// The answer for an object the caller may not see: the route's own "not found".
pub fn not_found(object: Owned) -> ApiError {
    match object {
        Owned::Task(id) => ApiError::not_found("task_not_found", format!("no task {id}")),
        Owned::Agent(id) => ApiError::not_found("agent_not_found", format!("no agent {id}")),
        Owned::Schedule(id) => {
            ApiError::not_found("schedule_not_found", format!("no schedule {id}"))
        }
        Owned::EvalRun(id) => {
            ApiError::not_found("eval_not_found", format!("no evaluation run {id}"))
        }
    }
}

/// 403 for a caller without the scope a route needs.
fn missing_scope(needed: Scope) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "missing_scope",
        format!("this token lacks the {needed} scope that this route needs"),
    )
}

/// Route layer of every `/v1` route, inside the token check: the scope, then the tenant of
/// the object the route names.
pub async fn authorize(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let checked = match check(&request) {
        Ok(None) => Ok(()),
        Ok(Some((tenant, object))) => owned_by(&state, &tenant, object).await,
        Err(err) => Err(err),
    };
    match checked {
        Ok(()) => next.run(request).await,
        Err(err) => err.into_response(),
    }
}

/// The scope check; then the object whose tenant must be the caller's, if any.
fn check(request: &Request) -> Result<Option<(String, Owned)>, ApiError> {
    let Some(caller) = request.extensions().get::<Caller>() else {
        return Err(ApiError::unauthorized("no caller"));
    };
    let Some(template) = request.extensions().get::<MatchedPath>() else {
        return Ok(None);
    };
    let needed = scope_for(request.method(), template.as_str());
    if !scopes::grants(&caller.scopes, needed) {
        return Err(missing_scope(needed));
    }
    if caller.tenant_id == tenancy::ALL_TENANTS {
        return Ok(None);
    }
    let object = named_object(template.as_str(), request.uri().path());
    Ok(object.map(|object| (caller.tenant_id.clone(), object)))
}

/// Whether `object` is of `tenant`: 404 if not, as when it does not exist.
async fn owned_by(state: &AppState, tenant: &str, object: Owned) -> Result<(), ApiError> {
    // An object of another tenant, and one that does not exist, answer the same.
    match owners::tenant_of(state.pool(), object).await? {
        Some(owner) if tenancy::may_see(tenant, &owner) => Ok(()),
        _ => Err(not_found(object)),
    }
}

/// Whether `caller` may see an object of `owner`.
pub fn sees(caller: &Caller, owner: &str) -> bool {
    tenancy::may_see(&caller.tenant_id, owner)
}

/// The tenant of an object `caller` makes (a task, an agent), naming `named` (a body's
/// `tenant_id`): the caller's own, or for a caller of every tenant the one it names, else
/// `fallback` (a task's agent's, `default` for an agent). A caller naming another tenant
/// than its own is 403 `wrong_tenant`.
pub fn new_tenant(
    caller: &Caller,
    named: Option<&str>,
    fallback: &str,
) -> Result<String, ApiError> {
    let named = named
        .map(|tenant| tenancy::parse_tenant(tenant, false))
        .transpose()
        .map_err(|err| ApiError::invalid_body(format!("tenant_id: {err}")))?;
    let tenant = tenancy::owner_for(&caller.tenant_id, named.as_deref(), fallback);
    match named {
        Some(named) if named != tenant => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "wrong_tenant",
            "this token makes objects of its own tenant only: leave tenant_id out",
        )),
        _ => Ok(tenant),
    }
}

/// The tenant filter of a list for `caller`: `None` for every tenant.
pub fn tenant_filter(caller: &Caller) -> Option<String> {
    (caller.tenant_id != tenancy::ALL_TENANTS).then(|| caller.tenant_id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_need_read_and_writes_their_scope() {
        let post = Method::POST;
        for (method, template, scope) in [
            (&Method::GET, "/v1/tasks/{task_id}/events", Scope::Read),
            (&Method::GET, "/v1/agents", Scope::Read),
            (&post, "/v1/tasks", Scope::Submit),
            (&post, "/v1/tasks/{task_id}/fork", Scope::Submit),
            (&post, "/v1/tasks/{task_id}/rerun", Scope::Submit),
            (
                &post,
                "/v1/tasks/{task_id}/approvals/{tool_call_id}",
                Scope::Decide,
            ),
            (
                &post,
                "/v1/tasks/{task_id}/tool_calls/{tool_call_id}/resolve",
                Scope::Decide,
            ),
            (&post, "/v1/tasks/{task_id}/cancel", Scope::Operate),
            (&post, "/v1/tasks/{task_id}/pause", Scope::Operate),
            (&post, "/v1/tasks/{task_id}/resume", Scope::Operate),
            (&post, "/v1/tasks/{task_id}/inject", Scope::Operate),
            (&post, "/v1/schedules", Scope::Operate),
            (
                &Method::PATCH,
                "/v1/schedules/{schedule_id}",
                Scope::Operate,
            ),
            (
                &Method::DELETE,
                "/v1/schedules/{schedule_id}",
                Scope::Operate,
            ),
            (&post, "/v1/evals", Scope::Operate),
            (&post, "/v1/evals/{eval_run_id}/cancel", Scope::Operate),
            (&post, "/v1/agents", Scope::Admin),
            (&post, "/v1/agents/{agent_id}/versions", Scope::Admin),
            (
                &Method::PUT,
                "/v1/agents/{agent_id}/channels/{channel}",
                Scope::Admin,
            ),
            (&post, "/v1/something/new", Scope::Admin),
        ] {
            assert_eq!(scope_for(method, template), scope, "{method} {template}");
        }
    }

    #[test]
    fn a_route_names_its_task_agent_or_schedule() {
        let id = Uuid::now_v7();
        let named = |template: &str, path: String| named_object(template, &path);
        assert_eq!(
            named(
                "/v1/tasks/{task_id}/events",
                format!("/v1/tasks/{id}/events")
            ),
            Some(Owned::Task(id))
        );
        assert_eq!(
            named("/v1/agents/{agent_id}", format!("/v1/agents/{id}")),
            Some(Owned::Agent(id))
        );
        assert_eq!(
            named(
                "/v1/schedules/{schedule_id}/fires",
                format!("/v1/schedules/{id}/fires")
            ),
            Some(Owned::Schedule(id))
        );
        assert_eq!(
            named("/v1/evals/{eval_run_id}", format!("/v1/evals/{id}")),
            Some(Owned::EvalRun(id))
        );
        assert_eq!(named("/v1/tasks", "/v1/tasks".into()), None);
        assert_eq!(
            named("/v1/tasks/{task_id}", "/v1/tasks/not-a-uuid".into()),
            None
        );
    }

    #[test]
    fn another_tenant_s_object_is_not_found_like_a_missing_one() {
        let id = Uuid::now_v7();
        let err = not_found(Owned::Task(id));
        assert_eq!(
            (err.status, err.code),
            (StatusCode::NOT_FOUND, "task_not_found")
        );
        assert_eq!(err.message, format!("no task {id}"));
    }
}
