//! The check of one request: key → deny cache → store call → failure policy
//! → [`Verdict`].
//!
//! [`precheck`] does what needs no waiting (find the key, weigh the
//! request, ask the deny cache) and either answers at once (a [`Precheck`])
//! or returns the store call as a future ([`Deciding`]); [`decide`] is that
//! call and what follows it. The service
//! ([`RateLimit::call`](crate::middleware::RateLimit)) then only asks whether the
//! request bypasses the limiter, checks it, and hands the result to its
//! [`ResponseFuture`](crate::ResponseFuture).
//!
//! Plans: the layer's [`PlanResolver`](crate::middleware::PlanResolver)
//! picks the request's plan where [`precheck`] picks the limiter (still one
//! store call); shadow mode skips the deny cache and lets a denial through
//! (`future.rs` makes it a "would have denied" outcome).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http::request::Parts;

use super::config::Config;
use super::metrics::{self, OutcomeLabel};
use super::policy::{self, Failure, Resolved};
use super::response;
use super::stats::Counters;
use crate::decision::{Decision, Interned};
use crate::error::StoreError;
use crate::limiter::deny_cache::Started;
use crate::limiter::{RateLimiter, boxed_in_place};
use crate::plans::ActivePlan;
use crate::settle::Reservation;

/// What the check of a request found before any store call.
// (a decision inline: boxing it would cost the allocation this avoids)
#[allow(clippy::large_enum_variant)]
pub(super) enum Precheck {
    /// No key, and [`MissingKey::skip`](crate::middleware::MissingKey::skip): the
    /// request goes on unlimited.
    Skip,
    /// The request's plan is unlimited: it goes on without a store call.
    Unlimited(Arc<ActivePlan>),
    /// The middleware's answer, without a store call: a request without a
    /// key rejected, or a denial from the deny cache.
    Answer(Response<Bytes>),
    /// Decided already: a memory store decides at once.
    Decided(Checked),
    /// The store decides: this gives the verdict.
    Store(Deciding),
}

/// The store call of a [`Precheck::Store`], and the failure policy after it.
pub(super) type Deciding = Pin<Box<dyn Future<Output = Checked> + Send>>;

/// A verdict, with what the rest of the request needs to apply it.
pub(super) struct Checked {
    pub(super) verdict: Verdict,
    /// The request's plan, for a layer with plans.
    pub(super) plan: Option<Arc<ActivePlan>>,
    pub(super) cost: u64,
    /// Shadow mode (the layer's or the plan's): a denial lets the request through.
    pub(super) shadow: bool,
    /// The reservation of an admitted request, for a layer that settles
    /// after the response (its decision is the verdict's).
    /// (boxed: a verdict is moved several times, few carry one)
    pub(super) reservation: Option<Box<Reservation>>,
}

impl Checked {
    /// The limiter the request was checked with.
    pub(super) fn limiter<'a>(&'a self, config: &'a Config) -> &'a RateLimiter {
        config.limits.limiter_for(self.plan.as_deref())
    }
}

/// The result of the store call of a check.
pub(super) enum Verdict {
    /// A decision of the layer's limiter.
    Decided(Decision),
    /// The store failed (the error); the fallback store decided.
    Fallback(Decision, RateLimiter, Arc<StoreError>),
    /// The store failed (the error); let the request through.
    Open(Arc<StoreError>),
    /// The store failed; answer 503.
    Closed,
}

thread_local! {
    /// The buffer this thread's checks write their request's key into: a
    /// request the store decides at once needs no key of its own.
    static KEY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A thread's key buffer is given up when a key left it larger than this.
const KEY_BUFFER_KEPT: usize = 1024;

/// Checks the request of `parts`: answers it at once where no store call is
/// needed, else starts the store call.
#[inline]
pub(super) fn precheck(config: &Arc<Config>, parts: &Parts) -> Precheck {
    // The buffer is taken out for the check (an extractor checking a request
    // of its own finds it empty and uses a new one) and put back after: the
    // check is returned straight to the caller, never moved out of a closure.
    let mut key = KEY
        .try_with(|cell| cell.try_borrow_mut().map(|mut k| std::mem::take(&mut *k)))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    key.clear();
    let check = precheck_with(config, parts, &mut key);
    if key.capacity() <= KEY_BUFFER_KEPT {
        // (the thread is being torn down, or a nested check put one back: dropped)
        let _ = KEY.try_with(|cell| {
            if let Ok(mut k) = cell.try_borrow_mut()
                && k.capacity() == 0
            {
                *k = key;
            }
        });
    }
    check
}

/// [`precheck`], with `key` (empty) to write the request's key into.
fn precheck_with(config: &Arc<Config>, parts: &Parts, key: &mut Vec<u8>) -> Precheck {
    let plan = config.limits.plan_of(parts);
    if let Some(p) = &plan
        && p.limiter().is_none()
    {
        return Precheck::Unlimited(p.clone());
    }
    if !config.requests.extractor.extract_into(parts, key)
        && let Some(check) = missing_key(config, parts, key)
    {
        return check;
    }
    let key: &Vec<u8> = key;
    let cost = config.cost_of(parts);
    let shadow = config.shadow || plan.as_ref().is_some_and(|p| p.is_shadow());
    let limiter = config.limits.limiter_for(plan.as_deref());
    if !shadow
        && config.deny_cache
        && let Some(decision) = limiter.deny_cache().lookup(limiter, key, cost)
    {
        return cached_denial(config, parts, plan.as_ref(), decision);
    }
    // A memory store decides at once: no future, no store error.
    let started = started(config, limiter);
    // (a layer that settles takes a reservation: always the store call)
    if config.settle.is_none()
        && let Some(decision) = limiter.decide_now(key, cost)
    {
        remember(
            config, limiter, limiter, key, cost, started, &decision, shadow,
        );
        return Precheck::Decided(Checked {
            verdict: Verdict::Decided(decision),
            plan,
            cost,
            shadow,
            reservation: None,
        });
    }
    store_call(config, plan, key, cost, shadow)
}

/// A request without a key: the key [`MissingKey`](super::MissingKey)
/// gives it (written into `key`, `None` returned), or its answer.
#[cold]
#[inline(never)]
fn missing_key(config: &Config, parts: &Parts, key: &mut Vec<u8>) -> Option<Precheck> {
    key.clear();
    let requests = &config.requests;
    match requests.missing.resolve(parts, requests.extractor.as_ref()) {
        Resolved::Key(k) => {
            *key = k;
            None
        }
        Resolved::Skip => Some(Precheck::Skip),
        Resolved::Reject(status) => {
            Some(Precheck::Answer(response::rejected(config, parts, status)))
        }
    }
}

/// The answer to a request the deny cache denies.
#[inline(never)]
fn cached_denial(
    config: &Config,
    parts: &Parts,
    plan: Option<&Arc<ActivePlan>>,
    decision: Decision,
) -> Precheck {
    let plan_name = plan.map_or(&Interned::EMPTY, |p| &p.label);
    Counters::bump(&config.counters.deny_cache_hits);
    metrics::deny_cache_hit(&config.name, plan_name, &decision.quota());
    metrics::decision(
        &config.name,
        plan_name,
        &decision.quota(),
        OutcomeLabel::Denied,
    );
    event!(trace, quota = %decision.quota(), "rate limited (deny cache)");
    let headers = config.limits.headers(config.answers.style, &decision, plan);
    Precheck::Answer(response::denied(config, parts, &decision, headers))
}

/// The store call of a request the store decides.
#[inline(never)]
fn store_call(
    config: &Arc<Config>,
    plan: Option<Arc<ActivePlan>>,
    key: &[u8],
    cost: u64,
    shadow: bool,
) -> Precheck {
    let key = key.to_vec();
    Precheck::Store(boxed_in_place(|| {
        decide(config.clone(), plan, key, cost, shadow)
    }))
}

/// When a decision of `limiter` starts, for its deny cache (`None`: the
/// layer does not use it).
#[inline]
fn started(config: &Config, limiter: &RateLimiter) -> Option<Started> {
    config
        .deny_cache
        .then(|| limiter.deny_cache().started(limiter))
}

/// Checks `key` with the store (bounded by the store's own timeout),
/// applying the failure policy; remembers denials in the deny cache.
async fn decide(
    config: Arc<Config>,
    plan: Option<Arc<ActivePlan>>,
    key: Vec<u8>,
    cost: u64,
    shadow: bool,
) -> Checked {
    let limiter = config.limits.limiter_for(plan.as_deref());
    let plan_name = plan.as_deref().map_or(&Interned::EMPTY, |p| &p.label);
    // Read before the call: a cached denial then ends no later than the store's.
    let started = started(&config, limiter);
    let timer = metrics::start();
    // (the limiter's `Check` future is small: the store's own, kilobytes, is on the heap)
    let mut reservation = None;
    let result = if config.settle.is_some() {
        match limiter.reserve_n(&key, cost).await {
            Ok(r) => {
                let decision = r.decision().clone();
                reservation = Some(Box::new(r));
                Ok(decision)
            }
            Err(e) => Err(e),
        }
    } else {
        limiter.check_n(&key, cost).await
    };
    metrics::store_call(&config.name, plan_name, timer);
    let verdict = match result {
        Ok(decision) => {
            remember(
                &config, limiter, limiter, &key, cost, started, &decision, shadow,
            );
            Verdict::Decided(decision)
        }
        Err(error) => {
            // a refusal for good (an ACL, a key of another type) is a
            // misconfiguration: the layer's refusal policy decides it
            if matches!(error, StoreError::Refused(_)) {
                Counters::bump(&config.counters.refused);
            }
            let failure = config.failure_for(&error);
            Counters::bump(&config.counters.store_errors);
            metrics::store_error(&config.name, plan_name, &error);
            policy::log_failure(
                &config.counters.failure_log,
                &config.counters.refusal_log,
                failure,
                &error,
                &config.name,
                plan_name,
            );
            let error = Arc::new(error);
            match failure {
                Failure::Open => Verdict::Open(error),
                Failure::Closed => Verdict::Closed,
                Failure::Fallback(fallback) => {
                    Counters::bump(&config.counters.fallback_decisions);
                    let fallback = fallback.limiter_for(plan.as_deref());
                    match fallback.check_n(&key, cost).await {
                        Ok(decision) => {
                            // (in the cache of the limiter it stands in for)
                            remember(
                                &config, limiter, &fallback, &key, cost, started, &decision, shadow,
                            );
                            Verdict::Fallback(decision, fallback, error)
                        }
                        // The memory store does not fail; if it ever did, fail open.
                        Err(_) => Verdict::Open(error),
                    }
                }
            }
        }
    };
    Checked {
        verdict,
        plan,
        cost,
        shadow,
        reservation,
    }
}

/// Counts a denial of `decider` (`limiter`, or its fallback) and keeps it
/// in `limiter`'s deny cache (a shadowed denial is counted apart and never
/// cached: it must not deny).
#[allow(clippy::too_many_arguments)]
fn remember(
    config: &Config,
    limiter: &RateLimiter,
    decider: &RateLimiter,
    key: &[u8],
    cost: u64,
    started: Option<Started>,
    decision: &Decision,
    shadow: bool,
) {
    if decision.allowed() {
        // a shadow quota of the limiter would have denied it
        if decision.shadow_denied() {
            Counters::bump(&config.counters.shadow_denied);
            event!(debug, "would have rate limited (a shadow quota)");
        }
        return;
    }
    if shadow {
        Counters::bump(&config.counters.shadow_denied);
        event!(debug, quota = %decision.quota(), "would have rate limited (shadow mode)");
        return;
    }
    Counters::bump(&config.counters.denied);
    event!(
        debug,
        quota = %decision.quota(),
        retry_after = ?decision.retry_after(),
        "rate limited"
    );
    if let Some(started) = started {
        limiter
            .deny_cache()
            .insert(decider, key, cost, started, decision);
    }
}
