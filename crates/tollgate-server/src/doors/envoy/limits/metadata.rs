//! A descriptor's `metadata`: any YAML mapping, kept as the
//! `google.protobuf.Struct` the service returns to Envoy as response
//! dynamic metadata when `[envoy] response_dynamic_metadata` is on
//! (docs/envoy.md, "Metadata"). Its keys and values are not checked
//! against a schema (they are the user's), only converted: keys must be
//! strings; plain scalars read as YAML 1.1 booleans, numbers and null, as
//! the reference service's reader reads them; the rest are strings.

use envoy_types::pb::google::protobuf::{ListValue, Struct, Value as ProtoValue, value::Kind};

use super::loader::Loader;
use super::scalars;
use super::yaml::{Value, Yaml};

/// The most levels of mappings and lists `metadata` may nest, itself
/// included: the answer wraps it in a few more, and a protobuf reader
/// (Envoy's, tonic's) refuses a message nested past 100 levels, each YAML
/// level being two. A deeper one would make every answer unreadable, which
/// Envoy's default `failure_mode_deny: false` turns into admitting every
/// request (and thousands of levels would overflow the stack).
const MAX_METADATA_DEPTH: usize = 32;

impl Loader {
    /// `metadata` as a `Struct`, or `None` (reported) when it is not a
    /// mapping with string keys; an empty or null one is `None` too.
    pub(super) fn metadata(&mut self, node: &Yaml, field: &str) -> Option<Struct> {
        match &*node.value {
            Value::Null => None,
            Value::Map(items) if items.is_empty() => None,
            Value::Map(_) => self.structure(node, field, 1),
            _ => {
                self.wrong_type(node, field, "a mapping");
                None
            }
        }
    }

    /// Reports `node` as nested too deep.
    fn too_deep(&mut self, node: &Yaml, field: &str) {
        self.error(
            node.line,
            field,
            format!(
                "metadata nests more than {MAX_METADATA_DEPTH} levels of mappings and lists \
                 (a deeper answer is refused by Envoy's protobuf reader)"
            ),
        );
    }

    /// The mapping `node`, `depth` levels deep in `metadata`.
    fn structure(&mut self, node: &Yaml, field: &str, depth: usize) -> Option<Struct> {
        let Value::Map(items) = &*node.value else {
            return None;
        };
        if depth > MAX_METADATA_DEPTH {
            self.too_deep(node, field);
            return None;
        }
        let mut out = Struct::default();
        let mut ok = true;
        for (key, value) in items {
            let Value::Scalar { text, .. } = &*key.value else {
                self.error(
                    key.line,
                    field,
                    format!("metadata keys must be strings, found {}", key.found()),
                );
                ok = false;
                continue;
            };
            let path = format!("{field}.{text}");
            match self.value(value, &path, depth) {
                Some(v) => {
                    out.fields.insert(text.clone(), v);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// The value `node`, inside a container `depth` levels deep.
    fn value(&mut self, node: &Yaml, field: &str, depth: usize) -> Option<ProtoValue> {
        let kind = match &*node.value {
            Value::Null => Kind::NullValue(0),
            Value::Scalar { text, plain: true } => plain(text),
            Value::Scalar { text, plain: false } => Kind::StringValue(text.clone()),
            Value::Seq(_) if depth >= MAX_METADATA_DEPTH => {
                self.too_deep(node, field);
                return None;
            }
            Value::Seq(items) => {
                let mut values = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    values.push(self.value(item, &format!("{field}[{i}]"), depth + 1)?);
                }
                Kind::ListValue(ListValue { values })
            }
            Value::Map(_) => Kind::StructValue(self.structure(node, field, depth + 1)?),
        };
        Some(ProtoValue { kind: Some(kind) })
    }
}

/// A plain scalar's value: null, a boolean, a number (integers exactly up
/// to 2^53, as a protobuf number is a double), else a string.
fn plain(text: &str) -> Kind {
    if matches!(text, "~" | "null" | "Null" | "NULL" | "") {
        return Kind::NullValue(0);
    }
    if let Some(b) = scalars::boolean(text) {
        return Kind::BoolValue(b);
    }
    if let Ok(n) = scalars::integer(text) {
        #[allow(clippy::cast_precision_loss)]
        return Kind::NumberValue(n as f64);
    }
    match text.parse::<f64>() {
        Ok(n) if n.is_finite() && text.chars().any(|c| c.is_ascii_digit()) => Kind::NumberValue(n),
        _ => Kind::StringValue(text.to_owned()),
    }
}
