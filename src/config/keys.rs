//! Configuration keys that nothing reads are refused, not ignored: a misspelled key
//! (`concurency = 4` in a file, or `AGENTD__WORKER__CONCURENCY=4`) would otherwise leave the
//! default in force without a word. What counts as known is what the [`Settings`] types
//! deserialize (so a key added to any section is known the moment its field exists); the
//! suggestion for a misspelled key is the nearest key that the merged configuration holds,
//! which includes every key of the built-in `config/default.toml`.
//!
//! [`Settings`]: super::Settings

use config::{Value, ValueKind};
use serde::de::DeserializeOwned;

/// Longest edit distance at which a known key is offered as "did you mean".
const MAX_SUGGESTION_DISTANCE: usize = 3;

/// Deserializes the merged configuration into `T`, refusing every key `T` does not read,
/// each named with where it came from and the nearest known key.
pub fn deserialize_strict<T: DeserializeOwned>(merged: config::Config) -> anyhow::Result<T> {
    let present = key_paths(&merged);
    let mut ignored = Vec::new();
    let settings = serde_ignored::deserialize(merged, |path| ignored.push(dotted(&path)));
    let settings = settings.map_err(|err| anyhow::anyhow!("invalid configuration: {err}"))?;
    if ignored.is_empty() {
        return Ok(settings);
    }
    let known = known_keys(&present, &ignored);
    let known: Vec<&String> = known.iter().collect();
    let problems: Vec<String> = ignored
        .iter()
        .map(|key| describe_unknown(key, &known))
        .collect();
    anyhow::bail!(
        "unknown configuration key{}: {} (every key is documented in config/default.toml)",
        if problems.len() == 1 { "" } else { "s" },
        problems.join("; ")
    )
}

/// serde_ignored's path as a configuration key: without the `?` it puts for an `Option`.
fn dotted(path: &serde_ignored::Path<'_>) -> String {
    let text = path.to_string();
    let parts: Vec<&str> = text.split('.').filter(|part| *part != "?").collect();
    parts.join(".")
}

/// The keys present and read, with every section that holds them (`worker`, `llm.retry`), so
/// that a misspelled section finds its nearest too.
fn known_keys(present: &[String], ignored: &[String]) -> Vec<String> {
    let under_ignored = |path: &str| {
        ignored
            .iter()
            .any(|bad| path == bad || path.starts_with(&format!("{bad}.")))
    };
    let mut known: Vec<String> = Vec::new();
    for path in present.iter().filter(|path| !under_ignored(path)) {
        let mut section = String::new();
        for part in path.split('.') {
            if !section.is_empty() {
                section.push('.');
            }
            section.push_str(part);
            if !known.contains(&section) {
                known.push(section.clone());
            }
        }
    }
    known
}

/// `key` with its origin and, when one is close, the known key it was probably meant to be.
fn describe_unknown(key: &str, known: &[&String]) -> String {
    let variable = env_name(key);
    let origin = if std::env::var_os(&variable).is_some() {
        format!("{key} (from the environment variable {variable})")
    } else {
        key.to_owned()
    };
    match nearest(key, known) {
        Some(near) => format!("{origin}: did you mean {near}?"),
        None => origin,
    }
}

/// The `AGENTD__` variable that sets `key`.
fn env_name(key: &str) -> String {
    format!("AGENTD__{}", key.replace('.', "__").to_uppercase())
}

/// The known key closest to `key` by edit distance, when it is close enough.
fn nearest<'a>(key: &str, known: &[&'a String]) -> Option<&'a str> {
    known
        .iter()
        .map(|candidate| (strsim::levenshtein(key, candidate), candidate.as_str()))
        .filter(|(distance, _)| *distance <= MAX_SUGGESTION_DISTANCE)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Every leaf key of the configuration as a dotted path (`worker.concurrency`,
/// `tools.mcp.0.name`), as serde_ignored names them.
fn key_paths(merged: &config::Config) -> Vec<String> {
    let mut paths = Vec::new();
    if let Ok(table) = merged
        .clone()
        .try_deserialize::<config::Map<String, Value>>()
    {
        for (key, value) in table {
            collect(&key, &value, &mut paths);
        }
    }
    paths
}

fn collect(path: &str, value: &Value, paths: &mut Vec<String>) {
    match &value.kind {
        ValueKind::Table(table) if !table.is_empty() => {
            for (key, value) in table {
                collect(&format!("{path}.{key}"), value, paths);
            }
        }
        ValueKind::Array(items) if !items.is_empty() => {
            for (index, value) in items.iter().enumerate() {
                collect(&format!("{path}.{index}"), value, paths);
            }
        }
        _ => paths.push(path.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_key_is_offered_only_when_it_is_close() {
        let known = [
            "worker.concurrency".to_owned(),
            "worker.lease_secs".to_owned(),
        ];
        let known: Vec<&String> = known.iter().collect();
        assert_eq!(
            nearest("worker.concurency", &known),
            Some("worker.concurrency")
        );
        assert_eq!(
            nearest("wroker.concurrency", &known),
            Some("worker.concurrency")
        );
        assert_eq!(nearest("gateway.bind", &known), None);
        assert_eq!(env_name("worker.concurency"), "AGENTD__WORKER__CONCURENCY");
    }
}
