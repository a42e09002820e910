//! A small JSON-schema check for tool arguments, enough for what tool specs use: `type`
//! (one name or a list), `properties`, `required`, `additionalProperties: false`, `items`
//! and `enum`, applied recursively. Keywords it does not know (`$ref`, `oneOf`, formats,
//! bounds...) are ignored, so an MCP tool with a richer schema is checked leniently
//! rather than rejected; the tool itself has the last word.

use serde_json::{Map, Value};

/// Checks `value` against `schema`; the error names the path and the mismatch, e.g.
/// `arguments.expression: expected string, got number`.
pub(crate) fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "arguments")
}

fn check(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Ok(()); // `true`, `{}` or nonsense: accept.
    };
    if let Some(expected) = schema.get("type") {
        check_type(expected, value, path)?;
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        return Err(format!(
            "{path}: {value} is not one of {}",
            Value::Array(allowed.clone())
        ));
    }
    match value {
        Value::Object(object) => check_object(schema, object, path),
        Value::Array(items) => match schema.get("items") {
            Some(item_schema) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| check(item_schema, item, &format!("{path}[{i}]"))),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

fn check_object(
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    path: &str,
) -> Result<(), String> {
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = schema.get("required") {
        let missing: Vec<&str> = required
            .iter()
            .filter_map(Value::as_str)
            .filter(|name| !object.contains_key(*name))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{path}: missing required propert{} {}",
                if missing.len() == 1 { "y" } else { "ies" },
                missing
                    .iter()
                    .map(|m| format!("'{m}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for (name, field) in object {
        let field_path = format!("{path}.{name}");
        match properties.and_then(|p| p.get(name)) {
            Some(field_schema) => check(field_schema, field, &field_path)?,
            None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                return Err(format!("{field_path}: unexpected property"));
            }
            None => {}
        }
    }
    Ok(())
}

fn check_type(expected: &Value, value: &Value, path: &str) -> Result<(), String> {
    let names: Vec<&str> = match expected {
        Value::String(name) => vec![name.as_str()],
        Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    if names.is_empty() || names.iter().any(|name| has_type(value, name)) {
        return Ok(());
    }
    Err(format!(
        "{path}: expected {}, got {}",
        names.join(" or "),
        type_name(value)
    ))
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true, // an unknown type name constrains nothing
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"},
                "b": {"type": "boolean"}, "o": {"type": "object", "required": ["k"]},
                "a": {"type": "array", "items": {"type": "integer"}},
                "either": {"type": ["string", "null"]}, "mode": {"enum": ["x", "y"]}
            },
            "required": ["s"]
        })
    }

    #[test]
    fn accepts_fitting_values() {
        let ok = json!({"s": "x", "n": 1.5, "i": 3, "b": true, "o": {"k": 1}, "a": [1, 2.0],
                        "either": null, "mode": "y", "extra": "allowed"});
        assert_eq!(validate(&schema(), &ok), Ok(()));
        assert_eq!(validate(&json!({}), &json!(42)), Ok(()));
        assert_eq!(validate(&json!({"type": "number"}), &json!(3)), Ok(()));
    }

    #[test]
    fn reports_the_path_and_mismatch() {
        let fail = |v: Value| validate(&schema(), &v).err().unwrap_or_default();
        assert_eq!(fail(json!([])), "arguments: expected object, got array");
        assert_eq!(fail(json!({})), "arguments: missing required property 's'");
        assert_eq!(
            fail(json!({"s": 1})),
            "arguments.s: expected string, got integer"
        );
        assert_eq!(
            fail(json!({"s": "", "n": "1"})),
            "arguments.n: expected number, got string"
        );
        assert_eq!(
            fail(json!({"s": "", "i": 1.5})),
            "arguments.i: expected integer, got number"
        );
        assert_eq!(
            fail(json!({"s": "", "b": 0})),
            "arguments.b: expected boolean, got integer"
        );
        assert_eq!(
            fail(json!({"s": "", "o": {}})),
            "arguments.o: missing required property 'k'"
        );
        assert_eq!(
            fail(json!({"s": "", "a": [1, "2"]})),
            "arguments.a[1]: expected integer, got string"
        );
        assert_eq!(
            fail(json!({"s": "", "either": 1})),
            "arguments.either: expected string or null, got integer"
        );
        assert_eq!(
            fail(json!({"s": "", "mode": "z"})),
            r#"arguments.mode: "z" is not one of ["x","y"]"#
        );
    }

    #[test]
    fn closed_objects_and_several_missing() {
        let closed = json!({"type": "object", "required": ["a", "b"], "additionalProperties": false,
                            "properties": {"a": {}, "b": {}}});
        assert_eq!(
            validate(&closed, &json!({})),
            Err("arguments: missing required properties 'a', 'b'".to_owned())
        );
        assert_eq!(
            validate(&closed, &json!({"a": 1, "b": 2, "c": 3})),
            Err("arguments.c: unexpected property".to_owned())
        );
    }
}
