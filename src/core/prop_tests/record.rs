//! Properties of the record of a model call (CONTRACT §12) on the way to PostgreSQL:
//! whatever Unicode a message or a response holds (NUL, its escape, stray backslashes and
//! quotes), a stored request part and a stored response are storable (`text` and `jsonb`
//! take them), a part still reads as the JSON the body had, with its text made storable and
//! redacted, and its address is the hash of what is stored.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::config;
use super::storable::unicode_text;
use crate::core::call_record::{Redactor, part_id, stored_part, stored_response};
use crate::core::storable::{self, is_storable, is_storable_json, json_text};
use crate::core::text::escape;

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
}
