//! The environment a stdio MCP server starts with: cleared, then the few variables of the
//! worker's own environment listed in [`INHERITED_ENV`], then the server's configured `env`
//! (configured values win).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// The worker's environment variables a stdio MCP server inherits, when the worker has
/// them; a name ending in `*` stands for every name with that prefix. Nothing else passes:
/// the worker's environment holds its secrets (`AGENTD__LLM__API_KEY`, the database and
/// broker URLs with their passwords, ...), and a tool server, often third-party code that
/// `npx` fetched a minute ago, must not see them. These are what launchers and runtimes
/// need to run at all: PATH to find `node`, `npx` or `python`, HOME for their caches
/// (`~/.npm`), the locale and time zone for sane text and dates, a temp dir, the terminal
/// type and who the user is. A server that needs more gets it through its `env` table.
pub const INHERITED_ENV: [&str; 11] = [
    "PATH", "HOME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR", "TERM", "USER", "LOGNAME", "SHELL",
];

/// Whether the worker's variable `name` passes to a server (see [`INHERITED_ENV`]).
fn is_inherited(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    INHERITED_ENV
        .iter()
        .any(|allowed| match allowed.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *allowed,
        })
}

/// The whole environment of a server: the inherited part of `worker` (the worker's
/// environment, `std::env::vars_os()`) plus `configured`, which wins on a clash.
pub(super) fn for_server(
    worker: impl IntoIterator<Item = (OsString, OsString)>,
    configured: &BTreeMap<String, String>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = worker
        .into_iter()
        .filter(|(name, _)| is_inherited(name))
        .collect();
    env.extend(
        configured
            .iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value))),
    );
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_the_allowlist_and_the_configured_env_pass() {
        let worker = vars(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/a"),
            ("LC_ALL", "C.UTF-8"),
            ("LC_TIME", "de_DE"),
            ("TZ", "UTC"),
            ("AGENTD__LLM__API_KEY", "sk-secret"),
            ("AGENTD__DATABASE__URL", "postgres://u:pw@db/agentd"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("PATHEXT", "not PATH"),
            ("LOG_LEVEL", "debug"),
        ]);
        let configured = BTreeMap::from([
            ("LOG_LEVEL".to_owned(), "info".to_owned()),
            ("TZ".to_owned(), "Europe/Berlin".to_owned()),
        ]);
        let env = for_server(worker, &configured);
        let names: Vec<&str> = env.keys().filter_map(|k| k.to_str()).collect();
        assert_eq!(
            names,
            ["HOME", "LC_ALL", "LC_TIME", "LOG_LEVEL", "PATH", "TZ"]
        );
        assert_eq!(env[OsStr::new("TZ")], "Europe/Berlin", "configured wins");
        assert_eq!(env[OsStr::new("LOG_LEVEL")], "info");
        assert_eq!(env[OsStr::new("PATH")], "/usr/bin");
    }
}
