//! The service's statistics, in Prometheus's text exposition format.
//!
//! The per-limit counters are envoyproxy/ratelimit's, counted as it counts
//! them, in hits (a request's `hits_addend` units, 1 by default), and named
//! as its Prometheus mapping names them; each has the labels `domain` and
//! `key`, the limit's statistics key without the domain (`remote_address`,
//! `path_/v1/*`, `tenant.user`):
//!
//! * `ratelimit_service_rate_limit_total_hits`: every hit on the limit;
//! * `ratelimit_service_rate_limit_within_limit`: hits of requests the limit
//!   admitted;
//! * `ratelimit_service_rate_limit_near_limit`: hits that took the count past
//!   80% of the limit (`floor(limit × 0.8)`) without passing the limit, in a
//!   request that was admitted or not;
//! * `ratelimit_service_rate_limit_over_limit`: hits past the limit;
//! * `ratelimit_service_rate_limit_shadow_mode`: of those, the hits a limit
//!   in `shadow_mode` let through.
//!
//! The key holds a request's values only where a rule asks for it
//! (`detailed_metric`, `value_to_metric`), and then for at most
//! [`ServiceOptions::max_metric_keys`](crate::service::ServiceOptions::max_metric_keys)
//! such keys (past it, under the rule's own key); a descriptor's `limit`
//! override is counted under `limit_override.` and the descriptor's keys,
//! without values (under the same cap, past it `limit_override`). A limit
//! that another one `replaces`, an `unlimited` one, a descriptor that
//! matches nothing and one the store failed to decide are not counted.
//!
//! And for the service:
//!
//! * `ratelimit_service_config_load_success`, `ratelimit_service_config_load_error`:
//!   configurations loaded (the first one included), and rejected by a
//!   reload (the running one stays);
//! * `ratelimit_service_store_errors` (label `domain`): calls whose store
//!   failed or timed out, whatever the domain's failure policy answered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use metrics::{Counter, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

/// `ratelimit_service_rate_limit_total_hits`.
pub const TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
/// `ratelimit_service_rate_limit_within_limit`.
pub const WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
/// `ratelimit_service_rate_limit_near_limit`.
pub const NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
/// `ratelimit_service_rate_limit_over_limit`.
pub const OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
/// `ratelimit_service_rate_limit_shadow_mode`.
pub const SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";
/// `ratelimit_service_config_load_success`.
pub const CONFIG_LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
/// `ratelimit_service_config_load_error`.
pub const CONFIG_LOAD_ERROR: &str = "ratelimit_service_config_load_error";
/// `ratelimit_service_store_errors`.
pub const STORE_ERRORS: &str = "ratelimit_service_store_errors";

/// The share of a limit past which hits are near it (the Go service's
/// default `NEAR_LIMIT_RATIO`).
const NEAR_LIMIT_RATIO: f32 = 0.8;

const METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

/// One limit's counters.
struct KeyCounters {
    total: Counter,
    within: Counter,
    near: Counter,
    over: Counter,
    shadow: Counter,
}

/// The statistics of one [`RlsService`](crate::service::RlsService) (and its
/// clones): [`render`](Self::render) them for a scrape.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Per domain, per key (read without allocating on every call).
    keys: RwLock<HashMap<String, HashMap<String, Arc<KeyCounters>>>>,
    /// How many keys holding a request's values have a series.
    valued: AtomicUsize,
    max_valued: usize,
    load_success: Counter,
    load_error: Counter,
    store_errors: Mutex<HashMap<String, Counter>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// What one descriptor's decision was, in the Go service's terms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    /// The descriptor's hits.
    pub(crate) hits: u64,
    /// The limit.
    pub(crate) limit: u64,
    /// The count before the hits.
    pub(crate) before: u64,
    /// Whether the hits did not fit.
    pub(crate) over: bool,
    /// Whether the limit is in shadow mode.
    pub(crate) shadow: bool,
}

impl Metrics {
    /// Empty statistics: no limit counted yet, no configuration loaded.
    /// At most `max_valued` keys that hold a request's values get a series.
    pub fn new(max_valued: usize) -> Metrics {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        for (name, help) in [
            (
                TOTAL_HITS,
                "Hits on a limit (a request's hits_addend units).",
            ),
            (WITHIN_LIMIT, "Hits of requests the limit admitted."),
            (
                NEAR_LIMIT,
                "Hits past 80% of the limit that did not pass the limit.",
            ),
            (OVER_LIMIT, "Hits past the limit."),
            (
                SHADOW_MODE,
                "Hits past the limit that shadow mode let through.",
            ),
            (CONFIG_LOAD_SUCCESS, "Configurations loaded."),
            (
                CONFIG_LOAD_ERROR,
                "Configurations rejected (the running one stays).",
            ),
            (STORE_ERRORS, "Calls whose store failed or timed out."),
        ] {
            recorder.describe_counter(name.into(), None, help.into());
        }
        let load_success =
            recorder.register_counter(&Key::from_name(CONFIG_LOAD_SUCCESS), &METADATA);
        let load_error = recorder.register_counter(&Key::from_name(CONFIG_LOAD_ERROR), &METADATA);
        Metrics {
            recorder,
            handle,
            keys: RwLock::new(HashMap::new()),
            valued: AtomicUsize::new(0),
            max_valued,
            load_success,
            load_error,
            store_errors: Mutex::new(HashMap::new()),
        }
    }

    /// Every series, in Prometheus's text exposition format (version
    /// 0.0.4).
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Counts a configuration load, or a rejected one.
    pub fn config_loaded(&self, ok: bool) {
        if ok {
            self.load_success.increment(1);
        } else {
            self.load_error.increment(1);
        }
    }

    /// Counts a call of `domain` whose store failed.
    pub(crate) fn store_error(&self, domain: &str) {
        let mut map = self
            .store_errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let counter = map.entry(domain.to_owned()).or_insert_with(|| {
            let labels = vec![Label::new("domain", domain.to_owned())];
            self.recorder
                .register_counter(&Key::from_parts(STORE_ERRORS, labels), &METADATA)
        });
        counter.increment(1);
    }

    /// Counts one descriptor's outcome under `key` (`domain.…`), or under
    /// `fallback` if `key` holds a request's values (`valued`) and the
    /// series for such keys are all taken.
    pub(crate) fn record(&self, domain: &str, key: &str, valued: bool, fallback: &str, o: Outcome) {
        let c = self.counters(domain, key, valued, fallback);
        // a descriptor's hits counted at most 2^32 - 1 (the request's own
        // `hits_addend` bound), so that no counter wraps (which Prometheus
        // would read as a reset)
        let o = Outcome {
            hits: o.hits.min(u64::from(u32::MAX)),
            ..o
        };
        c.total.increment(o.hits);
        let limit = o.limit;
        // (as the Go service: the threshold in f32, floored)
        let near_threshold = (limit as f32 * NEAR_LIMIT_RATIO).floor() as u64;
        let after = o.before.saturating_add(o.hits);
        if o.over {
            let over = if o.before >= limit {
                o.hits
            } else {
                c.near
                    .increment(limit.saturating_sub(near_threshold.max(o.before)));
                after.saturating_sub(limit)
            };
            c.over.increment(over);
            if o.shadow {
                c.shadow.increment(over);
            }
        } else {
            c.within.increment(o.hits);
            if after > near_threshold {
                c.near.increment(if o.before >= near_threshold {
                    o.hits
                } else {
                    after - near_threshold
                });
            }
        }
    }

    fn counters(&self, domain: &str, key: &str, valued: bool, fallback: &str) -> Arc<KeyCounters> {
        {
            let map = self.keys.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(c) = map.get(domain).and_then(|keys| keys.get(key)) {
                return c.clone();
            }
        }
        let mut map = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        let keys = map.entry(domain.to_owned()).or_default();
        if let Some(c) = keys.get(key) {
            return c.clone();
        }
        let mut key = key;
        if valued {
            // a series for a new key with values, while some are left
            // (counted under the lock: two callers of one new key take one)
            if self.valued.load(Ordering::Relaxed) < self.max_valued {
                self.valued.fetch_add(1, Ordering::Relaxed);
            } else {
                key = fallback;
            }
        }
        let label = key
            .strip_prefix(domain)
            .and_then(|k| k.strip_prefix('.'))
            .unwrap_or(key)
            .to_owned();
        let c = keys.entry(key.to_owned()).or_insert_with(|| {
            let make = |name: &'static str| {
                let labels = vec![
                    Label::new("domain", domain.to_owned()),
                    Label::new("key", label.clone()),
                ];
                self.recorder
                    .register_counter(&Key::from_parts(name, labels), &METADATA)
            };
            Arc::new(KeyCounters {
                total: make(TOTAL_HITS),
                within: make(WITHIN_LIMIT),
                near: make(NEAR_LIMIT),
                over: make(OVER_LIMIT),
                shadow: make(SHADOW_MODE),
            })
        });
        c.clone()
    }
}

/// Serves `GET /metrics` (the [`render`](Metrics::render)ed text,
/// `text/plain; version=0.0.4`) on `listener` over HTTP/1.1, until the
/// task is dropped; any other path is `404`, any other method `405`.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    use hyper::{Method, Response, StatusCode, header};

    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: cannot accept a connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let metrics = metrics.clone();
                    async move {
                        let (status, kind, body) = match (req.method(), req.uri().path()) {
                            (&Method::GET | &Method::HEAD, "/metrics") => (
                                StatusCode::OK,
                                "text/plain; version=0.0.4; charset=utf-8",
                                metrics.render(),
                            ),
                            (_, "/metrics") => (
                                StatusCode::METHOD_NOT_ALLOWED,
                                "text/plain; charset=utf-8",
                                "GET /metrics\n".to_owned(),
                            ),
                            _ => (
                                StatusCode::NOT_FOUND,
                                "text/plain; charset=utf-8",
                                "not found: the metrics are at /metrics\n".to_owned(),
                            ),
                        };
                        let mut response = Response::new(Full::new(Bytes::from(body)));
                        *response.status_mut() = status;
                        response
                            .headers_mut()
                            .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
            let io = hyper_util::rt::TokioIo::new(stream);
            // (a client that never finishes its request is dropped)
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "metrics: connection ended");
            }
        });
    }
}
