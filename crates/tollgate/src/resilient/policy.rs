//! What a check answers when the store fails ([`OnError`]), and what a
//! check returns: a [`Verdict`] or a [`Refusal`].

use std::fmt;
use std::str::FromStr;

use crate::decided::Deciders;
use crate::decision::{Decision, MultiDecision};
use crate::error::{Error, StoreError};

/// What a check answers when the store fails (`on_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnError {
    /// Admit the request (fail open) and mark the answer degraded. The
    /// default.
    #[default]
    Allow,
    /// Refuse the request (fail closed): [`Refusal::Unavailable`].
    Deny,
    /// Decide with an in-process limiter holding the rule's quota divided
    /// by the number of live replicas.
    Local,
}

impl OnError {
    /// The name used in config files.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Allow => "allow",
            OnError::Deny => "deny",
            OnError::Local => "local",
        }
    }

    /// How strict the policy is: of several rules in one check, the
    /// strictest policy answers (deny, then local, then allow).
    pub(super) fn strictness(self) -> u8 {
        match self {
            OnError::Allow => 0,
            OnError::Local => 1,
            OnError::Deny => 2,
        }
    }
}

impl fmt::Display for OnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnError {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(OnError::Allow),
            "deny" => Ok(OnError::Deny),
            "local" => Ok(OnError::Local),
            _ => Err(format!(
                "unknown on_error {s:?}; expected allow, deny or local"
            )),
        }
    }
}

/// A decided check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The combined decision (one pair for a single check).
    pub multi: MultiDecision,
    /// `Some(policy)` when the store failed and the failure policy
    /// (`allow` or `local`) answered instead. Under `allow` nothing was
    /// decided: every pair reads admitted with its full capacity.
    pub degraded: Option<OnError>,
    /// What decided each pair, in order: the limit the pair was resolved
    /// to before the store was asked (its rule, or an override, or its
    /// per-call limit). What describes the answer (RateLimit headers, an
    /// Envoy status) reads it here, never by looking the rule up again.
    pub decided_by: Deciders,
}

impl Verdict {
    /// A verdict whose deciders the caller adds ([`Verdict::decided_by`]).
    pub(crate) fn new(multi: MultiDecision, degraded: Option<OnError>) -> Self {
        Self {
            multi,
            degraded,
            decided_by: Deciders::default(),
        }
    }

    /// The deciding pair's decision.
    #[must_use]
    pub fn decision(&self) -> &Decision {
        self.multi.decision()
    }
}

/// Why a check was not decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The request is at fault: unknown rule, key too long, no pairs.
    Invalid(Error),
    /// The store failed (or the breaker is open) and the failure policy is
    /// `deny`.
    Unavailable(StoreError),
    /// The store failed (or the breaker is open) on a call only it can
    /// answer: a settle or cancel of a reservation it holds, a release or
    /// renew of a lease it holds. Refused whatever the failure policy;
    /// `policy` is the rule's own (the strictest of the ticket's rules'),
    /// named so that an answer never claims `deny` for an `allow` rule.
    Stranded {
        /// Why the store did not answer.
        error: StoreError,
        /// The rule's failure policy, which could not answer for it.
        policy: OnError,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Invalid(e) => e.fmt(f),
            Refusal::Unavailable(e) => write!(f, "{e} (on_error = deny)"),
            Refusal::Stranded { error, policy } => write!(
                f,
                "{error} (the store holds it, so it is refused whatever the rule's \
                 on_error, here {policy})"
            ),
        }
    }
}

impl std::error::Error for Refusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Refusal::Invalid(e) => Some(e),
            Refusal::Unavailable(e) | Refusal::Stranded { error: e, .. } => Some(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn policies_parse_and_print() {
        for p in [OnError::Allow, OnError::Deny, OnError::Local] {
            assert_eq!(p.as_str().parse::<OnError>(), Ok(p));
        }
        assert!("open".parse::<OnError>().is_err());
    }

    #[tokio::test]
    async fn a_verdict_carries_the_runtime_override_that_decided() {
        use std::time::Duration;

        use crate::decided::LimitSource;
        use crate::limiter::{Check, Limiter};
        use crate::live::RuntimeOverride;
        use crate::resilient::ResilientLimiter;
        use crate::rule::{Algorithm, RuleSpec};
        use crate::store::memory::MemoryStore;

        let rule = |name: &str| {
            RuleSpec::new(name, Algorithm::FixedWindow, 10, Duration::from_secs(60))
                .build()
                .expect("rule")
        };
        let limiter = Limiter::new(MemoryStore::new(), [rule("a"), rule("b")]).expect("limiter");
        let l = ResilientLimiter::builder(limiter)
            .build()
            .expect("resilient");
        l.set_override(RuntimeOverride {
            rule: "b".into(),
            key: b"vip".to_vec(),
            limit: 7,
            period: Some(Duration::from_secs(1)),
            burst: None,
            ends_ms: None,
        })
        .await
        .expect("override");
        let verdict = l.check("b", "vip", 1).await.expect("checked");
        assert_eq!(verdict.decision().limit, 7);
        let [by] = &*verdict.decided_by else {
            panic!("one pair, one decider")
        };
        assert_eq!(by.source, LimitSource::RuntimeOverride);
        assert_eq!((by.index, by.limit), (1, 7));
        assert_eq!(by.period(), Duration::from_secs(1));
        let charged = l
            .charge_all(&[Check::new("a", "k")])
            .await
            .expect("charged");
        assert_eq!(charged.decided_by[0].source, LimitSource::Rule);
    }
}
