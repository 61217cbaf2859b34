//! Plans per caller: an API key is looked up in a table (key digest →
//! account and plan) by an authentication middleware, which puts the
//! caller in the request's extensions; one rate-limit layer then checks each
//! request under its plan (`free` 60/min and 1,000/day, `pro` 600/min,
//! `internal` unlimited), as loaded from the file `PLANS_CONFIG` names
//! (default `examples/plans.toml`, relative to the working directory).
//!
//!     ADMIN_TOKEN=s3cret cargo run -p tower-redis-ratelimit-tests --example plans --features axum,serde
//!     curl -si -H 'x-api-key: key-free' http://127.0.0.1:3000/
//!     curl -si -H 'x-api-key: key-pro' http://127.0.0.1:3000/
//!     curl -si -H 'x-api-key: key-internal' http://127.0.0.1:3000/
//!
//! Crates it needs besides this one (features `axum`, `serde`): `tokio`
//! (features `macros`, `rt-multi-thread`, `net`), `axum`, `http`, `toml`,
//! `sha2`, `subtle`.
//!
//! Edit the file, then
//! `curl -si -X POST -H 'authorization: Bearer s3cret' http://127.0.0.1:3000/admin/reload`:
//! the new limits apply at once, without a restart. With `REDIS_URL` set,
//! a reload publishes them to Redis, where every instance reads them within
//! a second, and Redis is where the limits live from then on: an instance
//! (re)starting reads them from there, so the limits published last win
//! over the file, even over a file edited since. After editing the file,
//! always `POST /admin/reload`; a restart alone does not apply it.
//!
//! What makes it safe to copy:
//!
//! - an API key never reaches the store: the table holds key digests
//!   (`Header::key_of`), and the plans' keys are the account
//!   (`{plans-example/free:acct:ada}…`), not the key;
//! - a request without a known API key is answered 401, never admitted
//!   under a default plan;
//! - `POST /admin/reload` needs the admin token (compared in constant time
//!   over SHA-256 digests, with `subtle`; the `Bearer` scheme in any case);
//! - everything, the 401s included, is limited per peer IP first (120 a
//!   minute, a quota named `ip` so that the `RateLimit` headers name it apart
//!   from the plan's `minute`; a failed API key or admin token costing 10
//!   more), so keys and tokens cannot be guessed at speed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::{HeaderMap, HeaderName, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tower_redis_ratelimit::key::{Header, KeyExtractor, PeerIp, peer_addr};
use tower_redis_ratelimit::middleware::{
    LayerOptions, NearLimit, PlanFromExtension, RateLimitOutcome,
};
use tower_redis_ratelimit::plans::{ActivePlan, LimitsHandle, Plans, PlansConfig};
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, RedisStore};

/// The configuration file when `PLANS_CONFIG` does not name one.
pub(crate) const DEFAULT_CONFIG: &str = "examples/plans.toml";
const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// What a failed API key or admin token costs its IP, besides the request.
pub(crate) const FAILED_AUTH_COST: u64 = 10;

/// The demo API keys: (key, account, plan). A real app keeps only the
/// digests (`Header::key_of(key)`) in its database.
pub(crate) const API_KEYS: [(&str, &str, &str); 3] = [
    ("key-free", "ada", "free"),
    ("key-pro", "bob", "pro"),
    ("key-internal", "ops", "internal"),
];

/// Who called: what authentication put in the request.
#[derive(Clone)]
struct Caller {
    account: &'static str,
}

/// The plan the caller is on (what a real app reads from its database).
#[derive(Clone)]
struct Tier(&'static str);

impl AsRef<str> for Tier {
    fn as_ref(&self) -> &str {
        self.0
    }
}

/// The two parts of the file at `path`: the plans and the layer's options.
fn load(path: &Path) -> Result<(PlansConfig, LayerOptions), Box<dyn std::error::Error>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let table: toml::Table = toml::from_str(&text)?;
    let layer: LayerOptions = match table.get("layer") {
        Some(v) => v.clone().try_into()?,
        None => LayerOptions::default(),
    };
    let mut plans_only = table;
    plans_only.remove("layer");
    let plans = PlansConfig::deserialize_from(plans_only)?;
    Ok((plans, layer))
}

#[derive(Clone)]
struct Auth {
    /// API key digest → (account, plan).
    keys: Arc<HashMap<Vec<u8>, (&'static str, &'static str)>>,
    /// The SHA-256 of the admin token.
    admin_digest: Arc<[u8; 32]>,
    /// The per-IP limiter in front of everything.
    guard: RateLimiter,
    /// The plans' file, read again by `POST /admin/reload`.
    config: Arc<PathBuf>,
}

impl Auth {
    /// Charges the peer of a request that failed authentication; the 401.
    async fn refuse(&self, parts: &http::request::Parts, what: &str) -> Response {
        if let Some(peer) = peer_addr(parts) {
            // (a store error here only loses the surcharge: the request
            // itself was counted by the guard's layer)
            let _ = self
                .guard
                .penalize(PeerIp.key_of(peer.ip()), FAILED_AUTH_COST)
                .await;
        }
        (StatusCode::UNAUTHORIZED, format!("{what} required\n")).into_response()
    }

    fn is_admin(&self, headers: &HeaderMap) -> bool {
        headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| bearer_token(v.as_bytes()))
            .is_some_and(|given| {
                let given: [u8; 32] = Sha256::digest(given).into();
                bool::from(given.ct_eq(&*self.admin_digest))
            })
    }
}

/// The token of an `Authorization: Bearer <token>` value: the scheme in
/// any case (RFC 9110 §11.1), then one or more spaces; `None` for another
/// scheme or an empty token.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii_start();
    (!token.is_empty()).then_some(token)
}

/// API-key authentication: a known key's caller and plan go into the
/// request; any other request is answered 401.
async fn authenticate(State(auth): State<Auth>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let known = Header::new(API_KEY)
        .extract(&parts)
        .and_then(|digest| auth.keys.get(&digest).copied());
    let Some((account, plan)) = known else {
        return auth.refuse(&parts, "a known x-api-key").await;
    };
    parts.extensions.insert(Caller { account });
    parts.extensions.insert(Tier(plan));
    next.run(Request::from_parts(parts, body)).await
}

async fn hello(
    Extension(outcome): Extension<RateLimitOutcome>,
    plan: Option<Extension<Arc<ActivePlan>>>,
    near: Option<Extension<NearLimit>>,
) -> String {
    let plan = plan.as_ref().map_or("?", |p| p.0.name());
    let mut s = match outcome.decision() {
        Some(d) => format!("plan {plan}: {} left of {:?}\n", d.remaining(), d.quota()),
        None => format!("plan {plan}: not limited\n"),
    };
    if let Some(Extension(near)) = near {
        s.push_str(&format!(
            "warning: {} of your {} requests of {:?} are used\n",
            near.limit - near.remaining,
            near.limit,
            near.quota
        ));
    }
    s
}

async fn reload(State((auth, handle)): State<(Auth, LimitsHandle)>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    if !auth.is_admin(&parts.headers) {
        return auth.refuse(&parts, "the admin bearer token").await;
    }
    // (the error, not `Send`, must not live across the await)
    let config = match load(&auth.config) {
        Ok((config, _)) => config,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    match handle.publish(config).await {
        Ok(()) => (StatusCode::OK, format!("reloaded:\n{}", handle.current())).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}

/// The app: plans from the file at `config` on `store` (read back from it
/// every `sync` when given: then the limits published there, if any, replace
/// the file's before the app answers), `POST /admin/reload` behind
/// `admin_token`. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()`.
pub(crate) async fn app<S: Store + Clone>(
    store: S,
    sync: Option<Duration>,
    admin_token: &str,
    config: impl Into<PathBuf>,
) -> Result<Router, Box<dyn std::error::Error>> {
    if admin_token.is_empty() {
        return Err("the admin token must not be empty".into());
    }
    let config_path = config.into();
    let (config, options) = load(&config_path)?;
    let mut builder = Plans::builder()
        .prefix("plans-example")
        .config(config)
        .store(store.clone());
    if let Some(every) = sync {
        builder = builder.sync_interval(every);
    }
    let plans = builder.build()?;
    let handle = plans.handle();
    if sync.is_some() {
        // Redis holds the limits in force once any instance published them:
        // start with those, not with the file (a reload publishes the file).
        handle.sync().await?;
    }
    let guard = RateLimiter::builder()
        .store(store)
        .prefix("plans-example-guard")
        // (named "ip", not "minute": the RateLimit headers carry this quota
        // and the plan's, each by its name)
        .quota(Quota::fixed_window(Rate::per_minute(120)).name("ip"))
        .build()?;
    let header = Header::new(API_KEY);
    let auth = Auth {
        keys: Arc::new(
            API_KEYS
                .iter()
                .map(|(key, account, plan)| (header.key_of(key), (*account, *plan)))
                .collect(),
        ),
        admin_digest: Arc::new(Sha256::digest(admin_token.as_bytes()).into()),
        guard: guard.clone(),
        config: Arc::new(config_path),
    };

    // The plans' key: the account authentication found (never the API key).
    let account = |p: &http::request::Parts| {
        p.extensions
            .get::<Caller>()
            .map(|c| format!("acct:{}", c.account))
    };
    let layer = RateLimitLayer::with_plans(plans, account, PlanFromExtension::<Tier>::new())
        .options(&options);
    Ok(Router::new()
        .route("/", get(hello))
        .layer(layer)
        .layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            authenticate,
        ))
        .merge(
            Router::new()
                .route("/admin/reload", post(reload))
                .with_state((auth, handle)),
        )
        // outermost: every request counts against its IP, 401s included
        .layer(RateLimitLayer::new(guard, PeerIp)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let token = match std::env::var("ADMIN_TOKEN") {
        Ok(token) if !token.is_empty() => token,
        _ => return Err("set ADMIN_TOKEN to the bearer token of POST /admin/reload".into()),
    };
    let config =
        std::env::var_os("PLANS_CONFIG").map_or_else(|| DEFAULT_CONFIG.into(), PathBuf::from);
    let app = match std::env::var("REDIS_URL") {
        Ok(url) => {
            app(
                RedisStore::from_url(&url)?,
                Some(Duration::from_secs(1)),
                &token,
                config,
            )
            .await?
        }
        Err(_) => app(MemoryStore::new(), None, &token, config).await?,
    };
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".to_owned());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    println!("try: curl -si -H 'x-api-key: key-free' http://127.0.0.1:{port}/");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
