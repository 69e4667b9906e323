//! Estimates read from the request (`estimate = "max_tokens"`, `"prompt"`,
//! `"prompt+max_tokens"` with `estimate_default = N`): what a rule
//! charged from the response reserves when a request arrives, sized by
//! the request itself instead of one number for all. The reservation is
//! at most the rule's capacity, so a huge `max_tokens` cannot make a
//! request that could never pass; settling charges the actual usage
//! (docs/proxy.md, "Estimates from the request").
//!
//! * `max_tokens`: the body's `max_tokens`, else `max_completion_tokens`,
//!   else `max_output_tokens` (OpenAI chat and completions, Anthropic
//!   messages, OpenAI responses), the first that is a whole number.
//! * `prompt`: [`prompt_tokens`] of the body's first `request_body_limit`
//!   bytes, scaled up to its `Content-Length` when it is longer.
//! * `prompt+max_tokens`: both added.
//!
//! A part the request does not give (no such field, no body) is
//! `estimate_default`.
//!
//! ```
//! use tollgate_http::estimate::RequestEstimate;
//!
//! let e: RequestEstimate = "prompt+max_tokens".parse().unwrap();
//! assert_eq!(e.to_string(), "prompt+max_tokens");
//! assert!(e.reads_max_tokens() && e.reads_prompt());
//! assert!("tokens".parse::<RequestEstimate>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use crate::request_body::{BodyFacts, TextCount};

/// The fields `max_tokens` reads, in order.
pub const MAX_TOKENS_POINTERS: [&str; 3] = [
    "/max_tokens",
    "/max_completion_tokens",
    "/max_output_tokens",
];

/// ASCII bytes per token [`prompt_tokens`] assumes: fewer than the texts
/// measured average in a chat request body (English prose 4.1, Rust code
/// 4.4, JSON sent as a string 5.1, with o200k_base and cl100k_base
/// alike), so that a prompt is rarely under-reserved: a reservation
/// that errs high is given back when the usage settles, one that errs
/// low admits past the limit until then. `bench/tools/prompt-estimate`
/// measures it (bench/README.md, "The prompt estimate").
pub const ASCII_PER_TOKEN: u64 = 3;

/// Other characters per token [`prompt_tokens`] assumes: one each, what
/// cl100k_base spends on Chinese, Japanese and Korean; o200k_base and
/// alphabets such as Cyrillic take fewer (over-reserved up to 3.6 times).
pub const OTHER_PER_TOKEN: u64 = 1;

/// Where a rule's reservation comes from when it is read from the
/// request (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestEstimate {
    /// `max_tokens`: the output the request allows.
    MaxTokens,
    /// `prompt`: the input, guessed from the body's size.
    Prompt,
    /// `prompt+max_tokens`: both.
    PromptAndMaxTokens,
}

impl RequestEstimate {
    /// Whether it reads `max_tokens` and its kin.
    #[must_use]
    pub fn reads_max_tokens(self) -> bool {
        self != Self::Prompt
    }

    /// Whether it sizes the prompt.
    #[must_use]
    pub fn reads_prompt(self) -> bool {
        self != Self::MaxTokens
    }

    /// The units to reserve for a request whose body said `body` (`None`:
    /// its body was not read), a missing part counted as `default`; at
    /// least 1, at most `capacity`.
    #[must_use]
    pub fn reserve(self, body: Option<&BodyFacts>, default: u64, capacity: u64) -> u64 {
        let max_tokens = || {
            body.and_then(|b| MAX_TOKENS_POINTERS.iter().find_map(|p| b.found(p).as_u64()))
                .unwrap_or(default)
        };
        let prompt = || {
            body.and_then(|b| {
                let whole = b.length().unwrap_or(b.scanned());
                (b.scanned() > 0).then(|| scaled(prompt_tokens(b.text()), b.scanned(), whole))
            })
            .unwrap_or(default)
        };
        let units = match self {
            Self::MaxTokens => max_tokens(),
            Self::Prompt => prompt(),
            Self::PromptAndMaxTokens => prompt().saturating_add(max_tokens()),
        };
        units.clamp(1, capacity.max(1))
    }
}

/// `tokens` of `scanned` bytes, for a body of `whole` bytes.
fn scaled(tokens: u64, scanned: u64, whole: u64) -> u64 {
    if whole <= scanned || scanned == 0 {
        return tokens;
    }
    let t = u128::from(tokens) * u128::from(whole) / u128::from(scanned);
    u64::try_from(t).unwrap_or(u64::MAX)
}

/// The input tokens a request body of these characters is guessed to
/// hold: ASCII bytes by [`ASCII_PER_TOKEN`], other characters by
/// [`OTHER_PER_TOKEN`], rounded up. The body's JSON (keys, quotes, roles)
/// counts too, standing in for the tokens a chat template adds.
#[must_use]
pub fn prompt_tokens(text: TextCount) -> u64 {
    text.ascii.div_ceil(ASCII_PER_TOKEN) + text.other.div_ceil(OTHER_PER_TOKEN)
}

impl fmt::Display for RequestEstimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::MaxTokens => "max_tokens",
            Self::Prompt => "prompt",
            Self::PromptAndMaxTokens => "prompt+max_tokens",
        })
    }
}

impl FromStr for RequestEstimate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "max_tokens" => Ok(Self::MaxTokens),
            "prompt" => Ok(Self::Prompt),
            "prompt+max_tokens" => Ok(Self::PromptAndMaxTokens),
            _ => Err(format!(
                "estimate {s:?} is not read from the request; expected a whole number, \
                 \"max_tokens\", \"prompt\" or \"prompt+max_tokens\""
            )),
        }
    }
}

#[cfg(test)]
mod tests;
