//! The `[gateway]` section: the HTTP/SSE interface of `agentd serve`, as plain data (the
//! gateway reads it: `gateway::listen_address`, `gateway::auth`).

use serde::{Deserialize, Deserializer};

use super::secret::Secret;

/// The `[gateway]` section: the HTTP/SSE interface of `agentd serve`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct GatewaySettings {
    /// Address to listen on, e.g. `127.0.0.1:8787`.
    pub bind: String,
    /// Accepted bearer tokens. Empty: no auth, and only loopback binds and peers are allowed.
    /// A list, or one comma-separated string (`AGENTD__GATEWAY__TOKENS=a,b`).
    #[serde(deserialize_with = "tokens_from_config")]
    pub tokens: Vec<Secret>,
    /// Seconds between SSE heartbeat comments on an idle event stream.
    pub heartbeat_secs: u64,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Bounds of `agentd serve` (docs/gateway.md#bounds): connections served at once, the
    /// time a client has to send a request head, the bytes of stored events one page reads
    /// and one event stream may queue, and the size of `GET /v1/tasks/{id}`.
    pub max_connections: usize,
    pub header_read_timeout_secs: u64,
    pub stream_page_bytes: usize,
    pub stream_buffer_bytes: usize,
    pub trace_page_recursions: usize,
    pub max_field_chars: usize,
    /// Host names served without tokens besides the loopback ones (the DNS-rebinding rule).
    pub allowed_hosts: Vec<String>,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8787".to_owned(),
            tokens: Vec::new(),
            heartbeat_secs: 15,
            max_body_bytes: 65_536,
            max_connections: 512,
            header_read_timeout_secs: 10,
            stream_page_bytes: 1024 * 1024,
            stream_buffer_bytes: 1024 * 1024,
            trace_page_recursions: 100,
            max_field_chars: 65_536,
            allowed_hosts: Vec::new(),
        }
    }
}

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
}
