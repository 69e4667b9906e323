//! Checking Envoy YAML files field by field into [`EnvoyLimits`]: the
//! schema (fields allowed at each level, their types and bounds), YAML 1.1
//! conveniences as Go's `yaml.v2` reads them, the descriptor trees built
//! level by level, and the tollgate rule each limit becomes, with its
//! generated name.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use tollgate::{Algorithm, MAX_NAME_LEN, RuleSpec};

use super::tree::{EnvoyLimits, Level, Limit, Node, Unit};
use super::yaml::{Value, Yaml, read_yaml};
use crate::config_file::{ConfigError, ConfigErrors};

const ROOT_FIELDS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "detailed_metric",
];
const RATE_LIMIT_FIELDS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
];
const REPLACES_FIELDS: &[&str] = &["name"];

/// A mapping's fields, each checked to be allowed and given once; merge
/// keys (`<<: *anchor`) are expanded.
struct Fields {
    /// (name, line of the key, value).
    entries: Vec<(String, usize, Yaml)>,
}

impl Fields {
    fn get(&self, name: &str) -> Option<&Yaml> {
        self.entries
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, v)| v)
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Whether a YAML 1.1 plain scalar is a boolean, as Go's `yaml.v2` reads it.
fn boolean(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" | "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => {
            Some(true)
        }
        "false" | "False" | "FALSE" | "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
            Some(false)
        }
        _ => None,
    }
}

/// A plain scalar as an integer: decimal, `0x`, `0o` or `0b`, with an
/// optional sign and `_` separators; saturates far out of range. `Err` with
/// the reason when it is not one.
fn integer(text: &str) -> Result<i128, &'static str> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, rest) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cleaned.strip_prefix('+').unwrap_or(&cleaned)),
    };
    let (radix, digits) = if let Some(d) = rest.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = rest.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = rest.strip_prefix("0b") {
        (2, d)
    } else {
        (10, rest)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err("not an integer");
    }
    if radix == 10 && digits.len() > 1 && digits.starts_with('0') {
        // YAML 1.1 (the reference service's) reads 0100 as octal 64.
        return Err("a leading 0 is octal in YAML 1.1; write the number without it");
    }
    let n = i128::from_str_radix(digits, radix).unwrap_or(i128::MAX);
    Ok(if negative { -n } else { n })
}

/// What `load` and `parse` share: every file checked into one result.
struct Loader {
    out: EnvoyLimits,
    /// Rule names in use.
    used: HashSet<String>,
    /// Domain -> the file that defined it first.
    files: HashMap<String, String>,
    errors: Vec<ConfigError>,
    /// The file being checked.
    file: String,
}

impl Loader {
    fn new(taken: &[&str]) -> Self {
        Self {
            out: EnvoyLimits::default(),
            used: taken.iter().map(|&s| s.to_owned()).collect(),
            files: HashMap::new(),
            errors: Vec::new(),
            file: String::new(),
        }
    }

    fn finish(self) -> Result<EnvoyLimits, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(self.out)
        } else {
            Err(ConfigErrors {
                errors: self.errors,
            })
        }
    }

    /// A file-wide error (unreadable, syntax).
    fn file_error(&mut self, file: &str, line: Option<usize>, message: String) {
        self.errors.push(ConfigError {
            file: file.to_owned(),
            line,
            field: None,
            message,
        });
    }

    fn error(&mut self, line: usize, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line: Some(line),
            field: Some(field.into()),
            message: message.into(),
        });
    }

    fn wrong_type(&mut self, node: &Yaml, field: &str, expected: &str) {
        let found = node.found();
        self.error(
            node.line,
            field,
            format!("expected {expected}, found {found}"),
        );
    }

    /// Checks one file's text and adds its domain.
    fn file(&mut self, file: &str, text: &str) {
        // A byte order mark is not part of the YAML (yaml.v2 skips it too).
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        file.clone_into(&mut self.file);
        let start = self.errors.len();
        match read_yaml(text) {
            Err((line, message)) => self.file_error(file, Some(line), message),
            Ok(root) => self.root(root.as_ref()),
        }
        self.errors[start..].sort_by_key(|e| e.line.unwrap_or(0));
    }

    fn root(&mut self, root: Option<&Yaml>) {
        let empty = Yaml {
            line: 1,
            value: Rc::new(Value::Null),
        };
        let root = root.unwrap_or(&empty);
        if matches!(&*root.value, Value::Seq(_) | Value::Scalar { .. }) {
            let found = root.found();
            self.errors.push(ConfigError {
                file: self.file.clone(),
                line: Some(root.line),
                field: None,
                message: format!("expected a mapping with domain and descriptors, found {found}"),
            });
            return;
        }
        let Some(fields) = self.fields(
            root,
            "",
            ROOT_FIELDS,
            "a mapping with domain and descriptors",
        ) else {
            return;
        };
        let domain = match fields.get("domain") {
            None => None,
            Some(node) => self.string(node, "domain").map(|d| (d, node.line)),
        };
        let domain = match domain {
            Some((d, line)) if d.is_empty() => {
                self.error(line, "domain", "config file cannot have empty domain");
                None
            }
            Some((d, line)) => {
                if let Some(first) = self.files.get(&d) {
                    let message = format!("duplicate domain '{d}': also in {first}");
                    self.error(line, "domain", message);
                    None
                } else {
                    self.files.insert(d.clone(), self.file.clone());
                    Some(d)
                }
            }
            None => {
                if fields.get("domain").is_none() {
                    self.error(
                        root.line,
                        "domain",
                        "missing required field: config file cannot have empty domain",
                    );
                }
                None
            }
        };
        let mut top = Level::default();
        let parent = format!("{}.", domain.as_deref().unwrap_or_default());
        self.descriptors(fields.get("descriptors"), "descriptors", &parent, &mut top);
        if let Some(domain) = domain {
            self.out.domains.insert(domain, top);
        }
    }

    /// `node` as a mapping whose keys are all in `allowed`; reports it
    /// otherwise. A null is an empty mapping.
    fn fields(
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
    fn merge(&mut self, value: &Yaml, field: &str, out: &mut Vec<(String, usize, Yaml)>) {
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
    fn string(&mut self, node: &Yaml, field: &str) -> Option<String> {
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
    fn boolean(&mut self, node: &Yaml, field: &str) -> Option<bool> {
        match &*node.value {
            Value::Null => Some(false),
            Value::Scalar { text, plain: true } if boolean(text).is_some() => boolean(text),
            _ => {
                self.wrong_type(node, field, "a boolean (true or false)");
                None
            }
        }
    }

    /// An integer field in `min..=max`, `0` for null. `None` (reported)
    /// otherwise.
    fn integer(&mut self, node: &Yaml, field: &str, min: i128, max: i128) -> Option<i128> {
        match &*node.value {
            Value::Null => Some(0),
            Value::Scalar { text, plain: true } => match integer(text) {
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
    fn flag(&mut self, fields: &Fields, field: &str, name: &str) -> bool {
        fields
            .get(name)
            .and_then(|node| self.boolean(node, &join(field, name)))
            .unwrap_or(false)
    }

    fn descriptors(&mut self, node: Option<&Yaml>, field: &str, parent: &str, level: &mut Level) {
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

            // Without a key the node is not added; its children are still
            // checked, under a path that will never be used.
            let composite = match &key {
                Some(key) if value.is_empty() => key.clone(),
                Some(key) => format!("{key}_{value}"),
                None => String::new(),
            };
            let path = format!("{parent}{composite}");
            let duplicate = key.is_some() && level.by_composite.contains_key(composite.as_bytes());
            if duplicate {
                self.error(
                    item.line,
                    field.as_str(),
                    format!("duplicate descriptor composite key '{path}'"),
                );
            }
            let limit = fields.get("rate_limit").and_then(|node| {
                self.rate_limit(
                    node,
                    &join(&field, "rate_limit"),
                    &path,
                    shadow_mode,
                    detailed_metric,
                )
            });
            let limit = limit.map(|limit| {
                self.out.limits.push(limit);
                self.out.limits.len() - 1
            });
            let mut children = Level::default();
            self.descriptors(
                fields.get("descriptors"),
                &join(&field, "descriptors"),
                &format!("{path}."),
                &mut children,
            );
            if key.is_some() && !duplicate {
                let index = level.nodes.len();
                level.nodes.push(Node { limit, children });
                if let Some(prefix) = value.strip_suffix('*') {
                    let key = key.as_deref().unwrap_or_default();
                    level.wildcards.push((format!("{key}_{prefix}"), index));
                }
                level
                    .by_composite
                    .insert(composite.into_bytes().into_boxed_slice(), index);
            }
        }
    }

    /// The node's limit, or `None` when it has none or it is invalid
    /// (reported). Builds its rule when it needs one.
    fn rate_limit(
        &mut self,
        node: &Yaml,
        field: &str,
        path: &str,
        shadow_mode: bool,
        detailed_metric: bool,
    ) -> Option<Limit> {
        if matches!(&*node.value, Value::Null) {
            return None;
        }
        let before = self.errors.len();
        let fields = self.fields(node, field, RATE_LIMIT_FIELDS, "a rate_limit mapping")?;
        let line_of = |name: &str| {
            fields
                .entries
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or(node.line, |(_, _, v)| v.line)
        };
        let unlimited = self.flag(&fields, field, "unlimited");
        let requests_per_unit = fields
            .get("requests_per_unit")
            .and_then(|n| {
                self.integer(
                    n,
                    &join(field, "requests_per_unit"),
                    0,
                    i128::from(u32::MAX),
                )
            })
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        let name = fields
            .get("name")
            .and_then(|n| self.string(n, &join(field, "name")))
            .unwrap_or_default();
        let unit_field = join(field, "unit");
        let unit_text = match fields.get("unit") {
            None => Some(String::new()),
            // A wrong type is reported; the unit is not checked further.
            Some(n) => self.string(n, &unit_field),
        };
        let unit = if let Some(unit_text) = unit_text {
            self.unit(&unit_text, unlimited, &fields, node, &unit_field)
        } else {
            None
        };
        let replaces = self.replaces(fields.get("replaces"), &join(field, "replaces"), &name);
        let algorithm_field = join(field, "algorithm");
        let algorithm = match fields.get("algorithm") {
            None => Algorithm::FixedWindow,
            Some(n) => match self.string(n, &algorithm_field) {
                None => Algorithm::FixedWindow,
                Some(text) => match text.parse() {
                    // A descriptor's limit is a rate; in-flight limits are
                    // acquired and released, which ShouldRateLimit cannot.
                    Ok(Algorithm::Concurrency) => {
                        self.error(
                            n.line,
                            &algorithm_field,
                            "concurrency is not a rate: Envoy's ShouldRateLimit has no release; \
                             expected one of gcra, token_bucket, fixed_window, sliding_window, \
                             sliding_log"
                                .to_owned(),
                        );
                        Algorithm::FixedWindow
                    }
                    Ok(a) => a,
                    Err(e) => {
                        let e: tollgate::RuleError = e;
                        self.error(n.line, &algorithm_field, e.message);
                        Algorithm::FixedWindow
                    }
                },
            },
        };
        let burst_field = join(field, "burst");
        let burst = fields.get("burst").and_then(|n| {
            if algorithm.has_burst() {
                self.integer(n, &burst_field, 1, i128::from(u64::MAX))
                    .and_then(|b| u64::try_from(b).ok())
            } else {
                self.error(
                    n.line,
                    &burst_field,
                    format!("burst applies to gcra and token_bucket only, not {algorithm}"),
                );
                None
            }
        });
        if self.errors.len() > before {
            return None;
        }
        let mut limit = Limit {
            rule: None,
            name,
            path: path.to_owned(),
            requests_per_unit,
            unit,
            unlimited,
            shadow_mode,
            detailed_metric,
            replaces,
        };
        if let (Some(unit), false, true) = (unit, unlimited, requests_per_unit >= 1) {
            let mut spec = RuleSpec::new(
                self.rule_name(path),
                algorithm,
                u64::from(requests_per_unit),
                Duration::from_secs(unit.seconds()),
            );
            if let Some(burst) = burst {
                spec = spec.burst(burst);
            }
            match spec.build() {
                Ok(rule) => {
                    limit.rule = Some(self.out.rules.len());
                    self.out.rules.push(rule);
                }
                Err(e) => {
                    let name = match e.field {
                        "limit" => "requests_per_unit",
                        "period" => "unit",
                        other => other,
                    };
                    self.error(line_of(name), join(field, name), e.message);
                    return None;
                }
            }
        }
        Some(limit)
    }

    /// `rate_limit.unit` (its text, `""` when absent or null) checked
    /// against `unlimited`.
    fn unit(
        &mut self,
        text: &str,
        unlimited: bool,
        fields: &Fields,
        rate_limit: &Yaml,
        field: &str,
    ) -> Option<Unit> {
        const EXPECTED: &str = "expected second, minute, hour, day, week, month or year";
        let given = fields.get("unit");
        let line = given.map_or(rate_limit.line, |n| n.line);
        match (text, unlimited) {
            ("", true) => None,
            ("", false) if given.is_none() => {
                self.error(
                    line,
                    field,
                    "missing required field: a rate limit needs a unit (second, minute, hour, \
                     day, week, month or year) unless it is unlimited",
                );
                None
            }
            (_, true) => {
                self.error(
                    line,
                    field,
                    "should not specify rate limit unit when unlimited",
                );
                None
            }
            (text, false) => {
                let unit = Unit::parse(text);
                if unit.is_none() {
                    self.error(
                        line,
                        field,
                        format!("invalid rate limit unit '{text}'; {EXPECTED}"),
                    );
                }
                unit
            }
        }
    }

    /// `replaces`: a list of `{name: X}`, each name non-empty and not the
    /// limit's own.
    fn replaces(&mut self, node: Option<&Yaml>, field: &str, own: &str) -> Vec<String> {
        let mut names = Vec::new();
        let Some(node) = node else { return names };
        let items = match &*node.value {
            Value::Null => return names,
            Value::Seq(items) => items,
            _ => {
                self.wrong_type(node, field, "a list of {name: ...}");
                return names;
            }
        };
        for (i, item) in items.iter().enumerate() {
            let item_field = format!("{field}[{i}]");
            let Some(fields) =
                self.fields(item, &item_field, REPLACES_FIELDS, "a mapping {name: ...}")
            else {
                continue;
            };
            let name_field = join(&item_field, "name");
            let (name, line) = match fields.get("name") {
                None => (Some(String::new()), item.line),
                Some(n) => (self.string(n, &name_field), n.line),
            };
            match name {
                None => {}
                Some(name) if name.is_empty() => {
                    self.error(line, name_field, "should not have an empty replaces entry");
                }
                Some(name) if name == own => {
                    self.error(
                        line,
                        name_field,
                        format!("replaces should not contain name of same descriptor ('{name}')"),
                    );
                }
                Some(name) => names.push(name),
            }
        }
        names
    }

    /// A unique rule name for the node at `path` (see [`EnvoyLimits::rules`]).
    fn rule_name(&mut self, path: &str) -> String {
        let mut base: String = "envoy."
            .chars()
            .chain(path.chars().map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '_'
                }
            }))
            .collect();
        // Every character is ASCII now, so any byte length is a boundary.
        base.truncate(MAX_NAME_LEN);
        let mut name = base.clone();
        let mut n = 2u64;
        while self.used.contains(&name) {
            let suffix = format!(".{n}");
            let stem = &base[..base.len().min(MAX_NAME_LEN - suffix.len())];
            name = format!("{stem}{suffix}");
            n += 1;
        }
        self.used.insert(name.clone());
        name
    }
}

impl EnvoyLimits {
    /// Loads every file; `taken` are rule names already in use (the TOML
    /// config's rules) that generated rule names must avoid. Errors name
    /// each file as its path displays.
    ///
    /// # Errors
    /// Every problem in every file, file by file, in line order: an
    /// unreadable file is one error.
    pub fn load(files: &[PathBuf], taken: &[&str]) -> Result<Self, ConfigErrors> {
        let mut loader = Loader::new(taken);
        for path in files {
            let file = path.display().to_string();
            match crate::config_file::read(path) {
                Err(e) => loader.file_error(&file, None, e),
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => loader.file(&file, &text),
                    Err(e) => {
                        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
                        loader.file_error(
                            &file,
                            Some(line),
                            "the file is not valid UTF-8".to_owned(),
                        );
                    }
                },
            }
        }
        loader.finish()
    }

    /// Same as [`EnvoyLimits::load`] from in-memory `(file name, text)`
    /// pairs.
    ///
    /// # Errors
    /// Every problem in every source, source by source, in line order.
    pub fn parse(sources: &[(String, String)], taken: &[&str]) -> Result<Self, ConfigErrors> {
        let mut loader = Loader::new(taken);
        for (file, text) in sources {
            loader.file(file, text);
        }
        loader.finish()
    }
}
