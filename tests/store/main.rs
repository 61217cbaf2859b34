//! Store semantics: what a decision is on every store, and the two stores
//! against each other and against reference models.
//!
//! - `suite`: one suite of store semantics run on every store (`store_suite!`);
//! - `differential`: the memory store against a real Redis, case by case;
//! - `joint`: several limiters decided together, all or nothing (`AllOrNothing`);
//! - `reference_models`: each strategy against a plain model of its rule;
//! - `memory_store`, `redis_store`, `manual_clock_redis`: what belongs to one store;
//! - `local_budgets`, `lease_undo`: hot-key local budgets and undoing a lease;
//! - `batching`: several decisions per script call on Redis, each decided as alone;
//! - `on_denial`: a denial that records its cost (`OnDenial`), against check_n then penalize;
//! - `bounds`: one store call's work is bounded, whatever a caller asks;
//! - `soak`: many keys over many windows, memory bounded.
//!
//! One test binary; the Redis fixtures are `tests/common`.

#[path = "../common/mod.rs"]
mod common;

mod batching;
mod bounds;
#[cfg(feature = "calendar")]
mod calendar;
mod clock_skew;
mod differential;
mod joint;
mod lease_undo;
mod local_budgets;
mod manual_clock_redis;
mod memory_store;
mod on_denial;
mod redis_store;
mod reference_models;
mod soak;
mod suite;
