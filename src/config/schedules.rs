//! The `[schedules]` section (CONTRACT v3 §14): how often the scheduler looks for due
//! schedules and how late a fire may be decided and still count as on time. The defaults
//! match config/default.toml, where each key is documented.

use std::time::Duration;

use serde::Deserialize;

/// `[schedules]`: the scheduler that one worker of the fleet runs at a time.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SchedulesSettings {
    /// Milliseconds between two scheduler ticks; also how often a worker that does not
    /// hold the scheduler tries to take it (a killed holder is replaced within about this).
    pub tick_ms: u64,
    /// A due fire decided at most this many seconds after its time is on time; an older
    /// one was missed (no worker ran) and its schedule's catch-up rule decides it.
    pub on_time_grace_secs: u32,
}

impl Default for SchedulesSettings {
    fn default() -> Self {
        Self {
            tick_ms: 1000,
            on_time_grace_secs: crate::core::schedule::DEFAULT_ON_TIME_GRACE_SECS,
        }
    }
}

impl SchedulesSettings {
    /// The tick period, at least 10 ms.
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms.max(10))
    }

    /// The on-time grace as the core takes it.
    pub fn on_time_grace(&self) -> chrono::TimeDelta {
        chrono::TimeDelta::seconds(i64::from(self.on_time_grace_secs))
    }
}
