//! The `api_tokens` table (CONTRACT v3 §15): the gateway's scoped tokens, kept only as the
//! SHA-256 of the token (`core::scopes::token_sha256`), with the tenant and scopes the token
//! stands for, when it expires, a note, and when it was revoked.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::core::scopes::Scope;

/// One row of `api_tokens`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct TokenRow {
    pub token_sha256: String,
    pub tenant_id: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub note: Option<String>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TokenRow {
    /// The scopes it grants (names `core::scopes` does not know are ignored).
    pub fn granted(&self) -> Vec<Scope> {
        self.scopes.iter().filter_map(|s| Scope::parse(s)).collect()
    }

    /// Whether it may be used at `now`: not revoked, not expired.
    pub fn live_at(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| at > now)
    }
}

const TOKEN_COLUMNS: &str =
    "token_sha256, tenant_id, scopes, expires_at, note, created_at, revoked_at";

/// A token to record (its SHA-256 only).
#[derive(Debug, Clone)]
pub struct NewToken<'a> {
    pub token_sha256: &'a str,
    pub tenant_id: &'a str,
    pub scopes: &'a [Scope],
    pub expires_at: Option<DateTime<Utc>>,
    pub note: Option<&'a str>,
}

/// Records a token.
pub async fn insert(pool: &PgPool, token: &NewToken<'_>) -> sqlx::Result<()> {
    let scopes: Vec<&str> = token.scopes.iter().map(|s| s.as_str()).collect();
    sqlx::query(
        "INSERT INTO api_tokens (token_sha256, tenant_id, scopes, expires_at, note) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(token.token_sha256)
    .bind(token.tenant_id)
    .bind(scopes)
    .bind(token.expires_at)
    .bind(token.note)
    .execute(pool)
    .await?;
    Ok(())
}

/// The token whose SHA-256 is `token_sha256`, revoked or expired ones included.
pub async fn find(pool: &PgPool, token_sha256: &str) -> sqlx::Result<Option<TokenRow>> {
    sqlx::query_as(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_sha256 = $1"
    ))
    .bind(token_sha256)
    .fetch_optional(pool)
    .await
}

/// Every token, newest first.
pub async fn list(pool: &PgPool) -> sqlx::Result<Vec<TokenRow>> {
    sqlx::query_as(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at DESC, token_sha256"
    ))
    .fetch_all(pool)
    .await
}

/// Whether any token may be used now: then the gateway asks every request for one.
pub async fn any_live(pool: &PgPool) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM api_tokens WHERE revoked_at IS NULL \
                          AND (expires_at IS NULL OR expires_at > now()))",
    )
    .fetch_one(pool)
    .await
}

/// The SHA-256s that begin with `prefix` (lowercase hex), at most two: enough to tell
/// whether a prefix names one token.
pub async fn matching(pool: &PgPool, prefix: &str) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT token_sha256 FROM api_tokens WHERE left(token_sha256, length($1)) = $1 \
         ORDER BY token_sha256 LIMIT 2",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await
}

/// Revokes the token; returns its row, `None` when no token has that SHA-256. A token
/// revoked already keeps its first revocation time.
pub async fn revoke(pool: &PgPool, token_sha256: &str) -> sqlx::Result<Option<TokenRow>> {
    sqlx::query_as(&format!(
        "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now()) \
         WHERE token_sha256 = $1 RETURNING {TOKEN_COLUMNS}"
    ))
    .bind(token_sha256)
    .fetch_optional(pool)
    .await
}
