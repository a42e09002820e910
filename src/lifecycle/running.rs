//! The stop tokens of the tasks this worker runs, by task id: what a cancel message reaches,
//! and what shutdown releases. A cancel for a task not (yet) running here, and guidance for
//! a task whose lease this worker holds but that is not registered yet, are remembered for a
//! while, in case the task is between its claim and its registration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::interrupt::Stops;

/// How long a cancel (or guidance) for a task not running here is remembered, in case the
/// task is between its claim and its registration here (or is redelivered here soon).
const EARLY_CANCEL_TTL: Duration = Duration::from_secs(60);

/// The stop tokens of the tasks this worker is running, by task id.
#[derive(Debug, Clone, Default)]
pub struct RunningTasks {
    inner: Arc<Mutex<Registry>>,
}

#[derive(Debug, Default)]
struct Registry {
    running: HashMap<Uuid, Stops>,
    early_cancels: HashMap<Uuid, Instant>,
    early_guidance: HashMap<Uuid, (Instant, Vec<String>)>,
}

impl RunningTasks {
    pub fn insert(&self, task_id: Uuid, stops: Stops) {
        let Ok(mut registry) = self.inner.lock() else {
            return;
        };
        if registry.early_cancels.remove(&task_id).is_some() {
            stops.cancel.cancel();
        }
        if let Some((_, texts)) = registry.early_guidance.remove(&task_id)
            && let Ok(mut inbox) = stops.guidance.lock()
        {
            inbox.extend(texts);
        }
        registry.running.insert(task_id, stops);
    }

    pub fn remove(&self, task_id: Uuid) {
        if let Ok(mut registry) = self.inner.lock() {
            registry.running.remove(&task_id);
        }
    }

    /// Cancels a task. Returns whether it runs here; if not, the cancel is remembered for a
    /// while in case the task starts here.
    pub fn cancel(&self, task_id: Uuid) -> bool {
        let Ok(mut registry) = self.inner.lock() else {
            return false;
        };
        if let Some(stops) = registry.running.get(&task_id) {
            stops.cancel.cancel();
            return true;
        }
        let now = Instant::now();
        registry
            .early_cancels
            .retain(|_, at| now.duration_since(*at) < EARLY_CANCEL_TTL);
        registry.early_cancels.insert(task_id, now);
        false
    }

    /// Cancels a task if it runs here; remembers nothing otherwise.
    pub fn cancel_if_running(&self, task_id: Uuid) -> bool {
        let Ok(registry) = self.inner.lock() else {
            return false;
        };
        match registry.running.get(&task_id) {
            Some(stops) => {
                stops.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Pauses a task if it runs here (it stops before its next LLM call).
    pub fn pause_if_running(&self, task_id: Uuid) -> bool {
        let Ok(registry) = self.inner.lock() else {
            return false;
        };
        match registry.running.get(&task_id) {
            Some(stops) => {
                stops.pause.cancel();
                true
            }
            None => false,
        }
    }

    /// Hands guidance to a task if it runs here (its next recursion shows it).
    pub fn inject_if_running(&self, task_id: Uuid, text: &str) -> bool {
        let Ok(registry) = self.inner.lock() else {
            return false;
        };
        match registry.running.get(&task_id) {
            Some(stops) => {
                if let Ok(mut inbox) = stops.guidance.lock() {
                    inbox.push(text.to_owned());
                }
                true
            }
            None => false,
        }
    }

    /// Hands guidance to a task this worker holds the lease of: at once if it runs here,
    /// else kept for a while for the moment it registers (it is between its claim and its
    /// run).
    pub fn inject(&self, task_id: Uuid, text: &str) {
        if self.inject_if_running(task_id, text) {
            return;
        }
        let Ok(mut registry) = self.inner.lock() else {
            return;
        };
        let now = Instant::now();
        registry
            .early_guidance
            .retain(|_, (at, _)| now.duration_since(*at) < EARLY_CANCEL_TTL);
        let (_, texts) = registry
            .early_guidance
            .entry(task_id)
            .or_insert_with(|| (now, Vec::new()));
        texts.push(text.to_owned());
    }

    /// Lets every running task go (shutdown after the grace period).
    pub fn release_all(&self) {
        if let Ok(registry) = self.inner.lock() {
            registry
                .running
                .values()
                .for_each(|stops| stops.release.cancel());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guidance_for_a_task_not_registered_yet_reaches_it_when_it_registers() {
        let running = RunningTasks::default();
        let task_id = Uuid::now_v7();
        assert!(!running.inject_if_running(task_id, "dropped: not ours"));
        running.inject(task_id, "first");
        running.inject(task_id, "second");
        let stops = Stops::default();
        running.insert(task_id, stops.clone());
        assert_eq!(stops.take_guidance(), vec!["first", "second"]);
        running.inject(task_id, "third");
        assert_eq!(stops.take_guidance(), vec!["third"]);
        // Taken once: a later registration of the same task starts empty.
        running.remove(task_id);
        let again = Stops::default();
        running.insert(task_id, again.clone());
        assert!(again.take_guidance().is_empty());
    }

    #[test]
    fn a_cancel_for_a_task_not_registered_yet_cancels_it_when_it_registers() {
        let running = RunningTasks::default();
        let task_id = Uuid::now_v7();
        assert!(!running.cancel(task_id));
        let stops = Stops::default();
        running.insert(task_id, stops.clone());
        assert!(stops.cancel.is_cancelled());
    }
}
