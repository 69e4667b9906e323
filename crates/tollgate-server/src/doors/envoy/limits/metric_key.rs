//! The name a matched descriptor's metrics carry when its limit asks for
//! runtime values (`detailed_metric`, `value_to_metric`): the reference
//! service's stats key, built as its `GetLimit` builds it (docs/envoy.md,
//! "Metrics").

use std::borrow::Cow;

use super::tree::{EnvoyLimits, Step};

impl EnvoyLimits {
    /// The stats key of `entries` in `domain`, `None` when they find no
    /// limit: under `detailed_metric`, `domain.k1_v1.k2_v2…` with every
    /// entry's own value (`k_` for an empty one) (a `share_threshold` wildcard's pattern for the
    /// entries it matched); else `domain.` and, level by level, the key
    /// and the value the reference names there: the request's value
    /// where the node has `value_to_metric` (or was matched by its
    /// `key_value`), a wildcard's pattern where one matched, nothing for a
    /// key-only node. Bytes that are not UTF-8 read as U+FFFD.
    ///
    /// ```
    /// use tollgate_server::doors::envoy::limits::EnvoyLimits;
    ///
    /// let yaml = "
    /// domain: d
    /// descriptors:
    ///   - key: route
    ///     value_to_metric: true
    ///     descriptors:
    ///       - key: user
    ///         rate_limit: {unit: minute, requests_per_unit: 60}
    /// ";
    /// let limits = EnvoyLimits::parse(&[("d.yaml".into(), yaml.into())], &[]).unwrap();
    /// let key = limits.metric_key("d", &[("route", "draw"), ("user", "123")]);
    /// assert_eq!(key.as_deref(), Some("d.route_draw.user"));
    /// ```
    #[must_use]
    pub fn metric_key<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
    ) -> Option<String> {
        let mut level = self.domains.get(domain)?;
        let mut named = String::from(domain);
        let mut detailed = String::from(domain);
        let mut answer = None;
        let mut composite = Vec::new();
        for (i, (key, value)) in entries.iter().enumerate() {
            let (key, value) = (key.as_ref(), value.as_ref());
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            composite.clear();
            composite.extend_from_slice(key);
            composite.push(b'_');
            composite.extend_from_slice(value);
            let found = level.step(key, &composite).map(|(n, step)| match step {
                Step::Value => (n, None, true),
                Step::Wildcard(w) => (n, Some(w), true),
                Step::Key => (n, None, false),
            });
            named.push('.');
            detailed.push('.');
            let Some((index, wildcard, by_value)) = found else {
                named.push_str(&text(key));
                break;
            };
            let node = level.nodes.get(index)?;
            let pattern = wildcard.map(|w| {
                let whole: Vec<u8> = w.parts.join(&b"*"[..]);
                let value = whole
                    .strip_prefix(key)
                    .and_then(|p| p.strip_prefix(b"_"))
                    .map(<[u8]>::to_vec)
                    .unwrap_or(whole);
                text(&value)
            });
            let shared = node.share.is_some() && wildcard.is_some();
            let shown: Cow<'_, str> = match &pattern {
                Some(p) if shared || !node.value_to_metric => Cow::Borrowed(p.as_str()),
                _ if by_value || node.value_to_metric => Cow::Owned(text(value)),
                _ => Cow::Borrowed(""),
            };
            named.push_str(&text(key));
            if !shown.is_empty() {
                named.push('_');
                named.push_str(&shown);
            }
            detailed.push_str(&text(key));
            detailed.push('_');
            match &pattern {
                Some(p) if shared => detailed.push_str(p),
                _ => detailed.push_str(&text(value)),
            }
            if i + 1 == entries.len() {
                answer = node.limit.and_then(|l| self.limits.get(l));
            }
            if node.children.nodes.is_empty() {
                break;
            }
            level = &node.children;
        }
        let limit = answer?;
        Some(if limit.detailed_metric {
            detailed
        } else {
            named
        })
    }
}
