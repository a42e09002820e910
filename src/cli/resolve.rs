//! The operations commands of CONTRACT §14 beyond schedules and listing: `agentd agent
//! create`'s stall flags, and `agentd resolve TASK CALL --outcome O [--result JSON]
//! [--error TEXT] --reason TEXT`, which records a person's decision about a call whose
//! outcome is unknown (the task waits, reason `unknown_outcome`) in PostgreSQL at once, like
//! the gateway, and says what came of it; `agentd unknown` lists the calls that wait.

use crate::core::stall::StallSettings;

/// `--stall-repeat N --stall-action A` as `agents.stall` (`None`: neither given, the
/// default); refused as the gateway refuses them (a repeat of 1, ...).
pub fn stall_flags(
    repeat: Option<u32>,
    action: Option<&str>,
) -> anyhow::Result<Option<StallSettings>> {
    if repeat.is_none() && action.is_none() {
        return Ok(None);
    }
    let mut value = serde_json::Map::new();
    if let Some(repeat) = repeat {
        value.insert("repeat".into(), repeat.into());
    }
    if let Some(action) = action {
        value.insert("action".into(), action.into());
    }
    let settings = StallSettings::from_json(&serde_json::Value::Object(value))?;
    Ok(Some(settings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::stall::StallAction;

    #[test]
    fn stall_flags_make_settings_and_refuse_a_repeat_of_one() {
        assert_eq!(stall_flags(None, None).unwrap(), None);
        let fail = stall_flags(Some(2), Some("fail")).unwrap().unwrap();
        assert_eq!((fail.repeat, fail.action), (2, StallAction::Fail));
        let off = stall_flags(Some(0), None).unwrap().unwrap();
        assert!(off.is_off());
        let error = stall_flags(Some(1), None).unwrap_err().to_string();
        assert!(error.contains("use 0 (off) or 2 or more"), "{error}");
    }
}
