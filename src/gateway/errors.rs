//! The gateway's one error shape, `{"error": {"code": "...", "message": "..."}}`, and the
//! extractors that turn axum's own rejections (bad JSON, bad path or query, oversized body)
//! into it, so that a client never sees a plain-text error from this server.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

/// An error answered to the client: HTTP status, a stable machine-readable `code` and a
/// message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

/// The JSON body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// `error` inside [`ErrorBody`].
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable identifier to branch on, e.g. `invalid_body`, `agent_not_found`, `unauthorized`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
}

impl ApiError {
    /// An error with any status.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400: the request cannot be read (malformed JSON, bad path or header).
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 422 `invalid_body`: well-formed JSON that breaks a rule.
    pub fn invalid_body(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", message)
    }

    /// 422 `invalid_parameter`: a query parameter out of range.
    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_parameter",
            message,
        )
    }

    /// 404 with a specific code (`task_not_found`, `agent_not_found`, `route_not_found`).
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 401: no or an unknown bearer token.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 503: the broker refused or could not take a message.
    pub fn broker_unavailable(err: &anyhow::Error) -> Self {
        tracing::error!(error = %format!("{err:#}"), "publishing to RabbitMQ failed");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "broker_unavailable",
            "the message broker did not accept the message; retry later",
        )
    }

    /// 503: the database is away (restarting, unreachable, its pool exhausted).
    pub fn database_unavailable(err: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %err, "the database is unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the database is unavailable; retry later",
        )
    }

    /// The honest answer to a failed operation that uses the database and the broker: a
    /// database that is away is 503 `database_unavailable`, a database that refused the
    /// statement is 500 `internal` (retrying will not help), and what remains came from
    /// the broker (503 `broker_unavailable`).
    pub fn from_failure(err: &anyhow::Error) -> Self {
        match err
            .chain()
            .find_map(|cause| cause.downcast_ref::<sqlx::Error>())
        {
            Some(db) if crate::store::transient::sqlx_transient(db) => {
                Self::database_unavailable(&format!("{err:#}"))
            }
            Some(_) => Self::internal(&format!("{err:#}")),
            None => Self::broker_unavailable(err),
        }
    }

    /// 500: logged with its cause; the client only learns that it happened.
    pub fn internal(err: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %err, "gateway request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the gateway log",
        )
    }
}

impl From<sqlx::Error> for ApiError {
    /// A database that is away is 503 (retry later); one that refused the statement, 500.
    fn from(err: sqlx::Error) -> Self {
        match crate::store::transient::sqlx_transient(&err) {
            true => Self::database_unavailable(&err),
            false => Self::internal(&err),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"agentd\""),
            );
        }
        response
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let code = match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_body",
            _ => "invalid_json",
        };
        Self::new(rejection.status(), code, rejection.body_text())
    }
}

/// `axum::Json` whose rejections are [`ApiError`]s: 400 `invalid_json` for syntax errors,
/// 422 `invalid_body` for a wrong shape (missing or unknown fields, wrong types), 413 and
/// 415 for size and content type.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(value) = axum::Json::<T>::from_request(req, state).await?;
        Ok(Self(value))
    }
}

/// `axum::extract::Path` answering 400 `invalid_path` (e.g. an id that is not a UUID).
#[derive(Debug, Clone, Copy)]
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Self(value))
            .map_err(|rejection: PathRejection| {
                ApiError::bad_request("invalid_path", rejection.body_text())
            })
    }
}

/// `axum::extract::Query` answering 400 `invalid_query`.
#[derive(Debug, Clone, Copy)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Self(value))
            .map_err(|rejection: QueryRejection| {
                ApiError::bad_request("invalid_query", rejection.body_text())
            })
    }
}

/// Fallback for unknown paths: 404 `route_not_found`.
pub async fn route_not_found() -> ApiError {
    ApiError::not_found("route_not_found", "no such route")
}

/// Fallback for a known path with another method: 405 `method_not_allowed`.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not accept that method",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_blamed_on_what_failed() {
        let away = anyhow::Error::new(sqlx::Error::PoolTimedOut).context("recording a decision");
        assert_eq!(ApiError::from_failure(&away).code, "database_unavailable");
        let refused = anyhow::Error::new(sqlx::Error::ColumnNotFound("reason".into()));
        let refused = ApiError::from_failure(&refused.context("recording a decision"));
        assert_eq!(
            (refused.status, refused.code),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        );
        let broker = anyhow::anyhow!("the broker refused (nacked) the message");
        assert_eq!(ApiError::from_failure(&broker).code, "broker_unavailable");
        assert_eq!(
            ApiError::from(sqlx::Error::PoolTimedOut).status,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
