//! [`ServiceOptions`]: how the service answers, whatever its protocol
//! (headers, service-wide modes, bounds on a call, the default charge).

use tower_redis_ratelimit::limiter::AllOrNothing;

use crate::config::{Charge, OnStoreError};
use crate::metrics::NearLimitRatio;

/// How the service answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceOptions {
    /// Whether responses carry the IETF `RateLimit-Policy` and `RateLimit`
    /// headers (and `Retry-After` on `OVER_LIMIT`) in
    /// `response_headers_to_add`. Default: off, as envoyproxy/ratelimit
    /// adds none unless asked (a switch must not change what end users
    /// see).
    pub headers: bool,
    /// envoyproxy/ratelimit's own response headers
    /// (`LIMIT_RESPONSE_HEADERS_ENABLED`): the limit, the remaining count
    /// and the seconds until reset of the request's tightest descriptor,
    /// under these names. Default: none.
    pub go_headers: Option<GoHeaders>,
    /// Every limit in shadow mode, `limit` overrides too
    /// (envoyproxy/ratelimit's `SHADOW_MODE`, whose answer is then always
    /// `OK`): decided and counted as a rule's `shadow_mode` is, never
    /// denying. Default: off.
    pub shadow_mode: bool,
    /// Every configured limit in `quota_mode` (envoyproxy/ratelimit's
    /// `QUOTA_MODE`): a request is denied only when every limited
    /// descriptor is over. Default: off.
    pub quota_mode: bool,
    /// How many limiters for per-descriptor `limit` overrides are kept
    /// (one per distinct domain, count and unit). Past it, an override's
    /// limiter is built for the call and dropped after it (it counts in the
    /// same storage keys, so the answers are the same, only slower).
    /// Default: 1,024.
    pub max_override_limiters: usize,
    /// What a domain without a `failure_policy` answers when the store
    /// fails or times out ([`OnStoreError`]). Default:
    /// [`Unavailable`](OnStoreError::Unavailable), the call fails and
    /// Envoy's `failure_mode_deny` decides.
    pub on_store_error: OnStoreError,
    /// How many statistics keys that hold a request's values (a rule with
    /// `detailed_metric` or `value_to_metric`, a `limit` override) get
    /// their own series; past it, such a descriptor is counted under its
    /// rule's key (an override under `<domain>.limit_override`), so a
    /// stream of new values cannot grow the metrics without bound. A
    /// rule's own key always has its series. Default: 10,000.
    pub max_metric_keys: usize,
    /// The share of a limit past which hits count as near it in the
    /// statistics (envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`), in `(0, 1]`.
    /// Default: 0.8.
    pub near_limit_ratio: NearLimitRatio,
    /// The most descriptors a request may carry; a request with more is
    /// answered `INVALID_ARGUMENT` before the store is asked. Envoy sends
    /// one per matching rate limit action (a handful). Default: 64; at
    /// most [`AllOrNothing::MAX_PARTS`] (256). A request whose descriptors
    /// would write more than [`AllOrNothing::MAX_LOGGED`] sliding-log
    /// times together is `OVER_LIMIT` as one that never fits.
    pub max_descriptors: usize,
    /// The most entries one descriptor may carry; past it, the request is
    /// answered `INVALID_ARGUMENT` before the store is asked. Default: 32.
    pub max_entries: usize,
    /// When a call's hits are charged, for the rules that do not say
    /// (`charge` in their `rate_limit`, [`Charge`]). Default:
    /// [`Charge::Always`]: a denied call still records its hits on every
    /// descriptor, as the Go service counts them, so that a usage report is
    /// never lost.
    pub charge: Charge,
}

/// The names of envoyproxy/ratelimit's response headers
/// ([`ServiceOptions::go_headers`]): `LIMIT_LIMIT_HEADER`,
/// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoHeaders {
    /// The limit's header. Go's default: `RateLimit-Limit`.
    pub limit: String,
    /// The remaining count's header. Go's default: `RateLimit-Remaining`.
    pub remaining: String,
    /// The seconds until reset's header. Go's default: `RateLimit-Reset`.
    pub reset: String,
}

impl Default for GoHeaders {
    fn default() -> Self {
        Self {
            limit: "RateLimit-Limit".to_owned(),
            remaining: "RateLimit-Remaining".to_owned(),
            reset: "RateLimit-Reset".to_owned(),
        }
    }
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            headers: false,
            go_headers: None,
            shadow_mode: false,
            quota_mode: false,
            max_override_limiters: 1_024,
            on_store_error: OnStoreError::Unavailable,
            max_metric_keys: 10_000,
            near_limit_ratio: NearLimitRatio::default(),
            max_descriptors: 64,
            max_entries: 32,
            charge: Charge::Always,
        }
    }
}

impl ServiceOptions {
    /// Sets [`headers`](Self::headers).
    pub fn headers(mut self, on: bool) -> Self {
        self.headers = on;
        self
    }

    /// Sets [`go_headers`](Self::go_headers).
    pub fn go_headers(mut self, names: Option<GoHeaders>) -> Self {
        self.go_headers = names;
        self
    }

    /// Sets [`shadow_mode`](Self::shadow_mode).
    pub fn shadow_mode(mut self, on: bool) -> Self {
        self.shadow_mode = on;
        self
    }

    /// Sets [`quota_mode`](Self::quota_mode).
    pub fn quota_mode(mut self, on: bool) -> Self {
        self.quota_mode = on;
        self
    }

    /// Sets [`max_override_limiters`](Self::max_override_limiters).
    pub fn max_override_limiters(mut self, n: usize) -> Self {
        self.max_override_limiters = n;
        self
    }

    /// Sets [`on_store_error`](Self::on_store_error).
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_store_error = policy;
        self
    }

    /// Sets [`max_metric_keys`](Self::max_metric_keys).
    pub fn max_metric_keys(mut self, n: usize) -> Self {
        self.max_metric_keys = n;
        self
    }

    /// Sets [`near_limit_ratio`](Self::near_limit_ratio).
    pub fn near_limit_ratio(mut self, ratio: NearLimitRatio) -> Self {
        self.near_limit_ratio = ratio;
        self
    }

    /// Sets [`max_descriptors`](Self::max_descriptors): at least 1, at
    /// most [`AllOrNothing::MAX_PARTS`] (what the library decides in one
    /// store call).
    pub fn max_descriptors(mut self, n: usize) -> Self {
        self.max_descriptors = n.clamp(1, AllOrNothing::MAX_PARTS);
        self
    }

    /// Sets [`charge`](Self::charge).
    pub fn charge(mut self, charge: Charge) -> Self {
        self.charge = charge;
        self
    }

    /// Sets [`max_entries`](Self::max_entries) (at least 1).
    pub fn max_entries(mut self, n: usize) -> Self {
        self.max_entries = n.max(1);
        self
    }
}
