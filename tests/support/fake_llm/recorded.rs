//! What the fake records of each request, with helpers to read the messages, the offered
//! tools and the state snapshot embedded in the system message.

use serde_json::Value;

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The JSON body (the raw text as a JSON string when it was not JSON).
    pub body: Value,
    /// The `Authorization` header, e.g. `Bearer sk-...`.
    pub authorization: Option<String>,
    /// The body exactly as received.
    pub bytes: Vec<u8>,
}

impl RecordedRequest {
    /// `(role, content)` of every message, in order.
    pub fn messages(&self) -> Vec<(String, String)> {
        let Some(messages) = self.body.get("messages").and_then(Value::as_array) else {
            return Vec::new();
        };
        messages
            .iter()
            .map(|m| {
                let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
                let content = match m.get("content") {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                (role.to_owned(), content)
            })
            .collect()
    }

    /// Whether the request asked for a stream (`"stream": true`).
    pub fn streamed(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// `messages[0].content`: the user's input.
    pub fn user_input(&self) -> String {
        self.messages()
            .into_iter()
            .next()
            .map(|(_, content)| content)
            .unwrap_or_default()
    }

    /// The names of the offered tools (`tools[].function.name`).
    pub fn tool_names(&self) -> Vec<String> {
        let Some(tools) = self.body.get("tools").and_then(Value::as_array) else {
            return Vec::new();
        };
        tools
            .iter()
            .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect()
    }

    /// The JSON state snapshot embedded in the system message (`messages[1]`, or the first
    /// system message): the last ```` ```json ```` fenced block that parses, else the last
    /// top-level `{...}` that parses.
    pub fn system_state(&self) -> Option<Value> {
        let messages = self.messages();
        let system = messages
            .iter()
            .find(|(role, _)| role == "system")
            .or_else(|| messages.get(1))?;
        last_fenced_json(&system.1).or_else(|| last_json_object(&system.1))
    }
}

fn last_fenced_json(text: &str) -> Option<Value> {
    text.rmatch_indices("```json").find_map(|(at, fence)| {
        let body = &text[at + fence.len()..];
        let end = body.find("```")?;
        serde_json::from_str::<Value>(body[..end].trim()).ok()
    })
}

fn last_json_object(text: &str) -> Option<Value> {
    let mut last = None;
    let mut at = 0;
    while let Some(offset) = text[at..].find('{') {
        let start = at + offset;
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value @ Value::Object(_))) => {
                last = Some(value);
                at = start + stream.byte_offset();
            }
            _ => at = start + 1,
        }
    }
    last
}
