//! Who may steer (CONTRACT v3 §15): which control messages a worker applies. With
//! `control.signing_keys` set, a message must carry `x-agentd-key-id` and
//! `x-agentd-signature` (the hex HMAC-SHA256 of its body under that key), and a key bound to
//! a tenant (`control.key_tenants`) steers only that tenant's tasks. Anything else is
//! dropped: logged, counted in `agentd_control_rejected_total{reason}`, never applied and
//! never requeued. Without keys every readable message is applied, as in v2.
//!
//! Every worker receives every message twice over (its own queue, and in turn the pending
//! queue), so a refusal is counted and logged as a warning once: by the worker that reads
//! it from `agentd.control.pending`, or that received it forwarded. The other copies are
//! dropped with a debug line.

use lapin::message::Delivery;

use crate::amqp::signing::signature_of;
use crate::config::Signer;
use crate::contract::ControlMessage;
use crate::core::bounded;
use crate::core::signing::{self, Rejection};
use crate::lifecycle::fleet::Fleet;

/// A control message that passed the signature check, with the key that signed it (`None`
/// when signing is off).
#[derive(Debug, Clone)]
pub(super) struct Received {
    pub message: ControlMessage,
    pub key_id: Option<String>,
}

/// Reads a delivery: checks its signature when signing is on, parses it, and holds an
/// inject to `control.max_inject_bytes`. `None`: dropped (see the module doc); `counted`:
/// this copy is the one that counts.
pub(super) fn read(fleet: &Fleet, delivery: &Delivery, counted: bool) -> Option<Received> {
    let control = &fleet.control;
    let kind = delivery.properties.kind().as_ref().map(|k| k.as_str());
    let key_id = match control.signing() {
        false => None,
        true => {
            let (key_id, signature) = signature_of(&delivery.properties);
            let secret_of = |id: &str| control.secret(id).map(|s| s.expose().as_bytes());
            match signing::verify(
                secret_of,
                key_id.as_deref(),
                signature.as_deref(),
                &delivery.data,
            ) {
                Ok(key_id) => Some(key_id.to_owned()),
                Err(reason) => {
                    refuse(reason, kind, key_id.as_deref(), None, counted);
                    return None;
                }
            }
        }
    };
    let message = match ControlMessage::parse(kind, &delivery.data) {
        Ok(message) => message,
        Err(err) => {
            let error = bounded::reason(&err.to_string()).into_owned();
            if counted {
                crate::metrics::control_rejected(Rejection::Invalid.as_str());
            }
            tracing::warn!(%error, "control message ignored");
            return None;
        }
    };
    if let ControlMessage::Inject(inject) = &message
        && inject.text.len() > control.max_inject_bytes
    {
        let task_id = Some(inject.task_id);
        refuse(
            Rejection::Invalid,
            kind,
            key_id.as_deref(),
            task_id,
            counted,
        );
        return None;
    }
    Some(Received { message, key_id })
}

/// Whether the key that signed `received` may steer its task: a key bound to a tenant only
/// steers that tenant's tasks (`core::signing::may_steer`). Reads the task's tenant only for
/// a bound key. `Err`: the database is away (the caller retries or leaves it to the pending
/// queue's copy).
pub(super) async fn authorized(
    fleet: &Fleet,
    received: &Received,
    counted: bool,
) -> anyhow::Result<bool> {
    let Some(key_id) = received.key_id.as_deref() else {
        return Ok(true);
    };
    let Some(bound) = fleet.control.tenant_of(key_id) else {
        return Ok(true);
    };
    let task_id = received.message.task_id();
    let tenant = crate::store::steering::tenant_of(&fleet.pool, task_id).await?;
    if signing::may_steer(Some(bound), tenant.as_deref()) {
        return Ok(true);
    }
    let kind = Some(received.message.kind());
    refuse(
        Rejection::WrongTenant,
        kind,
        Some(key_id),
        Some(task_id),
        counted,
    );
    Ok(false)
}

/// Logs (and, for the counted copy, counts) a dropped message.
fn refuse(
    reason: Rejection,
    kind: Option<&str>,
    key_id: Option<&str>,
    task_id: Option<uuid::Uuid>,
    counted: bool,
) {
    let kind = bounded::quote(kind.unwrap_or("(none)"));
    let key_id = key_id.map(bounded::quote);
    let task_id = task_id.map(|id| id.to_string());
    if !counted {
        tracing::debug!(%kind, ?key_id, ?task_id, reason = reason.as_str(), "control message dropped");
        return;
    }
    crate::metrics::control_rejected(reason.as_str());
    tracing::warn!(%kind, ?key_id, ?task_id, reason = reason.as_str(), error = %reason,
        "control message dropped: not applied, not requeued");
}

/// The key a message this worker publishes again (forwarded, requeued, applied late) is
/// signed with: the key that signed the original when known (so the decision stays
/// attributed to it and a bound key keeps its bounds), else the workers' own key; `None`
/// when signing is off.
pub(super) fn signer_for<'a>(fleet: &'a Fleet, key_id: Option<&'a str>) -> Option<Signer<'a>> {
    let control = &fleet.control;
    if !control.signing() {
        return None;
    }
    key_id
        .and_then(|key_id| control.signer_of(key_id))
        .or_else(|| control.signer())
}
