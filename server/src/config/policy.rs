//! A domain's failure policy: [`OnStoreError`], what it answers when the
//! store fails.

use std::fmt;

/// What a domain answers when the store fails (an error, or no answer
/// within the store's timeout) for a descriptor it had to decide: the
/// `failure_policy` extension of a file, or the service's default
/// ([`ServiceOptions::on_store_error`](crate::service::ServiceOptions::on_store_error)).
///
/// Whatever the policy, a descriptor the service could decide (a
/// `requests_per_unit: 0` limit, or one decided before the failure) keeps
/// its answer, and a request that consumed units before the failure gets
/// them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnStoreError {
    /// The undecided descriptors are allowed (`OK`, no current limit): the
    /// request is denied only by a descriptor decided as over its limit.
    /// The library middleware's `FailurePolicy::Open`.
    Allow,
    /// The undecided descriptors are over their limit (`OVER_LIMIT`, so
    /// the request is), except those in shadow mode.
    Deny,
    /// The call fails with gRPC `UNAVAILABLE`, and Envoy's own
    /// `failure_mode_deny` decides (the default, as the Go service, whose
    /// call fails too). The library middleware's `FailurePolicy::Closed`.
    #[default]
    Unavailable,
}

impl OnStoreError {
    /// The policy named `s` (`allow`, `deny`, `unavailable`, any case).
    pub fn parse(s: &str) -> Option<OnStoreError> {
        [
            OnStoreError::Allow,
            OnStoreError::Deny,
            OnStoreError::Unavailable,
        ]
        .into_iter()
        .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// The policy's name, as a file writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnStoreError::Allow => "allow",
            OnStoreError::Deny => "deny",
            OnStoreError::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for OnStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
