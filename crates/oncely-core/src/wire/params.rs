//! oncely's own query parameters on a broker URL (`?queue=…&prefetch=…`).

use crate::{Error, Result};
use std::cell::Cell;
use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

/// The query parameters of a broker URL, read with typed getters. A parameter becomes
/// oncely's when a getter asks for it; [`UrlParams::rest`] is the URL without oncely's
/// parameters, for the client library (its own parameters, e.g. `heartbeat=10`, stay in
/// it), so call it after the getters. Bad values fail with an error naming the parameter;
/// a parameter given twice counts with its last value. Values are taken as written (no
/// percent-decoding); a parameter without `=` has the empty value.
///
/// ```
/// use oncely_core::wire::UrlParams;
/// use std::time::Duration;
/// let p = UrlParams::new("amqp://h:5672/%2f?heartbeat=10&queue=jobs&prefetch=8&wait_ms=250");
/// assert_eq!(p.text("queue"), Some("jobs"));
/// assert_eq!(p.number::<u16>("prefetch")?, Some(8));
/// assert_eq!(p.millis("wait_ms")?, Some(Duration::from_millis(250)));
/// assert_eq!(p.number::<u16>("missing")?, None);
/// assert_eq!(p.rest(), "amqp://h:5672/%2f?heartbeat=10");
///
/// let bad = UrlParams::new("amqp://h/?prefetch=abc");
/// let e = bad.number::<u16>("prefetch").unwrap_err();
/// assert!(e.to_string().contains("prefetch=\"abc\""), "{e}");
/// # Ok::<(), oncely_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct UrlParams {
    base: String,
    params: Vec<Param>,
}

#[derive(Debug, Clone)]
struct Param {
    /// As written in the URL (`k=v`, or `k`).
    pair: String,
    key: String,
    value: String,
    /// Asked for by a getter: oncely's, not the client library's.
    taken: Cell<bool>,
}

impl UrlParams {
    /// The query parameters of `url`; none are oncely's yet.
    pub fn new(url: &str) -> Self {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let params = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                Param {
                    pair: pair.to_owned(),
                    key: key.to_owned(),
                    value: value.to_owned(),
                    taken: Cell::new(false),
                }
            })
            .collect();
        Self {
            base: base.to_owned(),
            params,
        }
    }

    /// The URL without the parameters the getters asked for, for the client library.
    pub fn rest(&self) -> String {
        let kept: Vec<&str> = self
            .params
            .iter()
            .filter(|p| !p.taken.get())
            .map(|p| p.pair.as_str())
            .collect();
        if kept.is_empty() {
            self.base.clone()
        } else {
            format!("{}?{}", self.base, kept.join("&"))
        }
    }

    /// The URL without its query (e.g. for a broker whose client takes settings, not a URL).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The parameters no getter asked for, as `(key, value)` in URL order.
    pub fn others(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params
            .iter()
            .filter(|p| !p.taken.get())
            .map(|p| (p.key.as_str(), p.value.as_str()))
    }

    /// The value of parameter `name`, as written.
    pub fn text(&self, name: &str) -> Option<&str> {
        let mut last = None;
        for p in self.params.iter().filter(|p| p.key == name) {
            p.taken.set(true);
            last = Some(p.value.as_str());
        }
        last
    }

    /// The value of parameter `name`, or `default` without it.
    pub fn text_or(&self, name: &str, default: &str) -> String {
        self.text(name).unwrap_or(default).to_owned()
    }

    /// Parameter `name` as a number (any [`FromStr`] number type: the type's range is
    /// checked, so `prefetch=70000` for a `u16` is an error).
    pub fn number<T>(&self, name: &str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.parsed(name, "a number")
    }

    /// Parameter `name` as whole milliseconds.
    pub fn millis(&self, name: &str) -> Result<Option<Duration>> {
        Ok(self
            .parsed(name, "a number of milliseconds")?
            .map(Duration::from_millis))
    }

    /// Parameter `name` as whole seconds.
    pub fn secs(&self, name: &str) -> Result<Option<Duration>> {
        Ok(self
            .parsed(name, "a number of seconds")?
            .map(Duration::from_secs))
    }

    fn parsed<T>(&self, name: &str, what: &str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.text(name)
            .map(|v| {
                v.parse().map_err(|e| {
                    Error::config(format!("URL parameter {name}={v:?} is not {what} ({e})"))
                })
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn takes_only_what_the_getters_ask_for() {
        let p = UrlParams::new("redis://127.0.0.1:6379/0?protocol=resp3&queue=jobs");
        assert_eq!(
            p.rest(),
            "redis://127.0.0.1:6379/0?protocol=resp3&queue=jobs"
        );
        assert_eq!(p.text("queue"), Some("jobs"));
        assert_eq!(p.text("prefetch"), None);
        assert_eq!(p.rest(), "redis://127.0.0.1:6379/0?protocol=resp3");
        assert_eq!(p.base(), "redis://127.0.0.1:6379/0");
        assert_eq!(p.others().collect::<Vec<_>>(), [("protocol", "resp3")]);
        let p = UrlParams::new("mqtt://h/");
        assert_eq!((p.text("queue"), p.rest().as_str()), (None, "mqtt://h/"));
        let p = UrlParams::new("nats://h?queue=a&&queue=b&flag");
        assert_eq!((p.text("queue"), p.text("flag")), (Some("b"), Some("")));
        assert_eq!(p.rest(), "nats://h");
        assert_eq!(p.text_or("missing", "dflt"), "dflt");
    }

    #[test]
    fn bad_values_name_the_parameter() {
        let p = UrlParams::new("x://h?a=abc&b=70000&c=-1&d=1.5");
        for (name, err) in [
            ("a", p.number::<u16>("a").unwrap_err()),
            ("b", p.number::<u16>("b").unwrap_err()),
            ("c", p.millis("c").unwrap_err()),
            ("d", p.secs("d").unwrap_err()),
        ] {
            let text = err.to_string();
            assert!(text.contains(&format!("{name}=")), "{text}");
        }
        assert_eq!(p.number::<i64>("c").unwrap(), Some(-1));
    }

    proptest! {
        #[test]
        fn others_stay_in_order_and_ours_come_off(
            pairs in prop::collection::vec(
                (prop_oneof![Just("ours".to_owned()), "[a-z]{1,5}"], "[a-z0-9]{0,5}"),
                0..8,
            )
        ) {
            let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let url = format!("x://h/p?{}", query.join("&"));
            let p = UrlParams::new(&url);
            let last = pairs.iter().rev().find(|(k, _)| k == "ours").map(|(_, v)| v.as_str());
            prop_assert_eq!(p.text("ours"), last);
            let others: Vec<&str> = query
                .iter()
                .map(String::as_str)
                .filter(|q| !q.starts_with("ours="))
                .collect();
            let expected = if others.is_empty() {
                "x://h/p".to_owned()
            } else {
                format!("x://h/p?{}", others.join("&"))
            };
            prop_assert_eq!(p.rest(), expected);
        }
    }
}
