//! OpenAI Chat Completions wire types, kept private to `llm/`. The request side is exact;
//! the response side is lenient because "OpenAI-compatible" servers differ: unknown fields
//! are ignored, `content` may be null, missing or an array of text parts, `finish_reason`
//! may be absent, tool call ids may be missing (a `call_<uuid>` id is generated),
//! `arguments` may arrive as a JSON object instead of a string, and `usage` is optional.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[cfg(test)]
use crate::core::types::{ChatMessage, Text};
use crate::core::types::{LlmReply, Role, ToolCallRequest, ToolSpec, Usage};

/// The body of `POST {base_url}/chat/completions`, as serde writes it: what `body.rs`
/// assembles from pieces must equal it (its test checks).
#[cfg(test)]
#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: Vec<WireMessage<'a>>,
    /// Omitted when the agent may call no tool: some servers reject `"tools": []`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<WireTool<'a>>,
    pub stream: bool,
    /// Sent with `stream: true` only, asking for the usage chunk at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

/// `stream_options` of a streamed request.
#[derive(Debug, Serialize)]
pub(crate) struct StreamOptions {
    /// Ask for a final chunk with `usage` (and no choices).
    pub include_usage: bool,
}

/// One request message.
#[cfg(test)]
#[derive(Debug, Serialize)]
pub(crate) struct WireMessage<'a> {
    pub role: &'static str,
    pub content: &'a Text,
}

#[cfg(test)]
impl<'a> From<&'a ChatMessage> for WireMessage<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        Self {
            role: role_name(message.role),
            content: &message.content,
        }
    }
}

/// The wire name of a role.
pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::System => "system",
        Role::Assistant => "assistant",
    }
}

/// One offered tool: `{"type": "function", "function": {...}}`.
#[derive(Debug, Serialize)]
pub(crate) struct WireTool<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: WireFunctionSpec<'a>,
}

/// The function part of an offered tool.
#[derive(Debug, Serialize)]
pub(crate) struct WireFunctionSpec<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub parameters: &'a Value,
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: WireFunctionSpec {
                name: &spec.name,
                description: &spec.description,
                parameters: &spec.parameters,
            },
        }
    }
}

/// A (non-streamed) completion response. Every field is optional on purpose.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChatResponse {
    #[serde(default)]
    pub choices: Option<Vec<Choice>>,
    #[serde(default)]
    pub usage: Option<Value>,
    /// Some gateways answer 200 with an error object instead of choices.
    #[serde(default)]
    pub error: Option<Value>,
}

/// One choice; only the first is used.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Choice {
    #[serde(default)]
    pub message: Option<ResponseMessage>,
}

/// The assistant message of a choice.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponseMessage {
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCall>>,
}

/// A native tool call as sent by the provider.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireToolCall {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<WireFunctionCall>,
}

/// The function part of a tool call.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireFunctionCall {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<Value>,
}

impl ChatResponse {
    /// Normalizes the first choice into an [`LlmReply`]; `Err` names what was missing.
    pub fn into_reply(self) -> Result<LlmReply, String> {
        let usage = self.usage.as_ref().map(usage_from).unwrap_or_default();
        let Some(choice) = self.choices.and_then(|c| c.into_iter().next()) else {
            return Err(match self.error.as_ref().and_then(error_text) {
                Some(message) => format!("no choices; provider error: {message}"),
                None => "response has no choices".to_owned(),
            });
        };
        let message = choice.message.unwrap_or_default();
        let content = message
            .content
            .as_ref()
            .map(content_text)
            .unwrap_or_default();
        let tool_calls = message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(tool_call_from)
            .collect();
        Ok(LlmReply {
            content,
            tool_calls,
            usage,
        })
    }
}

/// The text of an OpenAI-shaped error value: `{"message": ..}` or a bare string.
pub(crate) fn error_text(error: &Value) -> Option<String> {
    match error {
        Value::String(text) => Some(text.clone()),
        Value::Object(map) => map
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// `content` as text: a string, an array of `{"type":"text","text":..}` parts, or null.
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                other => other.get("text").and_then(Value::as_str),
            })
            .collect(),
        other => other.to_string(),
    }
}

/// Normalizes one tool call: a `call_<uuid>` id when it has none, an empty name when it has
/// none, and `arguments` as the raw string (`{}` when absent, JSON text when an object).
pub(crate) fn tool_call_from(call: WireToolCall) -> ToolCallRequest {
    let id = match call.id {
        Some(id) if !id.trim().is_empty() => id,
        _ => format!("call_{}", uuid::Uuid::new_v4().simple()),
    };
    let function = call.function.unwrap_or_default();
    // A missing name stays empty: the registry then reports "unknown tool" to the model,
    // which is more useful than silently dropping the call.
    let name = function.name.unwrap_or_default();
    let arguments = match function.arguments {
        Some(Value::String(raw)) => raw,
        None | Some(Value::Null) => "{}".to_owned(),
        Some(other) => other.to_string(),
    };
    ToolCallRequest {
        id,
        name,
        arguments,
    }
}

/// `prompt_tokens` and `completion_tokens` of a `usage` object.
pub(crate) fn usage_from(usage: &Value) -> Usage {
    Usage {
        prompt_tokens: usage.get("prompt_tokens").and_then(Value::as_i64),
        completion_tokens: usage.get("completion_tokens").and_then(Value::as_i64),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reply(body: Value) -> Result<LlmReply, String> {
        serde_json::from_value::<ChatResponse>(body)
            .map_err(|e| e.to_string())?
            .into_reply()
    }

    #[test]
    fn request_omits_empty_tools_and_keeps_roles() -> Result<(), serde_json::Error> {
        let messages = [
            ChatMessage::new(Role::User, "hi"),
            ChatMessage::new(Role::System, "state"),
            ChatMessage::new(Role::Assistant, "{}"),
        ];
        let request = ChatRequest {
            model: "m",
            messages: messages.iter().map(WireMessage::from).collect(),
            tools: Vec::new(),
            stream: false,
            stream_options: None,
        };
        let body = serde_json::to_value(&request)?;
        assert_eq!(
            body,
            json!({"model": "m", "stream": false, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "state"},
                {"role": "assistant", "content": "{}"}]})
        );
        Ok(())
    }

    #[test]
    fn request_offers_tools_as_functions() -> Result<(), serde_json::Error> {
        let spec = ToolSpec {
            name: "calculate".into(),
            description: "math".into(),
            parameters: json!({"type": "object"}),
        };
        let body = serde_json::to_value(WireTool::from(&spec))?;
        assert_eq!(
            body,
            json!({"type": "function", "function": {
                "name": "calculate", "description": "math", "parameters": {"type": "object"}}})
        );
        Ok(())
    }

    #[test]
    fn lenient_response_is_normalized() -> Result<(), String> {
        let got = reply(json!({
            "id": "x", "unknown": [1, 2],
            "choices": [{"message": {"content": null, "tool_calls": [
                {"function": {"name": "calculate", "arguments": {"expression": "1+1"}}},
                {"id": "abc", "function": {"name": "current_time"}},
                {"id": "def", "function": {"name": "take_memo", "arguments": "{\"note\":\"n\"}"}}
            ]}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        }))?;
        assert_eq!(got.content, "");
        assert!(got.tool_calls[0].id.starts_with("call_"));
        assert_eq!(got.tool_calls[0].id.len(), "call_".len() + 32);
        assert_eq!(got.tool_calls[0].arguments, r#"{"expression":"1+1"}"#);
        assert_eq!(got.tool_calls[1].id, "abc");
        assert_eq!(got.tool_calls[1].arguments, "{}");
        assert_eq!(got.tool_calls[2].arguments, r#"{"note":"n"}"#);
        assert_eq!(got.usage.prompt_tokens, Some(12));
        assert_eq!(got.usage.completion_tokens, Some(3));
        Ok(())
    }

    #[test]
    fn content_parts_and_missing_message_fields() -> Result<(), String> {
        let parts = reply(json!({"choices": [{"message": {"content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]}))?;
        assert_eq!(parts.content, "ab");
        let bare = reply(json!({"choices": [{}]}))?;
        assert_eq!(bare, LlmReply::default());
        Ok(())
    }

    #[test]
    fn no_choices_is_an_error_naming_the_provider_message() {
        assert_eq!(
            reply(json!({"choices": []})),
            Err("response has no choices".to_owned())
        );
        assert_eq!(
            reply(json!({"error": {"message": "overloaded"}})),
            Err("no choices; provider error: overloaded".to_owned())
        );
    }
}
