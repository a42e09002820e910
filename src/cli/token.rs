//! `agentd token create | list | revoke` (CONTRACT v3 §15): the gateway's scoped tokens.
//! A new token is printed once, on stdout alone (`TOKEN=$(agentd token create ...)`); only
//! its SHA-256 is stored. A token is named afterwards by its SHA-256 (or the first 8 or more
//! hex digits of it, as `token list` shows them), or by the token itself.
//!
//! A wrong tenant, scope, lifetime or note is refused before anything connects, naming the
//! flag (exit 2).

use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};

use super::out::{errln, outln};
use crate::config::Settings;
use crate::core::fair_share::Priority;
use crate::core::scopes::{self, Scope};
use crate::core::tenancy;
use crate::store::{self, api_tokens};

/// `agentd token ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a token for a tenant with scopes; print it once (only its SHA-256 is kept).
    Create {
        /// The tenant the token acts for; `*` for every tenant.
        #[arg(long)]
        tenant: String,
        /// Comma-separated: read, submit, decide, operate, admin (admin grants all).
        #[arg(long)]
        scopes: String,
        /// How long it works: 90s, 15m, 12h, 30d, 2w (default: until revoked).
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
        /// Who or what it is for; shown by `token list` and recorded with its decisions.
        #[arg(long)]
        note: Option<String>,
    },
    /// List tokens: the start of their SHA-256, tenant, scopes, expiry, revocation, note.
    List,
    /// Revoke a token (given as the token, its SHA-256, or 8 or more of its first hex
    /// digits): the gateway answers 401 to it from now on.
    Revoke { token: String },
}

/// Hex digits of a SHA-256 that `token list` shows and `token revoke` accepts at least.
const SHORT_HEX: usize = 12;
const MIN_PREFIX: usize = 8;

/// Runs a token command.
pub async fn run(settings: &Settings, command: TokenCommand) -> anyhow::Result<ExitCode> {
    match command {
        TokenCommand::Create {
            tenant,
            scopes,
            expires,
            note,
        } => {
            create(
                settings,
                &tenant,
                &scopes,
                expires.as_deref(),
                note.as_deref(),
            )
            .await
        }
        TokenCommand::List => list(settings).await,
        TokenCommand::Revoke { token } => revoke(settings, &token).await,
    }
}

/// A flag's value refused before anything connected (exit 2).
fn refused(flag: &str, reason: impl std::fmt::Display) -> anyhow::Result<ExitCode> {
    errln!("agentd: {flag}: {reason}");
    Ok(ExitCode::from(2))
}

async fn create(
    settings: &Settings,
    tenant: &str,
    scopes: &str,
    expires: Option<&str>,
    note: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let tenant = match tenancy::parse_tenant(tenant, true) {
        Ok(tenant) => tenant,
        Err(err) => return refused("--tenant", err),
    };
    let scopes = match scopes::parse_scopes(scopes) {
        Ok(scopes) => scopes,
        Err(err) => return refused("--scopes", err),
    };
    let expires_at = match expires.map(lifetime_end).transpose() {
        Ok(at) => at,
        Err(reason) => return refused("--expires", reason),
    };
    let note = match note.map(scopes::parse_note).transpose() {
        Ok(note) => note,
        Err(reason) => return refused("--note", reason),
    };
    let token = new_token();
    let sha256 = scopes::token_sha256(&token);
    let pool = store::open(&settings.database.url, 2).await?;
    let row = api_tokens::NewToken {
        token_sha256: &sha256,
        tenant_id: &tenant,
        scopes: &scopes,
        expires_at,
        note: note.as_deref(),
    };
    api_tokens::insert(&pool, &row).await?;
    errln!(
        "agentd: token sha256:{} for tenant {} with {}: shown once, only its SHA-256 is kept",
        &sha256[..SHORT_HEX],
        crate::core::bounded::quote(&tenant),
        scope_names(&scopes)
    );
    outln!("{token}")?;
    Ok(ExitCode::SUCCESS)
}

/// When a token given `lifetime` from now stops working.
fn lifetime_end(lifetime: &str) -> Result<DateTime<Utc>, String> {
    let lifetime = store::prune::parse_age(lifetime)?;
    Utc::now()
        .checked_add_signed(lifetime)
        .filter(|end| {
            end.years_since(Utc::now())
                .is_some_and(|years| years <= 100)
        })
        .ok_or_else(|| "a token lives at most 100 years".to_owned())
}

/// A new token: `agentd_` and 64 hex digits from the operating system's random source
/// (two version-4 UUIDs: 244 random bits).
fn new_token() -> String {
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    format!("agentd_{}{}", a.simple(), b.simple())
}

async fn list(settings: &Settings) -> anyhow::Result<ExitCode> {
    let pool = store::open(&settings.database.url, 2).await?;
    let tokens = api_tokens::list(&pool).await?;
    outln!(
        "{:<12}  {:<20}  {:<34}  {:<20}  {:<20}  note",
        "sha256",
        "tenant",
        "scopes",
        "expires",
        "revoked"
    )?;
    let time = |at: Option<DateTime<Utc>>| {
        at.map_or_else(
            || "-".to_owned(),
            |at| at.to_rfc3339_opts(SecondsFormat::Secs, true),
        )
    };
    for token in tokens {
        outln!(
            "{:<12}  {:<20}  {:<34}  {:<20}  {:<20}  {}",
            &token.token_sha256[..SHORT_HEX.min(token.token_sha256.len())],
            token.tenant_id,
            token.scopes.join(","),
            time(token.expires_at),
            time(token.revoked_at),
            token.note.as_deref().unwrap_or("")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn revoke(settings: &Settings, given: &str) -> anyhow::Result<ExitCode> {
    let given = given.trim();
    let hex = !given.is_empty() && given.bytes().all(|b| b.is_ascii_hexdigit());
    let prefix = given.to_ascii_lowercase();
    if hex && given.len() < MIN_PREFIX {
        return refused(
            "token",
            format!("give at least {MIN_PREFIX} hex digits of the token's SHA-256"),
        );
    }
    let pool = store::open(&settings.database.url, 2).await?;
    let named = match hex && given.len() <= 64 {
        true => api_tokens::matching(&pool, &prefix).await?,
        false => Vec::new(),
    };
    let sha256 = match named.as_slice() {
        [one] => one.clone(),
        [_, _, ..] => {
            errln!("agentd: {given} begins the SHA-256 of more than one token: give more digits");
            return Ok(ExitCode::FAILURE);
        }
        // Not a known SHA-256 (or its start): the token itself.
        [] => scopes::token_sha256(given),
    };
    match api_tokens::revoke(&pool, &sha256).await? {
        Some(row) => {
            outln!(
                "revoked sha256:{} (tenant {})",
                &row.token_sha256[..SHORT_HEX],
                row.tenant_id
            )?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            errln!("agentd: no token is {given}, or has a SHA-256 that begins so");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `--tenant` of `submit` and `agent create`: a tenant id as `core::tenancy` allows.
pub fn tenant_arg(tenant: Option<&str>) -> anyhow::Result<Option<String>> {
    tenant
        .map(|tenant| tenancy::parse_tenant(tenant, false))
        .transpose()
        .map_err(|err| anyhow::anyhow!("--tenant: {err}"))
}

/// `--priority`: high or normal.
pub fn priority_arg(text: &str) -> Result<Priority, String> {
    Priority::parse(text)
}

/// Scopes as `read,submit`.
pub fn scope_names(scopes: &[Scope]) -> String {
    let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    names.join(",")
}
