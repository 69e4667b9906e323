//! Where each body source finds its usage: the JSON pointers a scanner
//! looks for (one scanner, every pointer of every source of a request),
//! the fields they make up, and how a source's usage is computed from
//! them (docs/proxy.md, "Usage from the body").
//!
//! A field is one number with a few spellings, the first found in an
//! event winning: OpenAI's input is `usage.prompt_tokens` (chat
//! completions, completions) or `usage.input_tokens` (responses), or
//! `response.usage.input_tokens` in a streamed responses event;
//! Anthropic's are `usage.*` (a JSON answer, `message_delta`) or
//! `message.usage.*` (`message_start`).

use std::sync::Arc;

use crate::cost::{Kind, Part, Shape, UsageSource};
use crate::json::{Found, Pointer, Scalar};

/// One field's value, in one event or as the stream left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Val {
    /// Not there (or JSON `null`, as OpenAI's chunks before the last say).
    Absent,
    /// A whole number of tokens.
    Num(u64),
    /// There, but not a whole number in u64: negative, fractional, too
    /// big, a string, an object, or given twice in one document.
    Bad,
}

impl Val {
    fn of(found: &Found) -> Self {
        match found {
            Found::Absent | Found::One(Scalar::Null) => Self::Absent,
            Found::One(n @ Scalar::Number(_)) => n.as_u64().map_or(Self::Bad, Self::Num),
            Found::One(_) | Found::Repeated | Found::Unreadable => Self::Bad,
        }
    }

    /// `self + other`, both required.
    fn plus(self, other: Self) -> Self {
        match (self, other) {
            (Self::Bad, _) | (_, Self::Bad) => Self::Bad,
            (Self::Num(a), Self::Num(b)) => a.checked_add(b).map_or(Self::Bad, Self::Num),
            _ => Self::Absent,
        }
    }

    /// `self + other` where `other` may be missing (counted as 0).
    fn plus_optional(self, other: Self) -> Self {
        match other {
            Self::Absent => self,
            _ => self.plus(other),
        }
    }
}

/// How one source's usage is made of fields (indexes into
/// [`Wanted::fields`]).
#[derive(Debug, Clone)]
enum Formula {
    One(usize),
    /// OpenAI's total: `total`, else `input + output`.
    TotalElse {
        total: usize,
        input: usize,
        output: usize,
    },
    /// Anthropic's input: `input` plus the cache fields when present.
    Input {
        input: usize,
        cached: [usize; 2],
    },
    /// Anthropic's total: its input plus `output`.
    InputPlus {
        input: usize,
        cached: [usize; 2],
        output: usize,
    },
}

/// What a request's body sources look for.
#[derive(Debug, Clone)]
pub(crate) struct Wanted {
    /// Every pointer, each once, in the scanner's order.
    pointers: Vec<Pointer>,
    /// The same, shared by every scanner of the response.
    shared: Arc<[Pointer]>,
    /// Each field's spellings (indexes into `pointers`), first first.
    fields: Vec<Vec<usize>>,
    /// One per source, in the hold's order; `None` for a header source.
    formulas: Vec<Option<(Formula, Finality)>>,
    /// The pointer `/type` when an Anthropic source is read: its
    /// `message_stop` event closes the output.
    kind: Option<usize>,
    /// Fields an event sets together (OpenAI's input, output and total):
    /// an event with any of them replaces all three, so a total is never
    /// taken from one event and its parts from another.
    together: Vec<bool>,
}

/// When a value seen in a stream cut short is the whole usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finality {
    /// Sent once, complete (OpenAI's usage; Anthropic's input in
    /// `message_start`).
    OnSight,
    /// Grows as the answer streams (a pointer's value): final once the
    /// body has ended.
    Open,
    /// Grows as the answer streams, and only the stream says when it is
    /// done (Anthropic's output: `message_stop`). A body that ends
    /// without saying so (an `error` event, then the end) was cut short.
    UntilStop,
}

const OPENAI_INPUT: &[&str] = &[
    "/usage/prompt_tokens",
    "/usage/input_tokens",
    "/response/usage/input_tokens",
];
const OPENAI_OUTPUT: &[&str] = &[
    "/usage/completion_tokens",
    "/usage/output_tokens",
    "/response/usage/output_tokens",
];
const OPENAI_TOTAL: &[&str] = &["/usage/total_tokens", "/response/usage/total_tokens"];
const ANTHROPIC_INPUT: &[&str] = &["/usage/input_tokens", "/message/usage/input_tokens"];
const ANTHROPIC_CACHE_WRITE: &[&str] = &[
    "/usage/cache_creation_input_tokens",
    "/message/usage/cache_creation_input_tokens",
];
const ANTHROPIC_CACHE_READ: &[&str] = &[
    "/usage/cache_read_input_tokens",
    "/message/usage/cache_read_input_tokens",
];
const ANTHROPIC_OUTPUT: &[&str] = &["/usage/output_tokens", "/message/usage/output_tokens"];

impl Wanted {
    /// What `sources` (a hold's, in its order) look for; `None` when none
    /// reads the body.
    pub(crate) fn new(sources: &[UsageSource]) -> Option<Self> {
        if !sources.iter().any(UsageSource::reads_body) {
            return None;
        }
        let mut w = Self {
            pointers: Vec::new(),
            fields: Vec::new(),
            formulas: Vec::new(),
            kind: None,
            together: Vec::new(),
            shared: Arc::new([]),
        };
        for source in sources {
            let formula = match source.kind() {
                Kind::Header(_) => None,
                Kind::Json(p) => Some((Formula::One(w.field(&[p.as_str()])), Finality::Open)),
                Kind::Shape(Shape::OpenAi, part) => {
                    let input = w.field(OPENAI_INPUT);
                    let output = w.field(OPENAI_OUTPUT);
                    let total = w.field(OPENAI_TOTAL);
                    w.set_together(&[input, output, total]);
                    let f = match part {
                        Part::Input => Formula::One(input),
                        Part::Output => Formula::One(output),
                        Part::Total => Formula::TotalElse {
                            total,
                            input,
                            output,
                        },
                    };
                    Some((f, Finality::OnSight))
                }
                Kind::Shape(Shape::Anthropic, part) => {
                    let input = w.field(ANTHROPIC_INPUT);
                    let cached = [
                        w.field(ANTHROPIC_CACHE_WRITE),
                        w.field(ANTHROPIC_CACHE_READ),
                    ];
                    let output = w.field(ANTHROPIC_OUTPUT);
                    w.kind = Some(w.pointer("/type"));
                    Some(match part {
                        Part::Input => (Formula::Input { input, cached }, Finality::OnSight),
                        Part::Output => (Formula::One(output), Finality::UntilStop),
                        Part::Total => (
                            Formula::InputPlus {
                                input,
                                cached,
                                output,
                            },
                            Finality::UntilStop,
                        ),
                    })
                }
            };
            w.formulas.push(formula);
        }
        w.shared = w.pointers.clone().into();
        Some(w)
    }

    fn pointer(&mut self, spelling: &str) -> usize {
        // Every spelling here is a valid pointer: the shapes' are fixed,
        // a `response_json` one was checked when its cost was parsed.
        let Ok(p) = spelling.parse::<Pointer>() else {
            return usize::MAX;
        };
        if let Some(i) = self.pointers.iter().position(|q| *q == p) {
            return i;
        }
        self.pointers.push(p);
        self.pointers.len() - 1
    }

    fn set_together(&mut self, fields: &[usize]) {
        for &f in fields {
            if self.together.len() <= f {
                self.together.resize(f + 1, false);
            }
            self.together[f] = true;
        }
    }

    /// Whether field `f` is set together with the others of its shape.
    pub(crate) fn together(&self, f: usize) -> bool {
        self.together.get(f).copied().unwrap_or(false)
    }

    fn field(&mut self, spellings: &[&str]) -> usize {
        let at: Vec<usize> = spellings.iter().map(|s| self.pointer(s)).collect();
        if let Some(i) = self.fields.iter().position(|f| *f == at) {
            return i;
        }
        self.fields.push(at);
        self.fields.len() - 1
    }

    /// The number of sources.
    pub(crate) fn sources(&self) -> usize {
        self.formulas.len()
    }

    /// Whether source `i` reads the body.
    pub(crate) fn reads(&self, i: usize) -> bool {
        self.formulas.get(i).is_some_and(Option::is_some)
    }

    /// The pointers a scanner looks for.
    pub(crate) fn pointers(&self) -> Arc<[Pointer]> {
        Arc::clone(&self.shared)
    }

    /// The number of fields.
    pub(crate) fn field_count(&self) -> usize {
        self.fields.len()
    }

    /// Each field's value in one document, `found` giving each pointer's.
    pub(crate) fn values(&self, found: impl Fn(usize) -> Val) -> Vec<Val> {
        self.fields
            .iter()
            .map(|spellings| {
                spellings
                    .iter()
                    .map(|&p| {
                        if p == usize::MAX {
                            Val::Absent
                        } else {
                            found(p)
                        }
                    })
                    .find(|v| *v != Val::Absent)
                    .unwrap_or(Val::Absent)
            })
            .collect()
    }

    /// Whether a document says the stream's usage is final (Anthropic's
    /// `message_stop`).
    pub(crate) fn closes(&self, found: impl Fn(usize) -> Option<Scalar>) -> bool {
        self.kind
            .and_then(found)
            .is_some_and(|t| t == Scalar::String("message_stop".to_owned()))
    }

    /// Source `i`'s usage from the fields' values, and whether a value
    /// seen before the end is the whole of it; `None` for a header source.
    pub(crate) fn usage(&self, i: usize, fields: &[Val]) -> Option<(Val, Finality)> {
        let (formula, finality) = self.formulas.get(i)?.as_ref()?;
        let v = |f: usize| fields.get(f).copied().unwrap_or(Val::Absent);
        let input = |input: usize, cached: [usize; 2]| {
            v(input)
                .plus_optional(v(cached[0]))
                .plus_optional(v(cached[1]))
        };
        let value = match *formula {
            Formula::One(f) => v(f),
            Formula::TotalElse {
                total,
                input,
                output,
            } => match v(total) {
                Val::Absent => v(input).plus(v(output)),
                t => t,
            },
            Formula::Input { input: i, cached } => input(i, cached),
            Formula::InputPlus {
                input: i,
                cached,
                output,
            } => input(i, cached).plus(v(output)),
        };
        Some((value, *finality))
    }
}

/// A pointer's value as a field value.
pub(crate) fn val(found: &Found) -> Val {
    Val::of(found)
}
