//! A domain's failure policy: [`OnStoreError`], what it answers when the
//! store fails, and its relation to the library middleware's policy of the
//! same name.

use std::fmt;

use tower_redis_ratelimit::middleware::OnStoreError as LibraryOnStoreError;

/// What a domain answers when the store fails (an error, or no answer
/// within the store's timeout) for a descriptor it had to decide: the
/// `failure_policy` extension of a file, or the service's default
/// (`ServiceOptions::on_store_error`).
///
/// Whatever the policy, a descriptor the service could decide (a
/// `requests_per_unit: 0` limit, or one decided before the failure) keeps
/// its answer, and a request that consumed units before the failure gets
/// them back.
///
/// # The library's policy of the same name
///
/// The library's middleware has a type of the same name,
/// [`tower_redis_ratelimit::middleware::OnStoreError`] (its
/// [`FailurePolicy`](tower_redis_ratelimit::middleware::FailurePolicy) as
/// a configuration names it), with other variants: this one answers
/// Envoy's protocol, that one an HTTP request. Their counterparts
/// ([`library_policy`](Self::library_policy)):
///
/// | Here (`failure_policy`) | The library's | What the undecided descriptors get |
/// |---|---|---|
/// | [`Allow`](Self::Allow) (`allow`) | `Open` ([`FailurePolicy::Open`](tower_redis_ratelimit::middleware::FailurePolicy::Open)) | `OK`: the request goes through |
/// | [`Unavailable`](Self::Unavailable) (`unavailable`) | `Closed` ([`FailurePolicy::Closed`](tower_redis_ratelimit::middleware::FailurePolicy::Closed)) | none: the call fails (gRPC `UNAVAILABLE`), and Envoy's `failure_mode_deny` decides |
/// | [`Deny`](Self::Deny) (`deny`) | none | `OVER_LIMIT` (but those in shadow mode) |
/// | none | `Fallback` ([`FailurePolicy::Fallback`](tower_redis_ratelimit::middleware::FailurePolicy::Fallback)) | (a decision in a local store: no counterpart here) |
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

    /// The library middleware's counterpart of this policy (see the
    /// [table](Self#the-librarys-policy-of-the-same-name)):
    /// [`Allow`](Self::Allow) is `Open`, [`Unavailable`](Self::Unavailable)
    /// is `Closed`; [`Deny`](Self::Deny) has none (`None`).
    pub fn library_policy(self) -> Option<LibraryOnStoreError> {
        match self {
            OnStoreError::Allow => Some(LibraryOnStoreError::Open),
            OnStoreError::Unavailable => Some(LibraryOnStoreError::Closed),
            OnStoreError::Deny => None,
        }
    }
}

impl fmt::Display for OnStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_has_the_library_counterpart_its_doc_gives() {
        assert_eq!(
            OnStoreError::Allow.library_policy(),
            Some(LibraryOnStoreError::Open)
        );
        assert_eq!(
            OnStoreError::Unavailable.library_policy(),
            Some(LibraryOnStoreError::Closed)
        );
        assert_eq!(OnStoreError::Deny.library_policy(), None);
        // the default is the library's `Closed`, not its default `Open`
        assert_eq!(
            OnStoreError::default().library_policy(),
            Some(LibraryOnStoreError::Closed)
        );
    }
}
