//! The README's code blocks, compiled (and, where they need no server, run)
//! as doctests of this package, so the README cannot drift from the API;
//! they may use any crate the test suite does. Nothing else is here: the
//! tests are this package's `[[test]]` targets (`store/`, `middleware/`,
//! `config/`, `deployments/`).

/// The README.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
