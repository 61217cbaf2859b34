//! Rate-limit metrics in the Prometheus text format, through the `metrics`
//! facade and `metrics-exporter-prometheus`, served on a listener of their
//! own that only this host can reach.
//!
//!     cargo run -p tower-redis-ratelimit-tests --example metrics --features axum,metrics
//!     for i in $(seq 8); do curl -s -o /dev/null http://127.0.0.1:3000/; done
//!     curl -s http://127.0.0.1:9000/metrics | grep ratelimit
//!
//! Counters `ratelimit_decisions_total{limiter,plan,quota,outcome}`,
//! `ratelimit_deny_cache_hits_total`, `ratelimit_store_errors_total`,
//! `ratelimit_near_limit_total`, the histogram
//! `ratelimit_store_call_seconds` (Redis calls) and the gauge
//! `ratelimit_leases`; labels never carry a user's key.
//!
//! Crates it needs besides this one (features `axum`, `metrics`): `tokio`
//! (features `macros`, `rt-multi-thread`, `net`), `axum`,
//! `metrics-exporter-prometheus`.
//!
//! What makes it safe to copy:
//!
//! - `/metrics` is not on the public listener (`PORT`, default 3000): it is
//!   served alone on `127.0.0.1:METRICS_PORT` (default 9000), a loopback
//!   address whatever the public one is, for a Prometheus on the same host
//!   or a sidecar. Metrics tell who is limited how often and how the store
//!   is doing: expose them to the internet only behind authentication;
//! - the limit is per client IP (`key::PeerIp`, served with connect info),
//!   never one `key::Global` budget that a single client could spend for
//!   everyone. Behind a proxy, use `key::ClientIp` with the proxy's
//!   addresses trusted.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};

/// Requests a client IP may make a minute, 5 at once.
pub(crate) const PER_MINUTE: u64 = 60;

/// The public app over `store`: `GET /`, limited per client IP. Serve it
/// with `into_make_service_with_connect_info::<SocketAddr>()`.
pub(crate) fn app(store: impl Store) -> Result<Router, Box<dyn std::error::Error>> {
    let limiter = RateLimiter::builder()
        .store(store)
        .prefix("api")
        .quota(
            Quota::gcra(Rate::per_minute(PER_MINUTE))
                .burst(5)
                .name("minute"),
        )
        .build()?;
    Ok(Router::new().route("/", get(|| async { "hello\n" })).layer(
        RateLimitLayer::new(limiter, key::PeerIp)
            .name("api") // the `limiter` label
            .near_limit(0.8),
    ))
}

/// The metrics app: `GET /metrics`, and nothing else. Serve it on a
/// loopback (or otherwise private) address only.
pub(crate) fn metrics_app(prometheus: PrometheusHandle) -> Router {
    Router::new().route(
        "/metrics",
        get(move || std::future::ready(prometheus.render())),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let metrics_port: u16 = std::env::var("METRICS_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9000);

    let public = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    // (loopback whatever the public address: never reachable from outside)
    let private = tokio::net::TcpListener::bind(("127.0.0.1", metrics_port)).await?;
    println!("listening on http://{}", public.local_addr()?);
    println!("metrics on http://{}/metrics", private.local_addr()?);

    let metrics = tokio::spawn(async move { axum::serve(private, metrics_app(prometheus)).await });
    axum::serve(
        public,
        app(MemoryStore::new())?.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    metrics.await??;
    Ok(())
}
