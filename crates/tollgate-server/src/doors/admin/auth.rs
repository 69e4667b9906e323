//! Who may call the admin API: named bearer tokens (`[[admin.tokens]]`,
//! and `TOLLGATE_ADMIN_TOKEN`, or the file `TOLLGATE_ADMIN_TOKEN_FILE`
//! names, as the token named `env`), compared in constant time; and the
//! rule that a listener beyond loopback needs one.

use std::net::SocketAddr;
use std::path::Path;

use http::HeaderMap;
use http::header::AUTHORIZATION;

use crate::config::secret::read_secret_file;
use crate::config::{AdminToken, token_problem};

/// The environment variable whose value is a token named `env`.
pub const TOKEN_ENV: &str = "TOLLGATE_ADMIN_TOKEN";
/// The environment variable naming a file whose content is the token named
/// `env` (a mounted Secret), instead of [`TOKEN_ENV`].
pub const TOKEN_FILE_ENV: &str = "TOLLGATE_ADMIN_TOKEN_FILE";

/// The tokens a request may carry.
#[derive(Debug, Clone)]
pub struct Tokens(Vec<AdminToken>);

impl Tokens {
    /// The config's tokens, plus `env` (the value of [`TOKEN_ENV`]) when
    /// given.
    ///
    /// # Errors
    /// An `env` token the config's would be refused for (too short, empty
    /// included, or with spaces: see [`token_problem`]), or equal to one of
    /// them: the message `serve` stops with.
    pub fn new(config: &[AdminToken], env: Option<String>) -> Result<Self, String> {
        Self::named(config, env, TOKEN_ENV)
    }

    /// The config's tokens, plus `env` from the environment: the value of
    /// [`TOKEN_ENV`] (`token`), or the content of the file [`TOKEN_FILE_ENV`]
    /// names (`token_file`), one trailing newline trimmed.
    ///
    /// # Errors
    /// Both variables set; the file missing, unreadable, empty or too
    /// large; then as [`Tokens::new`], the file named. No message holds a
    /// token.
    pub fn from_env(
        config: &[AdminToken],
        token: Option<String>,
        token_file: Option<&Path>,
    ) -> Result<Self, String> {
        match (token, token_file) {
            (Some(_), Some(_)) => Err(format!(
                "{TOKEN_ENV} and {TOKEN_FILE_ENV} are both set: keep one"
            )),
            (token, None) => Self::new(config, token),
            (None, Some(file)) => {
                let source = format!("{TOKEN_FILE_ENV} ({})", file.display());
                let token = read_secret_file(file).map_err(|e| format!("{source}: {e}"))?;
                Self::named(config, Some(token), &source)
            }
        }
    }

    /// [`Tokens::new`], messages naming the environment token's `source`.
    fn named(config: &[AdminToken], env: Option<String>, source: &str) -> Result<Self, String> {
        let mut all = config.to_vec();
        if let Some(token) = env {
            if let Some(problem) = token_problem(&token) {
                return Err(format!(
                    "{source}: {problem} (unset it for no token from the environment)"
                ));
            }
            if let Some(same) = config.iter().find(|t| t.token == token) {
                return Err(format!(
                    "{source} is the token of [[admin.tokens]] {:?}: each name needs its own",
                    same.name
                ));
            }
            all.push(AdminToken {
                name: "env".to_owned(),
                token,
            });
        }
        Ok(Self(all))
    }

    /// Whether no token is configured (the API is open).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Refuses a listener at `addr` beyond loopback without a token.
    ///
    /// # Errors
    /// The message `serve` stops with.
    pub fn check_listener(&self, addr: SocketAddr) -> Result<(), String> {
        if self.is_empty() && !addr.ip().is_loopback() {
            return Err(format!(
                "the admin API on {addr} is not on loopback and has no token: add \
                 [[admin.tokens]] to the config or set {TOKEN_ENV} (docs/admin.md)"
            ));
        }
        Ok(())
    }

    /// The name of the token `headers` carry (`Authorization: Bearer
    /// <token>`); `Some("open")` when no token is configured; `None` when
    /// none is carried or it matches no token. Every token is compared,
    /// each in constant time, so the time taken tells nothing of which
    /// one, or how much of one, matched.
    #[must_use]
    pub fn caller(&self, headers: &HeaderMap) -> Option<&str> {
        if self.0.is_empty() {
            return Some("open");
        }
        // The scheme's name is case-insensitive (RFC 9110, 11.1).
        let value = headers.get(AUTHORIZATION)?.as_bytes();
        let (scheme, given) = value.split_at_checked(7)?;
        if !scheme.eq_ignore_ascii_case(b"Bearer ") {
            return None;
        }
        let mut found = None;
        for t in &self.0 {
            if same(given, t.token.as_bytes()) && found.is_none() {
                found = Some(t.name.as_str());
            }
        }
        found
    }
}

/// Refuses a request with more than one `Authorization` field: which of
/// them a token is read from would be a guess (the first, by `caller`),
/// and a proxy in front may check another one than we do.
///
/// # Errors
/// The 400 message the admin API answers.
pub(super) fn one_authorization(headers: &HeaderMap) -> Result<(), String> {
    let n = headers.get_all(AUTHORIZATION).iter().count();
    if n > 1 {
        return Err(format!(
            "{n} Authorization fields: send one, Authorization: Bearer <token>"
        ));
    }
    Ok(())
}

/// `a == b` in time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_by_name_and_loopback_rules() {
        let config = [AdminToken {
            name: "oncall".into(),
            token: "0123456789abcdef".into(),
        }];
        let tokens = Tokens::new(&config, Some("fedcba9876543210".into())).expect("valid");
        let mut h = HeaderMap::new();
        assert_eq!(tokens.caller(&h), None);
        h.insert(AUTHORIZATION, "Bearer 0123456789abcdef".parse().unwrap());
        assert_eq!(tokens.caller(&h), Some("oncall"));
        h.insert(AUTHORIZATION, "Bearer fedcba9876543210".parse().unwrap());
        assert_eq!(tokens.caller(&h), Some("env"));
        h.insert(AUTHORIZATION, "Bearer 0123456789abcdeX".parse().unwrap());
        assert_eq!(tokens.caller(&h), None);
        h.insert(AUTHORIZATION, "Bearer 0123456789abcdef0".parse().unwrap());
        assert_eq!(tokens.caller(&h), None);
        h.insert(AUTHORIZATION, "bearer 0123456789abcdef".parse().unwrap());
        assert_eq!(tokens.caller(&h), Some("oncall"), "the scheme in any case");
        h.insert(AUTHORIZATION, "BEARER fedcba9876543210".parse().unwrap());
        assert_eq!(tokens.caller(&h), Some("env"));
        h.insert(AUTHORIZATION, "Basic 0123456789abcdef".parse().unwrap());
        assert_eq!(tokens.caller(&h), None);
        h.insert(AUTHORIZATION, "Bearer".parse().unwrap());
        assert_eq!(tokens.caller(&h), None);
        let open = Tokens::new(&[], None).expect("no token");
        assert_eq!(open.caller(&HeaderMap::new()), Some("open"));
        assert!(open.check_listener("127.0.0.1:1".parse().unwrap()).is_ok());
        assert!(open.check_listener("0.0.0.0:1".parse().unwrap()).is_err());
        assert!(tokens.check_listener("0.0.0.0:1".parse().unwrap()).is_ok());
    }

    /// Two `Authorization` fields are refused, whether or not either
    /// carries a token (the first used to be taken).
    #[test]
    fn two_authorization_fields_are_refused() {
        let mut h = HeaderMap::new();
        assert!(one_authorization(&h).is_ok());
        h.append(AUTHORIZATION, "Bearer 0123456789abcdef".parse().unwrap());
        assert!(one_authorization(&h).is_ok());
        h.append(AUTHORIZATION, "Bearer fedcba9876543210".parse().unwrap());
        let e = one_authorization(&h).expect_err("two fields");
        assert!(e.starts_with("2 Authorization fields"), "{e}");
    }

    /// `TOLLGATE_ADMIN_TOKEN` is held to the config tokens' rule: set but
    /// empty, short, or with spaces, it stops `serve` with a message naming
    /// it (it used to mean no token, or a token that never matches); equal
    /// to a config token, too.
    #[test]
    fn a_bad_environment_token_is_refused_by_name() {
        let config = [AdminToken {
            name: "oncall".into(),
            token: "0123456789abcdef".into(),
        }];
        for bad in [
            "",
            "short",
            "0123456789abcde",
            " 0123456789abcdef",
            "0123456789 abcdef",
        ] {
            let e = Tokens::new(&config, Some(bad.into())).expect_err(bad);
            assert!(e.starts_with(TOKEN_ENV), "{bad:?}: {e}");
        }
        let e = Tokens::new(&config, Some("0123456789abcdef".into())).expect_err("same");
        assert!(e.contains("\"oncall\""), "{e}");
        assert!(Tokens::new(&config, Some("0123456789abcdeg".into())).is_ok());
    }

    /// `TOLLGATE_ADMIN_TOKEN_FILE` gives the `env` token from a file (one
    /// newline trimmed), held to the same rules; its problems name the
    /// variable and the file, never the content; both variables at once
    /// are refused.
    #[test]
    fn the_environment_token_comes_from_a_file_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "fedcba9876543210\n").expect("write");
        let tokens = Tokens::from_env(&[], None, Some(&file)).expect("a token file");
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, "Bearer fedcba9876543210".parse().unwrap());
        assert_eq!(tokens.caller(&h), Some("env"));
        let e =
            Tokens::from_env(&[], Some("fedcba9876543210".into()), Some(&file)).expect_err("both");
        assert!(e.contains(TOKEN_ENV) && e.contains(TOKEN_FILE_ENV), "{e}");
        std::fs::write(&file, "short-secret\n").expect("write");
        let e = Tokens::from_env(&[], None, Some(&file)).expect_err("short");
        assert!(
            e.starts_with(TOKEN_FILE_ENV) && e.contains("at least 16"),
            "{e}"
        );
        assert!(!e.contains("short-secret"), "{e}");
        let e = Tokens::from_env(&[], None, Some(&dir.path().join("gone"))).expect_err("gone");
        assert!(e.contains("gone") && e.contains("cannot read"), "{e}");
    }
}
