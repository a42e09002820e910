//! The masking of the canonical form (see the parent module's doc): the ids a request
//! names under `task_id`, `trace_id` and `tool_call_id`, numbered per kind in order of first
//! appearance and replaced wherever they occur, RFC 3339 times under `_at` keys and elapsed
//! times. Which strings may quote an id is found in one pass over each ([`IdFinder`]).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::finder::IdFinder;
use super::{ELAPSED, TIMESTAMP};

/// Keys whose string value is an id that differs between runs.
const ID_KEYS: [&str; 3] = ["task_id", "trace_id", "tool_call_id"];
/// Keys whose number is an elapsed time (and `wall_secs` of a budget's `used`).
const ELAPSED_KEYS: [&str; 4] = ["duration_ms", "elapsed_ms", "latency_ms", "queued_ms"];

/// The ids found and their placeholders.
#[derive(Default)]
pub(super) struct Masker {
    ids: HashMap<String, String>,
    /// Ids in order of first appearance, the order they are replaced in inside text.
    order: Vec<String>,
    counts: HashMap<&'static str, usize>,
    /// Finds whether a string holds any id ([`Self::prepare`]); none without ids.
    finder: Option<IdFinder>,
}

impl Masker {
    pub(super) fn collect(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                for (key, item) in map {
                    match (ID_KEYS.iter().find(|k| **k == key), item) {
                        (Some(kind), Value::String(id)) if !id.is_empty() => {
                            self.register(kind, id);
                        }
                        _ => self.collect(item),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| self.collect(item)),
            _ => {}
        }
    }

    fn register(&mut self, kind: &'static str, id: &str) {
        if self.ids.contains_key(id) {
            return;
        }
        let count = self.counts.entry(kind).or_insert(0);
        *count += 1;
        self.ids.insert(id.to_owned(), format!("<{kind}:{count}>"));
        self.order.push(id.to_owned());
    }

    /// Builds the finder over the ids collected (none: no string holds an id).
    pub(super) fn prepare(&mut self) {
        self.finder = IdFinder::new(&self.order);
    }

    /// Whether `text` holds an id (equal to one, or quoting one).
    fn may_hold_id(&self, text: &str) -> bool {
        self.finder
            .as_ref()
            .is_some_and(|finder| finder.holds(&self.order, text))
    }

    /// Masks `value` in place; `key` is the key it sits under.
    pub(super) fn mask(&self, value: &mut Value, key: Option<&str>) {
        match value {
            Value::Object(map) => self.mask_object(map, key),
            Value::Array(items) => items.iter_mut().for_each(|item| self.mask(item, key)),
            Value::String(text) => {
                if key.is_some_and(|k| k.ends_with("_at")) && is_rfc3339(text) {
                    *text = TIMESTAMP.to_owned();
                } else if self.may_hold_id(text) {
                    match self.ids.get(text.as_str()) {
                        Some(placeholder) => text.clone_from(placeholder),
                        None => self.replace_within(text),
                    }
                }
            }
            Value::Number(_) => {
                if key.is_some_and(|k| ELAPSED_KEYS.contains(&k)) {
                    *value = Value::String(ELAPSED.to_owned());
                }
            }
            Value::Null | Value::Bool(_) => {}
        }
    }

    fn mask_object(&self, map: &mut Map<String, Value>, parent: Option<&str>) {
        for (key, item) in map.iter_mut() {
            if key == "wall_secs" && parent == Some("used") && item.is_number() {
                *item = Value::String(ELAPSED.to_owned());
            } else {
                self.mask(item, Some(key));
            }
        }
    }

    /// Replaces every known id occurring inside `text`.
    fn replace_within(&self, text: &mut String) {
        for id in &self.order {
            if text.contains(id.as_str()) {
                *text = text.replace(id.as_str(), &self.ids[id]);
            }
        }
    }
}

fn is_rfc3339(text: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(text).is_ok()
}
