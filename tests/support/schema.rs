//! Events checked against the AsyncAPI document (`agentd::contract::asyncapi`, committed as
//! docs/asyncapi.json): every event an integration test observes, published or stored, must
//! validate against the payload schema of the message named by its `type`. The harness
//! calls [`assert_valid_event`] wherever it reads events, so every test that looks at
//! events checks the document against what the worker really emits.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use jsonschema::{Draft, Registry, Validator};
use serde_json::{Value, json};

/// The base URI the document is registered under, for `$ref`s into it.
const DOC: &str = "urn:agentd:asyncapi";

/// One validator per event type: the payload of the events channel's message of that name.
fn validators() -> &'static BTreeMap<String, Validator> {
    static VALIDATORS: OnceLock<BTreeMap<String, Validator>> = OnceLock::new();
    VALIDATORS.get_or_init(|| {
        let doc = agentd::contract::asyncapi::document().expect("the AsyncAPI document");
        let messages = doc["channels"]["events"]["messages"]
            .as_object()
            .expect("the events channel's messages")
            .clone();
        let registry = Registry::new()
            .add(DOC, Draft::Draft202012.create_resource(doc))
            .and_then(|registry| registry.prepare())
            .expect("a registry holding the document");
        messages
            .into_iter()
            .map(|(kind, message)| {
                let reference = message["$ref"].as_str().expect("a message $ref");
                let validator = jsonschema::options()
                    .with_draft(Draft::Draft202012)
                    .should_validate_formats(true)
                    .with_registry(&registry)
                    .build(&json!({"$ref": format!("{DOC}{reference}/payload")}))
                    .expect("a validator for the message's payload");
                (kind, validator)
            })
            .collect()
    })
}

/// Why `event` does not match the schema of its type, if it does not.
pub fn event_problems(event: &Value) -> Option<String> {
    let Some(kind) = event["type"].as_str() else {
        return Some("the event has no string `type`".into());
    };
    let Some(validator) = validators().get(kind) else {
        return Some(format!(
            "event type {kind:?} has no message in the AsyncAPI document"
        ));
    };
    let problems: Vec<String> = validator
        .iter_errors(event)
        .map(|error| format!("at {:?}: {error}", error.instance_path().to_string()))
        .collect();
    (!problems.is_empty()).then(|| format!("{kind}: {}", problems.join("; ")))
}

/// Panics unless `event` validates against the schema of its `type` in the AsyncAPI
/// document (an event type the document lacks fails too).
pub fn assert_valid_event(event: &Value) {
    if let Some(problems) = event_problems(event) {
        panic!("event does not match docs/asyncapi.json: {problems}\n{event:#}");
    }
}
