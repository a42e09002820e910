//! A rerun's LLM answers from the record (CONTRACT v3 §13): the adapter the LLM-call path
//! uses instead of the client when a rerun's `llm` is `recorded`. Nothing is sent: the
//! request body is built exactly as the client would send it (so the rerun's own record
//! has its `request_sha256` and parts), and the source's recorded response (a provider body,
//! or a streamed reply reassembled in the same shape) is read as the client reads a
//! provider's body.

use serde::Deserialize;
use serde_json::Value;

use super::body;
use super::wire::ChatResponse;
use crate::core::retry::ErrorClass;
use crate::ports::{Exchange, LlmError, LlmRequest};

/// `llm_calls.status` and `served_from` of an attempt answered from the record.
pub const SERVED_FROM_RECORD: &str = "recorded";

/// The exchange `request` would have had, answered with the recorded `response`.
pub fn recorded_exchange(request: &LlmRequest<'_>, response: Value) -> Exchange {
    let sent = body::build(request).parts();
    let result = ChatResponse::deserialize(&response)
        .map_err(|err| err.to_string())
        .and_then(ChatResponse::into_reply)
        .map_err(|message| LlmError {
            class: ErrorClass::Fatal,
            status: None,
            label: "recorded".to_owned(),
            message: format!("the recorded response cannot be read as a reply: {message}"),
        });
    Exchange {
        result,
        sent,
        response: Some(response),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::types::{ChatMessage, Role};

    #[test]
    fn a_recorded_response_is_read_as_the_client_reads_it_and_the_body_is_built() {
        let messages = vec![ChatMessage::new(Role::User, "hi")];
        let request = LlmRequest {
            model: "m",
            messages: &messages,
            tools: &[],
            stream: false,
            on_delta: None,
            params: None,
        };
        let response = json!({
            "choices": [{"message": {"content": "hello", "tool_calls": [
                {"id": "call_1", "function": {"name": "calculate", "arguments": "{\"expression\":\"1\"}"}}
            ]}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}
        });
        let exchange = recorded_exchange(&request, response.clone());
        let reply = exchange.result.expect("reply");
        assert_eq!(reply.content, "hello");
        assert_eq!(reply.tool_calls[0].id, "call_1");
        assert_eq!(reply.usage.prompt_tokens, Some(7));
        assert_eq!(exchange.response, Some(response));
        let sent: Vec<u8> = exchange
            .sent
            .iter()
            .flat_map(|p| p.bytes.to_vec())
            .collect();
        let body: Value = serde_json::from_slice(&sent).expect("the body is JSON");
        assert_eq!(body["messages"][0]["content"], "hi");
        let broken = recorded_exchange(&request, json!({"error": "x"}));
        assert!(broken.result.is_err());
    }
}
