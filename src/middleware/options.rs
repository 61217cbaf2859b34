//! [`LayerOptions`]: the layer's policy options as data, for configuration
//! files (feature `serde`).

use super::headers::HeaderStyle;
use super::layer::RateLimitLayer;
use super::policy::FailurePolicy;
use crate::store::MemoryStore;

/// The failure policy as configuration can name it (for
/// [`on_store_error`](RateLimitLayer::on_store_error) and
/// [`on_refusal`](RateLimitLayer::on_refusal)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
#[non_exhaustive]
pub enum OnStoreError {
    /// [`FailurePolicy::Open`] (the default of `on_store_error`, not of
    /// `on_refusal`, whose absence keeps its default, `closed`).
    #[default]
    Open,
    /// [`FailurePolicy::Closed`].
    Closed,
    /// [`FailurePolicy::Fallback`] with a new [`MemoryStore`].
    Fallback,
}

impl From<OnStoreError> for FailurePolicy {
    fn from(policy: OnStoreError) -> Self {
        match policy {
            OnStoreError::Open => FailurePolicy::Open,
            OnStoreError::Closed => FailurePolicy::Closed,
            OnStoreError::Fallback => FailurePolicy::Fallback(MemoryStore::new()),
        }
    }
}

/// The policy options of a [`RateLimitLayer`], as a configuration file
/// gives them; [`RateLimitLayer::options`] applies them. Every field is
/// optional (absent: the layer's default).
///
/// ```toml
/// headers = "both"            # ietf | legacy | both | none
/// on_store_error = "fallback" # open | closed | fallback
/// on_refusal = "closed"       # the same choices, for a store's refusals
/// shadow = false
/// shadow_headers = true
/// deny_cache = true
/// deny_cache_capacity = 10000
/// near_limit = 0.8
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct LayerOptions {
    /// [`RateLimitLayer::headers`].
    pub headers: Option<HeaderStyle>,
    /// [`RateLimitLayer::on_store_error`].
    pub on_store_error: Option<OnStoreError>,
    /// [`RateLimitLayer::on_refusal`].
    pub on_refusal: Option<OnStoreError>,
    /// [`RateLimitLayer::shadow`].
    pub shadow: Option<bool>,
    /// [`RateLimitLayer::shadow_headers`].
    pub shadow_headers: Option<bool>,
    /// [`RateLimitLayer::deny_cache`].
    pub deny_cache: Option<bool>,
    /// [`RateLimitLayer::deny_cache_capacity`].
    pub deny_cache_capacity: Option<usize>,
    /// [`RateLimitLayer::grpc`].
    pub grpc: Option<bool>,
    /// [`RateLimitLayer::near_limit`] (the fraction only: a callback is set
    /// in code, with [`RateLimitLayer::on_near_limit`]).
    pub near_limit: Option<f64>,
}

impl RateLimitLayer {
    /// Applies the options that `options` sets; the others stay as they are.
    pub fn options(mut self, options: &LayerOptions) -> Self {
        if let Some(style) = options.headers {
            self = self.headers(style);
        }
        if let Some(policy) = options.on_store_error {
            self = self.on_store_error(policy.into());
        }
        if let Some(policy) = options.on_refusal {
            self = self.on_refusal(policy.into());
        }
        if let Some(shadow) = options.shadow {
            self = self.shadow(shadow);
        }
        if let Some(h) = options.shadow_headers {
            self = self.shadow_headers(h);
        }
        if let Some(capacity) = options.deny_cache_capacity {
            self = self.deny_cache_capacity(capacity);
        }
        if let Some(on) = options.deny_cache {
            self = self.deny_cache(on);
        }
        if let Some(grpc) = options.grpc {
            self = self.grpc(grpc);
        }
        if let Some(fraction) = options.near_limit {
            self = self.near_limit(fraction);
        }
        self
    }
}
