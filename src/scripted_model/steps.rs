//! The tool-steps script: a fixed number of CALL_TOOL recursions, then ANSWER, decided by
//! the request alone (how many recursions are done), so any number of tasks can share the
//! model and a recursion asked twice (a worker killed mid-call, a resumed task) gets the
//! same reply. The end-to-end bench runs it; the tests' word script is built on it.

use serde_json::json;

use super::{ModelReply, Seed, tool_call};

/// What each CALL_TOOL recursion calls.
#[derive(Debug, Clone, Default)]
pub struct ToolSteps {
    /// CALL_TOOL recursions before the ANSWER.
    pub steps: u64,
    /// `(tool, arguments as JSON text)` of each call of a CALL_TOOL reply; none: one
    /// `calculate` call with `{"expression": "<done>+1"}`.
    pub calls: Vec<(String, String)>,
}

impl ToolSteps {
    /// The reply to the recursion after `done` finished ones. Call ids are `call_<done>`,
    /// then `call_<done>b`, `call_<done>c`, ... for further calls of the same reply.
    pub fn reply(&self, done: u64) -> ModelReply {
        if done >= self.steps {
            let answer = json!({"answer": format!("done after {} steps", self.steps)});
            return Seed::new("ANSWER", answer)
                .summary(format!("step {done}"))
                .reply();
        }
        let default = [(
            "calculate".to_owned(),
            json!({"expression": format!("{done}+1")}).to_string(),
        )];
        let calls = if self.calls.is_empty() {
            &default[..]
        } else {
            &self.calls[..]
        };
        let calls = calls
            .iter()
            .zip(std::iter::once(String::new()).chain(('b'..='z').map(String::from)))
            .map(|((tool, arguments), suffix)| {
                tool_call(&format!("call_{done}{suffix}"), tool, arguments)
            })
            .collect();
        Seed::new("CALL_TOOL", json!({}))
            .summary(format!("step {done}"))
            .calling(calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(reply: &ModelReply) -> serde_json::Value {
        reply.body()["choices"][0]["message"].clone()
    }

    #[test]
    fn calculate_steps_then_the_answer() {
        let script = ToolSteps {
            steps: 2,
            calls: Vec::new(),
        };
        let first = message(&script.reply(0));
        assert_eq!(first["tool_calls"][0]["id"], "call_0");
        assert_eq!(
            first["tool_calls"][0]["function"]["arguments"],
            r#"{"expression":"0+1"}"#
        );
        let second = message(&script.reply(1));
        assert_eq!(second["tool_calls"][0]["id"], "call_1");
        let answer = message(&script.reply(2));
        assert!(answer.get("tool_calls").is_none());
        assert!(
            answer["content"]
                .as_str()
                .unwrap()
                .contains("done after 2 steps")
        );
    }

    #[test]
    fn named_calls_get_lettered_ids() {
        let script = ToolSteps {
            steps: 1,
            calls: vec![("a".into(), "{}".into()), ("b".into(), r#"{"x":1}"#.into())],
        };
        let calls = message(&script.reply(0))["tool_calls"].clone();
        assert_eq!(calls[0]["id"], "call_0");
        assert_eq!(calls[1]["id"], "call_0b");
        assert_eq!(calls[1]["function"]["arguments"], r#"{"x":1}"#);
    }
}
