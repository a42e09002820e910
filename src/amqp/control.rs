//! The one control publisher (CONTRACT §2, v3 §15): a [`ControlMessage`] of the contract
//! goes to the control fanout exchange (every worker gets it), JSON with its AMQP `type`,
//! signed with this side's key when `control.signing_keys` names one. The CLI, the
//! gateway, a worker cancelling a parent's children, and the tests all send through here.

use lapin::types::FieldTable;

use super::Publisher;
use super::signing::control_properties;
use crate::config::{AmqpSettings, ControlSettings, Signer};
use crate::contract::ControlMessage;

/// Publishes `message` to the control exchange, signed by `signer` when there is one.
pub async fn publish(
    publisher: &Publisher,
    names: &AmqpSettings,
    signer: Option<Signer<'_>>,
    message: &ControlMessage,
) -> anyhow::Result<()> {
    let to = (names.control_exchange.as_str(), "");
    publish_to(publisher, to, signer, message, FieldTable::default()).await
}

/// Publishes `message` to `(exchange, routing_key)` with `headers`, signed by `signer` when
/// there is one: a worker forwarding a message to the holder of its task, or putting back
/// on the pending queue one it could not apply yet, signs it again with the key that
/// signed it.
pub async fn publish_to(
    publisher: &Publisher,
    (exchange, routing_key): (&str, &str),
    signer: Option<Signer<'_>>,
    message: &ControlMessage,
    headers: FieldTable,
) -> anyhow::Result<()> {
    let body = message.body();
    let properties = control_properties(message, &body, signer, headers);
    publisher
        .publish(exchange, routing_key, &body, properties)
        .await
}

/// Publishes a control message unsigned: for a fleet without `control.signing_keys` (v2
/// producers, tests). agentd's own producers use [`send_control_signed`].
pub async fn send_control(
    publisher: &Publisher,
    names: &AmqpSettings,
    message: &ControlMessage,
) -> anyhow::Result<()> {
    publish(publisher, names, None, message).await
}

/// Publishes a control message signed with `control`'s own key when signing is on
/// (unsigned otherwise, as v2).
pub async fn send_control_signed(
    publisher: &Publisher,
    names: &AmqpSettings,
    control: &ControlSettings,
    message: &ControlMessage,
) -> anyhow::Result<()> {
    publish(publisher, names, control.signer(), message).await
}
