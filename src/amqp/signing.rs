//! Control messages on the wire with their signature (CONTRACT v3 §15): the AMQP properties
//! a signed message carries, and the signature headers of a delivery. The signature itself
//! is `core::signing`'s.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString};

use crate::config::Signer;
use crate::contract::ControlMessage;
use crate::core::signing::{KEY_ID_HEADER, SIGNATURE_HEADER, sign};

/// The properties of `message` (JSON, its type), with `headers`, signed by `signer` when
/// there is one. `body` must be the exact bytes published.
pub fn control_properties(
    message: &ControlMessage,
    body: &[u8],
    signer: Option<Signer<'_>>,
    mut headers: FieldTable,
) -> BasicProperties {
    if let Some(signer) = signer {
        let signature = sign(signer.secret.expose().as_bytes(), body);
        headers.insert(
            KEY_ID_HEADER.into(),
            AMQPValue::LongString(LongString::from(signer.key_id)),
        );
        headers.insert(
            SIGNATURE_HEADER.into(),
            AMQPValue::LongString(LongString::from(signature)),
        );
    }
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_type(message.kind().into())
        .with_headers(headers)
}

/// The text of header `name` of `properties` (a long or short string), if any.
pub fn header_text(properties: &BasicProperties, name: &str) -> Option<String> {
    let headers = properties.headers().as_ref()?;
    match headers.inner().get(name)? {
        AMQPValue::LongString(text) => Some(String::from_utf8_lossy(text.as_bytes()).into_owned()),
        AMQPValue::ShortString(text) => Some(text.as_str().to_owned()),
        _ => None,
    }
}

/// The key id and signature headers of a delivery.
pub fn signature_of(properties: &BasicProperties) -> (Option<String>, Option<String>) {
    (
        header_text(properties, KEY_ID_HEADER),
        header_text(properties, SIGNATURE_HEADER),
    )
}
