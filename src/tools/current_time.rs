//! The `current_time` tool: the current UTC time as an RFC 3339 string.

use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::core::types::ToolSpec;
use crate::ports::ToolOutput;

/// The tool's name.
pub(crate) const NAME: &str = "current_time";

/// How the tool is offered to the model.
pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description: "The current date and time in UTC (RFC 3339).".to_owned(),
        parameters: json!({ "type": "object", "properties": {} }),
    }
}

/// Runs the tool; arguments are ignored.
pub(crate) fn run(_arguments: &Value) -> Result<ToolOutput, String> {
    let utc = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
    Ok(ToolOutput {
        result: json!({ "utc": utc }),
        memo: None,
    })
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;

    #[test]
    fn returns_a_parsable_utc_timestamp() {
        let before = Utc::now();
        let out = run(&json!({})).ok().map(|o| o.result);
        let utc = out
            .as_ref()
            .and_then(|r| r["utc"].as_str())
            .unwrap_or_default();
        assert!(utc.ends_with('Z'), "{utc}");
        let parsed = DateTime::parse_from_rfc3339(utc).map(|t| t.with_timezone(&Utc));
        assert!(parsed.is_ok_and(|t| t >= before - chrono::Duration::milliseconds(1)));
    }
}
