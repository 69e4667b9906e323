//! Requests for a domain no Envoy config defines. Every descriptor of one
//! is answered `OK`, as envoyproxy/ratelimit answers it (changing that
//! would deny traffic the reference admits); but a typo in a domain
//! silently turns a route's limits off, so each such domain is logged once
//! (a warning naming it) and every such request counted in
//! [`UNKNOWN_DOMAIN`].

use std::collections::HashSet;
use std::sync::Mutex;

/// Counter: requests whose domain no Envoy config defines (answered `OK`,
/// unlimited). No label: the domain comes from the request.
pub const UNKNOWN_DOMAIN: &str = crate::metrics::ENVOY_UNKNOWN_DOMAIN;
/// The most distinct unknown domains logged by name; past it one more
/// warning says that further ones are only counted. Domains come from
/// Envoy's config, but a client reaching the gRPC port could send any.
pub const MAX_LOGGED_DOMAINS: usize = 64;
/// The longest domain kept (and logged) in full.
const MAX_DOMAIN_LEN: usize = 256;

/// The unknown domains logged so far, by one service (a config reload
/// starts afresh: the new config may define them, or drop others).
#[derive(Debug, Default)]
pub(crate) struct UnknownDomains {
    logged: Mutex<HashSet<String>>,
}

impl UnknownDomains {
    /// Counts a request for `domain`, which no config defines, and logs
    /// the domain the first time (up to [`MAX_LOGGED_DOMAINS`] of them).
    /// Whether it logged, for the tests.
    pub(crate) fn note(&self, domain: &str) -> bool {
        ::metrics::counter!(UNKNOWN_DOMAIN).increment(1);
        // Kept and looked up cut alike: a long domain looked up whole would
        // never be found, and be logged at every request.
        let shown = crate::utf8::prefix(domain, MAX_DOMAIN_LEN);
        let Ok(mut logged) = self.logged.lock() else {
            return false;
        };
        if logged.len() > MAX_LOGGED_DOMAINS || logged.contains(shown) {
            return false;
        }
        if logged.len() == MAX_LOGGED_DOMAINS {
            // A marker no real domain equals (domains are never empty).
            logged.insert(String::new());
            tracing::warn!(
                "Envoy: more than {MAX_LOGGED_DOMAINS} unknown domains; \
                 further ones are only counted in {UNKNOWN_DOMAIN}"
            );
            return true;
        }
        logged.insert(shown.to_owned());
        tracing::warn!(
            "Envoy: requests for domain {shown:?}, which no loaded Envoy config (file or xDS) defines, \
             are answered OK (unlimited), as envoyproxy/ratelimit answers them; check the \
             domain of Envoy's rate limit filter (counted in {UNKNOWN_DOMAIN})"
        );
        true
    }

    /// How many domains were logged by name.
    #[cfg(test)]
    fn logged(&self) -> usize {
        self.logged
            .lock()
            .map(|l| l.iter().filter(|d| !d.is_empty()).count())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each domain is logged once, and the set of names kept is bounded
    /// however many a client invents.
    #[test]
    fn each_domain_is_kept_once_and_the_set_is_bounded() {
        let u = UnknownDomains::default();
        assert!(u.note("a"));
        assert!(!u.note("a"), "logged once");
        assert_eq!(u.logged(), 1);
        for i in 0..10 * MAX_LOGGED_DOMAINS {
            u.note(&format!("d{i}"));
        }
        assert_eq!(u.logged(), MAX_LOGGED_DOMAINS);
        let long = "é".repeat(MAX_DOMAIN_LEN);
        let fresh = UnknownDomains::default();
        assert!(fresh.note(&long));
        assert!(!fresh.note(&long), "a long domain is logged once too");
        assert_eq!(fresh.logged(), 1, "a long domain is kept cut, once");
    }
}
