//! A descriptor tree checked level by level: keys, values, wildcards,
//! duplicates, and each node's limit (`rate_limit.rs`).

use super::loader::{Loader, join};
use super::rate_limit::Modes;
use super::tree::{Level, Node, Wildcard};
use super::yaml::{Value, Yaml};

const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "detailed_metric",
    "share_threshold",
    "quota_mode",
    "value_to_metric",
    "metadata",
];

impl Loader {
    pub(super) fn descriptors(
        &mut self,
        node: Option<&Yaml>,
        field: &str,
        parent: &str,
        level: &mut Level,
    ) {
        let Some(node) = node else { return };
        let items = match &*node.value {
            Value::Null => return,
            Value::Seq(items) => items,
            _ => {
                self.wrong_type(node, field, "a list of descriptors");
                return;
            }
        };
        for (i, item) in items.iter().enumerate() {
            let field = format!("{field}[{i}]");
            let Some(fields) = self.fields(item, &field, DESCRIPTOR_FIELDS, "a descriptor mapping")
            else {
                continue;
            };
            let key_field = join(&field, "key");
            let key = match fields.get("key") {
                None => {
                    self.error(
                        item.line,
                        key_field,
                        "missing required field: descriptor has empty key",
                    );
                    None
                }
                Some(node) => match self.string(node, &key_field) {
                    Some(key) if key.is_empty() => {
                        self.error(node.line, key_field, "descriptor has empty key");
                        None
                    }
                    key => key,
                },
            };
            let value = fields
                .get("value")
                .and_then(|node| self.string(node, &join(&field, "value")))
                .unwrap_or_default();
            let shadow_mode = self.flag(&fields, &field, "shadow_mode");
            let detailed_metric = self.flag(&fields, &field, "detailed_metric");
            let share_threshold = self.flag(&fields, &field, "share_threshold");
            let quota_mode = self.flag(&fields, &field, "quota_mode");
            let value_to_metric = self.flag(&fields, &field, "value_to_metric");
            let metadata = fields
                .get("metadata")
                .and_then(|node| self.metadata(node, &join(&field, "metadata")));

            // Without a key the node is not added; its children are still
            // checked, under a path that will never be used.
            let composite = match &key {
                Some(key) if value.is_empty() => key.clone(),
                Some(key) => format!("{key}_{value}"),
                None => String::new(),
            };
            let path = format!("{parent}{composite}");
            // As the reference: any `*` in `key_value` (or a key-only node's key)
            // makes the node a wildcard.
            let wildcard = key.is_some() && composite.contains('*');
            if share_threshold && key.is_some() && !wildcard {
                let line = fields.get("share_threshold").map_or(item.line, |n| n.line);
                self.error(
                    line,
                    join(&field, "share_threshold"),
                    format!(
                        "share_threshold can only be used with wildcard values (containing \
                         '*'), but found key '{composite}'"
                    ),
                );
            }
            let duplicate = key.is_some() && level.by_composite.contains_key(composite.as_bytes());
            if duplicate {
                // Across merged files, name the one that had it first.
                let elsewhere = self
                    .node_files
                    .get(&path)
                    .filter(|f| **f != self.file)
                    .map(|f| format!(": also in {f}"))
                    .unwrap_or_default();
                self.error(
                    item.line,
                    field.as_str(),
                    format!("duplicate descriptor composite key '{path}'{elsewhere}"),
                );
            } else if key.is_some() && self.merge_domains {
                self.node_files.insert(path.clone(), self.file.clone());
            }
            let limit = fields.get("rate_limit").and_then(|node| {
                self.rate_limit(
                    node,
                    &join(&field, "rate_limit"),
                    &path,
                    Modes {
                        shadow_mode,
                        quota_mode,
                        detailed_metric,
                        runtime_metric: detailed_metric
                            || value_to_metric
                            || self.under_value_to_metric,
                    },
                )
            });
            let limit = limit.map(|mut limit| {
                if let Some(metadata) = metadata {
                    limit.metadata = Some(self.out.metadata.len());
                    self.out.metadata.push(metadata);
                }
                self.out.limits.push(limit);
                self.out.limits.len() - 1
            });
            let mut children = Level::default();
            let outer = self.under_value_to_metric;
            self.under_value_to_metric |= value_to_metric;
            self.descriptors(
                fields.get("descriptors"),
                &join(&field, "descriptors"),
                &format!("{path}."),
                &mut children,
            );
            self.under_value_to_metric = outer;
            if key.is_some() && !duplicate {
                let index = level.nodes.len();
                let share = (share_threshold && wildcard)
                    .then(|| composite.as_bytes().to_vec().into_boxed_slice());
                level.nodes.push(Node {
                    limit,
                    share,
                    value_to_metric,
                    children,
                });
                if wildcard {
                    level.wildcards.push(Wildcard {
                        parts: composite
                            .split('*')
                            .map(|p| p.as_bytes().to_vec().into_boxed_slice())
                            .collect(),
                        node: index,
                    });
                }
                level
                    .by_composite
                    .insert(composite.into_bytes().into_boxed_slice(), index);
            }
        }
    }
}
