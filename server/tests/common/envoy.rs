//! Simulated Envoys of the quota filter (`envoy.extensions.filters.http.rate_limit_quota`),
//! run as Envoy's global RLQS client runs its buckets: a bucket is created
//! at its first request (decided by `no_assignment_behavior`) and reported
//! at once; every bucket is reported each reporting interval; a token
//! bucket assignment starts full and is kept, state and all, when the same
//! one is assigned again; an assignment lapses after its TTL (whole
//! seconds) to the no-assignment behaviour; an abandoned bucket is
//! forgotten. Time is simulated (seconds as `f64`) and drives the
//! service's time and the budgets' manual clock alike.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit_server::rlqs::config::Blanket;
use tower_redis_ratelimit_server::rlqs::{
    Action, QuotaService, QuotaStream, Strategy, TokenBucket, Usage,
};

pub(crate) type Id = Vec<(String, String)>;

pub(crate) fn id(entries: &[(&str, &str)]) -> Id {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Envoy's local token bucket: continuous refill, capped, starts full.
#[derive(Debug, Clone)]
struct Local {
    cfg: TokenBucket,
    tokens: f64,
    last: f64,
}

#[derive(Debug, Clone)]
struct Bucket {
    /// The assignment in force and when it lapses.
    action: Option<(Strategy, f64)>,
    local: Option<Local>,
    allowed: u64,
    denied: u64,
}

/// One simulated Envoy.
pub(crate) struct SimEnvoy {
    buckets: BTreeMap<Id, Bucket>,
    /// What a bucket without an assignment does.
    pub(crate) no_assignment: Blanket,
    /// Buckets created since the last report, reported at once.
    fresh: Vec<Id>,
    /// Responses on their way: when each is applied.
    inbox: Vec<(f64, Vec<(Id, Action)>)>,
    /// The stream, while connected.
    pub(crate) stream: Option<QuotaStream>,
    /// The service instance it talks to.
    pub(crate) instance: usize,
}

impl SimEnvoy {
    pub(crate) fn new(instance: usize, no_assignment: Blanket) -> SimEnvoy {
        SimEnvoy {
            buckets: BTreeMap::new(),
            no_assignment,
            fresh: Vec::new(),
            inbox: Vec::new(),
            stream: None,
            instance,
        }
    }

    /// One request of bucket `id` at `now`: whether it is admitted.
    pub(crate) fn request(&mut self, id: &Id, now: f64) -> bool {
        self.apply_due(now);
        let no_assignment = self.no_assignment;
        let b = self.buckets.entry(id.clone()).or_insert_with(|| {
            self.fresh.push(id.clone());
            Bucket {
                action: None,
                local: None,
                allowed: 0,
                denied: 0,
            }
        });
        if let Some((_, until)) = b.action
            && now >= until
        {
            b.action = None;
            b.local = None;
        }
        let ok = match b.action {
            None => no_assignment == Blanket::AllowAll,
            Some((Strategy::Blanket(bl), _)) => bl == Blanket::AllowAll,
            Some((Strategy::TokenBucket(_), _)) => {
                let l = b.local.as_mut().expect("a token bucket has its state");
                l.tokens =
                    (l.tokens + (now - l.last) * l.cfg.rate()).min(f64::from(l.cfg.max_tokens));
                l.last = now;
                if l.tokens >= 1.0 {
                    l.tokens -= 1.0;
                    true
                } else {
                    false
                }
            }
        };
        if ok {
            b.allowed += 1;
        } else {
            b.denied += 1;
        }
        ok
    }

    fn take_usage(&mut self, id: &Id) -> Option<Usage> {
        let b = self.buckets.get_mut(id)?;
        let u = Usage {
            id: id.clone(),
            allowed: b.allowed,
            denied: b.denied,
        };
        b.allowed = 0;
        b.denied = 0;
        Some(u)
    }

    /// The immediate reports of buckets created since the last call.
    pub(crate) fn fresh_reports(&mut self) -> Vec<Usage> {
        let fresh = std::mem::take(&mut self.fresh);
        fresh.iter().filter_map(|id| self.take_usage(id)).collect()
    }

    /// The periodic report of every bucket.
    pub(crate) fn report(&mut self) -> Vec<Usage> {
        self.fresh.clear();
        let ids: Vec<Id> = self.buckets.keys().cloned().collect();
        ids.iter().filter_map(|id| self.take_usage(id)).collect()
    }

    /// A response that Envoy applies at `at`.
    pub(crate) fn receive(&mut self, actions: Vec<(Id, Action)>, at: f64) {
        self.inbox.push((at, actions));
    }

    /// Drops the responses not yet applied (the stream broke).
    pub(crate) fn lose_inbox(&mut self) {
        self.inbox.clear();
    }

    /// Applies the responses due by `now`, in order.
    pub(crate) fn apply_due(&mut self, now: f64) {
        let mut due = Vec::new();
        self.inbox.retain(|(at, a)| {
            if *at <= now {
                due.push((*at, a.clone()));
                false
            } else {
                true
            }
        });
        due.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (at, actions) in due {
            for (id, action) in actions {
                self.apply(&id, action, at);
            }
        }
    }

    fn apply(&mut self, id: &Id, action: Action, at: f64) {
        match action {
            Action::Abandon => {
                self.buckets.remove(id);
            }
            Action::Assign { strategy, ttl } => {
                // an action for a bucket Envoy does not hold is ignored
                let Some(b) = self.buckets.get_mut(id) else {
                    return;
                };
                if let Some((_, until)) = b.action
                    && at >= until
                {
                    b.action = None;
                    b.local = None;
                }
                let until = at + ttl.as_secs() as f64;
                match strategy {
                    Strategy::TokenBucket(cfg) => {
                        let same =
                            matches!(b.action, Some((Strategy::TokenBucket(old), _)) if old == cfg);
                        if !same {
                            b.local = Some(Local {
                                cfg,
                                tokens: f64::from(cfg.max_tokens),
                                last: at,
                            });
                        }
                    }
                    Strategy::Blanket(_) => b.local = None,
                }
                b.action = Some((strategy, until));
            }
        }
    }

    /// Buckets held.
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }
}

pub(crate) fn at(secs: f64) -> Duration {
    Duration::from_secs_f64(secs.max(0.0))
}

/// Sends `usages` of `envoy` on its stream to `services[envoy.instance]`
/// at `now` (opening a stream if it has none), the response applied
/// `delay` later.
pub(crate) async fn send(
    services: &[QuotaService],
    clock: &ManualClock,
    envoy: &mut SimEnvoy,
    domain: &str,
    usages: Vec<Usage>,
    now: f64,
    delay: f64,
) {
    if usages.is_empty() {
        return;
    }
    let service = &services[envoy.instance];
    let stream = envoy.stream.get_or_insert_with(|| service.stream());
    clock.set(at(now));
    let debug = std::env::var_os("RLQS_SIM_DEBUG").is_some();
    let shown = if debug {
        format!("{usages:?}")
    } else {
        String::new()
    };
    let actions = service.report(stream, domain, usages, at(now)).await;
    if debug {
        eprintln!("{now:.2} [{}] {shown} -> {actions:?}", envoy.instance);
    }
    envoy.receive(actions, now + delay);
}

/// The most events of `times` (sorted) in any window of length `window`.
pub(crate) fn most_in_window(times: &[f64], window: f64) -> usize {
    let mut best = 0;
    let mut start = 0;
    for (end, t) in times.iter().enumerate() {
        while times[start] <= t - window {
            start += 1;
        }
        best = best.max(end + 1 - start);
    }
    best
}
