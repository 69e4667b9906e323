//! The URL a store is opened with: the `[store]` URL (or `--store`), with
//! the password of `[store] password_file` or [`PASSWORD_ENV`] and the
//! `[store] username` set in its credentials (never pasted into a URL
//! string), and the `[store.tls]` settings checked against it. Each value
//! comes from one place: a password in two is an error naming both.

use std::ffi::OsString;

use crate::config::StoreConfig;
use crate::config::secret::{Secret, trim_newline};
use crate::store_url::StoreUrl;

/// The environment variable whose value is the Redis password.
pub const PASSWORD_ENV: &str = "TOLLGATE_REDIS_PASSWORD";

/// `url` with the credentials of `store` and `env` (the value of
/// [`PASSWORD_ENV`], if set) joined in.
///
/// # Errors
/// A password from two places (the URL, `password_file`, the
/// environment), a user from two, a user without a password, a
/// `[store]` password, user or TLS setting for a store that takes none,
/// an empty or non-UTF-8 environment value. Messages name the sources,
/// never a value.
pub fn with_credentials(
    url: &StoreUrl,
    store: &StoreConfig,
    env: Option<OsString>,
) -> Result<StoreUrl, String> {
    let mut joined = url.clone();
    let Some(credentials) = joined.credentials_mut() else {
        // `memory`: the environment may be shared with Redis replicas
        // (a chart sets it whatever the store); the config says more.
        if store.password.is_some() || store.username.is_some() || store.tls.is_some() {
            return Err(
                "[store] password_file, username and [store.tls] are for a Redis store; \
                 the store url is memory"
                    .to_owned(),
            );
        }
        return Ok(joined);
    };
    // read only for a Redis store: a memory store's environment may carry
    // a fleet-wide (or empty) value meant for Redis replicas
    let env = env
        .map(|value| {
            let value = value
                .into_string()
                .map_err(|_| format!("{PASSWORD_ENV} is not UTF-8"))?;
            match trim_newline(&value) {
                "" => Err(format!(
                    "{PASSWORD_ENV} is set but empty (unset it for no password from the environment)"
                )),
                v => Ok(Secret::new(v.to_owned(), PASSWORD_ENV.to_owned())),
            }
        })
        .transpose()?;
    if store.tls.is_some() && !matches!(url, StoreUrl::Redis { tls: true, .. }) {
        return Err(format!(
            "[store.tls] is for a rediss:// url (TLS); the store url is {url}"
        ));
    }
    let from_url = credentials
        .password
        .as_ref()
        .map(|_| "the store url".to_owned());
    let sources: Vec<&str> = from_url
        .as_deref()
        .into_iter()
        .chain(store.password.as_ref().map(Secret::source))
        .chain(env.as_ref().map(Secret::source))
        .collect();
    if let [first, second, ..] = sources.as_slice() {
        return Err(format!(
            "the Redis password is given twice, by {first} and by {second}: keep one"
        ));
    }
    if let Some(secret) = store.password.as_ref().or(env.as_ref()) {
        credentials.password = Some(secret.expose().to_owned());
    }
    if let Some(user) = &store.username {
        if credentials.username.is_some() {
            return Err(
                "the Redis user is given twice, by the store url and by [store] username: \
                 keep one"
                    .to_owned(),
            );
        }
        credentials.username = Some(user.clone());
    }
    if credentials.username.is_some() && credentials.password.is_none() {
        return Err(format!(
            "the Redis user needs a password: [store] password_file, {PASSWORD_ENV} \
             or the url's user:password@"
        ));
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PW: &str = "hunter2-secret";

    fn url(s: &str) -> StoreUrl {
        s.parse().expect("url")
    }

    fn from_file() -> StoreConfig {
        StoreConfig {
            password: Some(Secret::new(
                PW.to_owned(),
                "[store] password_file /run/pw".to_owned(),
            )),
            ..StoreConfig::default()
        }
    }

    fn password(u: &StoreUrl) -> Option<&str> {
        u.credentials()?.password.as_deref()
    }

    #[test]
    fn the_password_comes_from_one_place_into_every_topology() {
        for u in [
            "redis://h:1",
            "rediss://h:1/2",
            "redis+cluster://a:1,b:2",
            "redis+sentinel://s:1/m",
        ] {
            let joined = with_credentials(&url(u), &from_file(), None).expect(u);
            assert_eq!(password(&joined), Some(PW), "{u}");
            assert!(!joined.to_string().contains(PW), "{joined}");
            let env = Some(OsString::from(format!("{PW}\n")));
            let joined = with_credentials(&url(u), &StoreConfig::default(), env).expect(u);
            assert_eq!(password(&joined), Some(PW), "{u}: one newline trimmed");
        }
        let user = StoreConfig {
            username: Some("tollgate".to_owned()),
            ..from_file()
        };
        let joined = with_credentials(&url("redis://h:1"), &user, None).expect("user");
        assert_eq!(
            joined.credentials().and_then(|c| c.username.as_deref()),
            Some("tollgate")
        );
        // a user in the url, the password from the file: the ACL case
        let joined = with_credentials(&url("redis://app@h:1"), &from_file(), None).expect("acl");
        assert_eq!(password(&joined), Some(PW));
    }

    /// The variable is read for a Redis store only: on the memory store a
    /// value (or an empty one, as a chart's template may leave) is no
    /// error; on Redis an empty one is.
    #[test]
    fn the_variable_is_read_for_a_redis_store_only() {
        for env in [OsString::from(""), OsString::from(PW)] {
            let joined = with_credentials(&url("memory"), &StoreConfig::default(), Some(env))
                .expect("memory takes the variable as not its business");
            assert_eq!(joined.to_string(), "memory");
        }
        let err = with_credentials(
            &url("redis://h:1"),
            &StoreConfig::default(),
            Some(OsString::from("")),
        )
        .expect_err("empty on Redis");
        assert!(err.contains("set but empty"), "{err}");
    }

    #[test]
    fn two_sources_are_named_and_no_value_is_shown() {
        let env = || Some(OsString::from(PW));
        for (u, store, env, names) in [
            (
                "redis://:other@h:1",
                from_file(),
                None,
                ["the store url", "[store] password_file /run/pw"],
            ),
            (
                "redis://:other@h:1",
                StoreConfig::default(),
                env(),
                ["the store url", PASSWORD_ENV],
            ),
            (
                "redis://h:1",
                from_file(),
                env(),
                ["[store] password_file /run/pw", PASSWORD_ENV],
            ),
        ] {
            let e = with_credentials(&url(u), &store, env).expect_err(u);
            for name in names {
                assert!(e.contains(name), "{e}");
            }
            assert!(!e.contains(PW) && !e.contains("other"), "{e}");
        }
        let user_twice = StoreConfig {
            username: Some("b".to_owned()),
            ..from_file()
        };
        let e = with_credentials(&url("redis://a@h:1"), &user_twice, None).expect_err("user");
        assert!(e.contains("user is given twice"), "{e}");
        let no_password = StoreConfig {
            username: Some("b".to_owned()),
            ..StoreConfig::default()
        };
        let e = with_credentials(&url("redis://h:1"), &no_password, None).expect_err("alone");
        assert!(e.contains("needs a password"), "{e}");
        let e = with_credentials(&url("redis://h:1"), &no_password, Some("\n".into()))
            .expect_err("empty");
        assert!(e.contains("set but empty"), "{e}");
        let e = with_credentials(&url("memory"), &from_file(), None).expect_err("memory");
        assert!(e.contains("the store url is memory"), "{e}");
        // the environment alone says nothing of a memory store
        assert!(with_credentials(&url("memory"), &StoreConfig::default(), env()).is_ok());
    }
}
