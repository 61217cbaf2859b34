//! Rate-limit metrics on `/metrics` in the Prometheus text format, through
//! the `metrics` facade and `metrics-exporter-prometheus`.
//!
//!     cargo run --example metrics --features axum,metrics
//!     for i in $(seq 8); do curl -s -o /dev/null http://127.0.0.1:3000/; done
//!     curl -s http://127.0.0.1:3000/metrics | grep ratelimit
//!
//! Counters `ratelimit_decisions_total{limiter,plan,quota,outcome}`,
//! `ratelimit_deny_cache_hits_total`, `ratelimit_store_errors_total`,
//! `ratelimit_near_limit_total`, the histogram
//! `ratelimit_store_call_seconds` (Redis calls) and the gauge
//! `ratelimit_leases`; labels never carry a user's key.

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusBuilder;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter, key};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .prefix("api")
        .quota(Quota::gcra(Rate::per_minute(60)).burst(5).name("minute"))
        .build()?;
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(
            RateLimitLayer::new(limiter, key::Global)
                .name("api")
                .near_limit(0.8, None::<fn(&http::request::Parts, &_)>),
        )
        .route(
            "/metrics",
            get(move || std::future::ready(prometheus.render())),
        );
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".to_owned());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!(
        "listening on http://{}; metrics on /metrics",
        listener.local_addr()?
    );
    axum::serve(listener, app).await?;
    Ok(())
}
