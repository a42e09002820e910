//! Properties of the record of a model call (CONTRACT §12) on the way to PostgreSQL:
//! whatever Unicode a message or a response holds (NUL, its escape, stray backslashes and
//! quotes), a stored request part and a stored response are storable (`text` and `jsonb`
//! take them), a part still reads as the JSON the body had, with its text made storable and
//! redacted, and its address is the hash of what is stored. The request key written straight
//! into its hasher is the hash of the canonical form's text, byte for byte, whatever the
//! messages hold (ids quoted inside text, times, elapsed values, any Unicode).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::config;
use super::storable::unicode_text;
use crate::core::call_record::{Redactor, part_id, stored_part, stored_response};
use crate::core::prompt::PromptTemplate;
use crate::core::request_key::{KeyHead, canonical, request_key, request_key_with, sha256_hex};
use crate::core::storable::{self, is_storable, is_storable_json, json_text};
use crate::core::text::escape;
use crate::core::types::{ChatMessage, Role, ToolSpec};

/// Ids that recur across a request, one a prefix of another (`call_1`, `call_10`).
const IDS: &[&str] = &[
    "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa",
    "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb",
    "call_1",
    "call_10",
    "\\u0000",
    "\u{0}",
    "好",
];

/// A JSON object in the shape of a snapshot or a history message: ids under id keys, the
/// same ids quoted in text, times, elapsed values and outside text.
fn request_json() -> impl Strategy<Value = Value> {
    let id = || proptest::sample::select(IDS);
    let texts = (unicode_text(), unicode_text());
    (id(), id(), id(), texts, any::<u32>(), any::<bool>()).prop_map(
        |(a, b, c, (text, more), n, flag)| {
            json!({"task_id": a, "trace_id": b, "updated_at": "2026-11-27T10:00:00Z",
                "fire_at": text, "note": format!("{text} {c} {a}{more}"),
                "tool_call_results": [{"tool_call_id": c, "result": more, "duration_ms": n}],
                "budget": {"used": {"wall_secs": f64::from(n) / 7.0, "tokens": n}},
                "flag": flag, "list": [text, c, null]})
        },
    )
}

/// A message of a request: the user's input, the system prompt with a snapshot (or a fill
/// that is not JSON), or a history message (JSON or not).
fn request_message() -> impl Strategy<Value = ChatMessage> {
    prop_oneof![
        unicode_text().prop_map(|text| ChatMessage::new(Role::User, text)),
        (request_json(), unicode_text(), any::<bool>()).prop_map(|(state, text, json)| {
            let template = PromptTemplate::new(format!("A \"{text}\"\n{{{{current_state}}}}\nB"))
                .or_else(|_| PromptTemplate::new("{{current_state}}"))
                .expect("a template");
            let fill = if json { state.to_string() } else { text };
            ChatMessage::new(Role::System, template.render(fill))
        }),
        (request_json(), unicode_text(), any::<bool>()).prop_map(|(value, text, json)| {
            ChatMessage::new(Role::Assistant, if json { value.to_string() } else { text })
        }),
    ]
}

/// A message as the body carries it, and where its escaped text is.
fn message_part(text: &str) -> (String, std::ops::Range<usize>) {
    let head = r#",{"role":"user","content":""#;
    let escaped = escape(text);
    let part = format!("{head}{escaped}\"}}");
    (part, head.len()..head.len() + escaped.len())
}

fn storable_everywhere(content: &str) -> bool {
    is_storable(content) && json_text(content) == content
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn a_stored_part_is_storable_and_the_same_json(text in unicode_text(), redact in any::<bool>()) {
        let (sent, range) = message_part(&text);
        let patterns = if redact { vec!["[0-9a-f]{2}".to_owned(), "\\\\".to_owned()] } else { Vec::new() };
        let redactor = Redactor::new(&patterns).unwrap();
        let part = stored_part(sent.as_bytes(), Some(range), &redactor);
        prop_assert!(storable_everywhere(&part.content), "{:?}", part.content);
        prop_assert_eq!(part.id, part_id(&part.content));
        let parsed: Value = serde_json::from_str(&format!("[{}]", &part.content[1..]))
            .expect("a stored part is JSON");
        let expected = redactor.text(&storable::text(&text)).into_owned();
        prop_assert_eq!(&parsed[0]["content"], &json!(expected));
        if !redact && is_storable(&text) {
            prop_assert_eq!(part.content.as_bytes(), sent.as_bytes());
        }
    }

    #[test]
    fn a_stored_glue_part_is_storable(text in unicode_text()) {
        let glue = format!(r#"{{"model":{},"messages":["#, serde_json::to_string(&text).unwrap());
        let part = stored_part(glue.as_bytes(), None, &Redactor::default());
        prop_assert!(storable_everywhere(&part.content), "{:?}", part.content);
    }

    #[test]
    fn a_stored_response_is_storable(text in unicode_text(), key in unicode_text()) {
        let response = json!({"choices": [{"message": {"content": text, "tool_calls": [
            {"id": key, "function": {"name": text, "arguments": key}}]}}],
            key.clone(): text});
        let redactor = Redactor::new(&["a+".to_owned()]).unwrap();
        let stored = stored_response(response, &redactor);
        prop_assert!(is_storable_json(&stored));
        prop_assert!(storable_everywhere(&stored.to_string()));
    }

    #[test]
    fn the_request_key_hashes_the_canonical_text(
        messages in proptest::collection::vec(request_message(), 0..6),
        model in unicode_text(),
        name in unicode_text(),
        description in unicode_text(),
    ) {
        let tools = [ToolSpec {
            name,
            description,
            parameters: json!({"type": "object", "properties": {"expression": {"type": "string"}}}),
        }];
        let text = canonical(&model, &messages, &tools).to_string();
        prop_assert_eq!(request_key(&model, &messages, &tools), sha256_hex([text.as_bytes()]));
        let bare = canonical(&model, &messages, &[]).to_string();
        prop_assert_eq!(request_key(&model, &messages, &[]), sha256_hex([bare.as_bytes()]));
    }

    #[test]
    fn a_kept_head_gives_the_same_keys(
        turns in proptest::collection::vec(
            (proptest::sample::select(&["add 1 and 2", "", "\u{0}\"好\\"][..]), request_json(),
             proptest::collection::vec(request_json(), 0..3), any::<bool>()),
            1..6),
        template in unicode_text(),
    ) {
        let template = PromptTemplate::new(format!("{template}{{{{current_state}}}}end"))
            .or_else(|_| PromptTemplate::new("{{current_state}}"))
            .expect("a template");
        let other = PromptTemplate::new("other {{current_state}}").expect("a template");
        let mut head = KeyHead::default();
        for (input, state, history, same_template) in turns {
            let prompt = if same_template { &template } else { &other };
            let mut messages = vec![
                ChatMessage::new(Role::User, input),
                ChatMessage::new(Role::System, prompt.render(state.to_string())),
            ];
            messages.extend(history.iter().map(|h| ChatMessage::new(Role::Assistant, h.to_string())));
            prop_assert_eq!(request_key_with(&mut head, "m", &messages, &[]), request_key("m", &messages, &[]));
        }
    }
}
