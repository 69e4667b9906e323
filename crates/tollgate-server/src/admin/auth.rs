//! Who may call the admin API: named bearer tokens (`[[admin.tokens]]`,
//! and `TOLLGATE_ADMIN_TOKEN` as the token named `env`), compared in
//! constant time; and the rule that a listener beyond loopback needs one.

use std::net::SocketAddr;

use http::HeaderMap;
use http::header::AUTHORIZATION;

use crate::config::AdminToken;

/// The environment variable whose value is a token named `env`.
pub const TOKEN_ENV: &str = "TOLLGATE_ADMIN_TOKEN";

/// The tokens a request may carry.
#[derive(Debug, Clone)]
pub struct Tokens(Vec<AdminToken>);

impl Tokens {
    /// The config's tokens, plus `env` (the value of [`TOKEN_ENV`]) when
    /// given and not empty.
    #[must_use]
    pub fn new(config: &[AdminToken], env: Option<String>) -> Self {
        let mut all = config.to_vec();
        if let Some(token) = env.filter(|t| !t.is_empty()) {
            all.push(AdminToken {
                name: "env".to_owned(),
                token,
            });
        }
        Self(all)
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
        let given = headers
            .get(AUTHORIZATION)?
            .as_bytes()
            .strip_prefix(b"Bearer ")?;
        let mut found = None;
        for t in &self.0 {
            if same(given, t.token.as_bytes()) && found.is_none() {
                found = Some(t.name.as_str());
            }
        }
        found
    }
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
        let tokens = Tokens::new(&config, Some("fedcba9876543210".into()));
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
        let open = Tokens::new(&[], Some(String::new()));
        assert_eq!(open.caller(&HeaderMap::new()), Some("open"));
        assert!(open.check_listener("127.0.0.1:1".parse().unwrap()).is_ok());
        assert!(open.check_listener("0.0.0.0:1".parse().unwrap()).is_err());
        assert!(tokens.check_listener("0.0.0.0:1".parse().unwrap()).is_ok());
    }
}
