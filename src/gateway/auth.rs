//! Who may talk to the gateway. With `gateway.tokens` configured, or any scoped token of
//! `api_tokens` live (CONTRACT v3 §15: `agentd token create`), every `/v1` request needs
//! `Authorization: Bearer TOKEN` (the event stream also accepts `?access_token=TOKEN`,
//! because a browser's EventSource cannot set headers); a revoked or expired token is 401.
//! Without tokens the gateway is loopback-only: it refuses to bind anything else, answers
//! 403 to non-loopback peers, and 403 `host_not_allowed` to a request whose `Host` is not a
//! loopback name (`localhost`, `*.localhost`, a loopback address, or one of
//! `gateway.allowed_hosts`): a web page the user opens cannot drive it by DNS rebinding,
//! since its requests carry the page's name.
//!
//! Every `/v1` request carries a [`Caller`]: the tenant and scopes it acts with (a static
//! token, or no token at all on loopback, is tenant `*` with `admin`) and who it is as far
//! as the gateway verified it, kept with the decisions it records. What a caller may reach
//! is `access.rs`'s.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::AppState;
use super::errors::ApiError;
use crate::config::Secret;
use crate::core::scopes::{self, Scope};
use crate::core::tenancy::ALL_TENANTS;
use crate::store::api_tokens::{self, TokenRow};

/// Whether `ip` is a loopback address (IPv4-mapped IPv6 included).
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Who made a request: the tenant and scopes it acts with (CONTRACT v3 §15), and who it is
/// as the gateway verified it (`None` without a token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's tenant; `*` sees every tenant.
    pub tenant_id: String,
    pub scopes: Vec<Scope>,
    /// The token's tenant and note (for a static token or one without a note, the first 8
    /// hex digits of its SHA-256 stand for the note).
    pub verified_by: Option<String>,
}

impl Caller {
    /// The caller of a static `gateway.tokens` token: every tenant, `admin`.
    fn of_static_token(token: &Secret) -> Self {
        let sha256 = scopes::token_sha256(token.expose());
        Self {
            tenant_id: ALL_TENANTS.to_owned(),
            scopes: vec![Scope::Admin],
            verified_by: Some(format!("* (gateway token sha256:{})", &sha256[..8])),
        }
    }

    /// The caller of a scoped token of `api_tokens`.
    fn of_row(row: &TokenRow) -> Self {
        let who = match row.note.as_deref() {
            Some(note) if !note.trim().is_empty() => note.to_owned(),
            _ => format!("token sha256:{}", &row.token_sha256[..8]),
        };
        Self {
            tenant_id: row.tenant_id.clone(),
            scopes: row.granted(),
            verified_by: Some(format!("{} ({who})", row.tenant_id)),
        }
    }

    /// A request without a token to a gateway that asks for none (loopback only): every
    /// tenant, `admin`, verified by nothing.
    fn local() -> Self {
        Self {
            tenant_id: ALL_TENANTS.to_owned(),
            scopes: vec![Scope::Admin],
            verified_by: None,
        }
    }
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

/// Whether the gateway asks every request for a token: static `gateway.tokens` are
/// configured, or a scoped token is live (`api_tokens`).
async fn tokens_required(state: &AppState) -> Result<bool, ApiError> {
    if !state.tokens().is_empty() {
        return Ok(true);
    }
    Ok(api_tokens::any_live(state.pool()).await?)
}

/// Who presented `presented`: a static token (compared without an early exit), else a
/// scoped token found by its SHA-256, live. Without a token, a gateway that asks for none
/// serves the local caller.
async fn identify(state: &AppState, presented: Option<&str>) -> Result<Caller, ApiError> {
    let Some(presented) = presented else {
        return match tokens_required(state).await? {
            true => Err(ApiError::unauthorized(
                "missing bearer token (Authorization: Bearer TOKEN)",
            )),
            false => Ok(Caller::local()),
        };
    };
    // Every token is compared (no early exit); the last that matches names the caller.
    let known = state.tokens().iter().fold(None, |hit, token| {
        match same_bytes(token.expose().as_bytes(), presented.as_bytes()) {
            true => Some(token),
            false => hit,
        }
    });
    if let Some(token) = known {
        return Ok(Caller::of_static_token(token));
    }
    // Found by its SHA-256: the lookup learns nothing a timing could tell about the token.
    let sha256 = scopes::token_sha256(presented);
    match api_tokens::find(state.pool(), &sha256).await? {
        Some(row) if row.live_at(chrono::Utc::now()) => Ok(Caller::of_row(&row)),
        Some(row) if row.revoked_at.is_some() => {
            Err(ApiError::unauthorized("the bearer token was revoked"))
        }
        Some(_) => Err(ApiError::unauthorized("the bearer token has expired")),
        // A gateway that asks for no token ignores one it does not know, as before.
        None if !tokens_required(state).await? => Ok(Caller::local()),
        None => Err(ApiError::unauthorized("unknown bearer token")),
    }
}

/// Middleware for `/v1` routes: the caller of the token in the Authorization header.
pub async fn require_token(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    match identify(&state, bearer(&request)).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

/// Middleware for the event stream: like [`require_token`], also accepting `?access_token=`.
pub async fn require_token_or_query(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let from_query = query_token(&request);
    let presented = bearer(&request).map(str::to_owned).or(from_query);
    match identify(&state, presented.as_deref()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

/// Middleware for the whole app when no token is configured: loopback peers only.
pub async fn loopback_only(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    // With the database away, the loopback rules hold (a token could not be checked anyway).
    if tokens_required(&state).await.unwrap_or(false) {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    if !peer.is_some_and(is_loopback) {
        return ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "loopback_only",
            "no gateway.tokens are configured, so only loopback clients are served",
        )
        .into_response();
    }
    let host = request_host(&request);
    let allowed = &state.settings().gateway.allowed_hosts;
    match host.as_deref() {
        Some(host) if host_allowed(host, allowed) => next.run(request).await,
        _ => {
            let named = host.as_deref().map_or_else(
                || "a request without a Host header".to_owned(),
                |host| format!("Host {}", crate::core::bounded::quote(host)),
            );
            ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "host_not_allowed",
                format!(
                    "{named} is not a loopback name: without gateway.tokens the gateway serves \
                     only requests addressed to localhost, 127.0.0.1 or [::1] (a web page must \
                     not reach it by DNS rebinding); add the name to gateway.allowed_hosts or \
                     configure gateway.tokens"
                ),
            )
            .into_response()
        }
    }
}

/// The host a request is addressed to: its `Host` header, or the authority of an
/// absolute-form request target.
fn request_host(request: &Request) -> Option<String> {
    if let Some(host) = request.headers().get(header::HOST) {
        return host.to_str().ok().map(str::to_owned);
    }
    request.uri().authority().map(|a| a.as_str().to_owned())
}

/// Whether `host` (a Host header: a name or address, maybe with a port) names this machine's
/// loopback: `localhost`, a `*.localhost` name (RFC 6761), a loopback IPv4 or IPv6 address,
/// or one of `extra` (compared without case).
pub fn host_allowed(host: &str, extra: &[String]) -> bool {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((address, port))
                if port.is_empty() || (port.starts_with(':') && is_port(port)) =>
            {
                address
            }
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return false;
    }
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Ok(ip) = name.parse::<IpAddr>() {
        return is_loopback(ip);
    }
    extra
        .iter()
        .any(|allowed| allowed.eq_ignore_ascii_case(&name))
}

/// `:PORT` after a host: digits only.
fn is_port(text: &str) -> bool {
    let digits = text.strip_prefix(':').unwrap_or(text);
    !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_token_acts_for_its_tenant_and_is_recorded_by_its_note() {
        let row = TokenRow {
            token_sha256: scopes::token_sha256("t"),
            tenant_id: "acme".into(),
            scopes: vec!["read".into(), "decide".into()],
            expires_at: None,
            note: Some("ci bot".into()),
            created_at: chrono::Utc::now(),
            revoked_at: None,
        };
        let caller = Caller::of_row(&row);
        assert_eq!(caller.tenant_id, "acme");
        assert_eq!(caller.scopes, [Scope::Read, Scope::Decide]);
        assert_eq!(caller.verified_by.as_deref(), Some("acme (ci bot)"));
        let unnoted = Caller::of_row(&TokenRow { note: None, ..row });
        let short = &scopes::token_sha256("t")[..8];
        let expected = format!("acme (token sha256:{short})");
        assert_eq!(unnoted.verified_by.as_deref(), Some(expected.as_str()));
        let admin = Caller::of_static_token(&Secret::from("static"));
        assert_eq!(
            (admin.tenant_id.as_str(), admin.scopes.as_slice()),
            ("*", &[Scope::Admin][..])
        );
    }

    #[test]
    fn comparison_needs_equal_bytes() {
        assert!(same_bytes(b"secret", b"secret"));
        assert!(!same_bytes(b"secret", b"secreT"));
        assert!(!same_bytes(b"secret", b"secret2"));
    }

    #[test]
    fn only_loopback_host_names_pass_without_tokens() {
        let none: &[String] = &[];
        for host in [
            "localhost",
            "localhost:8787",
            "LOCALHOST.:8787",
            "app.localhost:3000",
            "127.0.0.1",
            "127.0.0.1:8787",
            "127.8.9.10:1",
            "[::1]",
            "[::1]:8787",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert!(host_allowed(host, none), "{host}");
        }
        for host in [
            "rebind.evil.example",
            "rebind.evil.example:8787",
            "localhost.evil.example",
            "evil-localhost",
            "10.0.0.1:8787",
            "0.0.0.0:8787",
            "[::2]:8787",
            "[::1]x",
            "localhost:port",
            "localhost:8787:1",
            "",
            ":8787",
            "127.0.0.1.nip.io",
        ] {
            assert!(!host_allowed(host, none), "{host}");
        }
        let extra = ["agentd.test".to_owned()];
        assert!(host_allowed("AgentD.test:8787", &extra));
        assert!(!host_allowed("other.test", &extra));
    }

    #[test]
    fn loopback_includes_mapped_ipv6() {
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap_or(IpAddr::from([0; 4]));
        assert!(is_loopback(mapped));
        assert!(is_loopback(IpAddr::from([127, 0, 0, 1])));
        assert!(!is_loopback(IpAddr::from([10, 0, 0, 1])));
    }
}
