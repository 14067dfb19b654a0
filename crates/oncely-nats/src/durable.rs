//! The JetStream durable consumer name of an oncely consumer name: readable, and injective.

use oncely_core::PayloadHash;

/// Hex digits of the SHA-256 of the exact consumer name appended by [`durable_name`].
const HASH_DIGITS: usize = 8;

/// The durable name for consumer `consumer`. NATS allows `A–Z a–z 0–9 - _` in the names
/// oncely uses; a name made of those only, and not ending like a hashed name
/// (`-` + 8 lower-case hex digits), is used as it is. Any other name keeps its readable
/// part (each other character replaced by `_`) and gets `-` + the first 8 hex digits of
/// the SHA-256 of the exact name, so `orders.v1`, `orders_v1` and `orders-v1` name three
/// different durables (`orders_v1-…`, `orders_v1`, `orders-v1`) and never split each
/// other's messages.
pub fn durable_name(consumer: &str) -> String {
    let sanitized: String = consumer
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if sanitized == consumer && !looks_hashed(consumer) {
        return sanitized;
    }
    let hash = PayloadHash::of(consumer.as_bytes()).to_hex();
    format!("{sanitized}-{}", &hash[..HASH_DIGITS])
}

/// True for a name ending in `-` and [`HASH_DIGITS`] lower-case hex digits, the shape of
/// a hashed name: such a name is hashed too, so that it cannot equal another's.
fn looks_hashed(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() > HASH_DIGITS
        && b[b.len() - HASH_DIGITS - 1] == b'-'
        && b[b.len() - HASH_DIGITS..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn plain_names_are_kept() {
        assert_eq!(durable_name("billing"), "billing");
        assert_eq!(durable_name("orders_v1"), "orders_v1");
        assert_eq!(durable_name("orders-v1"), "orders-v1");
    }

    #[test]
    fn similar_names_map_to_different_durables() {
        let names = [
            "orders.v1",
            "orders_v1",
            "orders-v1",
            "orders v1",
            "orders*v1",
        ];
        let durables: HashSet<String> = names.iter().map(|n| durable_name(n)).collect();
        assert_eq!(durables.len(), names.len(), "{durables:?}");
        let dotted = durable_name("orders.v1");
        assert!(dotted.starts_with("orders_v1-"), "{dotted}");
        assert_eq!(dotted.len(), "orders_v1-".len() + HASH_DIGITS);
        assert!(
            dotted
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }

    #[test]
    fn a_name_shaped_like_a_hashed_one_is_hashed_too() {
        let hashed = durable_name("orders.v1");
        assert_ne!(durable_name(&hashed), hashed);
        assert_ne!(durable_name("x-0123abcd"), "x-0123abcd");
        assert_eq!(durable_name("x-0123abcg"), "x-0123abcg");
    }

    #[test]
    fn stable_across_calls() {
        assert_eq!(durable_name("orders.v1"), durable_name("orders.v1"));
    }
}
