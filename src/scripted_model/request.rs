//! What the scripted model reads of a request, and records: the Chat Completions body, the
//! `Authorization` header and the exact bytes, with one reader for the messages, the offered
//! tools and the state snapshot at the end of the system message (seed 002 §5), so every
//! script reads the snapshot the same way.

use serde::Deserialize;
use serde_json::Value;

use crate::core::state::ToolResultView;

/// One `POST /v1/chat/completions` as the model received it.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The JSON body (the raw text as a JSON string when it was not JSON).
    pub body: Value,
    /// The `Authorization` header, e.g. `Bearer sk-...`.
    pub authorization: Option<String>,
    /// The body exactly as received.
    pub bytes: Vec<u8>,
}

impl ModelRequest {
    /// `(role, content)` of every message, in order (content `""` when it is null or
    /// missing, its JSON text when it is not a string).
    pub fn messages(&self) -> Vec<(String, String)> {
        self.raw_messages()
            .iter()
            .map(|m| {
                let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
                (role.to_owned(), content_text(m))
            })
            .collect()
    }

    /// Whether the request asked for a stream (`"stream": true`).
    pub fn streamed(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// `messages[0].content`: the task's input in the seeds' layout.
    pub fn user_input(&self) -> String {
        self.raw_messages()
            .first()
            .map(content_text)
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

    /// How many assistant messages the request carries: one per earlier recursion in the
    /// seeds' layout, until compaction folds old ones into the snapshot.
    pub fn assistant_messages(&self) -> usize {
        self.raw_messages()
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .count()
    }

    /// Recursions finished before this request: `current_recursion.iteration_index - 1` of
    /// the snapshot, else the number of assistant messages. The snapshot comes first because
    /// compaction folds old assistant messages away, so counting them alone undercounts.
    pub fn recursions_done(&self) -> u32 {
        match self.snapshot().and_then(|s| s.iteration_index()) {
            Some(index) => index.saturating_sub(1),
            None => u32::try_from(self.assistant_messages()).unwrap_or(u32::MAX),
        }
    }

    /// The state snapshot in the system message (the first `system` message, else
    /// `messages[1]`): the JSON value that follows the last ```` ```json ```` fence and
    /// parses, else the last top-level `{...}` in the text that parses.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let messages = self.raw_messages();
        let system = messages
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .or_else(|| messages.get(1))?;
        let text = system.get("content").and_then(Value::as_str)?;
        last_fenced_json(text)
            .or_else(|| last_json_object(text))
            .map(Snapshot)
    }

    /// The snapshot as plain JSON, for tests that look anywhere in it.
    pub fn system_state(&self) -> Option<Value> {
        self.snapshot().map(Snapshot::into_value)
    }

    fn raw_messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

/// The state snapshot a request carries, read through the fields the scripts need.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot(Value);

/// The part of `current_recursion` a script reads.
#[derive(Deserialize)]
struct CurrentRecursion {
    trace_id: Option<String>,
    iteration_index: Option<u32>,
}

impl Snapshot {
    /// The snapshot's JSON.
    pub fn value(&self) -> &Value {
        &self.0
    }

    /// The snapshot's JSON, owned.
    pub fn into_value(self) -> Value {
        self.0
    }

    fn current(&self) -> Option<CurrentRecursion> {
        CurrentRecursion::deserialize(self.0.get("current_recursion")?).ok()
    }

    /// `current_recursion.iteration_index`: the 1-based number of the recursion asked for.
    pub fn iteration_index(&self) -> Option<u32> {
        self.current()?.iteration_index
    }

    /// `current_recursion.trace_id`.
    pub fn trace_id(&self) -> Option<String> {
        self.current()?.trace_id
    }

    /// Every entry of every `tool_call_results` list in the snapshot (the last recursion's,
    /// those shown under plan steps, ...), depth first; entries that are not tool results
    /// are skipped.
    pub fn tool_results(&self) -> Vec<ToolResultView> {
        let mut found = Vec::new();
        visit(&self.0, &mut |object| {
            let results = object.get("tool_call_results").and_then(Value::as_array);
            found.extend(
                results
                    .into_iter()
                    .flatten()
                    .filter_map(|r| ToolResultView::deserialize(r).ok()),
            );
        });
        found
    }
}

fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The value after the last ```` ```json ```` fence that parses. Fences are read from the
/// start and a value that parses is skipped whole, so a fence inside one of its strings (an
/// objective quoting markdown) is not taken for the snapshot's.
fn last_fenced_json(text: &str) -> Option<Value> {
    const FENCE: &str = "```json";
    let mut last = None;
    let mut at = 0;
    while let Some(offset) = text[at..].find(FENCE) {
        let start = at + offset + FENCE.len();
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) => {
                last = Some(value);
                at = start + stream.byte_offset();
            }
            _ => at = start,
        }
    }
    last
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

/// Calls `f` on every object, depth first.
fn visit(value: &Value, f: &mut impl FnMut(&serde_json::Map<String, Value>)) {
    match value {
        Value::Object(map) => {
            f(map);
            map.values().for_each(|v| visit(v, f));
        }
        Value::Array(items) => items.iter().for_each(|v| visit(v, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(system: &str) -> ModelRequest {
        let body = json!({"messages": [
            {"role": "user", "content": "in"},
            {"role": "system", "content": system},
            {"role": "assistant", "content": "a1"}
        ]});
        ModelRequest {
            bytes: body.to_string().into_bytes(),
            body,
            authorization: None,
        }
    }

    #[test]
    fn the_snapshot_is_the_last_fenced_value_even_with_a_fence_in_a_string() {
        let system = "## 4\n```json\n{\"x\": 1}\n```\n## 6\n```json\n{\"current_recursion\": \
            {\"trace_id\": \"t\", \"iteration_index\": 4}, \"context\": {\"objective\": \
            \"see ```json {} ```\"}}\n```\nYou must:";
        let snapshot = request(system).snapshot().expect("a snapshot");
        assert_eq!(snapshot.iteration_index(), Some(4));
        assert_eq!(snapshot.trace_id().as_deref(), Some("t"));
        assert_eq!(request(system).recursions_done(), 3);
    }

    #[test]
    fn without_a_snapshot_recursions_are_counted_by_assistant_messages() {
        let plain = request("no state here");
        assert_eq!(plain.snapshot(), None);
        assert_eq!(plain.recursions_done(), 1);
        assert_eq!(plain.user_input(), "in");
    }

    #[test]
    fn tool_results_are_found_anywhere() {
        let system = format!(
            "```json\n{}\n```",
            json!({"last_recursion": {"tool_call_results": [
                {"tool_call_id": "c1", "name": "calculate", "arguments": {}, "success": true, "result": 3},
                {"not": "a result"}
            ]}, "context": {"plan": [{"tool_call_results": [
                {"tool_call_id": "c2", "name": "calculate", "arguments": {}, "success": false, "error": "x"}
            ]}]}})
        );
        let results = request(&system).snapshot().unwrap().tool_results();
        let mut ids: Vec<&str> = results.iter().map(|r| r.tool_call_id.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["c1", "c2"]);
    }
}
