//! Where the counters live: the store flags (`--redis`, `--redis-cluster`,
//! `--redis-sentinel`, at most one), else the store's variables
//! (`REDIS_URL`, which also takes envoyproxy/ratelimit's forms:
//! [`go_redis`], `REDIS_CLUSTER_URLS`, `REDIS_SENTINEL_URLS`), else this
//! process's memory.

use std::path::PathBuf;

use super::flags::StoreFlags;
use super::go_env::go_bool;
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

/// The store from envoyproxy/ratelimit's variables: `REDIS_URL` without a
/// scheme (`host:port`, a socket's path, a cluster's `host:port,...`, or a
/// sentinel's `master,host:port,...`) read with `REDIS_TYPE`
/// (`single`, `cluster`, `sentinel`), `REDIS_SOCKET_TYPE` (`tcp`, `unix`: Go's
/// default), `REDIS_AUTH` (`password` or `user:password`), `REDIS_TLS`,
/// `REDIS_SENTINEL_AUTH`; `REDIS_TLS_CACERT` is `REDIS_CA`.
pub(super) fn go_redis(
    url: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreChoice, String> {
    let kind = env("REDIS_TYPE").map(|t| t.trim().to_ascii_lowercase());
    let kind = kind.as_deref().unwrap_or("single");
    let socket = env("REDIS_SOCKET_TYPE").map(|t| t.trim().to_ascii_lowercase());
    let socket = socket.as_deref().unwrap_or("unix");
    let tls = match env("REDIS_TLS") {
        Some(v) => go_bool("REDIS_TLS", &v)?,
        None => false,
    };
    let auth = env("REDIS_AUTH");
    let ca = env("REDIS_CA")
        .or_else(|| env("REDIS_TLS_CACERT"))
        .map(PathBuf::from);
    let scheme = if tls { "rediss" } else { "redis" };
    let hosts = |list: &str, auth: &str| -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for h in list.split(',') {
            let h = h.trim();
            if h.is_empty() {
                return Err(format!(
                    "REDIS_URL {url:?}: an empty address (REDIS_TYPE={kind}: host:port,host:port)"
                ));
            }
            out.push(format!("{scheme}://{auth}{h}/"));
        }
        Ok(out)
    };
    match kind {
        "single" => match socket {
            "tcp" => {
                let url = format!("{scheme}://{}{}/", auth_prefix(auth.as_deref()), url.trim());
                Ok(StoreChoice::Redis { url, ca })
            }
            "unix" => {
                if tls || auth.is_some() {
                    return Err(format!(
                        "REDIS_URL {url:?} is a Unix socket (REDIS_SOCKET_TYPE=unix, Go's default) \
                         with REDIS_TLS or REDIS_AUTH: give REDIS_URL as a URL instead \
                         (redis://user:password@host:6379/, or REDIS_SOCKET_TYPE=tcp)"
                    ));
                }
                if !url.trim().starts_with('/') {
                    return Err(format!(
                        "REDIS_URL {url:?}: with REDIS_SOCKET_TYPE=unix (Go's default) the path \
                         of a socket, such as /var/run/redis.sock; set REDIS_SOCKET_TYPE=tcp for \
                         host:port, or give a URL such as redis://host:6379/"
                    ));
                }
                Ok(StoreChoice::Redis {
                    url: format!("unix://{}", url.trim()),
                    ca,
                })
            }
            other => Err(format!("REDIS_SOCKET_TYPE={other:?}: tcp or unix")),
        },
        "cluster" => {
            if ca.is_some() {
                return Err("REDIS_TLS_CACERT/REDIS_CA: for one Redis only, not a cluster".into());
            }
            Ok(StoreChoice::Cluster {
                urls: hosts(url, &auth_prefix(auth.as_deref()))?,
            })
        }
        "sentinel" => {
            if tls || auth.is_some() || ca.is_some() {
                return Err(
                    "REDIS_TYPE=sentinel with REDIS_TLS, REDIS_AUTH or a CA: here the primary \
                     is reached over plain TCP without credentials; drop them or use one Redis \
                     URL (REDIS_TYPE=single)"
                        .into(),
                );
            }
            let Some((master, sentinels)) = url.split_once(',') else {
                return Err(format!(
                    "REDIS_URL {url:?}: REDIS_TYPE=sentinel takes <master name>,<host:port>,..."
                ));
            };
            let sentinel_auth = auth_prefix(env("REDIS_SENTINEL_AUTH").as_deref());
            Ok(StoreChoice::Sentinel {
                urls: hosts(sentinels, &sentinel_auth)?,
                master: master.trim().to_owned(),
            })
        }
        other => Err(format!("REDIS_TYPE={other:?}: single, cluster or sentinel")),
    }
}

/// Percent-encodes what is not unreserved in a URL's user information.
fn userinfo(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `REDIS_AUTH`'s `password` or `user:password` as a URL's `user:password@`.
fn auth_prefix(auth: Option<&str>) -> String {
    match auth {
        None => String::new(),
        Some(a) => match a.split_once(':') {
            Some((user, pass)) => format!("{}:{}@", userinfo(user), userinfo(pass)),
            None => format!(":{}@", userinfo(a)),
        },
    }
}
