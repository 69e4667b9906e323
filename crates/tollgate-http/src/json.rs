//! STUB of the lead's streaming JSON scanner (INTERFACE40.md): replaced by
//! main's crates/tollgate-http/src/json.rs when it lands.
#![allow(missing_docs, clippy::missing_errors_doc, clippy::must_use_candidate)]

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pointer {
    tokens: Vec<String>,
}

impl FromStr for Pointer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some(rest) = s.strip_prefix('/') else {
            return Err(format!("{s:?} is not a JSON pointer (RFC 6901): it must start with /"));
        };
        Ok(Self {
            tokens: rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect(),
        })
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tokens {
            write!(f, "/{}", t.replace('~', "~0").replace('/', "~1"))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scalar {
    Number(String),
    String(String),
    Bool(bool),
    Null,
}

impl Scalar {
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Self::Number(n) if n.bytes().all(|b| b.is_ascii_digit()) => n.parse().ok(),
            _ => None,
        }
    }
    pub fn key_text(&self) -> Option<String> {
        None
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Absent,
    One(Scalar),
    Repeated,
    Unreadable,
}

#[derive(Debug)]
pub struct Scanner {
    found: Vec<Found>,
}

impl Scanner {
    pub fn new(pointers: Vec<Pointer>) -> Self {
        Self {
            found: pointers.iter().map(|_| Found::Absent).collect(),
        }
    }
    pub fn push(&mut self, _bytes: &[u8]) {}
    pub fn finish(&mut self) {}
    pub fn found(&self, i: usize) -> &Found {
        &self.found[i]
    }
    pub fn complete(&self) -> bool {
        false
    }
    pub fn malformed(&self) -> bool {
        false
    }
}
