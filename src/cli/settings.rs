//! Loading the binary's settings. `config` reads them and checks what it can alone (types,
//! ranges, the core's rules); a value an adapter interprets is checked here by that
//! adapter's own rules, before any command runs, so that a bad `amqp.url` or
//! `retention.older_than` is refused at start, naming its key, whichever command it is.

use crate::config::{Extra, Settings};

/// The settings of `extra` over the defaults and under the environment, checked.
pub fn load(extra: Option<Extra<'_>>) -> anyhow::Result<Settings> {
    let settings = Settings::load_extra(extra)?;
    check(&settings)?;
    Ok(settings)
}

/// The checks of the sections an adapter reads.
pub fn check(settings: &Settings) -> anyhow::Result<()> {
    crate::amqp::broker::check_urls(&settings.amqp.url)?;
    super::prune::check_retention(&settings.retention)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// config/default.toml overlaid with `extra` (a TOML text), checked.
    fn load_with(extra: &str) -> anyhow::Result<Settings> {
        let path =
            std::env::temp_dir().join(format!("agentd-settings-{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(&path, extra)?;
        let settings = Settings::load_from(Path::new("config/default.toml"), Some(&path));
        let _ = std::fs::remove_file(&path);
        let settings = settings?;
        check(&settings)?;
        Ok(settings)
    }

    #[test]
    fn a_bad_amqp_url_is_refused_at_load_without_its_password() {
        let err = load_with("[amqp]\nurl = \"amqp://u:secret@h1/%2f,amqp://u:secret@h2:port/\"\n")
            .expect_err("bad port");
        let text = format!("{err:#}");
        assert!(
            text.contains("amqp.url") && !text.contains("secret"),
            "{text}"
        );
        assert!(load_with("[amqp]\nurl = \" , \"\n").is_err());
    }

    #[test]
    fn a_bad_retention_is_refused_at_load() {
        let err = load_with("[retention]\nolder_than = \"30\"\n").expect_err("no unit");
        assert!(
            format!("{err:#}").contains("retention.older_than"),
            "{err:#}"
        );
        assert!(load_with("").is_ok());
    }
}
