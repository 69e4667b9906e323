//! The loader's state and its typed field readers: every problem found
//! in every file is collected (with its file, line and field path) rather
//! than stopping at the first, and each field is read by a reader that
//! checks its type and bounds. The schema walk is in `files.rs` (files and
//! domains), `descriptors.rs` (descriptor trees) and `rate_limit.rs` (each
//! limit and its rule).

use std::collections::{HashMap, HashSet};

use super::scalars;
use super::tree::EnvoyLimits;
use super::yaml::{Value, Yaml};
use crate::config::file::{ConfigError, ConfigErrors};

/// A mapping's fields, each checked to be allowed and given once; merge
/// keys (`<<: *anchor`) are expanded.
pub(super) struct Fields {
    /// (name, line of the key, value).
    pub(super) entries: Vec<(String, usize, Yaml)>,
}

impl Fields {
    pub(super) fn get(&self, name: &str) -> Option<&Yaml> {
        self.entries
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, v)| v)
    }
}

/// `path.key`, or `key` at the top.
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// What `load` and `parse` share: every file checked into one result.
pub(super) struct Loader {
    pub(super) out: EnvoyLimits,
    /// Rule names in use.
    pub(super) used: HashSet<String>,
    /// The config's own rule names, which the Envoy rules go around.
    taken: HashSet<String>,
    /// The raw path of each rule in `out.rules`, for the final names
    /// (`naming::settle`).
    pub(super) rule_paths: Vec<String>,
    /// Domain -> the file that defined it first.
    pub(super) files: HashMap<String, String>,
    /// One domain may be spread over several files (`--envoy-merge-domains`,
    /// the reference's `MERGE_DOMAIN_CONFIG`).
    pub(super) merge_domains: bool,
    /// A node's full path -> the file that defined it: a duplicate across
    /// merged files names both.
    pub(super) node_files: HashMap<String, String>,
    pub(super) errors: Vec<ConfigError>,
    /// The file being checked.
    pub(super) file: String,
    /// Whether the descriptors being read are under a `value_to_metric`
    /// node.
    pub(super) under_value_to_metric: bool,
}

impl Loader {
    pub(super) fn new(taken: &[&str], merge_domains: bool) -> Self {
        Self {
            out: EnvoyLimits::default(),
            used: taken.iter().map(|&s| s.to_owned()).collect(),
            taken: taken.iter().map(|&s| s.to_owned()).collect(),
            rule_paths: Vec::new(),
            files: HashMap::new(),
            merge_domains,
            node_files: HashMap::new(),
            errors: Vec::new(),
            file: String::new(),
            under_value_to_metric: false,
        }
    }

    pub(super) fn finish(mut self) -> Result<EnvoyLimits, ConfigErrors> {
        if self.errors.is_empty() {
            self.override_rules();
            self.settle_names();
            Ok(self.out)
        } else {
            Err(ConfigErrors {
                errors: self.errors,
            })
        }
    }

    /// Renames every rule to its load-order-free name
    /// (`naming::settle`).
    fn settle_names(&mut self) {
        let names = super::naming::settle(&self.rule_paths, &self.taken);
        for (rule, name) in self.out.rules.iter_mut().zip(names) {
            if rule.name() != name {
                let mut spec = rule.spec();
                spec.name = name;
                // The same checked spec under another valid name.
                if let Ok(renamed) = spec.build() {
                    *rule = renamed;
                }
            }
        }
    }

    /// A file-wide error (unreadable, syntax).
    pub(super) fn file_error(&mut self, file: &str, line: Option<usize>, message: String) {
        self.errors.push(ConfigError {
            file: file.to_owned(),
            line,
            field: None,
            message,
        });
    }

    pub(super) fn error(
        &mut self,
        line: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line: Some(line),
            field: Some(field.into()),
            message: message.into(),
        });
    }

    pub(super) fn wrong_type(&mut self, node: &Yaml, field: &str, expected: &str) {
        let found = node.found();
        self.error(
            node.line,
            field,
            format!("expected {expected}, found {found}"),
        );
    }

    /// `node` as a mapping whose keys are all in `allowed`; reports it
    /// otherwise. A null is an empty mapping.
    pub(super) fn fields(
        &mut self,
        node: &Yaml,
        field: &str,
        allowed: &[&str],
        expected: &str,
    ) -> Option<Fields> {
        let mut fields = Fields {
            entries: Vec::new(),
        };
        match &*node.value {
            Value::Null => return Some(fields),
            Value::Map(entries) => {
                let mut merged = Vec::new();
                for (key, value) in entries {
                    let Value::Scalar { text: name, .. } = &*key.value else {
                        let found = key.found();
                        self.error(
                            key.line,
                            join(field, "<key>"),
                            format!("expected a string key, found {found}"),
                        );
                        continue;
                    };
                    if name == "<<" && matches!(&*key.value, Value::Scalar { plain: true, .. }) {
                        self.merge(value, field, &mut merged);
                    } else if !allowed.contains(&name.as_str()) {
                        self.error(
                            key.line,
                            join(field, name),
                            format!("unknown field; expected one of {}", allowed.join(", ")),
                        );
                    } else if fields.get(name).is_some() {
                        self.error(key.line, join(field, name), "field given twice");
                    } else {
                        let mut value = value.clone();
                        if !matches!(&*value.value, Value::Scalar { .. }) {
                            // An empty value's mark is where the next token
                            // starts, a block's is its first entry: the
                            // key's line is the one to name.
                            value.line = key.line;
                        }
                        fields.entries.push((name.clone(), key.line, value));
                    }
                }
                // Merged fields never override the mapping's own.
                for (name, line, value) in merged {
                    if !allowed.contains(&name.as_str()) {
                        self.error(
                            line,
                            join(field, &name),
                            format!("unknown field; expected one of {}", allowed.join(", ")),
                        );
                    } else if fields.get(&name).is_none() {
                        fields.entries.push((name, line, value));
                    }
                }
            }
            _ => {
                self.wrong_type(node, field, expected);
                return None;
            }
        }
        Some(fields)
    }

    /// The entries of a merge key's value (a mapping or a list of them),
    /// earlier ones first.
    pub(super) fn merge(
        &mut self,
        value: &Yaml,
        field: &str,
        out: &mut Vec<(String, usize, Yaml)>,
    ) {
        let maps: Vec<&Yaml> = match &*value.value {
            Value::Map(_) => vec![value],
            Value::Seq(items) => items.iter().collect(),
            _ => {
                self.wrong_type(value, &join(field, "<<"), "a mapping or a list of mappings");
                return;
            }
        };
        for map in maps {
            let Value::Map(entries) = &*map.value else {
                self.wrong_type(map, &join(field, "<<"), "a mapping");
                continue;
            };
            for (key, value) in entries {
                if let Value::Scalar { text, .. } = &*key.value
                    && !out.iter().any(|(n, _, _)| n == text)
                {
                    out.push((text.clone(), key.line, value.clone()));
                }
            }
        }
    }

    /// A string field: any scalar's text (Go's `yaml.v2` reads `value: 200`
    /// as `"200"`), `""` for null. `None` (reported) when not a scalar.
    pub(super) fn string(&mut self, node: &Yaml, field: &str) -> Option<String> {
        match &*node.value {
            Value::Null => Some(String::new()),
            Value::Scalar { text, .. } => Some(text.clone()),
            _ => {
                self.wrong_type(node, field, "a string");
                None
            }
        }
    }

    /// A boolean field, `false` for null. `None` (reported) otherwise.
    pub(super) fn boolean(&mut self, node: &Yaml, field: &str) -> Option<bool> {
        match &*node.value {
            Value::Null => Some(false),
            Value::Scalar { text, plain: true } if scalars::boolean(text).is_some() => {
                scalars::boolean(text)
            }
            _ => {
                self.wrong_type(node, field, "a boolean (true or false)");
                None
            }
        }
    }

    /// An integer field in `min..=max`, `0` for null. `None` (reported)
    /// otherwise.
    pub(super) fn integer(
        &mut self,
        node: &Yaml,
        field: &str,
        min: i128,
        max: i128,
    ) -> Option<i128> {
        match &*node.value {
            Value::Null => Some(0),
            Value::Scalar { text, plain: true } => match scalars::integer(text) {
                Ok(n) if (min..=max).contains(&n) => Some(n),
                Ok(_) => {
                    self.error(
                        node.line,
                        field,
                        format!("{text} is out of range; expected {min} to {max}"),
                    );
                    None
                }
                Err(why) => {
                    self.error(
                        node.line,
                        field,
                        format!("expected an integer, found {text:?} ({why})"),
                    );
                    None
                }
            },
            _ => {
                self.wrong_type(node, field, "an integer");
                None
            }
        }
    }

    /// Optional boolean field `name` of `fields`, `false` when absent.
    pub(super) fn flag(&mut self, fields: &Fields, field: &str, name: &str) -> bool {
        fields
            .get(name)
            .and_then(|node| self.boolean(node, &join(field, name)))
            .unwrap_or(false)
    }
}
