//! Fair shares (CONTRACT v3 §15), the pure rules: when a task of a tenant with
//! `tenants.max_running` may start, the order its waiting tasks start in (priority `high`
//! first, then arrival), and which waiting tenant the next freed slot goes to (smooth
//! weighted round robin over `tenants.weight`), so that one tenant's flood cannot starve
//! another.
//!
//! A slot is held by a task that is running, or that was given a slot and is about to be
//! claimed (`store::tenants` counts both). Nothing here does I/O.

use std::cmp::Ordering;

/// A task's place within its tenant: `high` starts before `normal`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    High,
    #[default]
    Normal,
}

impl Priority {
    /// The name stored in `tasks.priority` and carried by a task message.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::High => "high",
            Self::Normal => "normal",
        }
    }

    /// The priority named `name`; `Err` names the two there are.
    pub fn parse(name: &str) -> Result<Priority, String> {
        match name {
            "high" => Ok(Self::High),
            "normal" => Ok(Self::Normal),
            other => Err(format!(
                "priority must be \"high\" or \"normal\", not {}",
                crate::core::bounded::quote(other)
            )),
        }
    }
}

/// A waiting task's place in its tenant's queue: priority, then arrival (its
/// `created_at` and `recorded_seq`, as one ordered value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<T: Ord> {
    pub priority: Priority,
    pub arrival: T,
}

impl<T: Ord> PartialOrd for Place<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: Ord> Ord for Place<T> {
    /// Earlier places start first: `high` before `normal`, then earlier arrivals.
    fn cmp(&self, other: &Self) -> Ordering {
        let rank = |p: Priority| match p {
            Priority::High => 0,
            Priority::Normal => 1,
        };
        rank(self.priority)
            .cmp(&rank(other.priority))
            .then_with(|| self.arrival.cmp(&other.arrival))
    }
}

/// What admission decides for a task of a limited tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A slot is free and no task of the tenant waits ahead of it: it starts.
    Run,
    /// It waits (reason `tenant_limit`) until a slot frees and its turn comes.
    Wait,
}

/// Whether a task may start: its tenant holds `occupied` slots besides it (running tasks
/// and tasks given a slot), may hold `max_running` (`None`: no limit), and `ahead` says
/// whether one of its waiting tasks comes before it.
pub fn admit(max_running: Option<u32>, occupied: u32, ahead: bool) -> Admission {
    match max_running {
        None => Admission::Run,
        Some(max) if occupied < max && !ahead => Admission::Run,
        Some(_) => Admission::Wait,
    }
}

/// How many more tasks a tenant may start now.
pub fn free_slots(max_running: Option<u32>, occupied: u32) -> u32 {
    max_running.map_or(u32::MAX, |max| max.saturating_sub(occupied))
}

/// A tenant with waiting tasks, as the round robin sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contender {
    /// `tenants.weight` (at least 1).
    pub weight: u32,
    /// Tasks it may start now: its free slots, at most its waiting tasks.
    pub startable: u32,
}

/// The order in which up to `budget` freed slots go to `contenders` (indices into it):
/// smooth weighted round robin, so over any stretch each contender that still has
/// startable tasks gets slots in proportion to its weight, interleaved rather than in
/// runs, and a contender with weight 1 waits at most one round behind one with weight N.
pub fn round_robin(contenders: &[Contender], budget: usize) -> Vec<usize> {
    let mut left: Vec<u32> = contenders.iter().map(|c| c.startable).collect();
    let mut current: Vec<i64> = vec![0; contenders.len()];
    let mut order = Vec::new();
    while order.len() < budget {
        let eligible: Vec<usize> = (0..contenders.len()).filter(|&i| left[i] > 0).collect();
        if eligible.is_empty() {
            break;
        }
        let mut total = 0i64;
        for &i in &eligible {
            let weight = i64::from(contenders[i].weight.max(1));
            current[i] += weight;
            total += weight;
        }
        // The first of the highest: ties go to the contender listed first.
        let Some(&pick) = eligible
            .iter()
            .max_by(|&&a, &&b| current[a].cmp(&current[b]).then(b.cmp(&a)))
        else {
            break;
        };
        current[pick] -= total;
        left[pick] -= 1;
        order.push(pick);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn priorities_are_high_and_normal() {
        assert_eq!(Priority::parse("high"), Ok(Priority::High));
        assert_eq!(Priority::parse("normal"), Ok(Priority::Normal));
        assert_eq!(Priority::default(), Priority::Normal);
        let err = Priority::parse("urgent").expect_err("unknown");
        assert!(err.contains("\"urgent\"") && err.contains("high"), "{err}");
        assert_eq!(
            serde_json::to_value(Priority::High).ok(),
            Some(serde_json::json!("high"))
        );
    }

    #[test]
    fn high_goes_first_then_arrival() {
        let place = |priority, arrival| Place { priority, arrival };
        let mut places = [
            place(Priority::Normal, 1),
            place(Priority::High, 3),
            place(Priority::Normal, 0),
            place(Priority::High, 2),
        ];
        places.sort();
        let arrivals: Vec<i32> = places.iter().map(|p| p.arrival).collect();
        assert_eq!(arrivals, [2, 3, 0, 1]);
    }

    #[test]
    fn a_task_starts_when_a_slot_is_free_and_none_waits_ahead() {
        assert_eq!(admit(None, 1000, true), Admission::Run);
        assert_eq!(admit(Some(2), 1, false), Admission::Run);
        assert_eq!(admit(Some(2), 2, false), Admission::Wait);
        assert_eq!(admit(Some(2), 0, true), Admission::Wait, "arrival order");
        assert_eq!(admit(Some(0), 0, false), Admission::Wait, "a held tenant");
        assert_eq!(free_slots(Some(5), 2), 3);
        assert_eq!(free_slots(Some(2), 5), 0);
        assert_eq!(free_slots(None, 5), u32::MAX);
    }

    #[test]
    fn slots_go_round_by_weight_interleaved() {
        let contenders = [
            Contender {
                weight: 2,
                startable: 100,
            },
            Contender {
                weight: 1,
                startable: 100,
            },
        ];
        assert_eq!(round_robin(&contenders, 6), [0, 1, 0, 0, 1, 0]);
        let equal = [
            Contender {
                weight: 1,
                startable: 100,
            },
            Contender {
                weight: 1,
                startable: 2,
            },
            Contender {
                weight: 1,
                startable: 100,
            },
        ];
        let order = round_robin(&equal, 7);
        assert_eq!(order[..3], [0, 1, 2]);
        let count = |i| order.iter().filter(|&&p| p == i).count();
        assert_eq!((count(1), count(0) + count(2)), (2, 5), "{order:?}");
        assert!(count(0) >= 2 && count(2) >= 2, "{order:?}");
    }

    #[test]
    fn a_flood_does_not_starve_a_small_tenant() {
        // A thousand waiting tasks of a heavy tenant, ten of a light one, ten slots.
        let contenders = [
            Contender {
                weight: 5,
                startable: 1000,
            },
            Contender {
                weight: 1,
                startable: 10,
            },
        ];
        let order = round_robin(&contenders, 12);
        assert!(order[..6].contains(&1), "{order:?}");
        assert_eq!(order.iter().filter(|&&i| i == 1).count(), 2);
    }

    #[test]
    fn nothing_startable_gives_nothing() {
        assert!(round_robin(&[], 5).is_empty());
        let idle = [Contender {
            weight: 3,
            startable: 0,
        }];
        assert!(round_robin(&idle, 5).is_empty());
        let one = [Contender {
            weight: 3,
            startable: 2,
        }];
        assert_eq!(round_robin(&one, 5), [0, 0]);
    }

    proptest! {
        /// Every slot handed out goes to a contender that may start a task, none gets more
        /// than it may, and slots stop only when the budget or the startable tasks do; over
        /// a long stretch each gets its weighted share (within one round).
        #[test]
        fn the_round_robin_is_weighted_and_bounded(
            weights in proptest::collection::vec(1u32..6, 1..5),
            startable in proptest::collection::vec(0u32..40, 1..5),
            budget in 0usize..120,
        ) {
            let contenders: Vec<Contender> = weights.iter().zip(&startable)
                .map(|(&weight, &startable)| Contender { weight, startable })
                .collect();
            let order = round_robin(&contenders, budget);
            let total: u32 = contenders.iter().map(|c| c.startable).sum();
            prop_assert_eq!(order.len(), budget.min(total as usize));
            for (i, contender) in contenders.iter().enumerate() {
                let got = order.iter().filter(|&&p| p == i).count() as u32;
                prop_assert!(got <= contender.startable);
            }
            // While every contender still had startable tasks, shares follow the weights.
            let unlimited: Vec<Contender> = weights.iter()
                .map(|&weight| Contender { weight, startable: u32::MAX })
                .collect();
            let total_weight: u32 = weights.iter().sum();
            let rounds = 5usize;
            let order = round_robin(&unlimited, rounds * total_weight as usize);
            for (i, &weight) in weights.iter().enumerate() {
                let got = order.iter().filter(|&&p| p == i).count();
                prop_assert_eq!(got, rounds * weight as usize);
            }
        }
    }
}
