//! The check of one request: key → deny cache → store call → failure policy
//! → [`Verdict`].
//!
//! [`check`] does what needs no waiting (find the key, weigh the request,
//! ask the deny cache) and either answers at once or returns the store call
//! as a future; [`decide`] is that call and what follows it. The service
//! ([`RateLimit::call`](crate::middleware::RateLimit)) then only asks whether the
//! request bypasses the limiter, checks it, and hands the result to its
//! [`ResponseFuture`](crate::ResponseFuture).
//!
//! Plans: the layer's [`PlanResolver`](crate::middleware::PlanResolver)
//! picks the request's plan where [`check`] picks the limiter (still one
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
use super::headers::{Policy, RateHeaders};
use super::metrics::{self, Outcome};
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
pub(crate) enum Check {
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
    Store(CheckFuture),
}

/// The store call of a [`Check::Store`], and the failure policy after it.
pub(crate) type CheckFuture = Pin<Box<dyn Future<Output = Checked> + Send>>;

/// A verdict, with what the rest of the request needs to apply it.
pub(crate) struct Checked {
    pub(crate) verdict: Verdict,
    /// The request's plan, for a layer with plans.
    pub(crate) plan: Option<Arc<ActivePlan>>,
    pub(crate) cost: u64,
    /// Shadow mode (the layer's or the plan's): a denial lets the request through.
    pub(crate) shadow: bool,
    /// The reservation of an admitted request, for a layer that settles
    /// after the response (its decision is the verdict's).
    /// (boxed: a verdict is moved several times, few carry one)
    pub(crate) reservation: Option<Box<Reservation>>,
}

impl Checked {
    /// The limiter the request was checked with.
    pub(crate) fn limiter<'a>(&'a self, config: &'a Config) -> &'a RateLimiter {
        limiter_of(config, self.plan.as_deref())
    }

    /// What the headers need of the quotas.
    pub(crate) fn policy<'a>(&'a self, config: &'a Config) -> &'a Policy {
        match self.plan.as_deref().and_then(|p| p.policy.as_deref()) {
            Some(policy) => policy,
            None => &config.policy,
        }
    }
}

/// The limiter of `plan` (a limited one), else the layer's.
fn limiter_of<'a>(config: &'a Config, plan: Option<&'a ActivePlan>) -> &'a RateLimiter {
    plan.and_then(ActivePlan::limiter)
        .unwrap_or(&config.limiter)
}

/// The result of the store call of a check.
pub(crate) enum Verdict {
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
pub(crate) fn check(config: &Arc<Config>, parts: &Parts) -> Check {
    // The buffer is taken out for the check (an extractor checking a request
    // of its own finds it empty and uses a new one) and put back after: the
    // check is returned straight to the caller, never moved out of a closure.
    let mut key = KEY
        .try_with(|cell| cell.try_borrow_mut().map(|mut k| std::mem::take(&mut *k)))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    key.clear();
    let check = check_with(config, parts, &mut key);
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

/// [`check`], with `key` (empty) to write the request's key into.
fn check_with(config: &Arc<Config>, parts: &Parts, key: &mut Vec<u8>) -> Check {
    let plan = config
        .plans
        .as_ref()
        .map(|(plans, resolver)| plans.resolve(resolver.plan(parts).as_deref()));
    if let Some(p) = &plan
        && p.limiter().is_none()
    {
        return Check::Unlimited(p.clone());
    }
    if !config.extractor.extract_into(parts, key)
        && let Some(check) = missing_key(config, parts, key)
    {
        return check;
    }
    let key: &Vec<u8> = key;
    let estimate = config.settle.as_ref().and_then(|s| s.estimate(parts));
    // (at least 1: a request of cost 0 would be admitted as a peek even with
    // nothing left, and take no concurrency lease nor leaky-bucket slot)
    let cost = estimate
        .unwrap_or_else(|| config.cost.as_ref().map_or(1, |cost| cost(parts)))
        .max(1);
    let shadow = config.shadow || plan.as_ref().is_some_and(|p| p.is_shadow());
    let limiter = limiter_of(config, plan.as_deref());
    if !shadow
        && config.deny_cache
        && let Some(decision) = limiter.deny_cache().lookup(limiter, key, cost)
    {
        return cached_denial(config, parts, plan.as_deref(), decision);
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
        return Check::Decided(Checked {
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
fn missing_key(config: &Config, parts: &Parts, key: &mut Vec<u8>) -> Option<Check> {
    key.clear();
    match config.missing.resolve(parts, config.extractor.as_ref()) {
        Resolved::Key(k) => {
            *key = k;
            None
        }
        Resolved::Skip => Some(Check::Skip),
        Resolved::Reject(status) => Some(Check::Answer(response::rejected(config, parts, status))),
    }
}

/// The answer to a request the deny cache denies.
#[inline(never)]
fn cached_denial(
    config: &Config,
    parts: &Parts,
    plan: Option<&ActivePlan>,
    decision: Decision,
) -> Check {
    let plan_name = plan.map_or(&Interned::EMPTY, |p| &p.label);
    Counters::bump(&config.counters.deny_cache_hits);
    metrics::deny_cache_hit(&config.name, plan_name, &decision.quota());
    metrics::decision(&config.name, plan_name, &decision.quota(), Outcome::Denied);
    event!(trace, quota = %decision.quota(), "rate limited (deny cache)");
    let policy = match plan.and_then(|p| p.policy.as_deref()) {
        Some(policy) => policy,
        None => &config.policy,
    };
    let headers = RateHeaders::new(config.style, &decision, policy);
    Check::Answer(response::denied(config, parts, &decision, headers))
}

/// The store call of a request the store decides.
#[inline(never)]
fn store_call(
    config: &Arc<Config>,
    plan: Option<Arc<ActivePlan>>,
    key: &[u8],
    cost: u64,
    shadow: bool,
) -> Check {
    let key = key.to_vec();
    Check::Store(boxed_in_place(|| {
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
    let limiter = limiter_of(&config, plan.as_deref());
    let plan_name = plan.as_deref().map_or(&Interned::EMPTY, |p| &p.label);
    // Read before the call: a cached denial then ends no later than the store's.
    let started = started(&config, limiter);
    let timer = metrics::start();
    // (`Check` is small: the store's own future, kilobytes, is on the heap)
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
            let refused = matches!(error, StoreError::Refused(_));
            let failure = if refused {
                Counters::bump(&config.counters.refused);
                &config.refusal
            } else {
                &config.failure
            };
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
