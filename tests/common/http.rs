//! Driving the middleware in process: an axum app behind a layer, requests
//! sent with `oneshot`, the peer address mocked.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::extract::connect_info::MockConnectInfo;
use axum::routing::get;
use http::request::Parts;
use http::{Request, Response};
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower_redis_ratelimit::RateLimitLayer;
use tower_redis_ratelimit::middleware::RateLimitOutcome;

/// The peer address `make_app` mocks.
pub(crate) const PEER: ([u8; 4], u16) = ([203, 0, 113, 7], 40_000);

/// The peer IP from axum's connect info, real or mocked (what `key::PeerIp` reads).
pub(crate) fn peer(parts: &Parts) -> Option<String> {
    let e = &parts.extensions;
    e.get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .or_else(|| e.get::<MockConnectInfo<SocketAddr>>().map(|m| m.0))
        .map(|a| a.ip().to_string())
}

/// `GET /` answers the remaining quota the handler sees; `/health` is a plain route.
pub(crate) fn make_app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/",
            // (the outcome's extension, not the crate's extractors: this app
            // is built without the `axum` feature too, by the benches)
            get(
                |outcome: Option<axum::Extension<RateLimitOutcome>>| async move {
                    match outcome.as_ref().and_then(|o| o.decision()) {
                        Some(d) => format!("remaining={}", d.remaining()),
                        None => "no decision".to_owned(),
                    }
                },
            ),
        )
        .route("/health", get(|| async { "ok" }))
        .layer(layer)
        .layer(MockConnectInfo(SocketAddr::from(PEER)))
}

pub(crate) async fn send(app: &Router, req: Request<Body>) -> Response<Body> {
    app.clone().oneshot(req).await.unwrap()
}

pub(crate) fn get_req(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

pub(crate) async fn text(res: Response<Body>) -> String {
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

pub(crate) fn header<'a>(res: &'a Response<Body>, name: &str) -> Option<&'a str> {
    res.headers().get(name).map(|v| v.to_str().unwrap())
}
