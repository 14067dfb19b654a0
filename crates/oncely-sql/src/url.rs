//! The workspace's one database-URL parser: the authority (`user:password@host:port`, or
//! several hosts separated by commas) of `scheme://authority/path?query` URLs.

use oncely_core::Error;

/// A URL cut at its authority: `scheme://`, `userinfo@` (with the `@`), the hosts, the rest.
struct Parts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    hosts: &'a str,
    tail: &'a str,
}

fn parts(url: &str) -> Option<Parts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    Some(Parts {
        scheme,
        userinfo,
        hosts,
        tail,
    })
}

/// The URL with any password replaced by `***`, safe for logs and errors.
///
/// ```
/// assert_eq!(
///     oncely_sql::redact_url("postgres://app:s3cret@db:5432/x"),
///     "postgres://app:***@db:5432/x"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(Parts {
        scheme,
        userinfo: Some(userinfo),
        hosts,
        tail,
    }) = parts(url)
    else {
        return url.to_owned();
    };
    let user = userinfo.split(':').next().unwrap_or("");
    let masked = if userinfo.contains(':') {
        format!("{user}:***")
    } else {
        user.to_owned()
    };
    format!("{scheme}://{masked}@{hosts}{tail}")
}

/// One URL per host of a multi-host URL (`mysql://u@h1:3306,h2:3306,h3:3306/app`), in order;
/// a single-host URL comes back as itself. Empty host entries are a [`ErrorKind::Config`]
/// error.
///
/// [`ErrorKind::Config`]: oncely_core::ErrorKind::Config
pub(crate) fn split_hosts(url: &str) -> Result<Vec<String>, Error> {
    let Some(p) = parts(url).filter(|p| p.hosts.contains(',')) else {
        return Ok(vec![url.to_owned()]);
    };
    let user = p.userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    p.hosts
        .split(',')
        .map(|host| {
            let host = host.trim();
            if host.is_empty() {
                return Err(Error::config(format!(
                    "{} has an empty host in its host list",
                    redact_url(url)
                )));
            }
            Ok(format!("{}://{user}{host}{}", p.scheme, p.tail))
        })
        .collect()
}

/// Takes oncely's own query options (`?pooler=`, `?replication=`, …) off a database URL
/// before the driver parses it: the URL without the pairs whose key is in `names`, and those
/// pairs (key, value) in the URL's order. The one place these options are cut out.
pub(crate) fn take_options(url: &str, names: &[&str]) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), Vec::new());
    };
    let (mut kept, mut taken) = (Vec::new(), Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if names.contains(&key) {
            taken.push((key.to_owned(), value.to_owned()));
        } else {
            kept.push(pair);
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, taken)
}

/// The hosts of a URL (`host:port` as written), for messages; never the credentials.
pub(crate) fn host_of(url: &str) -> String {
    parts(url).map_or_else(String::new, |p| p.hosts.to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_hosts_splits_a_multi_host_url() {
        let urls =
            super::split_hosts("mysql://root@10.0.0.1:3306,10.0.0.2:3306/app?ssl-mode=disabled")
                .unwrap();
        assert_eq!(
            urls,
            [
                "mysql://root@10.0.0.1:3306/app?ssl-mode=disabled",
                "mysql://root@10.0.0.2:3306/app?ssl-mode=disabled",
            ]
        );
    }

    use super::*;

    #[test]
    fn redacts_and_splits() {
        assert_eq!(redact_url("sqlite:x.db"), "sqlite:x.db");
        assert_eq!(redact_url("mysql://root@h/x"), "mysql://root@h/x");
        assert_eq!(
            redact_url("postgres://a:b@h1:1,h2:2?x=1"),
            "postgres://a:***@h1:1,h2:2?x=1"
        );
        assert_eq!(split_hosts("sqlite:x.db").unwrap(), ["sqlite:x.db"]);
        assert_eq!(
            split_hosts("postgres://a:b@h1,h2:5433").unwrap(),
            ["postgres://a:b@h1", "postgres://a:b@h2:5433"]
        );
        let e = split_hosts("mysql://a:secret@h1,,h2/x").unwrap_err();
        assert!(e.to_string().contains("a:***@h1,,h2") && !e.to_string().contains("secret"));
        assert_eq!(host_of("mysql://a:b@h1:3306/x"), "h1:3306");
        let (url, taken) = take_options("postgres://h/x?a=1&pooler=none&&b=2", &["pooler"]);
        assert_eq!(url, "postgres://h/x?a=1&b=2");
        assert_eq!(taken, [("pooler".to_owned(), "none".to_owned())]);
        assert_eq!(
            take_options("postgres://h/x?pooler=none", &["pooler"]).0,
            "postgres://h/x"
        );
    }
}
