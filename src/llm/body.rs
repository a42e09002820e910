//! The request body, assembled from pieces instead of serialized whole: the system prompt's
//! template parts are JSON-escaped once and shared (reference-counted) by every request in
//! flight, and only what differs per request (the state snapshot, the history, the input)
//! is escaped and copied. The result is the same bytes `serde_json` would produce for
//! [`super::wire::ChatRequest`] (a test checks it), sent with its `Content-Length`. The
//! pieces are cut where the record (CONTRACT §12) wants them: what repeats from one request
//! of a task to the next is a piece of its own, so it is stored once.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use super::wire::{StreamOptions, WireTool, role_name};
use crate::core::text::{Piece, Text};
use crate::ports::{BodyPart, LlmRequest};

/// A body in pieces, in order, and its length. Each piece is one part of the record
/// (CONTRACT §12): the glue between messages, one plain message, one fixed part of the
/// system prompt template or the state snapshot between them, the tail with the tools.
#[derive(Debug, Default)]
pub(crate) struct Body {
    pub chunks: Vec<Bytes>,
    /// For each chunk, where the JSON-escaped text of a message is in it (none for glue).
    pub texts: Vec<Option<Range<usize>>>,
    pub len: usize,
    /// Bytes not yet turned into a chunk.
    open: Vec<u8>,
}

/// A shared template part as the bytes of a chunk, without copying it.
struct Shared(Arc<str>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl Body {
    fn push(&mut self, bytes: &[u8]) {
        self.open.extend_from_slice(bytes);
    }

    fn push_json<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        // Serializing plain data into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.open, value);
    }

    /// Appends `text` escaped, without quotes; where it is in the open chunk.
    fn push_escaped(&mut self, text: &str) -> Range<usize> {
        let start = self.open.len();
        self.push_json(text);
        // Drop the quotes serde_json wrote around it.
        self.open.pop();
        self.open.remove(start);
        start..self.open.len()
    }

    fn push_shared(&mut self, part: &Arc<str>) {
        self.close(None);
        self.len += part.len();
        self.texts.push(Some(0..part.len()));
        self.chunks
            .push(Bytes::from_owner(Shared(Arc::clone(part))));
    }

    fn close(&mut self, text: Option<Range<usize>>) {
        if !self.open.is_empty() {
            let open = std::mem::take(&mut self.open);
            self.len += open.len();
            self.texts.push(text);
            self.chunks.push(Bytes::from(open));
        }
    }

    /// The chunks with the text ranges, for the record.
    pub(crate) fn parts(&self) -> Vec<BodyPart> {
        self.chunks
            .iter()
            .zip(&self.texts)
            .map(|(bytes, text)| BodyPart {
                bytes: bytes.clone(),
                text: text.clone(),
            })
            .collect()
    }
}

/// The fields an agent version's `params` cannot set: the request is made of them.
const RESERVED: &[&str] = &["model", "messages", "tools", "stream", "stream_options"];

/// The Chat Completions body of `request`.
pub(crate) fn build(request: &LlmRequest<'_>) -> Body {
    let mut body = Body::default();
    body.push(b"{\"model\":");
    body.push_json(request.model);
    body.push(b",\"messages\":[");
    body.close(None);
    for (i, message) in request.messages.iter().enumerate() {
        if i > 0 {
            body.push(b",");
        }
        body.push(b"{\"role\":\"");
        body.push(role_name(message.role).as_bytes());
        body.push(b"\",\"content\":\"");
        match &message.content {
            Text::Plain(text) => {
                let range = body.push_escaped(text);
                body.push(b"\"}");
                body.close(Some(range));
            }
            prompt @ Text::Prompt { .. } => {
                body.close(None);
                for piece in prompt.pieces() {
                    match piece {
                        Piece::Escaped(part) => body.push_shared(part),
                        Piece::Raw(text) => {
                            let range = body.push_escaped(text);
                            body.close(Some(range));
                        }
                    }
                }
                body.push(b"\"}");
                body.close(None);
            }
        }
    }
    body.push(b"]");
    if !request.tools.is_empty() {
        body.push(b",\"tools\":");
        let tools: Vec<WireTool<'_>> = request.tools.iter().map(WireTool::from).collect();
        body.push_json(&tools);
    }
    for (key, value) in request.params.into_iter().flatten() {
        if !RESERVED.contains(&key.as_str()) {
            body.push(b",");
            body.push_json(key);
            body.push(b":");
            body.push_json(value);
        }
    }
    body.push(b",\"stream\":");
    body.push_json(&request.stream);
    if request.stream {
        body.push(b",\"stream_options\":");
        body.push_json(&StreamOptions {
            include_usage: true,
        });
    }
    body.push(b"}");
    body.close(None);
    body
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::prompt::PromptTemplate;
    use crate::core::types::{ChatMessage, Role, ToolSpec};
    use crate::llm::wire::{ChatRequest, WireMessage};

    fn joined(body: &Body) -> Vec<u8> {
        body.chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    #[test]
    fn the_pieces_make_the_same_json_as_serde() {
        let template = PromptTemplate::new("sys \"quoted\"\n{{current_state}}\nend ✓").unwrap();
        let messages = [
            ChatMessage::new(Role::User, "hi \"there\" \u{1}"),
            ChatMessage::new(Role::System, template.render("{\"k\":\"v\\\\n\"}".into())),
            ChatMessage::new(Role::Assistant, "{}"),
        ];
        let tools = [ToolSpec {
            name: "calculate".into(),
            description: "math".into(),
            parameters: json!({"type": "object"}),
        }];
        for (stream, tools) in [(false, &tools[..]), (true, &[][..])] {
            let request = LlmRequest {
                model: "m\"x",
                messages: &messages,
                tools,
                stream,
                on_delta: None,
                params: None,
            };
            let body = build(&request);
            let expected = serde_json::to_vec(&ChatRequest {
                model: request.model,
                messages: messages.iter().map(WireMessage::from).collect(),
                tools: tools.iter().map(WireTool::from).collect(),
                stream,
                stream_options: stream.then_some(StreamOptions {
                    include_usage: true,
                }),
            })
            .unwrap();
            assert_eq!(
                String::from_utf8(joined(&body)).unwrap(),
                String::from_utf8(expected).unwrap()
            );
            assert_eq!(body.len, joined(&body).len());
        }
    }

    #[test]
    fn a_version_s_params_join_the_body_and_never_replace_its_fields() {
        let messages = [ChatMessage::new(Role::User, "hi")];
        let params = json!({
            "temperature": 0.2, "top_p": 0.9, "max_tokens": 64, "seed": 7,
            "model": "other", "stream": true, "messages": [], "response_format": {"type": "json_object"}
        });
        let request = LlmRequest {
            model: "m",
            messages: &messages,
            tools: &[],
            stream: false,
            on_delta: None,
            params: params.as_object(),
        };
        let body: serde_json::Value = serde_json::from_slice(&joined(&build(&request))).unwrap();
        assert_eq!(body["temperature"], json!(0.2));
        assert_eq!(body["top_p"], json!(0.9));
        assert_eq!(body["max_tokens"], json!(64));
        assert_eq!(body["seed"], json!(7));
        assert_eq!(body["response_format"], json!({"type": "json_object"}));
        assert_eq!(body["model"], json!("m"));
        assert_eq!(body["stream"], json!(false));
        assert_eq!(body["messages"][0]["content"], json!("hi"));
    }

    #[test]
    fn each_message_text_is_a_piece_of_its_own() {
        let template = PromptTemplate::new("sys \"q\"\n{{current_state}}\nend").unwrap();
        let messages = [
            ChatMessage::new(Role::User, "hi \"there\""),
            ChatMessage::new(Role::System, template.render("{\"k\":1}".into())),
            ChatMessage::new(Role::Assistant, "{}"),
        ];
        let request = LlmRequest {
            model: "m",
            messages: &messages,
            tools: &[],
            stream: false,
            on_delta: None,
            params: None,
        };
        let parts = build(&request).parts();
        let texts: Vec<String> = parts
            .iter()
            .filter_map(|part| {
                let range = part.text.clone()?;
                let escaped = std::str::from_utf8(&part.bytes[range]).unwrap();
                Some(serde_json::from_str::<String>(&format!("\"{escaped}\"")).unwrap())
            })
            .collect();
        assert_eq!(
            texts,
            ["hi \"there\"", "sys \"q\"\n", "{\"k\":1}", "\nend", "{}"]
        );
        // The history message is one piece with its glue.
        let last = &parts[parts.len() - 2];
        assert_eq!(
            &last.bytes[..],
            b",{\"role\":\"assistant\",\"content\":\"{}\"}"
        );
    }
}
