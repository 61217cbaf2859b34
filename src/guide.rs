//! The guide: how to use the crate, one chapter per topic.
//!
//! This module holds no code. Each submodule is a chapter, written in
//! `docs/guide/` of the repository and shown here; its code blocks are
//! compiled (and, where they need no server, run) as doctests.
//!
//! 1. [Quick start](quick_start): the dependencies, a first limiter, the
//!    examples and the Cargo features.
//! 2. [Strategies](strategies): the algorithms, what each keeps in the
//!    store, and which to choose.
//! 3. [Keys](keys): the key extractors, and the storage keys they lead to.
//! 4. [Middleware](middleware): the layer for axum, tonic and tower, its
//!    headers, denials, missing keys, the deny cache, near-limit warnings,
//!    shadow mode, metrics and hot keys.
//! 5. [Stores](stores): Redis, Cluster, Sentinel, TLS, ACL users, server
//!    versions, and the memory store.
//! 6. [Failure modes](failure_modes): what a request gets when Redis is
//!    slow, down, full or refusing.
//! 7. [Plans](plans): plans (tiers), limits changed while running, limits
//!    from configuration.
//! 8. [Settling](settle): reserve then settle, refunds by response, the
//!    penalty box and the admin API.
//! 9. [Simulator](simulator): any strategy against traffic patterns, drawn
//!    as a chart.
//! 10. [Behind Envoy](envoy): the workspace's rate limit service for Envoy
//!     gateways, its configuration, the Envoy side, and token budgets
//!     reported after the response.
//! 11. [The quota service](quota): Envoy's rate limit quota service (RLQS),
//!     its quota files, how each bucket's limit is divided among Envoys,
//!     and the bound on what they admit.

#[doc = include_str!("../docs/guide/quick-start.md")]
pub mod quick_start {}

#[doc = include_str!("../docs/guide/strategies.md")]
pub mod strategies {}

#[doc = include_str!("../docs/guide/keys.md")]
pub mod keys {}

#[doc = include_str!("../docs/guide/middleware.md")]
pub mod middleware {}

#[doc = include_str!("../docs/guide/stores.md")]
pub mod stores {}

#[doc = include_str!("../docs/guide/failure-modes.md")]
pub mod failure_modes {}

#[doc = include_str!("../docs/guide/plans.md")]
pub mod plans {}

#[doc = include_str!("../docs/guide/settle.md")]
pub mod settle {}

#[doc = include_str!("../docs/guide/simulator.md")]
pub mod simulator {}

#[doc = include_str!("../docs/guide/envoy.md")]
pub mod envoy {}

#[doc = include_str!("../docs/guide/quota.md")]
pub mod quota {}
