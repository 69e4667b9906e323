//! The reference's `REDIS_*` variables onto tollgate's `[store]`: the
//! store URL (`redis://`, `rediss://`, `redis+cluster://`,
//! `redis+sentinel://`), its credentials (set in the URL's credentials,
//! never pasted into a string), `[store.tls]` and the timeout.

use std::path::{Path, PathBuf};

use tollgate::store::redis::RedisTls;

use super::env::{Env, Refusal};
use crate::config::{StoreConfig, StoreTls};
use crate::store_url::StoreUrl;

/// `[store]` from the `REDIS_*` variables (and `BACKEND_TYPE`,
/// `CACHE_KEY_PREFIX`).
///
/// # Errors
/// A value tollgate cannot honour, named.
pub fn store(env: &Env) -> Result<StoreConfig, Refusal> {
    match env.string("BACKEND_TYPE", "redis")?.as_str() {
        "redis" | "" => {}
        "memcache" => {
            return Err(Refusal::new(
                "BACKEND_TYPE",
                "memcache is not supported: tollgate keeps its counters in Redis",
            ));
        }
        other => {
            return Err(Refusal::new(
                "BACKEND_TYPE",
                format!("{other:?} is not a backend (redis or memcache)"),
            ));
        }
    }
    if env.bool("REDIS_PERSECOND", false)? {
        return Err(Refusal::new(
            "REDIS_PERSECOND",
            "a second Redis for per-second limits is not supported: unset it (one Redis holds every limit)",
        ));
    }
    let kind = env.string("REDIS_TYPE", "SINGLE")?.to_ascii_lowercase();
    let socket = env.string("REDIS_SOCKET_TYPE", "unix")?;
    let address = env.string("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")?;
    let tls = env.bool("REDIS_TLS", false)?;
    let url = match kind.as_str() {
        "single" => single(&socket, &address, tls)?,
        "cluster" | "sentinel" => {
            if tls {
                return Err(Refusal::new(
                    "REDIS_TLS",
                    format!("TLS is supported for REDIS_TYPE=single only, not {kind}"),
                ));
            }
            if kind == "cluster" {
                parse_url("REDIS_URL", &format!("redis+cluster://{address}"))?
            } else {
                sentinel(&address)?
            }
        }
        other => {
            return Err(Refusal::new(
                "REDIS_TYPE",
                format!("{other:?} is not single, sentinel or cluster"),
            ));
        }
    };
    let mut store = StoreConfig {
        url,
        ..StoreConfig::default()
    };
    credentials(env, &mut store)?;
    // The reference uses it for REDIS_TYPE=sentinel only.
    if let Some(sentinel_auth) = env.get("REDIS_SENTINEL_AUTH")?
        && !sentinel_auth.is_empty()
        && kind == "sentinel"
    {
        return Err(Refusal::new(
            "REDIS_SENTINEL_AUTH",
            "a password for the sentinels themselves is not supported (REDIS_AUTH is the data nodes')",
        ));
    }
    store.tls = store_tls(env, tls)?;
    if let Some(timeout) = env.duration("REDIS_TIMEOUT")? {
        if timeout.is_zero() {
            return Err(Refusal::new("REDIS_TIMEOUT", "must be above 0"));
        }
        store.timeout = timeout;
    }
    match env.string("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT")?.as_str() {
        "WAIT" => {}
        other => {
            return Err(Refusal::new(
                "REDIS_POOL_ON_EMPTY_BEHAVIOR",
                format!("{other:?}: only WAIT (the reference refuses the others too)"),
            ));
        }
    }
    let prefix = env.string("CACHE_KEY_PREFIX", "")?;
    if !prefix.is_empty() {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
        if prefix.len() > crate::config::MAX_PREFIX_LEN || !prefix.chars().all(allowed) {
            return Err(Refusal::new(
                "CACHE_KEY_PREFIX",
                format!(
                    "at most {} bytes of A-Z a-z 0-9 _ . : - (tollgate's [store] prefix)",
                    crate::config::MAX_PREFIX_LEN
                ),
            ));
        }
        store.prefix = prefix;
    }
    Ok(store)
}

/// `REDIS_TYPE=single`: `host:port` over TCP (or a `redis://`/`rediss://`
/// URL as given); a unix socket is refused.
fn single(socket: &str, address: &str, tls: bool) -> Result<StoreUrl, Refusal> {
    match socket {
        "tcp" => {}
        "unix" => {
            return Err(Refusal::new(
                "REDIS_SOCKET_TYPE",
                "unix (the reference's default) is not supported: tollgate reaches Redis over TCP; \
                 set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port",
            ));
        }
        other => {
            return Err(Refusal::new(
                "REDIS_SOCKET_TYPE",
                format!("{other:?} is not tcp or unix"),
            ));
        }
    }
    let scheme = if tls { "rediss" } else { "redis" };
    if let Some((given, _)) = address.split_once("://") {
        if given != "redis" && given != "rediss" {
            return Err(Refusal::new(
                "REDIS_URL",
                format!("{given}:// is not a single Redis URL: host:port"),
            ));
        }
        let rest = &address[given.len() + 3..];
        return parse_url("REDIS_URL", &format!("{scheme}://{rest}"));
    }
    parse_url("REDIS_URL", &format!("{scheme}://{address}"))
}

/// `REDIS_TYPE=sentinel`: `<master name>,<sentinel host:port>,...`.
fn sentinel(address: &str) -> Result<StoreUrl, Refusal> {
    let mut parts = address.split(',');
    let master = parts.next().unwrap_or_default();
    let nodes: Vec<&str> = parts.collect();
    if master.is_empty() || nodes.is_empty() {
        return Err(Refusal::new(
            "REDIS_URL",
            "sentinel needs <master name>,<sentinel host:port>[,...]",
        ));
    }
    parse_url(
        "REDIS_URL",
        &format!("redis+sentinel://{}/{master}", nodes.join(",")),
    )
}

fn parse_url(variable: &str, url: &str) -> Result<StoreUrl, Refusal> {
    url.parse::<StoreUrl>()
        .map_err(|e| Refusal::new(variable, e))
}

/// `REDIS_AUTH`: `user:password` (split at the first `:`) or a password.
fn credentials(env: &Env, store: &mut StoreConfig) -> Result<(), Refusal> {
    let auth = env.string("REDIS_AUTH", "")?;
    if auth.is_empty() {
        return Ok(());
    }
    let Some(credentials) = store.url.credentials_mut() else {
        return Ok(());
    };
    if credentials.password.is_some() || credentials.username.is_some() {
        return Err(Refusal::new(
            "REDIS_AUTH",
            "REDIS_URL carries credentials too: keep one",
        ));
    }
    match auth.split_once(':') {
        Some((user, password)) => {
            credentials.username = Some(user.to_owned());
            credentials.password = Some(password.to_owned());
        }
        None => credentials.password = Some(auth),
    }
    Ok(())
}

/// `[store.tls]` from `REDIS_TLS_*`: the files read now, as a config
/// file's are.
fn store_tls(env: &Env, tls: bool) -> Result<Option<StoreTls>, Refusal> {
    let cert = env.string("REDIS_TLS_CLIENT_CERT", "")?;
    let key = env.string("REDIS_TLS_CLIENT_KEY", "")?;
    let ca = env.string("REDIS_TLS_CACERT", "")?;
    if env.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)? {
        return Err(Refusal::new(
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            "tollgate always verifies the Redis server's name",
        ));
    }
    if !tls {
        // The reference reads them only with REDIS_TLS.
        return Ok(None);
    }
    if cert.is_empty() != key.is_empty() {
        return Err(Refusal::new(
            "REDIS_TLS_CLIENT_CERT",
            "needs REDIS_TLS_CLIENT_KEY (and the other way round)",
        ));
    }
    let mut out = StoreTls::default();
    let mut settings = RedisTls::default();
    type Add = fn(RedisTls, &[u8]) -> Result<RedisTls, String>;
    let files: [(&str, &str, &mut Option<PathBuf>, Add); 3] = [
        (
            "REDIS_TLS_CACERT",
            &ca,
            &mut out.ca_file,
            RedisTls::with_ca_pem,
        ),
        (
            "REDIS_TLS_CLIENT_CERT",
            &cert,
            &mut out.cert_file,
            RedisTls::with_client_cert_pem,
        ),
        (
            "REDIS_TLS_CLIENT_KEY",
            &key,
            &mut out.key_file,
            RedisTls::with_client_key_pem,
        ),
    ];
    for (name, file, slot, add) in files {
        if file.is_empty() {
            continue;
        }
        let path = Path::new(file);
        let pem = crate::config::file::read(path)
            .map_err(|e| Refusal::new(name, format!("{file}: {e}")))?;
        settings = add(settings, &pem).map_err(|e| Refusal::new(name, format!("{file}: {e}")))?;
        *slot = Some(path.to_path_buf());
    }
    settings
        .check()
        .map_err(|e| Refusal::new("REDIS_TLS_CLIENT_CERT", e))?;
    out.settings = settings;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_of(pairs: &[(&str, &str)]) -> Result<StoreConfig, Refusal> {
        store(&Env::from_pairs(pairs))
    }

    #[test]
    fn envoy_gateways_redis() {
        let s = store_of(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis.redis.svc:6379"),
        ])
        .expect("store");
        assert_eq!(s.url.to_string(), "redis://redis.redis.svc:6379/0");
        assert_eq!(s.timeout, crate::config::DEFAULT_TIMEOUT);
        assert!(s.tls.is_none());
    }

    #[test]
    fn auth_user_and_password() {
        let s = store_of(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "h:1"),
            ("REDIS_AUTH", "app:pa:ss"),
            ("REDIS_TIMEOUT", "2s"),
            ("CACHE_KEY_PREFIX", "rl"),
        ])
        .expect("store");
        let c = s.url.credentials().expect("redis");
        assert_eq!(c.username.as_deref(), Some("app"));
        assert_eq!(c.password.as_deref(), Some("pa:ss"));
        assert_eq!(s.timeout, std::time::Duration::from_secs(2));
        assert_eq!(s.prefix, "rl");
        let s = store_of(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "h:1"),
            ("REDIS_AUTH", "secret"),
        ])
        .expect("store");
        let c = s.url.credentials().expect("redis");
        assert_eq!(
            (c.username.as_deref(), c.password.as_deref()),
            (None, Some("secret"))
        );
        assert_eq!(s.url.to_string(), "redis://:***@h:1/0");
    }

    #[test]
    fn cluster_and_sentinel() {
        let s = store_of(&[("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", "a:1,b:2")]).expect("store");
        assert_eq!(s.url.to_string(), "redis+cluster://a:1,b:2");
        let s = store_of(&[
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_URL", "mymaster,s1:26379,s2:26380"),
        ])
        .expect("store");
        assert_eq!(
            s.url.to_string(),
            "redis+sentinel://s1:26379,s2:26380/mymaster"
        );
        let err = store_of(&[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "mymaster")])
            .expect_err("no sentinel");
        assert_eq!(err.variable, "REDIS_URL");
    }

    #[test]
    fn refusals_name_the_variable() {
        let tcp = ("REDIS_SOCKET_TYPE", "tcp");
        let url = ("REDIS_URL", "h:1");
        for (pairs, variable) in [
            (vec![], "REDIS_SOCKET_TYPE"),
            (vec![("REDIS_SOCKET_TYPE", "unix")], "REDIS_SOCKET_TYPE"),
            (vec![tcp, url, ("BACKEND_TYPE", "memcache")], "BACKEND_TYPE"),
            (
                vec![tcp, url, ("REDIS_PERSECOND", "true")],
                "REDIS_PERSECOND",
            ),
            (
                vec![tcp, url, ("REDIS_PERSECOND", "maybe")],
                "REDIS_PERSECOND",
            ),
            (vec![tcp, url, ("REDIS_TYPE", "ring")], "REDIS_TYPE"),
            (vec![tcp, url, ("REDIS_TLS", "yes")], "REDIS_TLS"),
            (vec![tcp, url, ("REDIS_TIMEOUT", "10")], "REDIS_TIMEOUT"),
            (
                vec![
                    ("REDIS_TYPE", "sentinel"),
                    ("REDIS_URL", "m,s1:26379"),
                    ("REDIS_SENTINEL_AUTH", "x"),
                ],
                "REDIS_SENTINEL_AUTH",
            ),
            (
                vec![tcp, url, ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE")],
                "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            ),
            (
                vec![
                    tcp,
                    url,
                    ("REDIS_TLS", "true"),
                    ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
                ],
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            ),
            (
                vec![
                    ("REDIS_TYPE", "cluster"),
                    ("REDIS_URL", "a:1"),
                    ("REDIS_TLS", "true"),
                ],
                "REDIS_TLS",
            ),
            (
                vec![
                    tcp,
                    url,
                    ("REDIS_TLS", "true"),
                    ("REDIS_TLS_CLIENT_CERT", "/nonexistent/c"),
                ],
                "REDIS_TLS_CLIENT_CERT",
            ),
            (
                vec![
                    tcp,
                    url,
                    ("REDIS_TLS", "true"),
                    ("REDIS_TLS_CACERT", "/nonexistent/ca"),
                ],
                "REDIS_TLS_CACERT",
            ),
            (vec![tcp, ("REDIS_URL", "http://h:1")], "REDIS_URL"),
        ] {
            let err = store_of(&pairs).expect_err(variable);
            assert_eq!(err.variable, variable, "{pairs:?}: {err}");
        }
    }

    #[test]
    fn sentinel_auth_is_unused_but_for_sentinel() {
        // As the reference: only its sentinel dialer reads it.
        let s = store_of(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "h:1"),
            ("REDIS_SENTINEL_AUTH", "x"),
        ])
        .expect("single");
        assert_eq!(s.url.to_string(), "redis://h:1/0");
    }

    #[test]
    fn tls_is_rediss() {
        let s = store_of(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "h:6380"),
            ("REDIS_TLS", "true"),
        ])
        .expect("store");
        assert_eq!(s.url.to_string(), "rediss://h:6380/0");
        assert!(s.tls.is_some());
    }
}
