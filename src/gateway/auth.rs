//! Who may talk to the gateway. With `gateway.tokens` configured, every `/v1` request needs
//! `Authorization: Bearer TOKEN` (the event stream also accepts `?access_token=TOKEN`,
//! because a browser's EventSource cannot set headers). Without tokens the gateway is
//! loopback-only: it refuses to bind anything else, and answers 403 to non-loopback peers.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Deserializer};

use super::AppState;
use super::errors::ApiError;
use crate::llm::secret::Secret;

/// Deserializes `gateway.tokens` from a list, or from one comma-separated string (the only
/// shape an environment variable can take). Blank entries are dropped.
pub fn tokens_from_config<'de, D>(deserializer: D) -> Result<Vec<Secret>, D::Error>
where
    D: Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Tokens {
        List(Vec<String>),
        Text(String),
        // The environment source parses an all-digit value as a number.
        Number(i64),
    }
    let tokens = match Tokens::deserialize(deserializer)? {
        Tokens::List(list) => list,
        Tokens::Text(text) => text.split(',').map(str::to_owned).collect(),
        Tokens::Number(number) => vec![number.to_string()],
    };
    Ok(tokens
        .into_iter()
        .map(|token| token.trim().to_owned())
        .filter(|token| !token.is_empty())
        .map(Secret::from)
        .collect())
}

/// Whether `ip` is a loopback address (IPv4-mapped IPv6 included).
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Compares without an early exit, so the time taken does not reveal how much matched.
fn same_bytes(left: &[u8], right: &[u8]) -> bool {
    if left.len() != right.len() {
        return false;
    }
    left.iter()
        .zip(right)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}

/// The token of an `Authorization: Bearer TOKEN` header, if any.
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The `access_token` query parameter, if any.
fn query_token(request: &Request) -> Option<String> {
    #[derive(Deserialize)]
    struct AccessToken {
        access_token: Option<String>,
    }
    axum::extract::Query::<AccessToken>::try_from_uri(request.uri())
        .ok()?
        .0
        .access_token
}

fn check_token(state: &AppState, presented: Option<&str>) -> Result<(), ApiError> {
    let Some(presented) = presented else {
        return Err(ApiError::unauthorized(
            "missing bearer token (Authorization: Bearer TOKEN)",
        ));
    };
    let known = state.tokens().iter().fold(false, |hit, token| {
        hit | same_bytes(token.expose().as_bytes(), presented.as_bytes())
    });
    match known {
        true => Ok(()),
        false => Err(ApiError::unauthorized("unknown bearer token")),
    }
}

/// Middleware for `/v1` routes: a configured token in the Authorization header.
pub async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if state.tokens().is_empty() {
        return next.run(request).await;
    }
    match check_token(&state, bearer(&request)) {
        Ok(()) => next.run(request).await,
        Err(err) => err.into_response(),
    }
}

/// Middleware for the event stream: like [`require_token`], also accepting `?access_token=`.
pub async fn require_token_or_query(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if state.tokens().is_empty() {
        return next.run(request).await;
    }
    let from_query = query_token(&request);
    let presented = bearer(&request).map(str::to_owned).or(from_query);
    match check_token(&state, presented.as_deref()) {
        Ok(()) => next.run(request).await,
        Err(err) => err.into_response(),
    }
}

/// Middleware for the whole app when no token is configured: loopback peers only.
pub async fn loopback_only(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if !state.tokens().is_empty() {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    match peer {
        Some(ip) if is_loopback(ip) => next.run(request).await,
        _ => ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "loopback_only",
            "no gateway.tokens are configured, so only loopback clients are served",
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "tokens_from_config")]
        tokens: Vec<Secret>,
    }

    fn parse(json: &str) -> Vec<String> {
        serde_json::from_str::<Holder>(json)
            .map(|h| h.tokens.iter().map(|t| t.expose().to_owned()).collect())
            .unwrap_or_else(|err| vec![format!("error: {err}")])
    }

    #[test]
    fn tokens_come_from_a_list_or_a_comma_separated_string() {
        assert_eq!(parse(r#"{"tokens": ["a", " b "]}"#), ["a", "b"]);
        assert_eq!(parse(r#"{"tokens": "a, b,,"}"#), ["a", "b"]);
        assert!(parse(r#"{"tokens": ""}"#).is_empty());
        assert_eq!(parse(r#"{"tokens": 12345}"#), ["12345"]);
    }

    #[test]
    fn comparison_needs_equal_bytes() {
        assert!(same_bytes(b"secret", b"secret"));
        assert!(!same_bytes(b"secret", b"secreT"));
        assert!(!same_bytes(b"secret", b"secret2"));
    }

    #[test]
    fn loopback_includes_mapped_ipv6() {
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap_or(IpAddr::from([0; 4]));
        assert!(is_loopback(mapped));
        assert!(is_loopback(IpAddr::from([127, 0, 0, 1])));
        assert!(!is_loopback(IpAddr::from([10, 0, 0, 1])));
    }
}
