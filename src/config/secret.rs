//! A secret string (the LLM API key, the gateway's tokens, the control signing keys) that
//! cannot leak through formatting: its `Debug` and `Display` print `[redacted]`, so a derived
//! `Debug` on any settings type stays safe and a stray `{}` or `{:?}` in a log line shows
//! nothing. Reading the value takes an explicit [`Secret::expose`].
//!
//! [`redact_userinfo`] does the same for URLs: whatever stands before the `@` of a URL's
//! authority (a user, a password, a token used as a user name) never reaches an error or a
//! log line.

use std::fmt;

use serde::Deserialize;

/// A string that never prints itself. Deserializes from a plain string.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself. Only for putting it on the wire, never for logging.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `url` with its userinfo (everything before the `@` of the authority) replaced by `***`.
/// Works on text that is not a valid URL too, since that is when it ends up in an error.
pub fn redact_userinfo(url: &str) -> String {
    let authority_start = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_len].rfind('@') {
        Some(at) => format!(
            "{}***{}",
            &url[..authority_start],
            &url[authority_start + at..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_never_shows() {
        let cases = [
            ("http://u:secret@h:8080/v1", "http://***@h:8080/v1"),
            ("https://sk-token@h/v1", "https://***@h/v1"),
            ("http://u:p@ss@h:notaport/v1", "http://***@h:notaport/v1"),
            ("u:secret@h/v1", "***@h/v1"),
            ("http://h/v1?next=a@b", "http://h/v1?next=a@b"),
            ("http://h:8080/v1", "http://h:8080/v1"),
        ];
        for (url, redacted) in cases {
            assert_eq!(redact_userinfo(url), redacted, "{url}");
        }
    }

    #[test]
    fn formatting_never_shows_the_value() {
        let secret = Secret::new("sk-very-secret");
        assert_eq!(format!("{secret}"), "[redacted]");
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(format!("{:#?}", Some(&secret)), "Some(\n    [redacted],\n)");
        assert_eq!(secret.expose(), "sk-very-secret");
    }

    #[test]
    fn deserializes_from_a_plain_string() -> Result<(), serde_json::Error> {
        let secret: Secret = serde_json::from_str("\"sk-abc\"")?;
        assert_eq!(secret.expose(), "sk-abc");
        assert_eq!(secret, Secret::from("sk-abc"));
        Ok(())
    }
}
