//! The `[partitions]` section (issue 29): how the trace tables are cut by time and how often
//! a worker makes partitions ahead of time (`store::partitions`). The defaults match
//! config/default.toml, where each key is documented.

use std::time::Duration;

use serde::Deserialize;

use crate::core::partitions::Layout;

/// `[partitions]`: the time partitions of the trace tables.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PartitionSettings {
    /// One partition per this much task creation time: whole hours dividing a day (`6h`),
    /// or whole days or weeks (`1d`, `1w`).
    pub interval: String,
    /// Partitions made ahead of the current one.
    pub ahead: u32,
    /// Seconds between two maintenance runs of a worker (at start, then this often);
    /// 0 = never (partitions are then someone else's job).
    pub maintain_every_secs: u64,
}

impl Default for PartitionSettings {
    fn default() -> Self {
        Self {
            interval: "1d".to_owned(),
            ahead: 3,
            maintain_every_secs: 3600,
        }
    }
}

impl PartitionSettings {
    /// The layout the core decides with.
    pub fn layout(&self) -> anyhow::Result<Layout> {
        Layout::parse(&self.interval, self.ahead)
            .map_err(|e| anyhow::anyhow!("partitions.interval / partitions.ahead: {e}"))
    }

    /// How often a worker maintains the partitions; `None` when it does not.
    pub fn every(&self) -> Option<Duration> {
        (self.maintain_every_secs > 0).then(|| Duration::from_secs(self.maintain_every_secs))
    }

    /// Checks the layout, and that maintenance runs before the partitions made ahead run
    /// out.
    pub fn validate(&self) -> anyhow::Result<()> {
        let layout = self.layout()?;
        let ahead_secs = layout.interval().num_seconds() * i64::from(layout.ahead());
        let every = i64::try_from(self.maintain_every_secs).unwrap_or(i64::MAX);
        anyhow::ensure!(
            every < ahead_secs,
            "partitions.maintain_every_secs ({every}) must be shorter than the partitions made \
             ahead cover (ahead × interval = {ahead_secs} s)"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_maintenance_must_outrun_the_partitions_ahead() {
        assert!(PartitionSettings::default().validate().is_ok());
        let slow = PartitionSettings {
            interval: "1h".to_owned(),
            ahead: 2,
            maintain_every_secs: 7200,
        };
        assert!(slow.validate().is_err());
        let off = PartitionSettings {
            maintain_every_secs: 0,
            ..PartitionSettings::default()
        };
        assert!(off.validate().is_ok());
        assert_eq!(off.every(), None);
        let bad = PartitionSettings {
            interval: "5h".to_owned(),
            ..PartitionSettings::default()
        };
        assert!(bad.validate().is_err());
    }
}
