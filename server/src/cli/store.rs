//! Where the counters live: the store flags (`--redis`, `--redis-cluster`,
//! `--redis-sentinel`, at most one), else the store's variables
//! (`REDIS_URL`, which also takes envoyproxy/ratelimit's forms:
//! [`go_redis`], `REDIS_CLUSTER_URLS`, `REDIS_SENTINEL_URLS`), else this
//! process's memory.

use std::path::PathBuf;

use super::flags::StoreFlags;
use super::go_env::go_redis;
use super::parse::{has_scheme, store_url, store_urls};

/// Where the counters live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreChoice {
    /// This process's memory (one instance only).
    Memory,
    /// One Redis, at `url`, a `rediss://` one verified against `ca` (else
    /// the system's roots).
    Redis { url: String, ca: Option<PathBuf> },
    /// A Redis Cluster, through its seed nodes.
    Cluster { urls: Vec<String> },
    /// The primary that these Redis Sentinels monitor under `master`.
    Sentinel { urls: Vec<String>, master: String },
}

/// The store of the command line's store `flags`, else of the store's
/// variables and envoyproxy/ratelimit's (in `env`): a flag wins over
/// every variable.
pub(super) fn resolve(
    flags: &StoreFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreChoice, String> {
    let mut redis = flags.redis.clone();
    let mut cluster = flags.redis_cluster.clone().map(|u| u.0);
    let mut sentinel = flags.redis_sentinel.clone().map(|u| u.0);
    let mut ca = flags.redis_ca.clone();
    let mut master = flags.sentinel_master.clone();
    let flags = usize::from(redis.is_some())
        + usize::from(cluster.is_some())
        + usize::from(sentinel.is_some());
    if flags > 1 {
        return Err("give one of --redis, --redis-cluster, --redis-sentinel".into());
    }
    let mut go_store = None;
    if flags == 0 {
        // the environment, when no flag chose a store
        if let Some(v) = env("BACKEND_TYPE")
            && !v.trim().eq_ignore_ascii_case("redis")
        {
            return Err(format!(
                "BACKEND_TYPE={v:?}: only Redis here (--redis, --redis-cluster, \
                 --redis-sentinel; without one, counters in memory)"
            ));
        }
        let go_form = |v: &str| {
            !has_scheme(v.trim())
                || env("REDIS_TYPE").is_some_and(|t| !t.trim().eq_ignore_ascii_case("single"))
        };
        if let Some(v) = env("REDIS_URL") {
            if go_form(&v) {
                if has_scheme(v.trim()) {
                    return Err(format!(
                        "REDIS_URL {v:?} with REDIS_TYPE: give REDIS_URL in envoyproxy/ratelimit's \
                         form (host:port,...) or use REDIS_CLUSTER_URLS / REDIS_SENTINEL_URLS"
                    ));
                }
                go_store = Some(go_redis(&v, env)?);
            } else {
                redis = Some(store_url("REDIS_URL", &v)?);
            }
        }
        if let Some(v) = env("REDIS_CLUSTER_URLS") {
            cluster = Some(store_urls("REDIS_CLUSTER_URLS", &v)?);
        }
        if let Some(v) = env("REDIS_SENTINEL_URLS") {
            sentinel = Some(store_urls("REDIS_SENTINEL_URLS", &v)?);
        }
        let set = usize::from(redis.is_some() || go_store.is_some())
            + usize::from(cluster.is_some())
            + usize::from(sentinel.is_some());
        if set > 1 {
            return Err(
                "set one of REDIS_URL, REDIS_CLUSTER_URLS, REDIS_SENTINEL_URLS \
                        (or choose with a flag)"
                    .into(),
            );
        }
        if redis.is_some() && env("REDIS_AUTH").is_some() {
            return Err(
                "REDIS_AUTH beside a REDIS_URL with a scheme: put the credentials in the URL \
                 (redis://user:password@host:6379/)"
                    .into(),
            );
        }
    }
    if ca.is_none() && go_store.is_none() {
        ca = env("REDIS_CA").map(PathBuf::from);
    }
    if master.is_none() {
        master = env("REDIS_SENTINEL_MASTER");
    }
    let store = match (go_store, redis, cluster, sentinel) {
        (Some(s), ..) => s,
        (None, Some(url), None, None) => {
            if ca.is_some() && !url.starts_with("rediss://") {
                return Err(format!(
                    "--redis-ca is for a TLS Redis: the URL {url:?} should be rediss://"
                ));
            }
            StoreChoice::Redis { url, ca }
        }
        _ if ca.is_some() => return Err("--redis-ca needs --redis rediss://...".into()),
        (None, None, Some(urls), None) => StoreChoice::Cluster { urls },
        (None, None, None, Some(urls)) => StoreChoice::Sentinel {
            urls,
            master: master.ok_or(
                "--redis-sentinel needs --sentinel-master <name> (or REDIS_SENTINEL_MASTER)",
            )?,
        },
        _ => StoreChoice::Memory,
    };
    if let StoreChoice::Redis { url, ca: Some(_) } = &store
        && !url.starts_with("rediss://")
    {
        return Err(format!(
            "REDIS_TLS_CACERT/REDIS_CA is for a TLS Redis: {url:?} should be rediss:// \
             (REDIS_TLS=true)"
        ));
    }
    Ok(store)
}
