//! The bench's model: the library's [scripted model](agentd::scripted_model) on a free port
//! of 127.0.0.1 (real loopback HTTP), recording nothing, serving the
//! [tool-steps script](agentd::scripted_model::steps): while fewer than `steps` recursions
//! ran (read from the state snapshot's `current_recursion.iteration_index`, so compaction
//! does not confuse it), one native `calculate` call; then ANSWER. Every reply first waits
//! the configured latency and reports 1,000 prompt and 50 completion tokens.

use std::time::Duration;

use agentd::scripted_model::steps::ToolSteps;
use agentd::scripted_model::{ScriptedModel, ServeOptions};

/// Starts the model for `steps` tool recursions per task and `latency` per reply.
pub async fn start(steps: u32, latency: Duration) -> anyhow::Result<ScriptedModel> {
    let model = ScriptedModel::start_with(ServeOptions {
        record_requests: false,
        ..ServeOptions::default()
    })
    .await?;
    let script = ToolSteps {
        steps: u64::from(steps),
        calls: Vec::new(),
    };
    model.otherwise(move |request| {
        script
            .reply(u64::from(request.recursions_done()))
            .with_usage(1_000, 50)
            .with_delay(latency)
    });
    Ok(model)
}
