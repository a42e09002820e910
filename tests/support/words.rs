//! The word script of the scripted model, for tests where a recursion may be asked twice (a
//! worker killed mid-call, a resumed task): the reply depends only on the request. The user
//! input carries the script as `key=value` words: `steps=N` CALL_TOOL recursions
//! (calculate, see [`ToolSteps`]) then ANSWER; `tool=NAME` makes those recursions call
//! NAME with `{}` (or with `args=JSON`, written without spaces) instead of calculate, and
//! `tool2=NAME args2=JSON` adds a second call to the same reply; `delay_ms=M` before each
//! reply; `status=S` answers every call with HTTP S; `flaky=1` answers the first request of
//! every recursion with 503 (the retry gets the reply). Recursions are counted by the
//! assistant messages of the request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentd::scripted_model::steps::ToolSteps;
use agentd::scripted_model::{ModelReply, ModelRequest, ScriptedModel};
use serde_json::{Value, json};

/// Starts a scripted model (127.0.0.1, a free port) answering every input by its words.
pub async fn start() -> ScriptedModel {
    let model = ScriptedModel::start()
        .await
        .expect("the scripted model starts");
    let attempts: Arc<Mutex<HashMap<(String, usize), u32>>> = Arc::default();
    model.otherwise(move |request| {
        let input = request.user_input();
        let done = request.assistant_messages();
        let attempt = {
            let mut attempts = attempts.lock().unwrap_or_else(PoisonError::into_inner);
            let count = attempts.entry((input.clone(), done)).or_default();
            *count += 1;
            *count
        };
        reply(&input, done as u64, attempt)
    });
    model
}

/// The reply to the recursion after `done` finished ones, asked for the `attempt`th time.
fn reply(input: &str, done: u64, attempt: u32) -> ModelReply {
    let reply = if word(input, "flaky") == Some(1) && attempt == 1 {
        ModelReply::status(503, "scripted flaky 503")
    } else if let Some(status) = word(input, "status") {
        ModelReply::status(
            u16::try_from(status).unwrap_or(500),
            &format!("scripted {status}"),
        )
    } else {
        steps(input).reply(done).with_usage(10, 5)
    };
    match word(input, "delay_ms") {
        Some(ms) => reply.with_delay(Duration::from_millis(ms)),
        None => reply,
    }
}

/// The tool steps the words ask for.
fn steps(input: &str) -> ToolSteps {
    let mut calls = Vec::new();
    if let Some(tool) = text_word(input, "tool") {
        let arguments = text_word(input, "args")
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .unwrap_or_else(|| json!({}));
        calls.push((tool.to_owned(), arguments.to_string()));
        if let Some(second) = text_word(input, "tool2") {
            let arguments = text_word(input, "args2").unwrap_or("{}");
            calls.push((second.to_owned(), arguments.to_owned()));
        }
    }
    ToolSteps {
        steps: word(input, "steps").unwrap_or(0),
        calls,
    }
}

fn word(input: &str, key: &str) -> Option<u64> {
    text_word(input, key)?.parse().ok()
}

/// The value of the word `key=VALUE` in the input, as text.
fn text_word<'a>(input: &'a str, key: &str) -> Option<&'a str> {
    input
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// What a test asks of the requests a word-scripted model received, by exact input.
pub trait ByInput {
    /// How many requests carried this user input.
    fn calls_for(&self, input: &str) -> usize;
    /// The recursion numbers (`current_recursion.iteration_index`) the requests carrying
    /// this input were made for, in arrival order (a recursion asked twice appears twice).
    fn iterations_for(&self, input: &str) -> Vec<u32>;
    /// Every Authorization header received.
    fn authorizations(&self) -> Vec<Option<String>>;
}

impl ByInput for ScriptedModel {
    fn calls_for(&self, input: &str) -> usize {
        self.requests_where(|r| r.user_input() == input).len()
    }

    fn iterations_for(&self, input: &str) -> Vec<u32> {
        self.requests_where(|r| r.user_input() == input)
            .iter()
            .filter_map(|r| r.snapshot()?.iteration_index())
            .collect()
    }

    fn authorizations(&self) -> Vec<Option<String>> {
        self.requests()
            .into_iter()
            .map(|r: ModelRequest| r.authorization)
            .collect()
    }
}
