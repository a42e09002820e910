//! Which agent version a task runs on (CONTRACT v3 §11), pure: a task message may name a
//! version or a channel; otherwise `stable`, except that a `canary` with weight W takes W %
//! of those tasks, chosen by a hash of the task_id so that every delivery of a message (and
//! every worker) agrees. The choice is made once, at intake; the driver stores it in
//! `tasks.agent_version` and every continuation of the task reads it back from there.

use uuid::Uuid;

/// The default channel.
pub const STABLE: &str = "stable";
/// The channel that takes a weighted share of the tasks that name nothing.
pub const CANARY: &str = "canary";
/// Longest channel name.
pub const MAX_CHANNEL_CHARS: usize = 100;

/// What a task message asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Requested {
    /// Nothing: stable, or canary by weight.
    #[default]
    Default,
    /// This version (must exist).
    Version(i32),
    /// This channel's version (the channel must exist).
    Channel(String),
}

/// One row of `agent_channels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    pub name: String,
    pub version: i32,
    /// 0..=100; only the canary's matters.
    pub weight: i32,
}

/// Why no version could be chosen: the task is rejected like one naming an unknown agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    #[error("agent {agent_id} has no version {version}")]
    UnknownVersion { agent_id: Uuid, version: i32 },
    #[error("agent {agent_id} has no channel {channel}")]
    UnknownChannel { agent_id: Uuid, channel: String },
    #[error("agent {agent_id} has no stable channel")]
    NoStable { agent_id: Uuid },
}

/// The task's bucket in 0..100: a 64-bit FNV-1a hash of the id's 16 bytes, mixed
/// (splitmix64's finalizer) so that sequential ids spread evenly.
pub fn bucket(task_id: Uuid) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in task_id.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^= hash >> 31;
    u32::try_from(hash % 100).unwrap_or(0)
}

/// The version `task_id` runs on. `versions` are the agent's existing version numbers
/// (checked only for a named version); `channels` its channels.
pub fn choose(
    agent_id: Uuid,
    task_id: Uuid,
    requested: &Requested,
    channels: &[Channel],
    versions: &[i32],
) -> Result<i32, ChoiceError> {
    let channel = |name: &str| channels.iter().find(|c| c.name == name);
    match requested {
        Requested::Version(version) if versions.contains(version) => Ok(*version),
        Requested::Version(version) => Err(ChoiceError::UnknownVersion {
            agent_id,
            version: *version,
        }),
        Requested::Channel(name) => {
            channel(name)
                .map(|c| c.version)
                .ok_or_else(|| ChoiceError::UnknownChannel {
                    agent_id,
                    channel: name.clone(),
                })
        }
        Requested::Default => {
            let stable = channel(STABLE).ok_or(ChoiceError::NoStable { agent_id })?;
            match channel(CANARY) {
                Some(canary) if i64::from(bucket(task_id)) < i64::from(canary.weight) => {
                    Ok(canary.version)
                }
                _ => Ok(stable.version),
            }
        }
    }
}

/// Fields of a version row that say which row it is, not what it defines.
const NOT_DEFINITION: &[&str] = &["agent_id", "version", "created_at"];

/// What differs between two versions (their rows as JSON objects), one line per change;
/// a multi-line text (instructions) as the lines removed (`- `) and added (`+ `) between
/// its common head and tail.
pub fn diff(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    let empty = serde_json::Map::new();
    let (a, b) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut lines = Vec::new();
    for key in keys {
        if NOT_DEFINITION.contains(&key.as_str()) {
            continue;
        }
        let (x, y) = (
            a.get(key).unwrap_or(&Value::Null),
            b.get(key).unwrap_or(&Value::Null),
        );
        if x == y {
            continue;
        }
        match (x, y) {
            (Value::String(x), Value::String(y)) if x.contains('\n') || y.contains('\n') => {
                lines.push(format!("{key}:"));
                lines.extend(text_diff(x, y));
            }
            (Value::String(_) | Value::Null, Value::String(_) | Value::Null) => {
                let show = |v: &Value| v.as_str().map_or("(none)".to_owned(), |s| format!("{s:?}"));
                lines.push(format!("{key}: {} -> {}", show(x), show(y)));
            }
            _ => lines.push(format!("{key}: {x} -> {y}")),
        }
    }
    lines
}

/// The lines of `old` and `new` that differ between their common first and last lines.
fn text_diff(old: &str, new: &str) -> Vec<String> {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = (a[head..].iter().rev())
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let removed = a[head..a.len() - tail]
        .iter()
        .map(|line| format!("  - {line}"));
    let added = b[head..b.len() - tail]
        .iter()
        .map(|line| format!("  + {line}"));
    removed.chain(added).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channels(stable: i32, canary: Option<(i32, i32)>) -> Vec<Channel> {
        let mut all = vec![Channel {
            name: STABLE.into(),
            version: stable,
            weight: 100,
        }];
        if let Some((version, weight)) = canary {
            all.push(Channel {
                name: CANARY.into(),
                version,
                weight,
            });
        }
        all
    }

    #[test]
    fn a_named_version_or_channel_wins() {
        let (agent, task) = (Uuid::now_v7(), Uuid::now_v7());
        let all = channels(1, Some((3, 100)));
        assert_eq!(
            choose(agent, task, &Requested::Version(2), &all, &[1, 2, 3]),
            Ok(2)
        );
        let stable = Requested::Channel(STABLE.into());
        assert_eq!(choose(agent, task, &stable, &all, &[1, 2, 3]), Ok(1));
        let canary = Requested::Channel(CANARY.into());
        assert_eq!(choose(agent, task, &canary, &all, &[1, 2, 3]), Ok(3));
    }

    #[test]
    fn unknown_versions_and_channels_are_refused_with_a_reason() {
        let (agent, task) = (Uuid::now_v7(), Uuid::now_v7());
        let all = channels(1, None);
        let err = choose(agent, task, &Requested::Version(9), &all, &[1]).unwrap_err();
        assert_eq!(err.to_string(), format!("agent {agent} has no version 9"));
        let named = Requested::Channel("beta".into());
        let err = choose(agent, task, &named, &all, &[1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("agent {agent} has no channel beta")
        );
        assert!(matches!(
            choose(agent, task, &Requested::Default, &[], &[1]),
            Err(ChoiceError::NoStable { .. })
        ));
    }

    #[test]
    fn without_a_canary_everything_is_stable() {
        let agent = Uuid::now_v7();
        for weight in [None, Some((2, 0))] {
            let all = channels(1, weight);
            for _ in 0..200 {
                let task = Uuid::new_v4();
                assert_eq!(
                    choose(agent, task, &Requested::Default, &all, &[1, 2]),
                    Ok(1)
                );
            }
        }
        let all = channels(1, Some((2, 100)));
        assert_eq!(
            choose(agent, Uuid::new_v4(), &Requested::Default, &all, &[1, 2]),
            Ok(2)
        );
    }

    /// Deterministic task ids: `n` pseudo-random ones (as v4 ids look) or `n` consecutive
    /// ones (as a producer numbering its tasks makes them).
    fn ids(n: u128, consecutive: bool) -> Vec<Uuid> {
        let mut state: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834;
        (0..n)
            .map(|i| {
                state = state
                    .wrapping_mul(0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645)
                    .wrapping_add(0x5851_f42d_4c95_7f2d_1405_7b7e_f767_814f);
                Uuid::from_u128(if consecutive {
                    0x0195_f3a0 << 96 | i
                } else {
                    state
                })
            })
            .collect()
    }

    fn canary_share(weight: i32, tasks: &[Uuid]) -> f64 {
        let all = channels(1, Some((2, weight)));
        let agent = Uuid::now_v7();
        let canary = tasks
            .iter()
            .filter(|task| choose(agent, **task, &Requested::Default, &all, &[1, 2]) == Ok(2))
            .count();
        100.0 * canary as f64 / tasks.len() as f64
    }

    /// CONTRACT §11's acceptance: over 500 consecutive task ids (as a producer numbering its
    /// tasks, or UUIDv7 within one millisecond, makes them) the canary takes its weight
    /// within ±4 points.
    #[test]
    fn the_canary_takes_its_weight_over_500_tasks() {
        let tasks = ids(500, true);
        for weight in [1, 5, 10, 25, 50, 75, 90, 99] {
            let share = canary_share(weight, &tasks);
            assert!(
                (share - f64::from(weight)).abs() <= 4.0,
                "weight {weight}: {share} %"
            );
        }
    }

    /// The hash is uniform: over 20,000 pseudo-random ids the share is within one point.
    /// (Over 500 *random* ids a hash cannot promise ±4 points at every weight: the share
    /// is binomial, with a standard deviation of 2.2 points at weight 50; docs/versions.md.)
    #[test]
    fn the_bucket_is_uniform() {
        let tasks = ids(20_000, false);
        for weight in [1, 10, 50, 90] {
            let share = canary_share(weight, &tasks);
            assert!(
                (share - f64::from(weight)).abs() <= 1.0,
                "weight {weight}: {share} %"
            );
        }
    }

    #[test]
    fn a_diff_names_what_changed() {
        use serde_json::json;
        let v1 = json!({"agent_id": "a", "version": 1, "created_at": "t1", "model": "m1",
            "max_iteration": 30, "instructions": "Be brief.\nUse French.\nSign as Ada.",
            "params": {}, "note": null});
        let v2 = json!({"agent_id": "a", "version": 2, "created_at": "t2", "model": "m2",
            "max_iteration": 30, "instructions": "Be brief.\nUse German.\nSign as Ada.",
            "params": {"temperature": 0.2}, "note": "german"});
        assert_eq!(
            diff(&v1, &v2),
            [
                "instructions:",
                "  - Use French.",
                "  + Use German.",
                "model: \"m1\" -> \"m2\"",
                "note: (none) -> \"german\"",
                "params: {} -> {\"temperature\":0.2}",
            ]
        );
        assert!(diff(&v1, &v1).is_empty());
    }

    #[test]
    fn the_choice_depends_on_the_task_id_only() {
        let agent = Uuid::now_v7();
        let all = channels(1, Some((2, 50)));
        for _ in 0..100 {
            let task = Uuid::new_v4();
            let first = choose(agent, task, &Requested::Default, &all, &[1, 2]);
            assert_eq!(
                choose(agent, task, &Requested::Default, &all, &[1, 2]),
                first
            );
        }
        // Fixed values: a change of the hash would move running canaries.
        let id = Uuid::from_u128(0);
        assert_eq!(bucket(id), bucket(Uuid::from_u128(0)));
        assert!(bucket(Uuid::from_u128(u128::MAX)) < 100);
    }
}
