//! Typed, path-aware access to the fields of a reply's JSON object: every failure is a
//! [`ReplyError`] naming the exact JSON path (`action.output.plan[1].description`) and what
//! was expected there. JSON `null` counts as absent.

use serde_json::{Map, Value};

use crate::core::reply_error::ReplyError;

/// An object of the reply together with its JSON path.
#[derive(Debug, Clone)]
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: String,
}

impl<'a> Fields<'a> {
    /// The reply's top-level object.
    pub(crate) fn root(map: &'a Map<String, Value>) -> Self {
        Self {
            map,
            prefix: String::new(),
        }
    }

    /// The JSON path of `key` in this object.
    pub(crate) fn path(&self, key: &str) -> String {
        match self.prefix.is_empty() {
            true => key.to_owned(),
            false => format!("{}.{key}", self.prefix),
        }
    }

    /// Whether `key` is present and not null.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|value| !value.is_null())
    }

    fn require(&self, key: &str, expected: &str) -> Result<&'a Value, ReplyError> {
        self.get(key).ok_or_else(|| ReplyError::MissingField {
            path: self.path(key),
            expected: expected.to_owned(),
        })
    }

    fn wrong_type(&self, key: &str, expected: &str, found: &Value) -> ReplyError {
        ReplyError::WrongType {
            path: self.path(key),
            expected: expected.to_owned(),
            found: type_name(found).to_owned(),
        }
    }

    /// A required string (possibly empty).
    pub(crate) fn string(&self, key: &str, expected: &str) -> Result<String, ReplyError> {
        match self.require(key, expected)? {
            Value::String(text) => Ok(text.clone()),
            other => Err(self.wrong_type(key, expected, other)),
        }
    }

    /// A required string that is not blank.
    pub(crate) fn text(&self, key: &str, expected: &str) -> Result<String, ReplyError> {
        let text = self.string(key, expected)?;
        match text.trim().is_empty() {
            true => Err(ReplyError::EmptyField {
                path: self.path(key),
                expected: expected.to_owned(),
            }),
            false => Ok(text),
        }
    }

    /// An optional string; absent or null is `None`.
    pub(crate) fn opt_string(&self, key: &str) -> Result<Option<String>, ReplyError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(other) => Err(self.wrong_type(key, "a string", other)),
        }
    }

    /// A required object.
    pub(crate) fn object(&self, key: &str, expected: &str) -> Result<Fields<'a>, ReplyError> {
        match self.require(key, expected)? {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: self.path(key),
            }),
            other => Err(self.wrong_type(key, expected, other)),
        }
    }

    /// A required, non-empty array of objects.
    pub(crate) fn array(&self, key: &str, expected: &str) -> Result<Vec<Fields<'a>>, ReplyError> {
        let items = self.items(key, self.require(key, expected)?, expected)?;
        match items.is_empty() {
            true => Err(ReplyError::EmptyField {
                path: self.path(key),
                expected: expected.to_owned(),
            }),
            false => Ok(items),
        }
    }

    /// An optional array of objects; absent or null is `None`.
    pub(crate) fn opt_array(&self, key: &str) -> Result<Option<Vec<Fields<'a>>>, ReplyError> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => self.items(key, value, "an array of objects").map(Some),
        }
    }

    fn items(
        &self,
        key: &str,
        value: &'a Value,
        expected: &str,
    ) -> Result<Vec<Fields<'a>>, ReplyError> {
        let Value::Array(values) = value else {
            return Err(self.wrong_type(key, expected, value));
        };
        let mut items = Vec::with_capacity(values.len());
        for (i, item) in values.iter().enumerate() {
            let path = format!("{}[{i}]", self.path(key));
            match item {
                Value::Object(map) => items.push(Fields { map, prefix: path }),
                other => {
                    return Err(ReplyError::WrongType {
                        path,
                        expected: "an object".to_owned(),
                        found: type_name(other).to_owned(),
                    });
                }
            }
        }
        Ok(items)
    }

    /// A required, non-blank `step_id`; an integer is accepted and written as text.
    pub(crate) fn step_id(&self) -> Result<String, ReplyError> {
        const EXPECTED: &str = "a non-empty string such as \"1\"";
        match self.require("step_id", EXPECTED)? {
            Value::Number(n) if n.is_u64() || n.is_i64() => Ok(n.to_string()),
            Value::String(_) => Ok(self.text("step_id", EXPECTED)?.trim().to_owned()),
            other => Err(self.wrong_type("step_id", EXPECTED, other)),
        }
    }
}

/// How a JSON value's type is named in error messages.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn paths_nest_through_objects_and_arrays() {
        let object = map(json!({"action": {"output": {"plan": [{"step_id": "1"}, {"x": 1}]}}}));
        let root = Fields::root(&object);
        let output = root
            .object("action", "")
            .and_then(|a| a.object("output", ""))
            .unwrap();
        let plan = output.array("plan", "").unwrap();
        assert_eq!(
            plan[1].path("description"),
            "action.output.plan[1].description"
        );
        let error = plan[1].text("description", "a string").unwrap_err();
        assert_eq!(
            error,
            ReplyError::MissingField {
                path: "action.output.plan[1].description".into(),
                expected: "a string".into()
            }
        );
    }

    #[test]
    fn null_is_absent_and_wrong_types_are_named() {
        let object = map(json!({"a": null, "b": 3, "c": [1]}));
        let root = Fields::root(&object);
        assert_eq!(root.opt_string("a").unwrap(), None);
        assert!(matches!(
            root.string("b", "a string"),
            Err(ReplyError::WrongType { found, .. }) if found == "a number"
        ));
        assert!(matches!(
            root.opt_array("c"),
            Err(ReplyError::WrongType { path, .. }) if path == "c[0]"
        ));
    }

    #[test]
    fn step_ids_accept_integers_and_reject_blanks() {
        let object = map(json!({"step_id": 2}));
        assert_eq!(Fields::root(&object).step_id().unwrap(), "2");
        let object = map(json!({"step_id": "  "}));
        assert!(matches!(
            Fields::root(&object).step_id(),
            Err(ReplyError::EmptyField { .. })
        ));
    }
}
