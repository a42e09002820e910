//! Scoped tokens (CONTRACT v3 §15), the pure part: the five scopes and what each allows,
//! a token's SHA-256 (all that is stored of it) and its note.
//!
//! `read` covers GET routes and the event stream; `submit` new tasks, forks and reruns;
//! `decide` approvals and resolves; `operate` cancel, pause, resume, inject, schedules and
//! evals; `admin` agents, versions and tokens, and every other scope with them.

use std::fmt;

use sha2::{Digest, Sha256};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Read,
    Submit,
    Decide,
    Operate,
    Admin,
}

impl Scope {
    /// Every scope, in the order they are listed.
    pub const ALL: [Scope; 5] = [
        Scope::Read,
        Scope::Submit,
        Scope::Decide,
        Scope::Operate,
        Scope::Admin,
    ];

    /// The name stored in `api_tokens.scopes`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Submit => "submit",
            Self::Decide => "decide",
            Self::Operate => "operate",
            Self::Admin => "admin",
        }
    }

    /// The scope named `name` (exactly, lowercase).
    pub fn parse(name: &str) -> Option<Scope> {
        Self::ALL.into_iter().find(|scope| scope.as_str() == name)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a list of scopes is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("name at least one scope (read, submit, decide, operate, admin)")]
    Empty,
    #[error("unknown scope {0}: the scopes are read, submit, decide, operate and admin")]
    Unknown(String),
}

/// Parses `read,submit` (comma-separated, blanks around names ignored, duplicates merged)
/// into sorted scopes.
pub fn parse_scopes(text: &str) -> Result<Vec<Scope>, ScopeError> {
    let mut scopes = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let scope = Scope::parse(name)
            .ok_or_else(|| ScopeError::Unknown(crate::core::bounded::quote(name)))?;
        scopes.push(scope);
    }
    scopes.sort();
    scopes.dedup();
    if scopes.is_empty() {
        return Err(ScopeError::Empty);
    }
    Ok(scopes)
}

/// Whether `held` allows what `needed` guards: the scope itself, or `admin`.
pub fn grants(held: &[Scope], needed: Scope) -> bool {
    held.contains(&needed) || held.contains(&Scope::Admin)
}

/// The lowercase hex SHA-256 of a token: what `api_tokens.token_sha256` holds.
pub fn token_sha256(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The longest note a token may carry, in characters.
pub const MAX_NOTE_CHARS: usize = 500;

/// A token's note as stored: storable (NUL becomes U+FFFD, `core::storable`), at most
/// [`MAX_NOTE_CHARS`] characters. `Err`: the reason it is refused.
pub fn parse_note(text: &str) -> Result<String, String> {
    let chars = text.chars().count();
    if chars > MAX_NOTE_CHARS {
        return Err(format!(
            "a token's note has at most {MAX_NOTE_CHARS} characters (this one has {chars})"
        ));
    }
    Ok(crate::core::storable::text(text).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn scopes_are_read_from_a_comma_separated_list() {
        assert_eq!(
            parse_scopes("submit, read,read"),
            Ok(vec![Scope::Read, Scope::Submit])
        );
        assert_eq!(parse_scopes(" , "), Err(ScopeError::Empty));
        let err = parse_scopes("read,Write").expect_err("unknown");
        assert!(err.to_string().contains("\"Write\""), "{err}");
        assert_eq!(parse_scopes("admin"), Ok(vec![Scope::Admin]));
    }

    #[test]
    fn a_scope_grants_itself_and_admin_grants_everything() {
        assert!(grants(&[Scope::Read], Scope::Read));
        assert!(!grants(&[Scope::Read], Scope::Submit));
        assert!(!grants(&[Scope::Submit, Scope::Decide], Scope::Operate));
        for scope in Scope::ALL {
            assert!(grants(&[Scope::Admin], scope), "{scope}");
            assert_eq!(Scope::parse(scope.as_str()), Some(scope));
        }
        assert!(!grants(&[], Scope::Read));
    }

    #[test]
    fn a_token_is_kept_as_its_sha256() {
        assert_eq!(
            token_sha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_note_is_storable_and_bounded() {
        assert_eq!(parse_note("ci bot \u{0}").as_deref(), Ok("ci bot \u{FFFD}"));
        assert!(parse_note(&"x".repeat(MAX_NOTE_CHARS)).is_ok());
        let err = parse_note(&"x".repeat(MAX_NOTE_CHARS + 1)).expect_err("too long");
        assert!(err.contains("at most"), "{err}");
    }

    proptest! {
        /// Any text is a note once made storable (NUL replaced), or refused by its length.
        #[test]
        fn any_note_is_stored_storable_or_refused(text in any::<String>()) {
            match parse_note(&text) {
                Ok(note) => {
                    prop_assert!(crate::core::storable::is_storable(&note));
                    prop_assert_eq!(note.chars().count(), text.chars().count());
                }
                Err(reason) => prop_assert!(reason.contains("at most")),
            }
        }
    }
}
