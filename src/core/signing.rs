//! Who may steer (CONTRACT v3 §15), the pure part: the HMAC-SHA256 signature of a control
//! message's body, the check of a received message against the configured keys, and whether
//! a key bound to a tenant may steer a given task.
//!
//! A signature is the lowercase hex HMAC-SHA256 of the exact body bytes under the key's
//! secret, carried in the AMQP header `x-agentd-signature` beside the key id in
//! `x-agentd-key-id`. The comparison is constant-time (`hmac`'s `verify_slice`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::core::text::hex;

type HmacSha256 = Hmac<Sha256>;

/// The AMQP header naming the key a control message is signed with.
pub const KEY_ID_HEADER: &str = "x-agentd-key-id";
/// The AMQP header holding the hex HMAC-SHA256 of the body.
pub const SIGNATURE_HEADER: &str = "x-agentd-signature";

/// Why a control message is not applied (the `reason` label of
/// `agentd_control_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// No key id or no signature header.
    #[error("the message is not signed (no x-agentd-key-id or x-agentd-signature header)")]
    Unsigned,
    /// A key id that `control.signing_keys` does not hold.
    #[error("the message names a key that control.signing_keys does not hold")]
    UnknownKey,
    /// The signature is not the body's under that key (or not hex).
    #[error("the signature does not match the body under the named key")]
    BadSignature,
    /// The key is bound to a tenant other than the task's (`control.key_tenants`).
    #[error("the key is bound to another tenant than the task's")]
    WrongTenant,
    /// A well-signed message that cannot be read or breaks a limit (an inject over
    /// `control.max_inject_bytes`, a type agentd does not know, a body that is no message).
    #[error("the message cannot be read or breaks a limit")]
    Invalid,
}

impl Rejection {
    /// Every reason, for the metric's series at 0.
    pub const ALL: [Rejection; 5] = [
        Self::Unsigned,
        Self::UnknownKey,
        Self::BadSignature,
        Self::WrongTenant,
        Self::Invalid,
    ];

    /// The metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::UnknownKey => "unknown_key",
            Self::BadSignature => "bad_signature",
            Self::WrongTenant => "wrong_tenant",
            Self::Invalid => "invalid",
        }
    }
}

/// The lowercase hex HMAC-SHA256 of `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = mac(secret);
    mac.update(body);
    hex(&mac.finalize().into_bytes())
}

fn mac(secret: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    match HmacSha256::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim().as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    text.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// Checks a received message: `key_id` and `signature` are its headers (absent: `None`),
/// `secret_of` looks a key id up in `control.signing_keys`. Returns the key id that signed
/// it.
pub fn verify<'a, S: AsRef<[u8]>>(
    secret_of: impl Fn(&str) -> Option<S>,
    key_id: Option<&'a str>,
    signature: Option<&str>,
    body: &[u8],
) -> Result<&'a str, Rejection> {
    let (Some(key_id), Some(signature)) = (key_id, signature) else {
        return Err(Rejection::Unsigned);
    };
    let secret = secret_of(key_id).ok_or(Rejection::UnknownKey)?;
    let signature = unhex(signature).ok_or(Rejection::BadSignature)?;
    let mut mac = mac(secret.as_ref());
    mac.update(body);
    mac.verify_slice(&signature)
        .map_err(|_| Rejection::BadSignature)?;
    Ok(key_id)
}

/// Whether a key bound to `key_tenant` (`None`: bound to no tenant) may steer a task of
/// `task_tenant` (`None`: no table knows the task yet). An unbound key steers every task; a
/// bound one only its tenant's known tasks, so it cannot leave a cancel behind for an id
/// that another tenant's message may bring later.
pub fn may_steer(key_tenant: Option<&str>, task_tenant: Option<&str>) -> bool {
    match key_tenant {
        None => true,
        Some(bound) => task_tenant == Some(bound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys(id: &str) -> Option<&'static str> {
        (id == "ops").then_some("s3cret")
    }

    #[test]
    fn the_signature_is_the_rfc_4231_hmac_sha256() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_signed_body_verifies_and_anything_else_is_refused_with_its_reason() {
        let body = br#"{"task_id":"0195f3a0-0000-7000-8000-000000000001"}"#;
        let good = sign(b"s3cret", body);
        assert_eq!(verify(keys, Some("ops"), Some(&good), body), Ok("ops"));
        assert_eq!(
            verify(keys, Some("ops"), Some(&good.to_uppercase()), body),
            Ok("ops"),
            "hex digits in either case"
        );
        assert_eq!(
            verify(keys, None, Some(&good), body),
            Err(Rejection::Unsigned)
        );
        assert_eq!(
            verify(keys, Some("ops"), None, body),
            Err(Rejection::Unsigned)
        );
        assert_eq!(
            verify(keys, Some("dev"), Some(&good), body),
            Err(Rejection::UnknownKey)
        );
        let wrong_key = sign(b"guess", body);
        assert_eq!(
            verify(keys, Some("ops"), Some(&wrong_key), body),
            Err(Rejection::BadSignature)
        );
        let edited = br#"{"task_id":"0195f3a0-0000-7000-8000-000000000002"}"#;
        assert_eq!(
            verify(keys, Some("ops"), Some(&good), edited),
            Err(Rejection::BadSignature)
        );
        for junk in ["", "zz", "abc", &good[..62]] {
            assert_eq!(
                verify(keys, Some("ops"), Some(junk), body),
                Err(Rejection::BadSignature),
                "{junk:?}"
            );
        }
    }

    #[test]
    fn a_bound_key_steers_only_its_tenants_known_tasks() {
        assert!(may_steer(None, Some("acme")));
        assert!(may_steer(None, None));
        assert!(may_steer(Some("acme"), Some("acme")));
        assert!(!may_steer(Some("acme"), Some("default")));
        assert!(!may_steer(Some("acme"), None));
    }

    #[test]
    fn every_reason_has_its_own_label() {
        let labels: std::collections::HashSet<&str> =
            Rejection::ALL.iter().map(Rejection::as_str).collect();
        assert_eq!(labels.len(), Rejection::ALL.len());
    }

    proptest! {
        #[test]
        fn only_the_exact_body_under_the_exact_secret_verifies(
            body in proptest::collection::vec(any::<u8>(), 0..256),
            other in proptest::collection::vec(any::<u8>(), 0..256),
            secret in "[ -~]{1,40}",
        ) {
            let signature = sign(secret.as_bytes(), &body);
            let lookup = |_: &str| Some(secret.clone());
            prop_assert_eq!(verify(lookup, Some("k"), Some(&signature), &body), Ok("k"));
            let lookup = |_: &str| Some(secret.clone());
            let verdict = verify(lookup, Some("k"), Some(&signature), &other);
            prop_assert_eq!(verdict.is_ok(), other == body);
        }
    }
}
