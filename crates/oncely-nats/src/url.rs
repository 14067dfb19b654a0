//! Splitting oncely's own query parameters (`?queue=…&prefetch=…`) off a broker URL.

use std::collections::BTreeMap;

/// Removes the query parameters named in `ours` from `url` and returns the rest of the URL
/// plus the removed parameters. Other parameters stay for the client library.
pub(crate) fn split_params(url: &str, ours: &[&str]) -> (String, BTreeMap<String, String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), BTreeMap::new());
    };
    let mut taken = BTreeMap::new();
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if ours.contains(&k) {
            taken.insert(k.to_owned(), v.to_owned());
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_only_our_params() {
        let (rest, ours) = split_params(
            "nats://127.0.0.1:4222?x=1&queue=jobs",
            &["queue", "prefetch"],
        );
        assert_eq!(rest, "nats://127.0.0.1:4222?x=1");
        assert_eq!(ours.get("queue").map(String::as_str), Some("jobs"));
        let (rest, ours) = split_params("nats://h/", &["queue"]);
        assert_eq!(rest, "nats://h/");
        assert!(ours.is_empty());
    }
}
