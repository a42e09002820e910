//! `agentd asyncapi`: prints the AsyncAPI 3 document of the broker interface
//! ([`crate::contract::asyncapi`]), or with `--check PATH` tells whether the copy at PATH is
//! current. It needs no configuration, database or broker.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use super::out::errln;

use anyhow::Context;

use crate::contract::asyncapi;

/// Prints the document, or compares it with the file at `check`.
pub fn run(check: Option<&Path>) -> anyhow::Result<ExitCode> {
    let generated = asyncapi::to_pretty_json()?;
    let Some(path) = check else {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(generated.as_bytes())
            .and_then(|()| stdout.flush())
            .context("writing the document to stdout")?;
        return Ok(ExitCode::SUCCESS);
    };
    let committed =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if committed == generated {
        errln!("{} is current", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    errln!(
        "agentd: {} is not the current AsyncAPI document; regenerate it with \
         `cargo run -- asyncapi > {}`",
        path.display(),
        path.display()
    );
    Ok(ExitCode::FAILURE)
}
