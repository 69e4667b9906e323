//! [`RuleKeys::without_body`]: the check a door that never reads request
//! bodies makes of its rules.

use super::{BuildError, RuleKeys};
use crate::cost::ResponseCost;

impl RuleKeys {
    /// `self` unchanged when no rule reads the request body, for a door
    /// that never reads one (the tower layer): such a rule would key
    /// every request alike, or reserve its default, without a word.
    ///
    /// # Errors
    /// [`BuildError::ReadsBody`] naming the first rule that reads it.
    pub fn without_body(self) -> Result<Self, BuildError> {
        for r in &self.rules {
            let what = if r.extractor.body_pointers().next().is_some() {
                format!("key {}", r.extractor)
            } else if let Some(e) = r.cost.as_ref().and_then(ResponseCost::request_estimate) {
                format!("estimate {:?}", e.to_string())
            } else {
                continue;
            };
            return Err(BuildError::ReadsBody {
                rule: r.name().to_owned(),
                what,
            });
        }
        Ok(self)
    }
}
