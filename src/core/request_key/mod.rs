//! `llm_calls.request_key` (CONTRACT v3 §12): the SHA-256 of a request in canonical form,
//! so that two runs of one agent version on one input whose model saw the same things have
//! equal keys, although their task ids, trace ids and clocks differ.
//!
//! The canonical form is the JSON value `{"model", "messages": [{"role", "content"}],
//! "tools"}` of the request (the transport flags `stream` and `stream_options` are left
//! out: they change how the answer travels, not what the model sees), serialized with
//! sorted keys, in which:
//!
//! - the state snapshot inside the system prompt and every assistant (history) message that
//!   is JSON are parsed, masked and written back;
//! - every string under a key `task_id`, `trace_id` or `tool_call_id` is an id: each
//!   distinct id becomes `<task_id:N>`, `<trace_id:N>` or `<tool_call_id:N>`, numbered per
//!   kind in order of first appearance (snapshot first, then the history in order), and
//!   every occurrence of that id inside any other string of those messages (a memory note
//!   quoting a trace id) becomes the same placeholder;
//! - every string under a key ending in `_at` that is an RFC 3339 time becomes
//!   `<timestamp>`;
//! - every number under `duration_ms`, `elapsed_ms`, `latency_ms` or `queued_ms`, and
//!   `wall_secs` of a budget's `used` (the task's age), becomes `<elapsed>`.
//!
//! The user's input (message 0) and text that is not JSON are kept as they are.
//!
//! [`canonical`] builds that value; [`request_key`] writes the same JSON text straight into
//! the hasher (the template's parts escaped once, no copy of the whole request, the ids
//! found in one pass over each string: `mask`), which a property holds byte for byte to
//! `canonical(..).to_string()`; [`request_key_with`] also starts a task's later requests
//! from the hash state after the head they share (`hashing`).

mod finder;
mod hashing;
mod mask;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

pub use hashing::KeyHead;
use hashing::{Hashing, Scratch};
use mask::Masker;

use crate::core::text::{Piece, Text, hex};
use crate::core::types::{ChatMessage, Role, ToolSpec};

/// Replaces an RFC 3339 time under a key ending in `_at`.
pub const TIMESTAMP: &str = "<timestamp>";
/// Replaces an elapsed time.
pub const ELAPSED: &str = "<elapsed>";

/// Lowercase hex SHA-256 of `chunks` taken together.
pub fn sha256_hex<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut hasher = Sha256::new();
    for chunk in chunks {
        hasher.update(chunk);
    }
    hex(&hasher.finalize())
}

/// The request key: lowercase hex SHA-256 of [`canonical`]'s JSON text, written into the
/// hasher as it is made (keys in the order `serde_json` sorts them).
pub fn request_key(model: &str, messages: &[ChatMessage], tools: &[ToolSpec]) -> String {
    request_key_with(&mut KeyHead::default(), model, messages, tools)
}

/// [`request_key`], starting from `head`'s hash state when the request begins as the one it
/// was made for (the same input and template): a task's requests share their first 15 KB
/// or so, which is then not hashed again. `head` is made (or remade) otherwise.
pub fn request_key_with(
    head: &mut KeyHead,
    model: &str,
    messages: &[ChatMessage],
    tools: &[ToolSpec],
) -> String {
    let parsed = masked(messages);
    let mut out = head.start(messages);
    let mut scratch = Scratch::default();
    out.put(b"{\"messages\":[");
    for (index, (message, content)) in messages.iter().zip(&parsed).enumerate() {
        if index > 0 {
            out.put(b",");
        }
        out.put(b"{\"content\":\"");
        content.write_escaped(&message.content, &mut out, &mut scratch);
        out.put(b"\",\"role\":\"");
        out.put(role_name(message.role).as_bytes());
        out.put(b"\"}");
    }
    out.put(b"],\"model\":");
    out.json(&model);
    out.put(b",\"tools\":");
    let tools: Vec<KeyTool<'_>> = tools.iter().map(KeyTool::of).collect();
    out.json(&tools);
    out.put(b"}");
    head.keep(&mut out, messages);
    hex(&out.finish())
}

/// The canonical form of a request (see the module doc).
pub fn canonical(model: &str, messages: &[ChatMessage], tools: &[ToolSpec]) -> Value {
    let parsed = masked(messages);
    let messages: Vec<Value> = messages
        .iter()
        .zip(parsed)
        .map(|(message, content)| {
            json!({"role": role_name(message.role), "content": content.into_text(&message.content)})
        })
        .collect();
    json!({"model": model, "messages": messages, "tools": tools_value(tools)})
}

/// The messages' contents with what is JSON parsed and masked, ids numbered over the whole
/// request.
fn masked(messages: &[ChatMessage]) -> Vec<Content> {
    // Parse what is JSON first, so that ids are numbered over the whole request.
    let mut parsed: Vec<Content> = messages.iter().map(Content::of).collect();
    let mut masker = Masker::default();
    for content in &parsed {
        content.visit(|value| masker.collect(value));
    }
    masker.prepare();
    for content in &mut parsed {
        content.visit_mut(|value| masker.mask(value, None));
    }
    parsed
}

fn tools_value(tools: &[ToolSpec]) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|tool| {
            json!({"type": "function", "function": {
                "name": tool.name, "description": tool.description,
                "parameters": tool.parameters}})
        })
        .collect();
    Value::Array(tools)
}

/// A tool as [`tools_value`] makes it, serialized without building the value: the fields
/// in the order `serde_json` sorts them.
#[derive(serde::Serialize)]
struct KeyTool<'a> {
    function: KeyFunction<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(serde::Serialize)]
struct KeyFunction<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}

impl<'a> KeyTool<'a> {
    fn of(tool: &'a ToolSpec) -> Self {
        Self {
            function: KeyFunction {
                description: &tool.description,
                name: &tool.name,
                parameters: &tool.parameters,
            },
            kind: "function",
        }
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::System => "system",
        Role::Assistant => "assistant",
    }
}

/// A message's text, with its JSON parsed where masking applies.
enum Content {
    /// Kept as it is (the user's input, text that is not JSON).
    Verbatim,
    /// The system prompt: its state snapshot, parsed.
    Snapshot(Value),
    /// A history message that is JSON, parsed.
    Json(Value),
}

impl Content {
    fn of(message: &ChatMessage) -> Self {
        match (&message.content, message.role) {
            (Text::Prompt { fill, .. }, _) => serde_json::from_str(fill)
                .map(Self::Snapshot)
                .unwrap_or(Self::Verbatim),
            (Text::Plain(text), Role::Assistant | Role::System) => serde_json::from_str(text)
                .map(Self::Json)
                .unwrap_or(Self::Verbatim),
            (Text::Plain(_), Role::User) => Self::Verbatim,
        }
    }

    fn visit(&self, mut f: impl FnMut(&Value)) {
        if let Self::Snapshot(value) | Self::Json(value) = self {
            f(value);
        }
    }

    fn visit_mut(&mut self, mut f: impl FnMut(&mut Value)) {
        if let Self::Snapshot(value) | Self::Json(value) = self {
            f(value);
        }
    }

    /// Writes what [`Self::into_text`] makes, escaped as the contents of a JSON string.
    fn write_escaped(&self, original: &Text, out: &mut Hashing, scratch: &mut Scratch) {
        match self {
            Self::Json(value) => scratch.escaped_json(value, out),
            Self::Verbatim | Self::Snapshot(_) => {
                for piece in original.pieces() {
                    match (piece, self) {
                        (Piece::Escaped(part), _) => out.put(part.as_bytes()),
                        // A snapshot's every hole holds the fill, masked.
                        (Piece::Raw(_), Self::Snapshot(value)) => scratch.escaped_json(value, out),
                        (Piece::Raw(text), _) => out.escaped(text),
                    }
                }
            }
        }
    }

    /// The message text with the masked values in place.
    fn into_text(self, original: &Text) -> String {
        match self {
            Self::Verbatim => original.to_string(),
            Self::Json(value) => value.to_string(),
            Self::Snapshot(value) => {
                let Text::Prompt { fill, .. } = original else {
                    return value.to_string();
                };
                let masked = value.to_string();
                original
                    .chunks()
                    .map(|chunk| {
                        if std::ptr::eq(chunk, fill.as_str()) {
                            masked.as_str()
                        } else {
                            chunk
                        }
                    })
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::prompt::PromptTemplate;
    use crate::core::text::TemplateParts;

    fn snapshot(task: &str, trace: &str, at: &str, wall: f64, memo: &str) -> String {
        json!({
            "global": {"task_id": task, "iteration": 1, "created_at": at, "updated_at": at,
                       "budget": {"used": {"wall_secs": wall, "tokens": 10},
                                  "max": {"wall_secs": 60}}},
            "current_recursion": {"trace_id": trace, "iteration_index": 2},
            "context": {"objective": "add", "memory": {"short_term": [
                {"trace_id": "11111111-1111-4111-8111-111111111111", "memory": memo}]}},
            "last_recursion": {"trace_id": "11111111-1111-4111-8111-111111111111",
                "tool_call_results": [{"tool_call_id": "call_x", "result": 3}]}
        })
        .to_string()
    }

    fn request(task: &str, trace: &str, at: &str, wall: f64, memo: &str) -> Vec<ChatMessage> {
        let template = PromptTemplate::new("SYSTEM\n{{current_state}}\nEND").unwrap();
        let history = json!({"iteration": 1, "trace_id": "11111111-1111-4111-8111-111111111111",
                             "status": "done"});
        vec![
            ChatMessage::new(Role::User, format!("input {task}")),
            ChatMessage::new(
                Role::System,
                template.render(snapshot(task, trace, at, wall, memo)),
            ),
            ChatMessage::new(Role::Assistant, history.to_string()),
            ChatMessage::new(Role::Assistant, "not json"),
        ]
    }

    const TASK: &str = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa";
    const TRACE: &str = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb";

    #[test]
    fn volatile_values_are_masked_and_the_rest_kept() {
        let messages = request(TASK, TRACE, "2026-01-01T00:00:00Z", 1.5, "note");
        let canonical = canonical("m", &messages, &[]);
        let system = canonical["messages"][1]["content"].as_str().unwrap();
        assert!(system.starts_with("SYSTEM\n{") && system.ends_with("}\nEND"));
        let state: Value = serde_json::from_str(&system[7..system.len() - 4]).unwrap();
        assert_eq!(state["global"]["task_id"], "<task_id:1>");
        assert_eq!(state["global"]["created_at"], TIMESTAMP);
        assert_eq!(state["global"]["budget"]["used"]["wall_secs"], ELAPSED);
        assert_eq!(state["global"]["budget"]["used"]["tokens"], 10);
        assert_eq!(state["global"]["budget"]["max"]["wall_secs"], 60);
        assert_eq!(state["global"]["iteration"], 1);
        // Numbered in order of first appearance, keys sorted: the memory (in `context`)
        // quotes the last recursion's trace before `current_recursion` comes.
        assert_eq!(state["current_recursion"]["trace_id"], "<trace_id:2>");
        assert_eq!(state["last_recursion"]["trace_id"], "<trace_id:1>");
        assert_eq!(
            state["context"]["memory"]["short_term"][0]["trace_id"],
            "<trace_id:1>"
        );
        let results = &state["last_recursion"]["tool_call_results"][0];
        assert_eq!(results["tool_call_id"], "<tool_call_id:1>");
        assert_eq!(results["result"], 3);
        let history: Value =
            serde_json::from_str(canonical["messages"][2]["content"].as_str().unwrap()).unwrap();
        assert_eq!(history["trace_id"], "<trace_id:1>");
        assert_eq!(canonical["messages"][3]["content"], "not json");
        // The user's input is verbatim, even when it quotes the task id.
        assert_eq!(canonical["messages"][0]["content"], format!("input {TASK}"));
        assert!(canonical.get("stream").is_none());
    }

    #[test]
    fn two_runs_that_saw_the_same_things_have_equal_keys() {
        let a = request(TASK, TRACE, "2026-01-01T00:00:00Z", 1.5, "note");
        let b = request(
            "cccccccc-cccc-4ccc-8ccc-cccccccccccc",
            "dddddddd-dddd-4ddd-8ddd-dddddddddddd",
            "2027-05-05T10:00:00.123+02:00",
            99.0,
            "note",
        );
        // The user's inputs differ (they quote the task id): make them equal.
        let mut b = b;
        b[0] = a[0].clone();
        assert_eq!(request_key("m", &a, &[]), request_key("m", &b, &[]));
    }

    #[test]
    fn what_the_model_sees_changes_the_key() {
        let base = request(TASK, TRACE, "2026-01-01T00:00:00Z", 1.5, "note");
        let key = request_key("m", &base, &[]);
        let other_memo = request(TASK, TRACE, "2026-01-01T00:00:00Z", 1.5, "other note");
        assert_ne!(key, request_key("m", &other_memo, &[]));
        assert_ne!(key, request_key("m2", &base, &[]));
        let tool = ToolSpec {
            name: "calculate".into(),
            description: "math".into(),
            parameters: json!({"type": "object"}),
        };
        assert_ne!(key, request_key("m", &base, &[tool]));
        let mut input = base.clone();
        input[0] = ChatMessage::new(Role::User, "another input");
        assert_ne!(key, request_key("m", &input, &[]));
    }

    #[test]
    fn ids_quoted_inside_text_get_the_same_placeholder() {
        let memo = format!("the trace {TRACE} went well");
        let messages = request(TASK, TRACE, "2026-01-01T00:00:00Z", 1.5, &memo);
        let text = canonical("m", &messages, &[]).to_string();
        assert!(!text.contains(TRACE), "{text}");
        assert!(text.contains("the trace <trace_id:2> went well"), "{text}");
    }

    #[test]
    fn a_time_elsewhere_is_kept_and_a_non_time_under_at_too() {
        let template = PromptTemplate::new("{{current_state}}").unwrap();
        let state = json!({"x": {"fire_at": "not a time", "note": "2026-01-01T00:00:00Z"}});
        let messages = [ChatMessage::new(
            Role::System,
            template.render(state.to_string()),
        )];
        let canonical = canonical("m", &messages, &[]);
        let state: Value =
            serde_json::from_str(canonical["messages"][0]["content"].as_str().unwrap()).unwrap();
        assert_eq!(state["x"]["fire_at"], "not a time");
        assert_eq!(state["x"]["note"], "2026-01-01T00:00:00Z");
    }

    #[test]
    fn a_prompt_whose_fill_is_not_json_is_verbatim() {
        let parts = Arc::new(TemplateParts::split(
            "a {{current_state}} b",
            "{{current_state}}",
        ));
        let messages = [ChatMessage::new(
            Role::System,
            Text::prompt(parts, "not json".into()),
        )];
        assert_eq!(
            canonical("m", &messages, &[])["messages"][0]["content"],
            "a not json b"
        );
    }

    #[test]
    fn the_head_is_hashed_once_per_task() {
        let template = PromptTemplate::new("SYSTEM\n{{current_state}}\nEND").unwrap();
        let mut head = KeyHead::default();
        let first = request(TASK, TRACE, "2026-01-01T00:00:00Z", 1.5, "note");
        let key = request_key_with(&mut head, "m", &first, &[]);
        assert_eq!(key, request_key("m", &first, &[]));
        assert!(format!("{head:?}").contains("kept: true"), "{head:?}");
        // The same input and template parts: the head is taken from the state kept.
        let mut next = first.clone();
        next[1] = ChatMessage::new(Role::System, template.render("{\"a\": 1}".into()));
        let again = PromptTemplate::new("SYSTEM\n{{current_state}}\nEND").unwrap();
        let mut same = first.clone();
        same[1] = ChatMessage::new(Role::System, again.render("{\"a\": 1}".into()));
        let mut kept = KeyHead::default();
        request_key_with(&mut kept, "m", &next, &[]);
        // Another input, or another template: the head is made again, the key is right.
        for messages in [&next, &same, &first] {
            assert_eq!(
                request_key_with(&mut kept, "m", messages, &[]),
                request_key("m", messages, &[])
            );
        }
        let mut other_input = next.clone();
        other_input[0] = ChatMessage::new(Role::User, "another input");
        assert_eq!(
            request_key_with(&mut kept, "m", &other_input, &[]),
            request_key("m", &other_input, &[])
        );
    }

    #[test]
    fn hex_and_sha256() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(
            sha256_hex([b"ab".as_slice(), b"c".as_slice()]),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
