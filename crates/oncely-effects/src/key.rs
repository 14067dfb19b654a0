//! Idempotency keys for outside effects, derived from the message id alone.

use oncely_core::MessageId;
use sha2::{Digest, Sha256};

/// Longest message id kept verbatim in a key; longer ids are hashed.
pub const MAX_VERBATIM_ID: usize = 100;

fn safe_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~')
}

fn safe_effect_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn sha_hex(text: &str, chars: usize) -> String {
    let mut hex = hex::encode(Sha256::digest(text.as_bytes()));
    hex.truncate(chars);
    hex
}

/// A stable idempotency key for the effect `effect` (e.g. `"email"`) of message `id`: the
/// same on every redelivery and every machine, as it depends on nothing but its arguments.
///
/// - `msg-<id>:<effect>` when the id is at most [`MAX_VERBATIM_ID`] bytes of
///   `[A-Za-z0-9._~-]` (safe in any HTTP header, URL path or provider key charset);
/// - `msgh-<first 32 hex digits of sha256(id)>:<effect>` otherwise (ids with spaces, `:`,
///   `/`, non-ASCII, or too long). The prefixes differ, so a verbatim key never equals a hashed one.
///
/// `effect` should be a short constant of `[A-Za-z0-9._-]`; any other name is replaced by
/// `h-` and 16 hex digits of its hash, so the key stays safe. Keys are at most 122 bytes.
///
/// ```
/// use oncely_core::MessageId;
/// use oncely_effects::effect_key;
/// let id = MessageId::new("8f2c1e").unwrap();
/// assert_eq!(effect_key(&id, "email"), "msg-8f2c1e:email");
/// let odd = MessageId::new("order 42/ünïcode").unwrap();
/// assert!(effect_key(&odd, "email").starts_with("msgh-"));
/// ```
pub fn effect_key(id: &MessageId, effect: &str) -> String {
    let effect = if !effect.is_empty() && effect.len() <= 16 && effect.chars().all(safe_effect_char)
    {
        effect.to_owned()
    } else {
        format!("h-{}", sha_hex(effect, 16))
    };
    let id = id.as_str();
    if id.len() <= MAX_VERBATIM_ID && id.chars().all(safe_id_char) {
        format!("msg-{id}:{effect}")
    } else {
        format!("msgh-{}:{effect}", sha_hex(id, 32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(s: &str) -> MessageId {
        MessageId::new(s).unwrap()
    }

    #[test]
    fn verbatim_for_safe_ids() {
        assert_eq!(effect_key(&id("8f2c"), "email"), "msg-8f2c:email");
        assert_eq!(
            effect_key(&id("order-17.v2_x~y"), "charge"),
            "msg-order-17.v2_x~y:charge"
        );
    }

    #[test]
    fn hashed_for_unsafe_or_long_ids() {
        // Known vector: sha256("a b") = c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c2034ae8c38e6fcc6d65
        assert_eq!(
            effect_key(&id("a b"), "email"),
            "msgh-c8687a08aa5d6ed2044328fa6a697ab8:email"
        );
        for unsafe_id in ["a:b", "a/b", "é", "a\"b", "a\\b", "x y z"] {
            assert!(
                effect_key(&id(unsafe_id), "email").starts_with("msgh-"),
                "{unsafe_id}"
            );
        }
        let long = "a".repeat(MAX_VERBATIM_ID + 1);
        assert!(effect_key(&id(&long), "email").starts_with("msgh-"));
        let fits = "a".repeat(MAX_VERBATIM_ID);
        assert_eq!(effect_key(&id(&fits), "email"), format!("msg-{fits}:email"));
    }

    #[test]
    fn unsafe_effect_names_are_hashed() {
        let k = effect_key(&id("m1"), "send email");
        assert!(
            k.starts_with("msg-m1:h-") && k.len() == "msg-m1:h-".len() + 16,
            "{k}"
        );
        assert_ne!(effect_key(&id("m1"), "email"), effect_key(&id("m1"), "sms"));
    }

    proptest! {
        #[test]
        fn keys_are_stable_header_safe_and_distinct(a in "[^\\p{Cc}]{1,255}", b in "[^\\p{Cc}]{1,255}") {
            prop_assume!(a.len() <= 255 && b.len() <= 255);
            let (ia, ib) = (id(&a), id(&b));
            let ka = effect_key(&ia, "email");
            // Stable: recomputed from a fresh MessageId (a redelivery) it is the same.
            prop_assert_eq!(&ka, &effect_key(&id(&a), "email"));
            // Safe for HTTP header values and provider charsets.
            prop_assert!(ka.len() <= 122);
            prop_assert!(ka.chars().all(|c| c.is_ascii_alphanumeric() || "-_.~:".contains(c)), "{}", ka);
            if a != b {
                prop_assert_ne!(ka, effect_key(&ib, "email"));
            }
        }
    }
}
