//! Store URLs (CONTRACT.md): `redis://`, `rediss://`, `redis+cluster://`,
//! `redis+sentinel://`.

use std::fmt;

/// Where a Redis store lives, parsed from a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisTopology {
    /// One server: `redis://[user:pass@]host:port[/db]` or `rediss://…` (TLS).
    /// Holds the URL as given, for the client library.
    Standalone(String),
    /// `redis+cluster://[user:pass@]host:port[,host:port…]`: seed nodes as
    /// `redis://` URLs.
    Cluster(Vec<String>),
    /// `redis+sentinel://[user:pass@]host:port[,host:port…]/master-name`.
    Sentinel {
        /// The sentinels, as `redis://host:port` URLs.
        sentinels: Vec<String>,
        /// The monitored master's name.
        master: String,
        /// `user:pass` for the master, if given.
        auth: Option<(String, String)>,
    },
}

/// A store URL that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError(pub String);

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UrlError {}

fn split_auth(rest: &str) -> (Option<&str>, &str) {
    match rest.rsplit_once('@') {
        Some((auth, hosts)) => (Some(auth), hosts),
        None => (None, rest),
    }
}

fn host_ports(url: &str, hosts: &str) -> Result<Vec<String>, UrlError> {
    let list: Vec<&str> = hosts.split(',').collect();
    for h in &list {
        let ok = h.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !ok {
            return Err(UrlError(format!(
                "store URL {url:?}: {h:?} is not host:port"
            )));
        }
    }
    Ok(list.into_iter().map(str::to_owned).collect())
}

impl RedisTopology {
    /// Parses a Redis store URL.
    ///
    /// ```
    /// use tollgate::store::redis::RedisTopology;
    /// assert_eq!(
    ///     RedisTopology::parse("redis+cluster://10.0.0.1:7000,10.0.0.2:7000").unwrap(),
    ///     RedisTopology::Cluster(vec!["redis://10.0.0.1:7000".into(), "redis://10.0.0.2:7000".into()]),
    /// );
    /// assert!(RedisTopology::parse("redis+sentinel://h:26379").is_err()); // no master name
    /// ```
    ///
    /// # Errors
    /// A message naming what is wrong with the URL.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        if let Some(rest) = url.strip_prefix("redis+cluster://") {
            let (auth, hosts) = split_auth(rest.trim_end_matches('/'));
            let prefix = auth.map_or_else(String::new, |a| format!("{a}@"));
            return Ok(RedisTopology::Cluster(
                host_ports(url, hosts)?
                    .into_iter()
                    .map(|h| format!("redis://{prefix}{h}"))
                    .collect(),
            ));
        }
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            let (hosts, master) = rest.split_once('/').ok_or_else(|| {
                UrlError(format!(
                    "store URL {url:?} names no master: use redis+sentinel://host:port[,host:port…]/master-name"
                ))
            })?;
            if master.is_empty() || master.contains('/') {
                return Err(UrlError(format!(
                    "store URL {url:?}: {master:?} is not a master name"
                )));
            }
            let (auth, hosts) = split_auth(hosts);
            let auth = auth.map(|a| {
                let (u, p) = a.split_once(':').unwrap_or(("", a));
                (u.to_owned(), p.to_owned())
            });
            return Ok(RedisTopology::Sentinel {
                sentinels: host_ports(url, hosts)?
                    .into_iter()
                    .map(|h| format!("redis://{h}"))
                    .collect(),
                master: master.to_owned(),
                auth,
            });
        }
        if let Some(rest) = url
            .strip_prefix("redis://")
            .or_else(|| url.strip_prefix("rediss://"))
        {
            let (_, hostpart) = split_auth(rest);
            let (hosts, db) = hostpart.split_once('/').unwrap_or((hostpart, ""));
            if hosts.contains(',') {
                return Err(UrlError(format!(
                    "store URL {url:?} lists several hosts: use redis+cluster:// or redis+sentinel://"
                )));
            }
            host_ports(url, hosts)?;
            if !db.is_empty() && db.parse::<u32>().is_err() {
                return Err(UrlError(format!(
                    "store URL {url:?}: database {db:?} is not a number"
                )));
            }
            return Ok(RedisTopology::Standalone(url.to_owned()));
        }
        Err(UrlError(format!(
            "store URL {url:?} is not one of memory, redis://, rediss://, redis+cluster://, redis+sentinel://"
        )))
    }
}
