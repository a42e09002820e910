//! Loading [`Settings`]: the defaults built into the binary (so that an installed binary
//! starts anywhere), `config/default.toml` over them when the working directory has it
//! (CONTRACT §1), the `--config` file (or a built-in text such as `agentd dev`'s), then the
//! `AGENTD__` environment; keys that nothing reads are refused.

use std::path::Path;

use anyhow::Context;

use super::{Settings, keys};

/// `config/default.toml` as it was when the binary was built: the defaults of every key, so
/// that a binary installed anywhere (`cargo install`) starts without the checkout.
pub const BUILT_IN_DEFAULTS: &str = include_str!("../../config/default.toml");

/// `config/dev.toml` as built in, for `agentd dev` run outside the checkout.
pub const BUILT_IN_DEV: &str = include_str!("../../config/dev.toml");

/// `prompts/system.md` as built in: the system prompt when `worker.prompt_path` keeps its
/// default and the working directory has no such file.
pub const BUILT_IN_PROMPT: &str = include_str!("../../prompts/system.md");

/// The default of `worker.prompt_path`.
pub const DEFAULT_PROMPT_PATH: &str = "prompts/system.md";

/// Where the defaults are looked for on disk, relative to the working directory (CONTRACT
/// §1); when the file is there it is loaded over the built-in copy.
pub const DEFAULTS_PATH: &str = "config/default.toml";

/// The optional extra configuration: a file (`--config PATH`) or a built-in text.
#[derive(Debug, Clone, Copy)]
pub enum Extra<'a> {
    File(&'a Path),
    BuiltIn(&'a str),
}

impl Settings {
    /// Loads the built-in defaults, config/default.toml when it exists (relative to the
    /// working directory), then `extra`, then the `AGENTD__` environment.
    pub fn load(extra: Option<&Path>) -> anyhow::Result<Self> {
        Self::load_extra(extra.map(Extra::File))
    }

    /// Like [`Settings::load`] with an extra file or built-in text.
    pub fn load_extra(extra: Option<Extra<'_>>) -> anyhow::Result<Self> {
        let on_disk = Path::new(DEFAULTS_PATH);
        let default = on_disk.is_file().then_some(on_disk);
        Self::build(default, extra)
    }

    /// Like [`Settings::load`] with an explicit default file (which must exist).
    pub fn load_from(default: &Path, extra: Option<&Path>) -> anyhow::Result<Self> {
        anyhow::ensure!(
            default.is_file(),
            "reading configuration: {} does not exist",
            default.display()
        );
        Self::build(Some(default), extra.map(Extra::File))
    }

    fn build(default: Option<&Path>, extra: Option<Extra<'_>>) -> anyhow::Result<Self> {
        use config::{File, FileFormat};
        let mut builder = config::Config::builder()
            .add_source(File::from_str(BUILT_IN_DEFAULTS, FileFormat::Toml));
        if let Some(path) = default {
            builder = builder.add_source(File::from(path).required(true));
        }
        match extra {
            Some(Extra::File(path)) => {
                builder = builder.add_source(File::from(path).required(true));
            }
            Some(Extra::BuiltIn(text)) => {
                builder = builder.add_source(File::from_str(text, FileFormat::Toml));
            }
            None => {}
        }
        let origin = default.map_or_else(
            || "built-in defaults".to_owned(),
            |p| p.display().to_string(),
        );
        let built = builder
            .add_source(
                config::Environment::with_prefix("AGENTD")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true),
            )
            .build()
            .with_context(|| format!("reading configuration ({origin})"))?;
        let settings: Settings = keys::deserialize_strict(built)?;
        settings.validate()?;
        Ok(settings)
    }
}

impl super::WorkerSettings {
    /// The system prompt template: the file at `prompt_path`, or the built-in prompt when
    /// the path is the default one and no such file exists (an installed binary run outside
    /// the checkout). A path set to something else must exist.
    pub fn prompt_text(&self) -> anyhow::Result<String> {
        let path = &self.prompt_path;
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(text),
            Err(err)
                if err.kind() == std::io::ErrorKind::NotFound
                    && path == Path::new(DEFAULT_PROMPT_PATH) =>
            {
                Ok(BUILT_IN_PROMPT.to_owned())
            }
            Err(err) => {
                Err(err).with_context(|| format!("reading the prompt template {}", path.display()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_defaults_load_without_any_file() {
        let settings = Settings::build(None, None).expect("built-in defaults");
        assert_eq!(settings.worker.prompt_path, Path::new(DEFAULT_PROMPT_PATH));
        let dev = Settings::build(None, Some(Extra::BuiltIn(BUILT_IN_DEV))).expect("dev");
        assert!(
            dev.database.url.ends_with("/agentd_dev"),
            "{}",
            dev.database.url
        );
    }

    #[test]
    fn the_prompt_falls_back_to_the_built_in_one_only_for_the_default_path() {
        let mut worker = Settings::build(None, None).expect("defaults").worker;
        worker.prompt_path = std::env::temp_dir().join("agentd-no-such-prompt.md");
        let err = worker
            .prompt_text()
            .expect_err("a configured path must exist");
        assert!(
            format!("{err:#}").contains("agentd-no-such-prompt.md"),
            "{err:#}"
        );
        worker.prompt_path = DEFAULT_PROMPT_PATH.into();
        assert!(
            worker
                .prompt_text()
                .expect("prompt")
                .contains("{{current_state}}")
        );
    }
}
