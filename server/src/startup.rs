//! Starting the service on its store (a module of the binary): the
//! service on the store the command line chose ([`service`]), and the
//! check of that store at the start ([`check_store`]).

use std::time::Duration;

use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::{
    MemoryStore, Quota, Rate, RateLimiter, RedisClusterStore, RedisSentinelStore, RedisStore,
    store::Store,
};
use tower_redis_ratelimit_server::config::Config;
use tower_redis_ratelimit_server::rlqs::{DomainConfig, QuotaOptions, QuotaService};
use tower_redis_ratelimit_server::service::RlsService;

use crate::cli::{Args, StoreChoice};

/// The limiters that check the store at startup: one of each kind of
/// quota `config` uses (the default fixed window, and each `strategy`),
/// on the service's store and clock.
fn probes<S: Store + Clone>(
    store: &S,
    config: &Config,
    quota: bool,
) -> Result<Vec<RateLimiter>, String> {
    let rate = Rate::new(10, Duration::from_secs(60));
    let mut quotas = vec![Quota::fixed_window(rate).aligned()];
    if quota {
        // the quota service's budgets and demand counters
        quotas.push(Quota::token_bucket(rate));
        quotas.push(Quota::sliding_window_counter(rate));
    }
    let mut seen = Vec::new();
    for domain in config.domains() {
        for rule in config.rules(domain) {
            if let Some(s) = rule.strategy
                && !seen.contains(&s)
            {
                seen.push(s);
                quotas.push(Quota::new(s, rate));
            }
        }
    }
    quotas
        .into_iter()
        .map(|q| {
            RateLimiter::builder()
                .store(store.clone())
                .prefix("rls.verify")
                .quota(q)
                .build()
                .map_err(|e| format!("the store check's limiter: {e}"))
        })
        .collect()
}

/// What serves: the rate limit service, the quota service when quota
/// files are given, and the limiters that check their store.
pub(crate) struct Services {
    pub(crate) rls: RlsService,
    pub(crate) quota: Option<QuotaService>,
    pub(crate) probes: Vec<RateLimiter>,
}

/// The services on `store`.
fn on<S: Store + Clone>(
    args: &Args,
    config: Config,
    quota: Option<Vec<DomainConfig>>,
    store: S,
    check: bool,
) -> Result<Services, Box<dyn std::error::Error>> {
    let probes = if check {
        probes(&store, &config, quota.is_some())?
    } else {
        Vec::new()
    };
    let quota = match quota {
        Some(q) => Some(QuotaService::new(
            q,
            store.clone(),
            QuotaOptions::default(),
        )?),
        None => None,
    };
    Ok(Services {
        rls: RlsService::new(config, store, args.options.clone())?,
        quota,
        probes,
    })
}

/// The services over `config` (and the quota files' `quota`) on the
/// chosen store, and the limiters that check that store.
pub(crate) fn service(
    args: &Args,
    config: Config,
    quota: Option<Vec<DomainConfig>>,
) -> Result<Services, Box<dyn std::error::Error>> {
    Ok(match &args.store {
        StoreChoice::Memory => {
            tracing::info!("store: memory");
            on(args, config, quota, MemoryStore::new(), false)?
        }
        StoreChoice::Redis { url, ca } => {
            let mut store = match ca {
                None => RedisStore::from_url(url)?,
                Some(path) => {
                    let pem = std::fs::read(path)
                        .map_err(|e| format!("--redis-ca {}: {e}", path.display()))?;
                    RedisStore::from_url_with_tls(
                        url,
                        tower_redis_ratelimit::redis::TlsCertificates {
                            client_tls: None,
                            root_cert: Some(pem),
                        },
                    )?
                }
            };
            if let Some(t) = args.store_timeout {
                store = store.timeout(t);
            }
            tracing::info!(tls = url.starts_with("rediss://"), "store: redis");
            on(args, config, quota, store, true)?
        }
        StoreChoice::Cluster { urls } => {
            let mut store = RedisClusterStore::from_urls(urls.iter().cloned())?;
            if let Some(t) = args.store_timeout {
                store = store.timeout(t);
            }
            tracing::info!(seeds = urls.len(), "store: redis cluster");
            on(args, config, quota, store, true)?
        }
        StoreChoice::Sentinel { urls, master } => {
            let mut store = RedisSentinelStore::from_urls(urls.iter().cloned(), master)?;
            if let Some(t) = args.store_timeout {
                store = store.timeout(t);
            }
            tracing::info!(sentinels = urls.len(), master, "store: redis sentinel");
            on(args, config, quota, store, true)?
        }
    })
}

/// Runs each probe's [`RateLimiter::verify`]: the first failure.
async fn verify(probes: &[RateLimiter]) -> Result<(), StoreError> {
    for p in probes {
        p.verify().await?;
    }
    Ok(())
}

/// The startup check of the store: a store that refuses what the service
/// needs (an ACL, a command, its version, its clock) stops the start, as
/// every call would fail until it is reconfigured; one that does not
/// answer is logged, the service starts (each call the store cannot decide
/// is answered by its domain's failure policy), and the check is retried
/// in the background until it passes.
pub(crate) async fn check_store(probes: Vec<RateLimiter>) -> Result<(), String> {
    if probes.is_empty() {
        return Ok(());
    }
    match verify(&probes).await {
        Ok(()) => {
            tracing::info!("store: checked (version, permissions, scripts, clock)");
            Ok(())
        }
        Err(StoreError::Refused(r)) => Err(format!(
            "the store refuses what the service needs: {r} (fix the server's ACL or \
             configuration; --no-store-check starts anyway)"
        )),
        Err(e) => {
            tracing::error!(
                "the store does not answer: {e}; starting anyway: until it does, each call \
                 is answered by its domain's failure_policy (else --on-store-error)"
            );
            tokio::spawn(async move {
                let mut wait = Duration::from_secs(1);
                loop {
                    tokio::time::sleep(wait).await;
                    match verify(&probes).await {
                        Ok(()) => {
                            tracing::info!("store: answering, checked");
                            return;
                        }
                        Err(StoreError::Refused(r)) => {
                            tracing::error!("the store refuses what the service needs: {r}");
                            return;
                        }
                        Err(_) => wait = (wait * 2).min(Duration::from_secs(30)),
                    }
                }
            });
            Ok(())
        }
    }
}
