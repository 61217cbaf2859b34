//! Plans and configuration: plans and their updates, configuration from text
//! (`serde`), and the rate parser.
//!
//! One test binary; the Redis fixtures are `tests/common`.

#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "serde")]
mod config;
mod plans;
mod rate_parser;
