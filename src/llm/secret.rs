//! A secret string (the LLM API key) that cannot leak through formatting: its `Debug` and
//! `Display` print `[redacted]`, so a derived `Debug` on any settings type stays safe and a
//! stray `{}` or `{:?}` in a log line shows nothing. Reading the value takes an explicit
//! [`Secret::expose`].

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

#[cfg(test)]
mod tests {
    use super::*;

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
