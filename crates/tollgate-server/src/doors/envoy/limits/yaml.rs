//! A YAML tree with a line on every node: the first document of a file,
//! read with `yaml-rust2`'s event parser so every error and every field can
//! name its line.

use std::collections::HashMap;
use std::rc::Rc;

use yaml_rust2::Event;
use yaml_rust2::parser::Parser;
use yaml_rust2::scanner::TScalarStyle;

/// At most this many nodes in one file, aliases expanded (an alias bomb is
/// an error, not an out-of-memory).
const MAX_NODES: usize = 1_000_000;

#[derive(Debug)]
pub(super) enum Value {
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
pub(super) struct Yaml {
    /// 1-based.
    pub(super) line: usize,
    pub(super) value: Rc<Value>,
}

impl Yaml {
    /// What it is, for "expected X, found Y".
    pub(super) fn found(&self) -> String {
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
pub(super) fn read_yaml(text: &str) -> Result<Option<Yaml>, (usize, String)> {
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
