//! A `ShouldRateLimit` call that failed ([`CallError`]): the status it is
//! answered with, and what failed, as a value from where that is known to
//! the door that counts it (`should_rate_limit_error{err_type}` of
//! `[metrics] reference_names`), so the count never depends on the
//! message's words.

use tollgate::resilient::Refusal;

use crate::metrics::reference::ErrorKind;

/// A failed call: its status and its kind. A status alone (`?` on a
/// `tonic::Status`) is a refused request, the reference's `serviceError`;
/// a store failure is made only by [`CallError::store`].
#[derive(Debug, Clone)]
pub struct CallError {
    /// What the caller is answered.
    pub status: tonic::Status,
    /// What failed, as the reference counts it.
    pub kind: ErrorKind,
}

impl CallError {
    /// A store call failed under `[envoy] store_failure = "error"`:
    /// `UNKNOWN`, the code grpc-go gives the reference's Redis error,
    /// naming the failure when the gate said it; counted as the
    /// reference's `redis_error`.
    #[must_use]
    pub fn store(refusal: Option<&Refusal>) -> Self {
        let status = match refusal {
            Some(Refusal::Unavailable(e)) => {
                tonic::Status::unknown(format!("store unavailable: {e}"))
            }
            Some(other) => tonic::Status::unknown(format!("store unavailable: {other}")),
            None => tonic::Status::unknown("store unavailable"),
        };
        Self {
            status,
            kind: ErrorKind::Redis,
        }
    }
}

impl From<tonic::Status> for CallError {
    /// A refused request (a bad one, or none can be decided yet): the
    /// reference's `service_error`.
    fn from(status: tonic::Status) -> Self {
        Self {
            status,
            kind: ErrorKind::Service,
        }
    }
}
