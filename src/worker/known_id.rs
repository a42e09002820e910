//! A task message whose `task_id` names a task already recorded: a redelivery, the message
//! of a task a producer (the gateway, a fork, an approval) recorded first, or a message
//! that arrives after a cancel ended its task. It takes the stored task up only if it is
//! that task's message: a message naming another agent, or asking for the reply on another
//! route than the one recorded, would otherwise run (or reject) someone else's task under
//! its own agent and take its reply. Such a message is refused (dead-lettered with the
//! reason) and the stored task is left as it is.

use uuid::Uuid;

use crate::contract::intake::TaskSpec;
use crate::core::bounded;
use crate::store::replies::ReplyRoute;
use crate::store::tasks::{self, Origin};

/// Why the message (`spec`, with the reply route of its properties) cannot be the stored
/// task's message, `None` when it may be (or no row exists).
pub async fn mismatch(
    pool: &sqlx::PgPool,
    spec: &TaskSpec,
    reply: Option<&ReplyRoute>,
) -> sqlx::Result<Option<String>> {
    let stored = tasks::origin(pool, spec.task_id).await?;
    Ok(stored.and_then(|stored| conflict(&stored, spec.task_id, spec.agent_id, reply)))
}

/// The rule. A row without an agent (a cancel recorded before the message was read) takes
/// any agent; a row without a route takes the message's (the first route asked for wins);
/// a message without a route asks for nothing (workers re-enqueue tasks that way).
pub fn conflict(
    stored: &Origin,
    task_id: Uuid,
    agent_id: Uuid,
    reply: Option<&ReplyRoute>,
) -> Option<String> {
    if let Some(stored_agent) = stored.agent_id
        && stored_agent != agent_id
    {
        return Some(format!(
            "task_id {task_id} names a task of agent {stored_agent}, not of agent_id \
             {agent_id}: a message may not take over another task (use a new task_id)"
        ));
    }
    match (&stored.reply, reply) {
        (Some(recorded), Some(asked)) if recorded != asked => Some(format!(
            "task_id {task_id} names a task whose reply goes to {} (correlation_id {}), not \
             to this message's reply_to {} (correlation_id {}): a message may not take over \
             another task (use a new task_id)",
            bounded::quote(&recorded.reply_to),
            quote_id(recorded.correlation_id.as_deref()),
            bounded::quote(&asked.reply_to),
            quote_id(asked.correlation_id.as_deref()),
        )),
        _ => None,
    }
}

fn quote_id(id: Option<&str>) -> String {
    id.map_or_else(|| "none".to_owned(), bounded::quote)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(to: &str, id: Option<&str>) -> ReplyRoute {
        ReplyRoute {
            reply_to: to.into(),
            correlation_id: id.map(str::to_owned),
        }
    }

    #[test]
    fn the_same_message_again_may_take_its_task_up() {
        let (task, agent) = (Uuid::now_v7(), Uuid::now_v7());
        let reply = route("amq.gen-1", Some("c1"));
        let stored = Origin {
            agent_id: Some(agent),
            reply: Some(reply.clone()),
        };
        assert_eq!(conflict(&stored, task, agent, Some(&reply)), None);
        // A worker's re-enqueued message carries no route.
        assert_eq!(conflict(&stored, task, agent, None), None);
    }

    #[test]
    fn a_row_without_agent_or_route_takes_the_message_s() {
        let (task, agent) = (Uuid::now_v7(), Uuid::now_v7());
        let tombstone = Origin {
            agent_id: None,
            reply: None,
        };
        let reply = route("q", None);
        assert_eq!(conflict(&tombstone, task, agent, Some(&reply)), None);
    }

    #[test]
    fn another_agent_or_route_is_refused() {
        let (task, agent) = (Uuid::now_v7(), Uuid::now_v7());
        let stored = Origin {
            agent_id: Some(agent),
            reply: Some(route("mine", None)),
        };
        let other = Uuid::now_v7();
        let reason = conflict(&stored, task, other, None).expect("another agent");
        assert!(reason.contains(&format!("agent {agent}")), "{reason}");
        let theirs = route("theirs", None);
        let reason = conflict(&stored, task, agent, Some(&theirs)).expect("another route");
        assert!(reason.contains("\"mine\""), "{reason}");
        let correlated = route("mine", Some("c2"));
        assert!(conflict(&stored, task, agent, Some(&correlated)).is_some());
    }
}
