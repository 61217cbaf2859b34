//! The service: a loaded [`Config`] and its limiters over a store,
//! reloaded atomically; Envoy's `ShouldRateLimit` answers with it
//! ([`RlsService::should_rate_limit_inner`], the gRPC method).
//!
//! The code is cut by job: `limits` builds the limiters of a
//! configuration, `decide` decides a call of protocol-free descriptors
//! (what follows is what it decides), `rls` is the protocol's
//! adapter, and this module holds the running configuration.
//!
//! Each configured limit gets one [`RateLimiter`], built when the service is
//! made: its prefix comes from the domain and the rule's path, its user key
//! is the request descriptor's entries (so different values count apart),
//! its quota the rule's: by default the Go service's fixed window aligned to
//! the epoch ([`Quota::aligned`]), or the rule's `strategy` and `burst`.
//!
//! # All or nothing
//!
//! A request is admitted on all of its descriptors or on none: every
//! limited descriptor is decided together, in one
//! [`AllOrNothing`] decision of the library (a request with one limited
//! descriptor: its limiter's own decision, which on Redis is batched with
//! concurrent ones; a joint call never is). On the memory store, one Redis
//! and Sentinel that is one atomic store call (one script): every
//! descriptor is checked, and only if all are within their limits is each
//! consumed. On a Redis Cluster, descriptors whose keys share a hash slot
//! are one atomic call; across slots they are decided slot by slot and,
//! when one is over, what the slots before it took is given back: between
//! a slot's call and that give-back (the round trips of the slots after it,
//! plus the give-back's) a concurrent request may see those units as used
//! and be denied because of them, never admitted past a limit. A request
//! denied whatever the store says (a limit of 0) only reads the others'
//! states. A store error consumes nothing, except that a call which timed
//! out may still be applied by Redis once it answers (as for any call of
//! the library: its script was sent).
//!
//! # Usage reports: what a denied request still records
//!
//! Envoy also calls after the response (`apply_on_stream_done`) with the
//! usage as `hits_addend`, and ignores the answer: the service cannot tell
//! that report from a check. So what a denied request records is each
//! rule's [`Charge`] (its `charge`, else [`ServiceOptions::charge`]): with
//! `always` (the default) its hits are recorded on every descriptor, past
//! the limit where it is over (as the Go service counts them: a fixed
//! window's count runs past its limit, a bucket takes a debt repaid at its
//! rate), so that the next call is denied; with `over` only on the
//! descriptors it is over, those that had room left as they were; with
//! `admitted` nothing is recorded (a descriptor of a denied request then
//! reports its limit's state untouched: its `limit_remaining` is what is
//! left). The decision and its record are one atomic store call (the
//! library's [`OnDenial`]: a part records as its rule's charge says, and
//! its answer is its state after). What the store cannot record in that
//! call is recorded by a second one ([`RateLimiter::penalize`]): a
//! descriptor whose hits never fit (sent as a look), a request too large
//! for one call, a quota-mode descriptor over while its call is let
//! through, a call denied by a limit of 0. A sliding log records at most
//! [`AllOrNothing::MAX_LOGGED`] times in one call, as a joint decision
//! writes.
//!
//! `hits_subtrahend` gives back: each descriptor's hits less it; where it
//! is larger, the difference goes back to the limit first
//! ([`RateLimiter::reward`]: never more than is used, a leaky bucket gives
//! nothing back) and the descriptor is only looked at; where it is
//! smaller, the rest is decided as any hits. Envoy sends no id of the
//! request a refund is for: a refund gives back what the key holds,
//! whoever used it, so it must only follow an admitted reservation.
//!
//! # `quota_mode`
//!
//! As in the Go service, a descriptor of a `quota_mode` limit that is over
//! denies the request only when every `quota_mode` descriptor of the
//! request is over; it is reported `OVER_LIMIT` either way. It is decided
//! as a shadow quota (it takes nothing when it would deny), and when the
//! request has several, the descriptors' states are read first: when every
//! quota-mode descriptor is over, the request is denied without consuming
//! anything; otherwise all are decided together as above. (A request's only
//! quota-mode descriptor denies exactly when it is over: it is decided as
//! any limit, all or nothing in one call.) In a race, every
//! quota-mode descriptor may go over between that look and the decision:
//! the request is then denied, and the units its other descriptors took
//! stay taken (stricter than all or nothing, never past a limit: quota
//! mode's rule depends on the others' states, which one script call per
//! descriptor set does not decide).
//!
//! # Descriptors that count in one key
//!
//! Descriptors that count in one storage key (the same descriptor twice,
//! a `limit` override beside the rule whose counter it shares, two
//! overrides) are one part of their summed hits, decided by the tightest
//! enforced limit among them, so every enforced limit holds. Each answers
//! by its own limit, read off that decision: a `quota_mode` or shadow rule
//! beside a strict override of its counter is over when the sum does not
//! fit its own limit, though the override let its units in (the counter
//! then runs past the rule's limit, as the Go service's does). When the
//! deciding limit has nothing left, the counter past it is not known: the
//! others report nothing left.
//!
//! # `replaces`
//!
//! As in the Go service, a matched limit whose `name` is in the `replaces`
//! of any limit matched in the same request (an `unlimited` one too) is
//! not applied: its descriptor answers `OK` with no current limit, and it
//! is neither counted nor reported in the statistics. An `unlimited` limit
//! is never replaced (it answers as unlimited), nor is a per-descriptor
//! `limit` override (it has no name).
//!
//! # Store failures
//!
//! When the store fails or does not answer within its timeout, each domain
//! answers by its [`OnStoreError`] policy (the file's `failure_policy`,
//! else [`ServiceOptions::on_store_error`]); see there.
//!
//! # Reload
//!
//! [`RlsService::reload`] swaps the configuration atomically: a call in
//! flight finishes with the configuration it started with, the next one
//! takes the new one, none waits or fails. A limit left unchanged keeps
//! its limiter (the same storage keys: it keeps counting); the limiters of
//! `limit` overrides are kept across reloads too. [`ConfigWatcher`](crate::reload::ConfigWatcher)
//! reloads a directory when its files change.
//!
//! [`AllOrNothing`]: tower_redis_ratelimit::limiter::AllOrNothing
//! [`AllOrNothing::MAX_LOGGED`]: tower_redis_ratelimit::limiter::AllOrNothing::MAX_LOGGED
//! [`Charge`]: crate::config::Charge
//! [`OnStoreError`]: crate::config::OnStoreError

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tower_redis_ratelimit::Quota;
use tower_redis_ratelimit::RateLimiter;
use tower_redis_ratelimit::limiter::OnDenial;
use tower_redis_ratelimit::store::Store;

use crate::config::Config;
use crate::decide::Core;
use crate::limits::{Make, build_limits};
use crate::metrics::Metrics;

pub use crate::decide::CallError;
pub use crate::limits::BuildError;
pub use crate::metrics::NearLimitRatio;
pub use crate::options::{GoHeaders, ServiceOptions};

/// The rate limit service (`envoy.service.ratelimit.v3.RateLimitService`):
/// serve it with [`RateLimitServiceServer::new`](crate::pb::RateLimitServiceServer::new).
///
/// Clones share everything: the configuration (a [`reload`](Self::reload)
/// through one is seen by all), the limiters and the [`Metrics`].
pub struct RlsService {
    shared: Arc<Shared>,
}

impl Clone for RlsService {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl std::fmt::Debug for RlsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.shared.current.load();
        f.debug_struct("RlsService")
            .field("domains", &inner.limits.len())
            .field("options", &inner.options)
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// The configuration answering now.
    current: ArcSwap<Core>,
    /// Held while a reload builds and swaps (reloads one at a time).
    reloading: Mutex<()>,
}

impl RlsService {
    /// The service over `config`, deciding on `store` (a
    /// [`MemoryStore`](tower_redis_ratelimit::MemoryStore), a
    /// [`RedisStore`](tower_redis_ratelimit::RedisStore), ...): builds one
    /// limiter per configured limit.
    ///
    /// The service counts in a new [`Metrics`] (one configuration load
    /// counted as loaded).
    pub fn new<S: Store + Clone>(
        config: Config,
        store: S,
        options: ServiceOptions,
    ) -> Result<Self, BuildError> {
        let make: Arc<Make> = Arc::new(move |prefix: &str, quota: Quota, on_denial: OnDenial| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix(prefix)
                .quota(quota)
                .on_denial(on_denial)
                .build()
        });
        let metrics = Arc::new(
            Metrics::new(options.max_metric_keys).near_limit_ratio(options.near_limit_ratio),
        );
        let limits = build_limits(&config, &*make, None, &options)?;
        metrics.config_loaded(true);
        Ok(Self {
            shared: Arc::new(Shared {
                current: ArcSwap::from_pointee(Core {
                    config,
                    limits,
                    make,
                    overrides: Arc::default(),
                    options,
                    metrics,
                    logs: Arc::default(),
                }),
                reloading: Mutex::new(()),
            }),
        })
    }

    /// The configuration the service answers with now (a reload does not
    /// change the one returned).
    pub fn config(&self) -> ConfigSnapshot {
        ConfigSnapshot(self.shared.current.load_full())
    }

    /// The service's statistics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.current.load().metrics.clone()
    }

    /// Answers with `config` from now on: builds the limiters of the
    /// limits it adds or changes, then swaps atomically: calls in flight
    /// finish with the old configuration, none fails. A limit whose rule
    /// is unchanged keeps its limiter; one whose `requests_per_unit` or
    /// `burst` changed keeps what callers used (the same storage keys, as
    /// in the Go service: a lower limit denies at once); a new strategy or
    /// period, or a new key path, counts anew. Counted in [`Metrics`] as a
    /// load, or a failed load.
    ///
    /// # Errors
    ///
    /// A rule the library rejects ([`BuildError`]); the service keeps the
    /// configuration it had.
    pub fn reload(&self, config: Config) -> Result<(), BuildError> {
        let _one = self
            .shared
            .reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.shared.current.load_full();
        let limits = match build_limits(&config, &*old.make, Some(&old.limits), &old.options) {
            Ok(l) => l,
            Err(e) => {
                old.metrics.config_loaded(false);
                return Err(e);
            }
        };
        self.shared.current.store(Arc::new(Core {
            config,
            limits,
            make: old.make.clone(),
            overrides: old.overrides.clone(),
            options: old.options.clone(),
            metrics: old.metrics.clone(),
            logs: old.logs.clone(),
        }));
        old.metrics.config_loaded(true);
        Ok(())
    }

    /// The configuration answering now, for one call.
    pub(crate) fn core(&self) -> Arc<Core> {
        self.shared.current.load_full()
    }
}

/// The configuration a service answered with when
/// [`RlsService::config`] was called (dereferences to [`Config`]).
pub struct ConfigSnapshot(Arc<Core>);

impl std::fmt::Debug for ConfigSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.config.fmt(f)
    }
}

impl std::ops::Deref for ConfigSnapshot {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0.config
    }
}
