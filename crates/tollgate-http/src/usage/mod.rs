//! Requests that hold something past their answer (docs/tower.md, "Usage
//! and in-flight limits"): a rule whose cost the response reports
//! ([`crate::cost::ResponseCost`]: an estimate reserved on arrival,
//! settled when the response ends) and a `concurrency` rule (a lease held
//! for the life of the request, renewed while the response streams,
//! released when its body ends or is dropped).
//!
//! * `admit.rs`: [`RuleKeys::admit`](crate::decide::RuleKeys::admit), the
//!   decision (acquire, then check or reserve) and what a denial gives
//!   back, as an [`Admission`].
//! * `hold.rs`: [`Hold`], what an admitted request holds, and the task
//!   that renews its lease and, once, settles and releases.
//! * `body.rs`: [`UsageBody`], the response body that reads the usage
//!   from the head, the trailers or (through a [`BodyMeter`]) the body,
//!   and ends the hold when it ends or is dropped.
//! * `meter.rs`: [`BodyMeter`], the usage of a JSON body or an event
//!   stream read as it passes; `shapes.rs`, where each named shape keeps
//!   its usage; [`sse`], the event-stream parser.

mod admit;
mod body;
mod hold;
mod meter;
mod shapes;
pub mod sse;

pub use admit::{Admission, AdmissionFuture};
pub use body::UsageBody;
pub use hold::{DEFAULT_RESERVATION_TTL, Hold, USAGE_UNREAD};
pub use meter::BodyMeter;
