//! Idempotency keys for outside effects, derived from the consumer, the message id and the
//! effect name alone.

use oncely_core::{ConsumerName, MessageId};
use sha2::{Digest, Sha256};

/// Longest message id kept verbatim in a key; longer ids are hashed.
pub const MAX_VERBATIM_ID: usize = 100;

/// Longest consumer name kept verbatim in a key; longer names are hashed.
pub const MAX_VERBATIM_CONSUMER: usize = 64;

/// Longest effect name kept verbatim in a key; longer names are hashed.
const MAX_VERBATIM_EFFECT: usize = 32;

/// Longest key [`effect_key`] makes (64 + 1 + 100 + 1 + 32 bytes).
pub const MAX_KEY_LEN: usize =
    MAX_VERBATIM_CONSUMER + 1 + MAX_VERBATIM_ID + 1 + MAX_VERBATIM_EFFECT;

fn sha_hex(text: &str, chars: usize) -> String {
    let mut hex = hex::encode(Sha256::digest(text.as_bytes()));
    hex.truncate(chars);
    hex
}

/// One part of a key: verbatim when short and made of `[A-Za-z0-9._-]` and not starting
/// with `h-`; otherwise `h-` and `hex_chars` hex digits of its SHA-256. A verbatim part never
/// starts with `h-` and no part contains `:`, so parts are unambiguous.
fn part(text: &str, max: usize, hex_chars: usize) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if !text.is_empty() && text.len() <= max && !text.starts_with("h-") && text.chars().all(safe) {
        text.to_owned()
    } else {
        format!("h-{}", sha_hex(text, hex_chars))
    }
}

/// A stable idempotency key for the effect `effect` (e.g. `"email"`) that consumer
/// `consumer` performs for message `id`: the same on every redelivery and every machine, and
/// different for two consumers handling the same message (so `welcome-mailer` and
/// `invoice-mailer` each send their email).
///
/// The key is `<consumer>:<id>:<effect>`, each part verbatim when it is short and made of
/// `[A-Za-z0-9._-]` (consumer ≤ 64 bytes, id ≤ [`MAX_VERBATIM_ID`], effect ≤ 32), otherwise
/// `h-` and the first 32 hex digits of its SHA-256 (16 for the effect). So a key is at most
/// [`MAX_KEY_LEN`] (198) bytes of `[A-Za-z0-9._:-]`: safe in any HTTP header, URL path or
/// provider key charset.
///
/// ```
/// use oncely_core::{ConsumerName, MessageId};
/// use oncely_effects::effect_key;
/// let welcome = ConsumerName::new("welcome-mailer").unwrap();
/// let id = MessageId::new("8f2c1e").unwrap();
/// assert_eq!(effect_key(&welcome, &id, "email"), "welcome-mailer:8f2c1e:email");
/// let odd = MessageId::new("order 42/ünïcode").unwrap();
/// assert!(effect_key(&welcome, &odd, "email").starts_with("welcome-mailer:h-"));
/// ```
pub fn effect_key(consumer: &ConsumerName, id: &MessageId, effect: &str) -> String {
    format!(
        "{}:{}:{}",
        part(consumer.as_str(), MAX_VERBATIM_CONSUMER, 32),
        part(id.as_str(), MAX_VERBATIM_ID, 32),
        part(effect, MAX_VERBATIM_EFFECT, 16)
    )
}

/// The start every [`effect_key`] of `consumer` and `id` shares (`<consumer>:<id>:`), to
/// find all effects of one message for one consumer (e.g. `oncely inspect`).
pub fn effect_key_prefix(consumer: &ConsumerName, id: &MessageId) -> String {
    format!(
        "{}:{}:",
        part(consumer.as_str(), MAX_VERBATIM_CONSUMER, 32),
        part(id.as_str(), MAX_VERBATIM_ID, 32)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(s: &str) -> MessageId {
        MessageId::new(s).unwrap()
    }

    fn c(s: &str) -> ConsumerName {
        ConsumerName::new(s).unwrap()
    }

    #[test]
    fn verbatim_for_safe_parts() {
        assert_eq!(
            effect_key(&c("billing"), &id("8f2c"), "email"),
            "billing:8f2c:email"
        );
        assert_eq!(
            effect_key(&c("orders.v1"), &id("order-17.v2_x"), "charge"),
            "orders.v1:order-17.v2_x:charge"
        );
    }

    #[test]
    fn consumers_get_different_keys_for_one_message() {
        let m = id("X");
        assert_ne!(
            effect_key(&c("welcome-mailer"), &m, "email"),
            effect_key(&c("invoice-mailer"), &m, "email")
        );
    }

    #[test]
    fn hashed_for_unsafe_or_long_parts() {
        // Known vector: sha256("a b") = c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c2034ae8c38e6fcc6d65
        assert_eq!(
            effect_key(&c("b"), &id("a b"), "email"),
            "b:h-c8687a08aa5d6ed2044328fa6a697ab8:email"
        );
        for unsafe_id in ["a:b", "a/b", "é", "a\"b", "a\\b", "x y z", "a~b", "h-abc"] {
            assert!(
                effect_key(&c("b"), &id(unsafe_id), "email").starts_with("b:h-"),
                "{unsafe_id}"
            );
        }
        let long = "a".repeat(MAX_VERBATIM_ID + 1);
        assert!(effect_key(&c("b"), &id(&long), "email").starts_with("b:h-"));
        let fits = "a".repeat(MAX_VERBATIM_ID);
        assert_eq!(
            effect_key(&c("b"), &id(&fits), "email"),
            format!("b:{fits}:email")
        );
        let name = "n".repeat(MAX_VERBATIM_CONSUMER + 1);
        assert!(effect_key(&c(&name), &id("m"), "email").starts_with("h-"));
        // A colon in the consumer name cannot shift the parts.
        assert_ne!(
            effect_key(&c("a:b"), &id("c"), "e"),
            effect_key(&c("a"), &id("b:c"), "e")
        );
    }

    #[test]
    fn prefixes_start_their_keys() {
        for raw in ["m1", "a b", &"z".repeat(300)[..255]] {
            let (cn, m) = (c("welcome-mailer"), id(raw));
            assert!(effect_key(&cn, &m, "email").starts_with(&effect_key_prefix(&cn, &m)));
        }
    }

    proptest! {
        #[test]
        fn keys_are_stable_header_safe_and_distinct(
            ca in "[^\\p{Cc}]{1,32}", cb in "[^\\p{Cc}]{1,32}",
            a in "[^\\p{Cc}]{1,63}", b in "[^\\p{Cc}]{1,63}",
        ) {
            let ka = effect_key(&c(&ca), &id(&a), "email");
            // Stable: recomputed from fresh values (a redelivery) it is the same.
            prop_assert_eq!(&ka, &effect_key(&c(&ca), &id(&a), "email"));
            prop_assert!(ka.len() <= MAX_KEY_LEN);
            prop_assert!(ka.chars().all(|ch| ch.is_ascii_alphanumeric() || "-_.:".contains(ch)), "{}", ka);
            // Three parts, none containing ':'.
            prop_assert_eq!(ka.matches(':').count(), 2);
            if (ca.as_str(), a.as_str()) != (cb.as_str(), b.as_str()) {
                prop_assert_ne!(ka, effect_key(&c(&cb), &id(&b), "email"));
            }
        }
    }
}
