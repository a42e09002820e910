//! Tenants (CONTRACT v3 §15), the pure rules: what a tenant id may be, which tenant a task
//! belongs to (its message's, which must be its agent's), and who sees whose objects (a
//! caller of tenant `*` sees every tenant, any other only its own).
//!
//! A tenant id comes from outside (a task message, a token, the CLI): it is refused with a
//! reason that says what is wrong when it cannot be stored or named safely, never mangled
//! into another tenant's id.

/// The tenant of every row written before tenants existed, and of an agent or task that
/// names none.
pub const DEFAULT_TENANT: &str = "default";

/// The tenant of a caller that sees every tenant (the static `gateway.tokens`).
pub const ALL_TENANTS: &str = "*";

/// The longest tenant id, in characters.
pub const MAX_TENANT_CHARS: usize = 200;

/// Why a tenant id is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantError {
    #[error("a tenant id must not be empty")]
    Empty,
    #[error("a tenant id has at most {MAX_TENANT_CHARS} characters (this one has {0})")]
    TooLong(usize),
    #[error("a tenant id must not hold control characters (NUL, newlines, tabs, ...)")]
    Control,
    #[error("a tenant id must not begin or end with white space")]
    Padded,
    #[error("`*` (every tenant) is only for a token; a task or an agent names one tenant")]
    All,
}

/// Checks a tenant id. `*` is accepted only when `all_allowed` (a token's tenant).
pub fn parse_tenant(text: &str, all_allowed: bool) -> Result<String, TenantError> {
    if text.is_empty() {
        return Err(TenantError::Empty);
    }
    let chars = text.chars().count();
    if chars > MAX_TENANT_CHARS {
        return Err(TenantError::TooLong(chars));
    }
    if text.chars().any(char::is_control) {
        return Err(TenantError::Control);
    }
    if text.trim() != text {
        return Err(TenantError::Padded);
    }
    if text == ALL_TENANTS && !all_allowed {
        return Err(TenantError::All);
    }
    Ok(text.to_owned())
}

/// Whether a caller of `caller_tenant` may see (and, with the scope, act on) an object of
/// `owner_tenant`: its own tenant's, or any with tenant `*`.
pub fn may_see(caller_tenant: &str, owner_tenant: &str) -> bool {
    caller_tenant == ALL_TENANTS || caller_tenant == owner_tenant
}

/// The tenant a new object of a caller of `caller_tenant` belongs to: the caller's own, or
/// for a caller of every tenant the one it names (`requested`), else `fallback`.
pub fn owner_for(caller_tenant: &str, requested: Option<&str>, fallback: &str) -> String {
    match caller_tenant {
        ALL_TENANTS => requested.unwrap_or(fallback).to_owned(),
        own => own.to_owned(),
    }
}

/// The tenant of a task whose message names `requested` (if any) and whose agent belongs to
/// `agent_tenant`: the agent's. `Err`: the reason the task is rejected (its message names
/// another tenant); it does not name the agent's tenant, which the producer may not know.
pub fn task_tenant(requested: Option<&str>, agent_tenant: &str) -> Result<String, String> {
    match requested {
        None => Ok(agent_tenant.to_owned()),
        Some(tenant) if tenant == agent_tenant => Ok(tenant.to_owned()),
        Some(tenant) => Err(format!(
            "the task's tenant_id {} is not the tenant of its agent: a task runs in its \
             agent's tenant (leave tenant_id out, or name the agent's)",
            crate::core::bounded::quote(tenant)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_tenant_id_is_one_to_two_hundred_printable_characters() {
        assert_eq!(parse_tenant("acme", false).as_deref(), Ok("acme"));
        assert_eq!(parse_tenant("好-team 2", false).as_deref(), Ok("好-team 2"));
        assert_eq!(parse_tenant("", false), Err(TenantError::Empty));
        assert_eq!(parse_tenant("a\u{0}b", false), Err(TenantError::Control));
        assert_eq!(parse_tenant("a\nb", false), Err(TenantError::Control));
        assert_eq!(parse_tenant(" acme", false), Err(TenantError::Padded));
        let long = "é".repeat(MAX_TENANT_CHARS + 1);
        assert_eq!(
            parse_tenant(&long, false),
            Err(TenantError::TooLong(MAX_TENANT_CHARS + 1))
        );
        assert!(parse_tenant(&"é".repeat(MAX_TENANT_CHARS), false).is_ok());
    }

    #[test]
    fn every_tenant_is_a_token_s_tenant_only() {
        assert_eq!(parse_tenant("*", false), Err(TenantError::All));
        assert_eq!(parse_tenant("*", true).as_deref(), Ok("*"));
        assert!(TenantError::All.to_string().contains("token"));
    }

    #[test]
    fn a_caller_sees_its_own_tenant_and_every_tenant_sees_all() {
        assert!(may_see("acme", "acme"));
        assert!(!may_see("acme", "globex"));
        assert!(!may_see("acme", "*"));
        assert!(may_see("*", "globex"));
        assert!(may_see("*", "default"));
    }

    #[test]
    fn a_new_object_belongs_to_its_caller_s_tenant() {
        assert_eq!(owner_for("acme", Some("globex"), "default"), "acme");
        assert_eq!(owner_for("*", Some("globex"), "default"), "globex");
        assert_eq!(owner_for("*", None, "default"), "default");
    }

    #[test]
    fn a_task_runs_in_its_agent_s_tenant() {
        assert_eq!(task_tenant(None, "acme").as_deref(), Ok("acme"));
        assert_eq!(task_tenant(Some("acme"), "acme").as_deref(), Ok("acme"));
        let reason = task_tenant(Some("globex"), "acme").expect_err("another tenant");
        assert!(reason.contains("\"globex\""), "{reason}");
        assert!(
            !reason.contains("acme"),
            "the agent's tenant stays unsaid: {reason}"
        );
    }

    proptest! {
        /// Whatever a producer sends as a tenant id is accepted as it is, storable and
        /// printable, or refused with a reason; it is never changed into another id.
        #[test]
        fn any_text_is_a_tenant_id_as_it_is_or_refused(text in any::<String>()) {
            match parse_tenant(&text, false) {
                Ok(tenant) => {
                    prop_assert_eq!(&tenant, &text);
                    prop_assert!(crate::core::storable::is_storable(&tenant));
                    prop_assert!(!tenant.chars().any(char::is_control));
                }
                Err(err) => prop_assert!(!err.to_string().is_empty()),
            }
        }
    }
}
