//! The `[control]` section (CONTRACT v3 §15 "Who may steer"): the keys control messages are
//! signed with, the tenants keys are bound to, the size cap of an inject and how long a
//! cancel for an id no table knows is kept. The defaults match config/default.toml, where
//! each key is documented; docs/operations.md ("Trust boundaries") says what they protect.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::secret::Secret;

/// `[control]`: who may steer a task through `agentd.control`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ControlSettings {
    /// `{"KEY_ID" = "secret"}`. Empty (the default): control messages are not signed and the
    /// broker's permissions are the boundary. Set: only messages signed with one of these
    /// keys are applied.
    pub signing_keys: BTreeMap<String, Secret>,
    /// `{"KEY_ID" = "tenant"}`: a key listed here steers only that tenant's tasks.
    pub key_tenants: BTreeMap<String, String>,
    /// The key the gateway, the CLI and the workers sign with (bound to no tenant). Unset:
    /// the first key (by id) bound to no tenant.
    pub sign_with: Option<String>,
    /// The largest inject text accepted, in bytes (UTF-8): guidance is kept for the rest of
    /// the task and shown in every later prompt.
    pub max_inject_bytes: usize,
    /// A cancel for a task id that no table knows leaves a tombstone (so the message that
    /// arrives later is acknowledged unrun); it is removed with its event after this many
    /// seconds.
    pub tombstone_secs: u64,
}

impl Default for ControlSettings {
    fn default() -> Self {
        Self {
            signing_keys: BTreeMap::new(),
            key_tenants: BTreeMap::new(),
            sign_with: None,
            max_inject_bytes: 8192,
            tombstone_secs: 86_400,
        }
    }
}

/// A key to sign with: its id and secret.
#[derive(Debug, Clone, Copy)]
pub struct Signer<'a> {
    pub key_id: &'a str,
    pub secret: &'a Secret,
}

impl ControlSettings {
    /// Whether control messages must be signed.
    pub fn signing(&self) -> bool {
        !self.signing_keys.is_empty()
    }

    /// The secret of `key_id`.
    pub fn secret(&self, key_id: &str) -> Option<&Secret> {
        self.signing_keys.get(key_id)
    }

    /// The tenant `key_id` is bound to, if any.
    pub fn tenant_of(&self, key_id: &str) -> Option<&str> {
        self.key_tenants.get(key_id).map(String::as_str)
    }

    /// `key_id` as a signer (`None`: not a configured key).
    pub fn signer_of<'a>(&'a self, key_id: &'a str) -> Option<Signer<'a>> {
        let secret = self.secret(key_id)?;
        Some(Signer { key_id, secret })
    }

    /// The key agentd's own producers sign with; `None` when signing is off.
    pub fn signer(&self) -> Option<Signer<'_>> {
        let key_id = match &self.sign_with {
            Some(key_id) => key_id.as_str(),
            None => self
                .signing_keys
                .keys()
                .find(|key_id| !self.key_tenants.contains_key(*key_id))?,
        };
        self.signer_of(key_id)
    }

    /// Refuses settings that would make every message fail or leave agentd unable to sign.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some((key_id, _)) = self
            .signing_keys
            .iter()
            .find(|(_, secret)| secret.expose().trim().is_empty())
        {
            anyhow::bail!("control.signing_keys.{key_id} is empty: a key needs a secret");
        }
        if let Some(key_id) = self
            .key_tenants
            .keys()
            .find(|key_id| !self.signing_keys.contains_key(*key_id))
        {
            anyhow::bail!(
                "control.key_tenants names the key {key_id:?}, which control.signing_keys does not hold"
            );
        }
        if let Some((key_id, _)) = self
            .key_tenants
            .iter()
            .find(|(_, tenant)| tenant.trim().is_empty())
        {
            anyhow::bail!("control.key_tenants.{key_id} is empty: name the key's tenant");
        }
        anyhow::ensure!(
            self.max_inject_bytes > 0,
            "control.max_inject_bytes must be > 0"
        );
        anyhow::ensure!(
            self.tombstone_secs > 0,
            "control.tombstone_secs must be > 0"
        );
        if let Some(key_id) = &self.sign_with {
            anyhow::ensure!(
                self.signing_keys.contains_key(key_id),
                "control.sign_with names the key {key_id:?}, which control.signing_keys does not hold"
            );
            anyhow::ensure!(
                !self.key_tenants.contains_key(key_id),
                "control.sign_with names the key {key_id:?}, which is bound to a tenant: agentd \
                 signs with a key that steers every task"
            );
        }
        if self.signing() && self.signer().is_none() {
            anyhow::bail!(
                "every key of control.signing_keys is bound to a tenant: add one bound to none \
                 for the gateway, the CLI and the workers to sign with (control.sign_with)"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(keys: &[(&str, &str)], tenants: &[(&str, &str)]) -> ControlSettings {
        ControlSettings {
            signing_keys: keys
                .iter()
                .map(|(id, secret)| ((*id).to_owned(), Secret::from(*secret)))
                .collect(),
            key_tenants: tenants
                .iter()
                .map(|(id, tenant)| ((*id).to_owned(), (*tenant).to_owned()))
                .collect(),
            ..ControlSettings::default()
        }
    }

    #[test]
    fn agentd_signs_with_the_named_key_or_the_first_unbound_one() {
        let none = ControlSettings::default();
        assert!(!none.signing() && none.signer().is_none());
        none.validate().expect("no keys: v2 behaviour");
        let two = settings(&[("a", "x"), ("b", "y")], &[("a", "acme")]);
        two.validate().expect("valid");
        assert_eq!(two.signer().map(|s| s.key_id), Some("b"));
        let named = ControlSettings {
            sign_with: Some("c".into()),
            ..settings(&[("a", "x"), ("b", "y"), ("c", "z")], &[])
        };
        assert_eq!(named.signer().map(|s| s.key_id), Some("c"));
    }

    #[test]
    fn settings_that_cannot_work_are_refused_with_the_key_named() {
        let cases = [
            (
                settings(&[("a", " ")], &[]),
                "control.signing_keys.a is empty",
            ),
            (settings(&[("a", "x")], &[("b", "acme")]), "\"b\""),
            (
                settings(&[("a", "x")], &[("a", "acme")]),
                "bound to a tenant",
            ),
            (
                settings(&[("a", "x"), ("b", "y")], &[("a", "")]),
                "key_tenants.a",
            ),
            (
                ControlSettings {
                    sign_with: Some("zz".into()),
                    ..settings(&[("a", "x")], &[])
                },
                "\"zz\"",
            ),
            (
                ControlSettings {
                    sign_with: Some("a".into()),
                    ..settings(&[("a", "x"), ("b", "y")], &[("a", "acme")])
                },
                "bound to a tenant",
            ),
            (
                ControlSettings {
                    max_inject_bytes: 0,
                    ..ControlSettings::default()
                },
                "max_inject_bytes",
            ),
        ];
        for (settings, needle) in cases {
            let err = settings.validate().expect_err(needle);
            assert!(format!("{err:#}").contains(needle), "{err:#}");
        }
    }

    #[test]
    fn a_secret_never_prints() {
        let settings = settings(&[("a", "hunter2-secret")], &[]);
        assert!(!format!("{settings:?}").contains("hunter2"));
    }
}
