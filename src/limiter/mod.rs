//! [`RateLimiter`]'s builder and limits: quotas, a store
//! and a clock, answering [`Decision`](crate::Decision)s.
//!
//! A limiter is a thin façade over an engine, as governor's limiter is
//! over its state, algorithm and clock: the engine (`engine.rs`) makes
//! every decision, take, give-back, adjustment, reset, release and
//! verification over the store's vocabulary, for both stores; in front of
//! it sit the local fast paths the limiter owns (the deny cache,
//! `deny_cache.rs`; the hot-key local budgets, `local_budget.rs`) and, for
//! runtime limits, the limiter in force. One guard sequence
//! (`RateLimiter::fast_path`) leads every check to them.
//!
//! Files: `rate_limiter.rs` (the type, what it holds, the guards),
//! `check.rs` (the [`Check`] future), `admin.rs` (peek, reset, release,
//! verify, …), `builder.rs` ([`RateLimiterBuilder`], its validation and
//! the one constructor of a limiter's state), `keys.rs` (storage-key
//! encoding), `joint.rs` ([`AllOrNothing`]: several limiters decided
//! together, all or nothing).

// `RateLimiter` is public at the crate root only (one path per item): its
// module is crate-visible, and `lib.rs` re-exports it.
pub(crate) mod rate_limiter;

mod admin;
mod builder;
mod check;
pub(crate) mod deny_cache;
mod engine;
mod joint;
mod keys;
mod local_budget;

pub use self::builder::{MAX_PREFIX_LEN, RateLimiterBuilder};
pub use self::check::Check;
pub(crate) use self::check::boxed_in_place;
pub use self::joint::{AllOrNothing, JointDecision};
pub use self::keys::MAX_VERBATIM_KEY_LEN;
pub(crate) use self::rate_limiter::{RateLimiter, RuntimeLimits};
pub use crate::store::on_denial::OnDenial;
