//! The middleware's own responses: 429 denials, 503 on store failure,
//! missing-key rejections; as plain HTTP or as gRPC trailers-only responses.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{Response, StatusCode, Version};

use super::config::Config;
use super::headers::{RateHeaders, retry_after_secs};
use crate::decision::Decision;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// gRPC `INVALID_ARGUMENT`: a request that can never fit.
const GRPC_INVALID_ARGUMENT: u16 = 3;
/// gRPC `RESOURCE_EXHAUSTED`.
const GRPC_RESOURCE_EXHAUSTED: u16 = 8;
/// gRPC `UNAVAILABLE`.
const GRPC_UNAVAILABLE: u16 = 14;

/// Whether the request has a gRPC content type (`application/grpc*`).
pub(super) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// Whether the middleware answers `parts` in gRPC form: as the layer was
/// told ([`RateLimitLayer::grpc`](crate::RateLimitLayer::grpc)), else for an
/// HTTP/2 request with a gRPC content type. An HTTP/1.1 request with a gRPC
/// content type is not a gRPC call: answering it with HTTP 200 would let a
/// client turn its 429 into a success.
fn grpc_form(config: &Config, parts: &Parts) -> bool {
    config
        .answers
        .grpc
        .unwrap_or_else(|| parts.version == Version::HTTP_2 && is_grpc(&parts.headers))
}

/// The default denial: `429 Too Many Requests`, `text/plain`, one line
/// saying which quota was exceeded and when to retry.
///
/// A request whose cost exceeds the quota's capacity (its
/// [`retry_after`](Decision::retry_after) is `None`) can never be admitted,
/// however long the client waits: it gets `413 Content Too Large` instead,
/// without `Retry-After` (a 429 tells clients and retry policies to try the
/// same request again later, which would never succeed; 413 says the
/// request is too large for the limit, and is not retried unchanged).
///
/// The middleware adds `Retry-After` (to a 429) and the rate-limit headers
/// to whatever a [`deny_response`](crate::RateLimitLayer::deny_response)
/// closure returns.
pub fn text_plain(_parts: &Parts, decision: &Decision) -> Response<Bytes> {
    let (status, body) = match decision.retry_after() {
        Some(_) => (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "Too Many Requests: rate limit \"{}\" exceeded, retry in {} s\n",
                decision.quota(),
                retry_after_secs(decision)
            ),
        ),
        None => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Content Too Large: the request's cost exceeds the \"{}\" limit of {}: \
                 it can never be admitted\n",
                decision.quota(),
                decision.limit()
            ),
        ),
    };
    with_type(status, "text/plain; charset=utf-8", body)
}

/// A denial as `application/problem+json` (RFC 9457), for
/// [`RateLimitLayer::deny_response`](crate::RateLimitLayer::deny_response):
///
/// ```json
/// {"type":"about:blank","title":"Too Many Requests","status":429,
///  "detail":"rate limit \"minute\" exceeded","quota":"minute","retry_after":3}
/// ```
///
/// A request that can never fit (see [`text_plain`]) gets status 413,
/// title `"Content Too Large"` and a `retry_after` of `null`.
pub fn problem_json(_parts: &Parts, decision: &Decision) -> Response<Bytes> {
    // Quota names are ASCII letters, digits, '-', '_' and '.': nothing to escape.
    let (status, retry, detail) = match decision.retry_after() {
        Some(_) => (
            StatusCode::TOO_MANY_REQUESTS,
            retry_after_secs(decision).to_string(),
            "exceeded",
        ),
        None => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "null".to_owned(),
            "can never be met by this request",
        ),
    };
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":\"{title}\",\"status\":{code},\
         \"detail\":\"rate limit \\\"{q}\\\" {detail}\",\"quota\":\"{q}\",\"retry_after\":{retry}}}",
        title = match status {
            StatusCode::TOO_MANY_REQUESTS => "Too Many Requests",
            _ => "Content Too Large",
        },
        code = status.as_u16(),
        q = json_escape(&decision.quota()),
    );
    with_type(status, "application/problem+json", body)
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

fn with_type(status: StatusCode, content_type: &'static str, body: String) -> Response<Bytes> {
    let mut res = Response::new(Bytes::from(body));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    res
}

/// The answer to a denied request, with the rate-limit headers (and
/// `Retry-After` unless the request can never fit).
pub(super) fn denied(
    config: &Config,
    parts: &Parts,
    decision: &Decision,
    headers: RateHeaders,
) -> Response<Bytes> {
    let mut res = if grpc_form(config, parts) {
        match decision.retry_after() {
            Some(_) => grpc(
                GRPC_RESOURCE_EXHAUSTED,
                &format!(
                    "rate limit \"{}\" exceeded, retry in {} s",
                    decision.quota(),
                    retry_after_secs(decision)
                ),
            ),
            // never fits: no retry would succeed (RESOURCE_EXHAUSTED is one
            // that retry policies retry)
            None => grpc(
                GRPC_INVALID_ARGUMENT,
                &format!(
                    "request cost exceeds the \"{}\" rate limit of {}: it can never be admitted",
                    decision.quota(),
                    decision.limit()
                ),
            ),
        }
    } else {
        match &config.answers.deny {
            Some(f) => f(parts, decision),
            None => text_plain(parts, decision),
        }
    };
    headers.apply(res.headers_mut());
    res
}

/// The answer when the store failed under [`FailurePolicy::Closed`](crate::middleware::FailurePolicy::Closed).
pub(super) fn unavailable(config: &Config, parts: &Parts) -> Response<Bytes> {
    let mut res = if grpc_form(config, parts) {
        grpc(GRPC_UNAVAILABLE, "rate limiter unavailable")
    } else {
        with_type(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain; charset=utf-8",
            "Service Unavailable: rate limiter unavailable\n".to_owned(),
        )
    };
    res.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

/// The answer to a request without a key under [`MissingKey::reject`](crate::middleware::MissingKey::reject):
/// `status` with a body saying why there is no key and what would fix it
/// (as axum's missing-extension rejection does). A server error (the
/// default 500: a misconfigured server) is also logged, once per layer.
pub(super) fn rejected(config: &Config, parts: &Parts, status: StatusCode) -> Response<Bytes> {
    let mut hint = config.requests.extractor.missing_hint(parts).into_owned();
    if let Some(fallback) = config.requests.missing.fallback_extractor() {
        hint.push_str("; and the MissingKey::fallback extractor: ");
        hint.push_str(&fallback.missing_hint(parts));
    }
    if status.is_server_error() && config.counters.first_missing_key() {
        event!(
            error,
            method = %parts.method,
            path = parts.uri.path(),
            "no rate-limit key: {hint}; requests without a key are rejected with {status} (logged once per layer)"
        );
    }
    if grpc_form(config, parts) {
        return grpc(grpc_code(status), &format!("no rate-limit key: {hint}"));
    }
    let reason = status.canonical_reason().unwrap_or("Error");
    with_type(
        status,
        "text/plain; charset=utf-8",
        format!("{reason}: no rate-limit key: {hint}\n"),
    )
}

/// The gRPC status of a missing-key rejection with HTTP status `status`:
/// gRPC's `http-grpc-status-mapping.md`, except that a 400 (the client left
/// out what the key is made of) is `INVALID_ARGUMENT` and a 500 (the server
/// is misconfigured) `INTERNAL`, what a server answering by itself means.
fn grpc_code(status: StatusCode) -> u16 {
    match status.as_u16() {
        400 => 3,              // INVALID_ARGUMENT
        500 => 13,             // INTERNAL
        401 => 16,             // UNAUTHENTICATED
        403 => 7,              // PERMISSION_DENIED
        404 => 12,             // UNIMPLEMENTED
        429 | 502..=504 => 14, // UNAVAILABLE
        _ => 2,                // UNKNOWN
    }
}

/// A trailers-only gRPC response: HTTP 200, status in the headers, no body.
fn grpc(code: u16, message: &str) -> Response<Bytes> {
    let mut res = Response::new(Bytes::new());
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(GRPC_STATUS, HeaderValue::from(code));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(message)) {
        h.insert(GRPC_MESSAGE, v);
    }
    res
}

/// `grpc-message` encoding: percent-encode everything outside printable ASCII, and `%`.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(percent_encode("50% \"ok\" é"), "50%25 \"ok\" %C3%A9");
    }

    #[test]
    fn grpc_content_types_are_recognised() {
        for (ct, grpc) in [
            ("application/grpc", true),
            ("application/grpc+proto", true),
            ("application/grpc-web", true),
            ("application/json", false),
        ] {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
            assert_eq!(is_grpc(&h), grpc, "{ct}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }
}
