//! envoyproxy/ratelimit YAML config files, loaded unchanged, and the lookup
//! of a request descriptor in them (README, "The Envoy rate limit service").
//!
//! Each file names one `domain` and a tree of `descriptors`; a node may
//! carry a `rate_limit`. [`EnvoyLimits::parse`] checks every file field by
//! field, so one pass reports **every** problem with its file, line and
//! field (`descriptors[0].descriptors[1].rate_limit.unit`: descriptors are
//! numbered from 0 in file order). Unknown fields are errors everywhere, as
//! in the reference service.
//!
//! Every node with a unit and `requests_per_unit >= 1` becomes one tollgate
//! rule ([`EnvoyLimits::rules`]), enforced with the same store and semantics
//! as every other rule. Two fields are tollgate's own extension of the
//! format, both optional inside `rate_limit`:
//!
//! * `algorithm`: `gcra`, `token_bucket`, `fixed_window`, `sliding_window`
//!   or `sliding_log`; `fixed_window` by default, as Envoy's users expect.
//! * `burst`: for `gcra` and `token_bucket` only; defaults to
//!   `requests_per_unit`.
//!
//! [`EnvoyLimits::find`] is the reference service's `GetLimit`: exact
//! `key_value`, then a wildcard value (`value: use*`) at the same level, then
//! the key alone.
//!
//! ```
//! use tollgate_server::envoy::limits::{EnvoyLimits, Unit};
//!
//! let yaml = "
//! domain: mongo_cps
//! descriptors:
//!   - key: database
//!     value: users
//!     rate_limit:
//!       unit: second
//!       requests_per_unit: 500
//! ";
//! let limits = EnvoyLimits::parse(&[("mongo.yaml".into(), yaml.into())], &[]).unwrap();
//! let limit = limits.find("mongo_cps", &[("database", "users")]).unwrap();
//! assert_eq!((limit.requests_per_unit, limit.unit), (500, Some(Unit::Second)));
//! assert_eq!(limits.rules()[0].name(), "envoy.mongo_cps.database_users");
//! assert!(limits.find("mongo_cps", &[("database", "orders")]).is_none());
//!
//! let bad = "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n";
//! let errors = EnvoyLimits::parse(&[("bad.yaml".into(), bad.into())], &[]).unwrap_err();
//! assert_eq!(
//!     errors.to_string(),
//!     "bad.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'; \
//!      expected second, minute, hour, day, week, month or year",
//! );
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use tollgate::{Algorithm, MAX_NAME_LEN, Rule, RuleSpec};
use yaml_rust2::Event;
use yaml_rust2::parser::Parser;
use yaml_rust2::scanner::TScalarStyle;

use crate::config_file::{ConfigError, ConfigErrors};

/// An envoyproxy/ratelimit time unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3600 seconds.
    Hour,
    /// 86400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// Its length in seconds, as the reference service divides time: 1, 60,
    /// 3600, 86400, 604800, 30*86400, 365*86400.
    #[must_use]
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// Its number in `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`:
    /// SECOND=1, MINUTE=2, HOUR=3, DAY=4, MONTH=5, YEAR=6, WEEK=7.
    #[must_use]
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// `"second"`, `"minute"`, ...: the name used in config files.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The unit named `s`, case-insensitively (the reference upper-cases
    /// it and looks it up in the proto enum).
    fn parse(s: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(s))
    }
}

/// One descriptor node's `rate_limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Index into [`EnvoyLimits::rules`] of the tollgate rule that counts
    /// it; `None` when unlimited or `requests_per_unit == 0`.
    pub rule: Option<usize>,
    /// `rate_limit.name`, `""` when not given.
    pub name: String,
    /// The node's full dotted key, as the reference service names it:
    /// `domain.key_value.key2` (the key, plus `_value` when a value is
    /// given), e.g. `mongo_cps.database_users`.
    pub path: String,
    /// `rate_limit.requests_per_unit` (0 when not given: every request is
    /// over the limit).
    pub requests_per_unit: u32,
    /// `rate_limit.unit`; `None` iff unlimited.
    pub unit: Option<Unit>,
    /// `rate_limit.unlimited`.
    pub unlimited: bool,
    /// The node's `shadow_mode`: over-limit answers are reported as OK.
    pub shadow_mode: bool,
    /// The node's `detailed_metric` (stored, otherwise unused).
    pub detailed_metric: bool,
    /// Names of the limits this one replaces (`rate_limit.replaces`).
    pub replaces: Vec<String>,
}

/// One level of a descriptor tree: the nodes, by composite key.
#[derive(Debug, Clone, Default)]
struct Level {
    nodes: Vec<Node>,
    /// `key` or `key_value` -> index into `nodes`. Bytes, so a request's
    /// entries need not be UTF-8 to be looked up.
    by_composite: HashMap<Box<[u8]>, usize>,
    /// Wildcard nodes in config order: (`key_` + the value without its
    /// trailing `*`, index into `nodes`).
    wildcards: Vec<(String, usize)>,
}

/// One descriptor node.
#[derive(Debug, Clone, Default)]
struct Node {
    /// Index into `EnvoyLimits::limits`.
    limit: Option<usize>,
    children: Level,
}

/// Every loaded domain: the descriptor trees, their limits and the tollgate
/// rules that count them.
#[derive(Debug, Clone, Default)]
pub struct EnvoyLimits {
    domains: BTreeMap<String, Level>,
    limits: Vec<Limit>,
    rules: Vec<Rule>,
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

    /// The tollgate rules, one per node that has a limit with a unit and
    /// `requests_per_unit >= 1`, in file then document order. A rule is
    /// named `envoy.` + the node's [`Limit::path`] with every character
    /// outside `[A-Za-z0-9_.-]` replaced by `_`, cut to
    /// [`tollgate::MAX_NAME_LEN`] bytes and made unique (against the names
    /// given to `load` and each other) by a `.2`, `.3`, ... suffix.
    #[must_use]
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The domains loaded, sorted.
    #[must_use]
    pub fn domains(&self) -> Vec<&str> {
        self.domains.keys().map(String::as_str).collect()
    }

    /// Every limit, in file then document order (so in rule order where
    /// they have one).
    pub fn limits(&self) -> impl Iterator<Item = &Limit> {
        self.limits.iter()
    }

    /// The limit that applies to one request descriptor, as the reference
    /// service's `GetLimit` finds it. `None` for an unknown domain.
    ///
    /// From the domain's top level, for each entry `(k, v)` in turn: the
    /// node `k_v`; else the first wildcard node at this level (config
    /// order) whose `k_` + value-without-`*` is a prefix of `k_v`; else the
    /// node with key `k` and no value. No node ends the walk. A node's limit
    /// is the answer only when its entry is the request's last; the walk
    /// goes on among the node's children, and ends at a node without any.
    /// So a request deeper than the config, or one that stops above a
    /// limited leaf, gets no limit.
    ///
    /// Keys and values are compared as bytes (as the reference service's Go
    /// strings are), so entries that are not UTF-8 (header values Envoy
    /// copied) are matched too: such a value never equals a configured
    /// value (those are UTF-8), but a wildcard prefix or a key-only node
    /// can match it; such a key matches nothing.
    #[must_use]
    pub fn find<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
    ) -> Option<&Limit> {
        let mut level = self.domains.get(domain)?;
        let mut answer = None;
        let mut composite = Vec::new();
        for (i, (key, value)) in entries.iter().enumerate() {
            let key = key.as_ref();
            composite.clear();
            composite.extend_from_slice(key);
            composite.push(b'_');
            composite.extend_from_slice(value.as_ref());
            let index = level
                .by_composite
                .get(composite.as_slice())
                .or_else(|| {
                    level
                        .wildcards
                        .iter()
                        .find(|(prefix, _)| composite.starts_with(prefix.as_bytes()))
                        .map(|(_, index)| index)
                })
                .or_else(|| level.by_composite.get(key));
            let Some(node) = index.and_then(|&index| level.nodes.get(index)) else {
                break;
            };
            if i + 1 == entries.len() {
                answer = node.limit.and_then(|l| self.limits.get(l));
            }
            if node.children.nodes.is_empty() {
                break;
            }
            level = &node.children;
        }
        answer
    }
}

/// The store key for a request descriptor matched to a limit: its entries
/// as `key=value` joined by `;`, with `\`, `;` and `=` escaped by a `\`,
/// and each byte that is not part of valid UTF-8 written `\xHH` (lower-case
/// hex; a bare `\x` never occurs otherwise, so such a key never names a
/// valid string's counter, and it stays readable and usable on the HTTP
/// API). Injective: two different entry lists never give the same string.
/// A key
/// that would be longer than [`tollgate::MAX_KEY_LEN`] (a long header
/// value) becomes `;sha256=` and the SHA-256 of its long form: a request
/// cannot escape its limits by being long, and since no short key starts
/// with a bare `;`, a short key never names a long key's counter.
///
/// ```
/// use tollgate_server::envoy::limits::store_key;
///
/// assert_eq!(store_key(&[("database", "users"), ("collection", "foo")]), "database=users;collection=foo");
/// assert_eq!(store_key(&[("a", "b;c")]), r"a=b\;c");
/// assert_eq!(store_key(&[(&b"user"[..], &b"\xff\xfe"[..])]), r"user=\xff\xfe");
/// ```
#[must_use]
pub fn store_key<K: AsRef<[u8]>, V: AsRef<[u8]>>(entries: &[(K, V)]) -> String {
    let len = entries
        .iter()
        .map(|(k, v)| k.as_ref().len() + v.as_ref().len() + 2)
        .sum();
    let mut out = String::with_capacity(len);
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        escape(key.as_ref(), &mut out);
        out.push('=');
        escape(value.as_ref(), &mut out);
    }
    if out.len() > tollgate::MAX_KEY_LEN {
        use sha2::Digest as _;
        use std::fmt::Write as _;
        let digest = sha2::Sha256::digest(out.as_bytes());
        let mut short = String::with_capacity(8 + 64);
        short.push_str(";sha256=");
        for b in digest {
            let _ = write!(short, "{b:02x}");
        }
        return short;
    }
    out
}

fn escape(s: &[u8], out: &mut String) {
    // One chunk, all valid, for a UTF-8 string.
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            if matches!(c, '\\' | ';' | '=') {
                out.push('\\');
            }
            out.push(c);
        }
        for b in chunk.invalid() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\x");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

// ---------------------------------------------------------------------------
// A YAML tree with a line on every node.

/// At most this many nodes in one file, aliases expanded (an alias bomb is
/// an error, not an out-of-memory).
const MAX_NODES: usize = 1_000_000;

#[derive(Debug)]
enum Value {
    Null,
    /// A scalar; `plain` when unquoted and untagged (only plain scalars are
    /// numbers, booleans or null).
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Yaml>),
    Map(Vec<(Yaml, Yaml)>),
}

#[derive(Debug, Clone)]
struct Yaml {
    /// 1-based.
    line: usize,
    value: Rc<Value>,
}

impl Yaml {
    /// What it is, for "expected X, found Y".
    fn found(&self) -> String {
        match &*self.value {
            Value::Null => "null".to_owned(),
            Value::Scalar { text, .. } => format!("{text:?}"),
            Value::Seq(_) => "a list".to_owned(),
            Value::Map(_) => "a mapping".to_owned(),
        }
    }
}

/// A container being read.
struct Open {
    line: usize,
    anchor: usize,
    /// Nodes in it, aliases expanded, itself included.
    weight: usize,
    items: Vec<Yaml>,
    map: bool,
}

/// The first document of `text` (`None` when there is none), or the line
/// and message of its syntax error. Like the reference service (Go's
/// `yaml.v2` `Unmarshal`), later documents are ignored.
fn read_yaml(text: &str) -> Result<Option<Yaml>, (usize, String)> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Open> = Vec::new();
    let mut anchors: HashMap<usize, (Rc<Value>, usize)> = HashMap::new();
    let mut total = 0usize;
    let mut root = None;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| {
            (
                e.marker().line().max(1),
                format!("YAML syntax error: {}", e.info()),
            )
        })?;
        let line = mark.line().max(1);
        let (node, weight, anchor) = match event {
            Event::StreamEnd => return Ok(root),
            Event::DocumentEnd if root.is_some() => return Ok(root),
            Event::Nothing | Event::StreamStart | Event::DocumentStart | Event::DocumentEnd => {
                continue;
            }
            Event::Alias(id) => {
                let (value, weight) = anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| (line, "YAML alias to an unknown anchor".to_owned()))?;
                (Yaml { line, value }, weight, 0)
            }
            Event::Scalar(text, style, anchor, tag) => {
                let plain = style == TScalarStyle::Plain && tag.is_none();
                let value = if plain && matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL")
                {
                    Value::Null
                } else {
                    Value::Scalar { text, plain }
                };
                let value = Rc::new(value);
                (Yaml { line, value }, 1, anchor)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                stack.push(Open {
                    line,
                    anchor,
                    weight: 1,
                    items: Vec::new(),
                    map: matches!(event, Event::MappingStart(..)),
                });
                total += 1;
                if total > MAX_NODES {
                    return Err((line, format!("more than {MAX_NODES} YAML nodes")));
                }
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let open = stack
                    .pop()
                    .ok_or_else(|| (line, "YAML syntax error: unbalanced end".to_owned()))?;
                let value = if open.map {
                    let mut entries = Vec::with_capacity(open.items.len() / 2);
                    let mut items = open.items.into_iter();
                    while let (Some(k), Some(v)) = (items.next(), items.next()) {
                        entries.push((k, v));
                    }
                    Value::Map(entries)
                } else {
                    Value::Seq(open.items)
                };
                // The container itself was counted at its start.
                let node = Yaml {
                    line: open.line,
                    value: Rc::new(value),
                };
                if open.anchor != 0 {
                    anchors.insert(open.anchor, (Rc::clone(&node.value), open.weight));
                }
                match stack.last_mut() {
                    None => root = Some(node),
                    Some(parent) => {
                        parent.weight = parent.weight.saturating_add(open.weight);
                        parent.items.push(node);
                    }
                }
                continue;
            }
        };
        total = total.saturating_add(weight);
        if total > MAX_NODES {
            return Err((
                line,
                format!("more than {MAX_NODES} YAML nodes (aliases expanded)"),
            ));
        }
        if anchor != 0 {
            anchors.insert(anchor, (Rc::clone(&node.value), weight));
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(parent) => {
                parent.weight = parent.weight.saturating_add(weight);
                parent.items.push(node);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Checking.

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
                Some(text) => text.parse().unwrap_or_else(|e: tollgate::RuleError| {
                    self.error(n.line, &algorithm_field, e.message);
                    Algorithm::FixedWindow
                }),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<EnvoyLimits, ConfigErrors> {
        EnvoyLimits::parse(&[("test.yaml".to_owned(), yaml.to_owned())], &[])
    }

    fn ok(yaml: &str) -> EnvoyLimits {
        match parse(yaml) {
            Ok(limits) => limits,
            Err(e) => panic!("unexpected errors:\n{e}"),
        }
    }

    /// The errors as (line, field, message) triples.
    fn errors(yaml: &str) -> Vec<(Option<usize>, Option<String>, String)> {
        parse(yaml)
            .expect_err("expected errors")
            .errors
            .into_iter()
            .map(|e| {
                assert_eq!(e.file, "test.yaml");
                (e.line, e.field, e.message)
            })
            .collect()
    }

    /// The single error, as (line, field, message).
    fn error(yaml: &str) -> (usize, String, String) {
        let mut all = errors(yaml);
        assert_eq!(all.len(), 1, "{all:?}");
        let (line, field, message) = all.remove(0);
        (line.unwrap(), field.unwrap_or_default(), message)
    }

    fn path<'a>(
        limits: &'a EnvoyLimits,
        domain: &str,
        entries: &[(&str, &str)],
    ) -> Option<&'a str> {
        limits.find(domain, entries).map(|l| l.path.as_str())
    }

    /// The reference service's README example, "Example 1" to "Example 4"
    /// folded into one domain.
    const MONGO: &str = "\
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    rate_limit:
      unit: second
      requests_per_unit: 100

  - key: remote_address
    descriptors:
      - key: path
        value: /foo
        rate_limit:
          unit: minute
          requests_per_unit: 10
      - key: path
        rate_limit:
          unit: hour
          requests_per_unit: 1000

  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bar
        rate_limit:
          unit: MINUTE
          requests_per_unit: 20
        shadow_mode: true
      - key: destination_cluster
        rate_limit:
          unlimited: true

  - key: foo
    value: foo1*
    rate_limit:
      unit: day
      requests_per_unit: 3
  - key: foo
    value: foo*
    rate_limit:
      unit: week
      requests_per_unit: 4
  - key: foo
    rate_limit:
      unit: year
      requests_per_unit: 5
";

    #[test]
    fn key_value_beats_the_default_for_the_key() {
        let limits = ok(MONGO);
        assert_eq!(
            path(&limits, "mongo_cps", &[("database", "users")]),
            Some("mongo_cps.database_users")
        );
        let default = limits.find("mongo_cps", &[("database", "orders")]).unwrap();
        assert_eq!(default.path, "mongo_cps.database");
        assert_eq!(default.requests_per_unit, 100);
        assert_eq!(
            path(&limits, "mongo_cps", &[("database", "")]),
            Some("mongo_cps.database")
        );
        assert_eq!(path(&limits, "mongo_cps", &[("nothing", "users")]), None);
    }

    #[test]
    fn nested_descriptors_match_by_key_then_value() {
        let limits = ok(MONGO);
        let foo = limits
            .find(
                "mongo_cps",
                &[("remote_address", "10.0.0.1"), ("path", "/foo")],
            )
            .unwrap();
        assert_eq!(foo.path, "mongo_cps.remote_address.path_/foo");
        assert_eq!((foo.requests_per_unit, foo.unit), (10, Some(Unit::Minute)));
        let other = limits
            .find(
                "mongo_cps",
                &[("remote_address", "10.0.0.1"), ("path", "/bar")],
            )
            .unwrap();
        assert_eq!(other.path, "mongo_cps.remote_address.path");
        assert_eq!(other.unit, Some(Unit::Hour));

        let bar = limits
            .find(
                "mongo_cps",
                &[("source_cluster", "proxy"), ("destination_cluster", "bar")],
            )
            .unwrap();
        assert!(bar.shadow_mode);
        assert_eq!(bar.unit, Some(Unit::Minute), "units are case-insensitive");
        let any = limits
            .find(
                "mongo_cps",
                &[("source_cluster", "proxy"), ("destination_cluster", "baz")],
            )
            .unwrap();
        assert!(any.unlimited);
        assert_eq!((any.unit, any.rule), (None, None));
        // Only source_cluster=proxy has children.
        assert_eq!(
            path(
                &limits,
                "mongo_cps",
                &[("source_cluster", "other"), ("destination_cluster", "bar")]
            ),
            None
        );
    }

    #[test]
    fn wildcards_match_by_prefix_in_config_order_before_the_default() {
        let limits = ok(MONGO);
        // foo1* comes first in the config, so it wins over foo* for foo1x.
        assert_eq!(
            path(&limits, "mongo_cps", &[("foo", "foo1x")]),
            Some("mongo_cps.foo_foo1*")
        );
        assert_eq!(
            path(&limits, "mongo_cps", &[("foo", "foo1")]),
            Some("mongo_cps.foo_foo1*")
        );
        assert_eq!(
            path(&limits, "mongo_cps", &[("foo", "foo2")]),
            Some("mongo_cps.foo_foo*")
        );
        assert_eq!(
            path(&limits, "mongo_cps", &[("foo", "foo")]),
            Some("mongo_cps.foo_foo*")
        );
        assert_eq!(
            path(&limits, "mongo_cps", &[("foo", "fo")]),
            Some("mongo_cps.foo")
        );
        assert_eq!(
            path(&limits, "mongo_cps", &[("foo", "bar")]),
            Some("mongo_cps.foo")
        );
    }

    #[test]
    fn an_exact_value_beats_a_wildcard() {
        let limits = ok("
domain: d
descriptors:
  - key: k
    value: '*'
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 2}
");
        assert_eq!(path(&limits, "d", &[("k", "exact")]), Some("d.k_exact"));
        assert_eq!(path(&limits, "d", &[("k", "other")]), Some("d.k_*"));
        assert_eq!(path(&limits, "d", &[("k", "")]), Some("d.k_*"));
    }

    #[test]
    fn wildcards_apply_only_at_their_own_level() {
        let limits = ok("
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        value: x*
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 2}
");
        assert_eq!(path(&limits, "d", &[("b", "xy")]), Some("d.b"));
        assert_eq!(
            path(&limits, "d", &[("a", "1"), ("b", "xy")]),
            Some("d.a.b_x*")
        );
        assert_eq!(path(&limits, "d", &[("a", "1"), ("b", "y")]), None);
    }

    #[test]
    fn a_request_deeper_than_the_config_gets_no_limit() {
        let limits = ok(MONGO);
        assert_eq!(
            path(
                &limits,
                "mongo_cps",
                &[("database", "users"), ("collection", "x")]
            ),
            None
        );
        assert_eq!(
            path(
                &limits,
                "mongo_cps",
                &[("remote_address", "1"), ("path", "/foo"), ("x", "y")]
            ),
            None
        );
    }

    #[test]
    fn a_request_that_stops_above_a_limited_leaf_gets_no_limit() {
        let limits = ok(MONGO);
        assert_eq!(
            path(&limits, "mongo_cps", &[("remote_address", "10.0.0.1")]),
            None
        );
        assert_eq!(
            path(&limits, "mongo_cps", &[("source_cluster", "proxy")]),
            None
        );
        assert_eq!(path(&limits, "mongo_cps", &[]), None);
    }

    #[test]
    fn a_limited_parent_applies_only_to_requests_ending_there() {
        let limits = ok("
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
");
        assert_eq!(path(&limits, "d", &[("a", "1")]), Some("d.a"));
        assert_eq!(path(&limits, "d", &[("a", "1"), ("b", "2")]), Some("d.a.b"));
        assert_eq!(path(&limits, "d", &[("a", "1"), ("c", "2")]), None);
    }

    #[test]
    fn an_unknown_domain_gets_no_limit() {
        let limits = ok(MONGO);
        assert_eq!(path(&limits, "other", &[("database", "users")]), None);
        assert_eq!(
            path(
                &EnvoyLimits::default(),
                "mongo_cps",
                &[("database", "users")]
            ),
            None
        );
    }

    #[test]
    fn composite_keys_collide_as_in_the_reference() {
        // The reference keys nodes by "key_value": key "a_b" (no value)
        // is the same node as key "a" with value "b".
        let limits = ok("
domain: d
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
");
        assert_eq!(path(&limits, "d", &[("a", "b")]), Some("d.a_b"));
        let (line, field, message) = error(
            "
domain: d
descriptors:
  - key: a_b
  - key: a
    value: b
",
        );
        assert_eq!((line, field.as_str()), (5, "descriptors[1]"));
        assert_eq!(message, "duplicate descriptor composite key 'd.a_b'");
    }

    #[test]
    fn domains_limits_and_fields_are_loaded() {
        let limits = ok(MONGO);
        assert_eq!(limits.domains(), ["mongo_cps"]);
        let all: Vec<&str> = limits.limits().map(|l| l.path.as_str()).collect();
        assert_eq!(
            all,
            [
                "mongo_cps.database_users",
                "mongo_cps.database_default",
                "mongo_cps.database",
                "mongo_cps.remote_address.path_/foo",
                "mongo_cps.remote_address.path",
                "mongo_cps.source_cluster_proxy.destination_cluster_bar",
                "mongo_cps.source_cluster_proxy.destination_cluster",
                "mongo_cps.foo_foo1*",
                "mongo_cps.foo_foo*",
                "mongo_cps.foo",
            ]
        );
        // Every limited node has its rule, in order; the unlimited one has none.
        let rules: Vec<Option<usize>> = limits.limits().map(|l| l.rule).collect();
        assert_eq!(
            rules,
            [
                Some(0),
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(5),
                None,
                Some(6),
                Some(7),
                Some(8)
            ]
        );
        for limit in limits.limits() {
            if let Some(r) = limit.rule {
                let rule = &limits.rules()[r];
                assert_eq!(rule.limit(), u64::from(limit.requests_per_unit));
                assert_eq!(
                    rule.period(),
                    Duration::from_secs(limit.unit.unwrap().seconds())
                );
            }
        }
        assert_eq!(limits.rules().len(), 9);
    }

    #[test]
    fn a_file_with_only_a_domain_is_a_domain_without_limits() {
        let limits = ok("domain: empty\n");
        assert_eq!(limits.domains(), ["empty"]);
        assert_eq!(limits.rules().len(), 0);
        assert_eq!(path(&limits, "empty", &[("a", "b")]), None);
        let limits = ok("domain: empty\ndescriptors:\n");
        assert_eq!(limits.domains(), ["empty"]);
        let limits = ok("domain: empty\ndescriptors: []\n");
        assert_eq!(limits.domains(), ["empty"]);
    }

    #[test]
    fn name_replaces_and_detailed_metric_are_kept() {
        let limits = ok("
domain: d
descriptors:
  - key: a
    detailed_metric: true
    rate_limit:
      name: big
      unit: second
      requests_per_unit: 10
      replaces:
        - name: small
        - name: other
");
        let limit = limits.find("d", &[("a", "x")]).unwrap();
        assert_eq!(limit.name, "big");
        assert_eq!(limit.replaces, ["small", "other"]);
        assert!(limit.detailed_metric);
        assert!(!limit.shadow_mode);
        assert!(!limit.unlimited);
    }

    #[test]
    fn unlimited_and_zero_requests_have_no_rule() {
        let limits = ok("
domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
  - key: b
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: c
    rate_limit:
      unit: minute
");
        let a = limits.find("d", &[("a", "1")]).unwrap();
        assert_eq!((a.rule, a.unit, a.unlimited), (None, None, true));
        let b = limits.find("d", &[("b", "1")]).unwrap();
        assert_eq!(
            (b.rule, b.unit, b.requests_per_unit),
            (None, Some(Unit::Second), 0)
        );
        let c = limits.find("d", &[("c", "1")]).unwrap();
        assert_eq!(
            (c.rule, c.requests_per_unit),
            (None, 0),
            "requests_per_unit defaults to 0"
        );
        assert!(limits.rules().is_empty());
    }

    #[test]
    fn algorithm_defaults_to_fixed_window_and_can_be_chosen() {
        let limits = ok("
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 25}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
  - key: e
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket}
  - key: f
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: sliding_log}
");
        let algorithms: Vec<Algorithm> = limits.rules().iter().map(Rule::algorithm).collect();
        assert_eq!(
            algorithms,
            [
                Algorithm::FixedWindow,
                Algorithm::Gcra,
                Algorithm::SlidingWindow,
                Algorithm::TokenBucket,
                Algorithm::SlidingLog
            ]
        );
        assert_eq!(limits.rules()[1].capacity(), 25);
        assert_eq!(
            limits.rules()[3].capacity(),
            10,
            "burst defaults to the limit"
        );
    }

    #[test]
    fn units_have_the_reference_lengths_and_proto_numbers() {
        let expected = [
            (Unit::Second, 1, 1, "second"),
            (Unit::Minute, 60, 2, "minute"),
            (Unit::Hour, 3600, 3, "hour"),
            (Unit::Day, 86_400, 4, "day"),
            (Unit::Month, 2_592_000, 5, "month"),
            (Unit::Year, 31_536_000, 6, "year"),
            (Unit::Week, 604_800, 7, "week"),
        ];
        for (unit, seconds, proto, name) in expected {
            assert_eq!(unit.seconds(), seconds);
            assert_eq!(unit.proto(), proto);
            assert_eq!(unit.as_str(), name);
            assert_eq!(Unit::parse(&name.to_uppercase()), Some(unit));
        }
        assert_eq!(Unit::parse("fortnight"), None);
        // Every unit gives a rule tollgate accepts.
        let yaml: String = std::iter::once("domain: d\ndescriptors:\n".to_owned())
            .chain(Unit::ALL.iter().map(|u| {
                format!(
                    "  - key: {0}\n    rate_limit: {{unit: {0}, requests_per_unit: 1}}\n",
                    u.as_str()
                )
            }))
            .collect();
        assert_eq!(ok(&yaml).rules().len(), 7);
    }

    #[test]
    fn rule_names_are_sanitized_bounded_unique_and_avoid_taken_names() {
        let long = "v".repeat(200);
        let yaml = format!(
            "
domain: d
descriptors:
  - key: path
    value: /a b
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: path
    value: /a_b
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: taken
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: k
    value: {long}1
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: k
    value: {long}2
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: ünï
    rate_limit: {{unit: second, requests_per_unit: 1}}
"
        );
        let limits = EnvoyLimits::parse(&[("t.yaml".into(), yaml)], &["envoy.d.taken"]).unwrap();
        let names: Vec<&str> = limits.rules().iter().map(Rule::name).collect();
        assert_eq!(names[0], "envoy.d.path__a_b");
        assert_eq!(names[1], "envoy.d.path__a_b.2");
        assert_eq!(names[2], "envoy.d.taken.2");
        let cut = format!("envoy.d.k_{long}");
        assert_eq!(names[3], &cut[..MAX_NAME_LEN]);
        assert_eq!(names[4], format!("{}.2", &cut[..MAX_NAME_LEN - 2]));
        assert_eq!(names[5], "envoy.d._n_");
        let unique: HashSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len());
        assert!(names.iter().all(|n| n.len() <= MAX_NAME_LEN));
    }

    #[test]
    fn rule_names_are_unique_across_files_and_past_nine() {
        // Domains "d/" and "d?" both sanitize to "d_".
        let source = |domain: &str| {
            format!(
                "domain: '{domain}'\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
            )
        };
        let limits = EnvoyLimits::parse(
            &[
                ("1.yaml".into(), source("d/")),
                ("2.yaml".into(), source("d?")),
            ],
            &[],
        )
        .unwrap();
        let names: Vec<&str> = limits.rules().iter().map(Rule::name).collect();
        assert_eq!(names, ["envoy.d_.k", "envoy.d_.k.2"]);

        let nested = ok("
domain: d
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: b, descriptors: [{key: 'x', rate_limit: {unit: second, requests_per_unit: 1}}]}
");
        assert_eq!(nested.rules()[0].name(), "envoy.d.a");
        assert_eq!(nested.rules()[1].name(), "envoy.d.b.x");

        // Eleven nodes whose paths all sanitize to the same name.
        let yaml: String = std::iter::once("domain: d\ndescriptors:\n".to_owned())
            .chain(["!", "@", "#", "$", "%", "^", "&", "(", ")", "+", "~"].iter().map(|v| {
                format!(
                    "  - key: k\n    value: '{v}'\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
                )
            }))
            .collect();
        let limits = ok(&yaml);
        let names: Vec<&str> = limits.rules().iter().map(Rule::name).collect();
        assert_eq!(names[0], "envoy.d.k__");
        assert_eq!(names[1], "envoy.d.k__.2");
        assert_eq!(names[10], "envoy.d.k__.11");
    }

    #[test]
    fn duplicate_domains_across_files_name_both_files() {
        let one = "domain: shared\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        let two = "# comment\ndomain: shared\n";
        let err = EnvoyLimits::parse(
            &[
                ("one.yaml".into(), one.into()),
                ("two.yaml".into(), two.into()),
            ],
            &[],
        )
        .unwrap_err();
        assert_eq!(err.errors.len(), 1);
        let e = &err.errors[0];
        assert_eq!(e.file, "two.yaml");
        assert_eq!(e.line, Some(2));
        assert_eq!(e.field.as_deref(), Some("domain"));
        assert_eq!(e.message, "duplicate domain 'shared': also in one.yaml");
        assert_eq!(
            err.to_string(),
            "two.yaml:2: domain: duplicate domain 'shared': also in one.yaml"
        );
    }

    #[test]
    fn errors_from_every_file_are_collected_in_file_order() {
        let err = EnvoyLimits::parse(
            &[
                ("a.yaml".into(), "domain: a\nbogus: 1\n".into()),
                ("b.yaml".into(), "domain: b\n".into()),
                ("c.yaml".into(), "domain: ''\n".into()),
            ],
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "a.yaml:2: bogus: unknown field; expected one of domain, descriptors\n\
             c.yaml:1: domain: config file cannot have empty domain"
        );
    }

    #[test]
    fn empty_and_missing_domains_are_errors() {
        assert_eq!(
            error("domain: ''\n"),
            (
                1,
                "domain".into(),
                "config file cannot have empty domain".into()
            )
        );
        assert_eq!(
            error("\n\ndomain:\n"),
            (
                3,
                "domain".into(),
                "config file cannot have empty domain".into()
            )
        );
        let (line, field, message) = error("");
        assert_eq!((line, field.as_str()), (1, "domain"));
        assert!(message.contains("missing required field"), "{message}");
        let (line, field, _) = error("# nothing\ndescriptors: []\n");
        assert_eq!((line, field.as_str()), (2, "domain"));
        let (line, field, message) = error("domain: [a]\n");
        assert_eq!((line, field.as_str()), (1, "domain"));
        assert_eq!(message, "expected a string, found a list");
        let (line, field, message) = error("- a\n- b\n");
        assert_eq!((line, field.as_str()), (1, ""));
        assert_eq!(
            message,
            "expected a mapping with domain and descriptors, found a list"
        );
    }

    #[test]
    fn unknown_fields_are_errors_at_every_level() {
        let all = errors(
            "
domain: d
extra: 1
descriptors:
  - key: a
    rate_limits:
      unit: second
    descriptors:
      - key: b
        rate_limit:
          unit: second
          requests_per_unit: 1
          per: 2
          replaces:
            - name: x
              why: y
",
        );
        let got: Vec<(usize, &str)> = all
            .iter()
            .map(|(l, f, _)| (l.unwrap(), f.as_deref().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                (3, "extra"),
                (6, "descriptors[0].rate_limits"),
                (13, "descriptors[0].descriptors[0].rate_limit.per"),
                (
                    16,
                    "descriptors[0].descriptors[0].rate_limit.replaces[0].why"
                ),
            ]
        );
        assert_eq!(
            all[0].2,
            "unknown field; expected one of domain, descriptors"
        );
        assert_eq!(
            all[1].2,
            "unknown field; expected one of key, value, rate_limit, descriptors, shadow_mode, \
             detailed_metric"
        );
        assert_eq!(
            all[2].2,
            "unknown field; expected one of unit, requests_per_unit, unlimited, name, replaces, \
             algorithm, burst"
        );
        assert_eq!(all[3].2, "unknown field; expected one of name");
    }

    #[test]
    fn wrong_types_are_errors() {
        let all = errors(
            "
domain: d
descriptors:
  - key: [a]
    shadow_mode: sometimes
    rate_limit:
      unit: second
      requests_per_unit: lots
      unlimited: 'true'
  - key: b
    descriptors: {key: c}
  - just a string
  - key: e
    rate_limit: [second]
  - key: f
    rate_limit:
      unit: {a: b}
      requests_per_unit: 1.5
      replaces: {name: x}
descriptors2: 1
",
        );
        let got: Vec<(usize, &str, &str)> = all
            .iter()
            .map(|(l, f, m)| (l.unwrap(), f.as_deref().unwrap(), m.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (4, "descriptors[0].key", "expected a string, found a list"),
                (
                    5,
                    "descriptors[0].shadow_mode",
                    "expected a boolean (true or false), found \"sometimes\""
                ),
                (
                    8,
                    "descriptors[0].rate_limit.requests_per_unit",
                    "expected an integer, found \"lots\" (not an integer)"
                ),
                (
                    9,
                    "descriptors[0].rate_limit.unlimited",
                    "expected a boolean (true or false), found \"true\""
                ),
                (
                    11,
                    "descriptors[1].descriptors",
                    "expected a list of descriptors, found a mapping"
                ),
                (
                    12,
                    "descriptors[2]",
                    "expected a descriptor mapping, found \"just a string\""
                ),
                (
                    14,
                    "descriptors[3].rate_limit",
                    "expected a rate_limit mapping, found a list"
                ),
                (
                    17,
                    "descriptors[4].rate_limit.unit",
                    "expected a string, found a mapping"
                ),
                (
                    18,
                    "descriptors[4].rate_limit.requests_per_unit",
                    "expected an integer, found \"1.5\" (not an integer)"
                ),
                (
                    19,
                    "descriptors[4].rate_limit.replaces",
                    "expected a list of {name: ...}, found a mapping"
                ),
                (
                    20,
                    "descriptors2",
                    "unknown field; expected one of domain, descriptors"
                ),
            ]
        );
    }

    #[test]
    fn empty_keys_are_errors() {
        assert_eq!(
            error("domain: d\ndescriptors:\n  - key: ''\n"),
            (
                3,
                "descriptors[0].key".into(),
                "descriptor has empty key".into()
            )
        );
        let (line, field, message) = error("domain: d\ndescriptors:\n  - value: v\n");
        assert_eq!((line, field.as_str()), (3, "descriptors[0].key"));
        assert!(message.contains("descriptor has empty key"), "{message}");
        // Two nodes without keys are two errors, not a duplicate.
        let all = errors("domain: d\ndescriptors:\n  - key:\n  - key:\n");
        assert_eq!(all.len(), 2, "{all:?}");
    }

    #[test]
    fn units_are_checked() {
        assert_eq!(
            error("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"),
            (
                5,
                "descriptors[0].rate_limit.unit".into(),
                "invalid rate limit unit 'fortnight'; expected second, minute, hour, day, week, month or year".into()
            )
        );
        let (line, field, message) = error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n",
        );
        // The missing field is named on the `rate_limit:` line.
        assert_eq!(
            (line, field.as_str()),
            (4, "descriptors[0].rate_limit.unit")
        );
        assert!(message.starts_with("missing required field"), "{message}");
        let (line, _, message) =
            error("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: ''\n");
        assert_eq!(line, 5);
        assert!(
            message.starts_with("invalid rate limit unit ''"),
            "{message}"
        );
        assert_eq!(
            error(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n"
            ),
            (
                6,
                "descriptors[0].rate_limit.unit".into(),
                "should not specify rate limit unit when unlimited".into()
            )
        );
        assert!(
            ok(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: ''}\n"
            )
            .find("d", &[("a", "")])
            .unwrap()
            .unlimited
        );
    }

    #[test]
    fn requests_per_unit_must_fit_a_u32() {
        let rpu = |v: &str| {
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: hour\n      requests_per_unit: {v}\n"
            )
        };
        assert_eq!(
            error(&rpu("-1")),
            (
                6,
                "descriptors[0].rate_limit.requests_per_unit".into(),
                "-1 is out of range; expected 0 to 4294967295".into()
            )
        );
        let (line, _, message) = error(&rpu("4294967296"));
        assert_eq!(line, 6);
        assert!(message.contains("out of range"), "{message}");
        let (_, _, message) = error(&rpu("99999999999999999999999999999999999999999999"));
        assert!(message.contains("out of range"), "{message}");
        let (_, _, message) = error(&rpu("'5'"));
        assert_eq!(message, "expected an integer, found \"5\"");
        let (_, _, message) = error(&rpu("010"));
        assert!(message.contains("octal"), "{message}");
        let max = ok(&rpu("4294967295"));
        assert_eq!(max.limits().next().unwrap().requests_per_unit, u32::MAX);
        assert_eq!(max.rules()[0].limit(), u64::from(u32::MAX));
        let other = ok(&rpu("0x10"));
        assert_eq!(other.limits().next().unwrap().requests_per_unit, 16);
        let other = ok(&rpu("1_000"));
        assert_eq!(other.limits().next().unwrap().requests_per_unit, 1000);
    }

    #[test]
    fn a_limit_tollgate_cannot_build_is_an_error_on_its_line() {
        // GCRA cannot count more than one request per microsecond.
        let (line, field, message) = error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      algorithm: gcra\n      requests_per_unit: 2000000\n",
        );
        assert_eq!(
            (line, field.as_str()),
            (7, "descriptors[0].rate_limit.requests_per_unit")
        );
        assert!(
            message.contains("more than one per microsecond"),
            "{message}"
        );
        let (line, field, message) = error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      algorithm: sliding_log\n      requests_per_unit: 200000\n",
        );
        assert_eq!(
            (line, field.as_str()),
            (7, "descriptors[0].rate_limit.requests_per_unit")
        );
        assert!(message.contains("sliding_log"), "{message}");
    }

    #[test]
    fn algorithm_and_burst_are_checked() {
        let (line, field, message) = error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: leaky\n",
        );
        assert_eq!(
            (line, field.as_str()),
            (7, "descriptors[0].rate_limit.algorithm")
        );
        assert!(
            message.starts_with("unknown algorithm \"leaky\""),
            "{message}"
        );
        assert_eq!(
            error(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n"
            ),
            (
                7,
                "descriptors[0].rate_limit.burst".into(),
                "burst applies to gcra and token_bucket only, not fixed_window".into()
            )
        );
        let (line, field, message) = error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: gcra\n      burst: 0\n",
        );
        assert_eq!(
            (line, field.as_str()),
            (8, "descriptors[0].rate_limit.burst")
        );
        assert!(message.contains("out of range"), "{message}");
    }

    #[test]
    fn replaces_are_checked() {
        let all = errors(
            "
domain: d
descriptors:
  - key: a
    rate_limit:
      name: mine
      unit: second
      requests_per_unit: 1
      replaces:
        - name: ''
        - name: mine
        - {}
        - name: fine
",
        );
        let got: Vec<(usize, &str, &str)> = all
            .iter()
            .map(|(l, f, m)| (l.unwrap(), f.as_deref().unwrap(), m.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    10,
                    "descriptors[0].rate_limit.replaces[0].name",
                    "should not have an empty replaces entry"
                ),
                (
                    11,
                    "descriptors[0].rate_limit.replaces[1].name",
                    "replaces should not contain name of same descriptor ('mine')"
                ),
                (
                    12,
                    "descriptors[0].rate_limit.replaces[2].name",
                    "should not have an empty replaces entry"
                ),
            ]
        );
    }

    #[test]
    fn duplicate_composite_keys_name_the_full_path() {
        let all = errors(
            "
domain: mongo_cps
descriptors:
  - key: database
    value: users
  - key: database
    value: users
  - key: other
    descriptors:
      - key: a
      - key: a
",
        );
        let got: Vec<(usize, &str, &str)> = all
            .iter()
            .map(|(l, f, m)| (l.unwrap(), f.as_deref().unwrap(), m.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    6,
                    "descriptors[1]",
                    "duplicate descriptor composite key 'mongo_cps.database_users'"
                ),
                (
                    11,
                    "descriptors[2].descriptors[1]",
                    "duplicate descriptor composite key 'mongo_cps.other.a'"
                ),
            ]
        );
        // The same key with and without a value are different nodes.
        ok("domain: d\ndescriptors:\n  - key: a\n  - key: a\n    value: b\n");
    }

    #[test]
    fn every_problem_is_reported_in_line_order() {
        let all = errors(
            "
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: parsec
      requests_per_unit: -5
  - key: ''
    descriptors:
      - key: b
        rate_limit: {unlimited: true, unit: day}
",
        );
        let lines: Vec<usize> = all.iter().map(|(l, _, _)| l.unwrap()).collect();
        assert_eq!(lines, [6, 7, 8, 11], "{all:?}");
    }

    #[test]
    fn yaml_syntax_errors_have_a_line_and_no_field() {
        let all = errors("domain: d\ndescriptors:\n  - key: a\n   bad: [\n");
        assert_eq!(all.len(), 1);
        let (line, field, message) = &all[0];
        assert!(line.is_some_and(|l| (3..=5).contains(&l)), "{line:?}");
        assert_eq!(field, &None);
        assert!(message.starts_with("YAML syntax error"), "{message}");
        let (line, _, _) = &errors("domain: d\nkey: 'unterminated\n")[0];
        assert!(line.is_some_and(|l| l >= 2), "{line:?}");
    }

    #[test]
    fn yaml_v2_conveniences_are_accepted() {
        // Numbers as strings, yes/no booleans, anchors, aliases and merge
        // keys: Go's yaml.v2 reads them all.
        let limits = ok("
domain: d
descriptors:
  - key: status
    value: 200
    shadow_mode: yes
    rate_limit: &base
      unit: second
      requests_per_unit: 5
  - key: other
    rate_limit: *base
  - key: third
    rate_limit:
      <<: *base
      requests_per_unit: 7
");
        let status = limits.find("d", &[("status", "200")]).unwrap();
        assert!(status.shadow_mode);
        assert_eq!(
            limits
                .find("d", &[("other", "x")])
                .unwrap()
                .requests_per_unit,
            5
        );
        let third = limits.find("d", &[("third", "x")]).unwrap();
        assert_eq!(
            (third.requests_per_unit, third.unit),
            (7, Some(Unit::Second))
        );
        // Only the first document counts.
        let limits = ok("domain: first\n---\ndomain: second\n");
        assert_eq!(limits.domains(), ["first"]);
    }

    #[test]
    fn an_alias_bomb_is_an_error_not_an_allocation() {
        let mut yaml = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            yaml.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
        }
        let (_, _, message) = &errors(&yaml)[0];
        assert!(message.contains("YAML nodes"), "{message}");
    }

    #[test]
    fn fields_given_twice_are_errors() {
        assert_eq!(
            error("domain: d\ndescriptors:\n  - key: a\n    key: b\n"),
            (4, "descriptors[0].key".into(), "field given twice".into())
        );
    }

    #[test]
    fn load_reads_files_and_reports_unreadable_ones() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.yaml");
        std::fs::write(&good, MONGO).unwrap();
        let limits = EnvoyLimits::load(std::slice::from_ref(&good), &[]).unwrap();
        assert_eq!(limits.domains(), ["mongo_cps"]);

        let missing = dir.path().join("missing.yaml");
        let latin1 = dir.path().join("latin1.yaml");
        std::fs::write(&latin1, b"domain: d\n# caf\xe9\n").unwrap();
        let err =
            EnvoyLimits::load(&[good.clone(), missing.clone(), latin1.clone()], &[]).unwrap_err();
        assert_eq!(err.errors.len(), 2);
        assert_eq!(err.errors[0].file, missing.display().to_string());
        assert_eq!(err.errors[0].line, None);
        assert!(err.errors[0].message.starts_with("cannot read"));
        assert_eq!(err.errors[1].file, latin1.display().to_string());
        assert_eq!(err.errors[1].line, Some(2));

        let err = EnvoyLimits::load(&[good.clone(), good.clone()], &[]).unwrap_err();
        let file = good.display().to_string();
        assert_eq!(
            err.to_string(),
            format!("{file}:1: domain: duplicate domain 'mongo_cps': also in {file}")
        );
    }

    #[test]
    fn limits_can_be_shared_between_threads() {
        fn shared<T: Send + Sync + 'static>(_: &T) {}
        shared(&ok(MONGO));
    }

    #[test]
    fn a_long_store_key_is_its_digest_and_never_a_short_one() {
        let long = "v".repeat(tollgate::MAX_KEY_LEN);
        let other = format!("{long}w");
        let a = store_key(&[("user", long.as_str())]);
        let b = store_key(&[("user", other.as_str())]);
        assert!(a.starts_with(";sha256=") && a.len() == 8 + 64, "{a}");
        assert_ne!(a, b);
        assert_eq!(a, store_key(&[("user", long.as_str())]));
        // Escaping can push a key over the limit: 3,000 `;` escape to 6,000.
        let semis = ";".repeat(3000);
        assert!(store_key(&[("user", semis.as_str())]).starts_with(";sha256="));
        // No short key starts with a bare `;`, an empty key included.
        for entries in [&[("", "")][..], &[(";sha256", "x")], &[("", ";sha256=")]] {
            assert!(!store_key(entries).starts_with(';'), "{entries:?}");
        }
        // Just at the limit: kept as it is.
        let fits = "v".repeat(tollgate::MAX_KEY_LEN - "user=".len());
        assert_eq!(
            store_key(&[("user", fits.as_str())]).len(),
            tollgate::MAX_KEY_LEN
        );
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let yaml = "\u{feff}domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        let limits = EnvoyLimits::parse(&[("bom.yaml".into(), yaml.into())], &[]).expect("parses");
        assert_eq!(limits.domains(), vec!["d"]);
    }

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = EnvoyLimits::load(&[dir.path().to_path_buf()], &[]).expect_err("a directory");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let big = dir.path().join("big.yaml");
        let f = std::fs::File::create(&big).expect("create");
        f.set_len(crate::config_file::MAX_FILE_BYTES + 1)
            .expect("grow");
        let err = EnvoyLimits::load(&[big], &[]).expect_err("too big");
        assert!(err.to_string().contains("larger than 16 MiB"), "{err}");
    }

    #[test]
    fn store_key_is_readable_and_injective() {
        assert_eq!(store_key::<&str, &str>(&[]), "");
        assert_eq!(store_key(&[("database", "users")]), "database=users");
        assert_eq!(store_key(&[("a", "b"), ("c", "d")]), "a=b;c=d");
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("", "")],
            &[("", ""), ("", "")],
            &[("a", "b;c")],
            &[("a", "b"), ("c", "")],
            &[("a", "b;c=")],
            &[("a", "b"), ("c=", "")],
            &[("a=b", "c")],
            &[("a", "b=c")],
            &[("a", "b\\"), ("c", "d")],
            &[("a", "b\\;c"), ("", "d")],
            &[("a", "b\\;c=d")],
            &[("a\\", "=b")],
            &[("a", "\\=b")],
        ];
        let keys: HashSet<String> = cases.iter().map(|c| store_key(c)).collect();
        assert_eq!(keys.len(), cases.len(), "{keys:?}");
    }

    /// Decodes a store key (the test's proof of injectivity).
    fn decode(key: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut entries = Vec::new();
        if key.is_empty() {
            return entries;
        }
        let (mut k, mut v, mut in_value) = (Vec::new(), Vec::new(), false);
        let mut chars = key.chars();
        while let Some(c) = chars.next() {
            let target = if in_value { &mut v } else { &mut k };
            match c {
                '\\' => match chars.next() {
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        target.push(u8::from_str_radix(&hex, 16).expect("hex"));
                    }
                    Some(c @ ('\\' | ';' | '=')) => target.push(c as u8),
                    other => panic!("bad escape {other:?} in {key}"),
                },
                '=' => in_value = true,
                ';' => {
                    entries.push((std::mem::take(&mut k), std::mem::take(&mut v)));
                    in_value = false;
                }
                _ => target.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        entries.push((k, v));
        entries
    }

    #[test]
    fn bytes_that_are_not_utf8_are_escaped_apart_from_any_string() {
        let key = |v: &[u8]| store_key(&[(&b"user"[..], v)]);
        assert_eq!(key(b"\xff\xfe"), r"user=\xff\xfe");
        assert_eq!(key(b"a\xc3"), r"user=a\xc3");
        let values: [&[u8]; 6] = [
            b"\xff\xfe",
            b"\xff\xfd",
            "\u{fffd}\u{fffd}".as_bytes(),
            "\u{ff}\u{fe}".as_bytes(),
            br"\xff\xfe",
            b"\xff\xfe\xff",
        ];
        let keys: HashSet<String> = values.iter().map(|v| key(v)).collect();
        assert_eq!(keys.len(), values.len(), "{keys:?}");
        // Long ones are hashed like any other long key.
        let long = [b'\xff'; tollgate::MAX_KEY_LEN];
        assert!(key(&long).starts_with(";sha256="));
        // Matching compares bytes: a wildcard prefix or a key-only node
        // matches such a value, a value never does.
        let limits = ok(
            "domain: d\ndescriptors:\n  - key: a\n    value: x*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
        );
        let rpu = |k: &[u8], v: &[u8]| limits.find("d", &[(k, v)]).map(|l| l.requests_per_unit);
        assert_eq!(rpu(b"a", b"x\xff"), Some(1));
        assert_eq!(rpu(b"a", b"\xff"), None);
        assert_eq!(rpu(b"b", b"\xff"), Some(2));
        assert_eq!(rpu(b"b\xff", b"v"), None);
    }

    proptest::proptest! {
        #[test]
        fn store_key_decodes_back(entries in proptest::collection::vec(("[a=;\\\\é]{0,4}", "[a=;\\\\é]{0,4}"), 0..4)) {
            let borrowed: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let bytes: Vec<(Vec<u8>, Vec<u8>)> = entries.iter().map(|(k, v)| (k.clone().into_bytes(), v.clone().into_bytes())).collect();
            proptest::prop_assert_eq!(decode(&store_key(&borrowed)), bytes);
        }

        #[test]
        fn store_key_of_any_bytes_decodes_back(entries in proptest::collection::vec((
            proptest::collection::vec(proptest::sample::select(vec![b'a', b'x', b'=', b';', b'\\', 0xc3, 0xa9, 0xff]), 0..5),
            proptest::collection::vec(proptest::sample::select(vec![b'a', b'x', b'=', b';', b'\\', 0xc3, 0xa9, 0xff]), 0..5),
        ), 0..4)) {
            proptest::prop_assert_eq!(decode(&store_key(&entries)), entries);
        }

        #[test]
        fn parse_never_panics(text in "[a-z:\\- \\n\\[\\]{}&*'\"#|>!%@`0-9,.?]{0,200}") {
            let _ = parse(&text);
        }

        #[test]
        fn find_never_panics(entries in proptest::collection::vec(("[a-z_]{0,6}", "[a-z_*/0-9]{0,6}"), 0..5)) {
            let limits = ok(MONGO);
            let borrowed: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let _ = limits.find("mongo_cps", &borrowed);
        }
    }
}
