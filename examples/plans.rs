//! Plans per caller: an API key is looked up in a table (key → plan) by an
//! authentication middleware, which puts the plan in the request's
//! extensions; one rate-limit layer then checks each request under its plan
//! (`free` 60/min and 1,000/day, `pro` 600/min, `internal` unlimited), as
//! loaded from `examples/plans.toml`.
//!
//!     cargo run --example plans --features axum,serde
//!     curl -si -H 'x-api-key: key-free' http://127.0.0.1:3000/
//!     curl -si -H 'x-api-key: key-pro' http://127.0.0.1:3000/
//!     curl -si -H 'x-api-key: key-internal' http://127.0.0.1:3000/
//!
//! Edit `examples/plans.toml`, then `curl -si -X POST http://127.0.0.1:3000/admin/reload`:
//! the new limits apply at once, without a restart (with `REDIS_URL` set,
//! they are published to Redis, where every instance reads them within a
//! second). An unknown key is the `free` plan.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::StatusCode;
use tower_redis_ratelimit::middleware::{
    LayerOptions, NearLimit, PlanFromExtension, RateLimitOutcome,
};
use tower_redis_ratelimit::plans::{ActivePlan, LimitsHandle, Plans, PlansConfig};
use tower_redis_ratelimit::{MemoryStore, RateLimitLayer, RedisStore};

const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/plans.toml");

/// The plan an API key is on (what a real app reads from its database).
#[derive(Clone)]
struct Tier(String);

impl AsRef<str> for Tier {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The file's two parts: the plans and the layer's options.
fn load() -> Result<(PlansConfig, LayerOptions), Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(CONFIG)?;
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

async fn authenticate(
    State(keys): State<Arc<HashMap<&'static str, &'static str>>>,
    mut req: Request,
    next: Next,
) -> impl IntoResponse {
    let plan = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .and_then(|k| keys.get(k));
    if let Some(plan) = plan {
        req.extensions_mut().insert(Tier((*plan).to_owned()));
    }
    next.run(req).await
}

async fn hello(
    Extension(outcome): Extension<RateLimitOutcome>,
    plan: Option<Extension<Arc<ActivePlan>>>,
    near: Option<Extension<NearLimit>>,
) -> String {
    let plan = plan.map_or("?", |p| p.0.name());
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

async fn reload(State(handle): State<LimitsHandle>) -> (StatusCode, String) {
    // (the error, not `Send`, must not live across the await)
    let config = match load() {
        Ok((config, _)) => config,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    match handle.publish(config).await {
        Ok(()) => (StatusCode::OK, format!("reloaded:\n{}", handle.current())),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (config, options) = load()?;
    let builder = Plans::builder().prefix("plans-example").config(config);
    let plans = match std::env::var("REDIS_URL") {
        Ok(url) => builder
            .store(RedisStore::from_url(&url)?)
            .sync_interval(Duration::from_secs(1))
            .build()?,
        Err(_) => builder.store(MemoryStore::new()).build()?,
    };
    let handle = plans.handle();
    let keys: Arc<HashMap<&str, &str>> = Arc::new(HashMap::from([
        ("key-free", "free"),
        ("key-pro", "pro"),
        ("key-internal", "internal"),
    ]));
    let key = |p: &http::request::Parts| p.headers.get("x-api-key").map(|v| v.as_bytes().to_vec());
    let layer =
        RateLimitLayer::with_plans(plans, key, PlanFromExtension::<Tier>::new()).options(&options);
    let app = Router::new()
        .route("/", get(hello))
        .layer(layer)
        .layer(axum::middleware::from_fn_with_state(keys, authenticate))
        .merge(
            Router::new()
                .route("/admin/reload", post(reload))
                .with_state(handle),
        );
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".to_owned());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    println!("try: curl -si -H 'x-api-key: key-free' http://127.0.0.1:{port}/");
    axum::serve(listener, app).await?;
    Ok(())
}
