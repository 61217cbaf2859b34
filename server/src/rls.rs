//! Envoy's rate limit service (`envoy.service.ratelimit.v3`) over the
//! protocol-free decision ([`crate::decide`]): a [`RateLimitRequest`] in,
//! a [`RateLimitResponse`] out, its headers written with the library's
//! formatter ([`fields`]).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use tonic::{Request, Response, Status};
use tower_redis_ratelimit::middleware::fields;

use crate::config::Unit;
use crate::decide::{Answer, Call, CallError, Descriptor, LimitOverride, ceil_secs};
use crate::options::GoHeaders;
use crate::pb::envoy::config::core::v3::HeaderValue;
use crate::pb::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit, rate_limit::Unit as PbUnit,
};
use crate::pb::{RateLimitRequest, RateLimitResponse, RateLimitService};
use crate::service::RlsService;

impl RlsService {
    /// Answers one request (what the gRPC method does).
    ///
    /// # Errors
    ///
    /// A request past [`ServiceOptions::max_descriptors`](crate::service::ServiceOptions::max_descriptors) or
    /// [`ServiceOptions::max_entries`](crate::service::ServiceOptions::max_entries) ([`CallError::Invalid`], before the
    /// store is asked); a store error ([`CallError::Store`]) when the
    /// domain's failure policy is [`OnStoreError::Unavailable`](crate::config::OnStoreError::Unavailable) (nothing
    /// was consumed).
    pub async fn should_rate_limit_inner(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, CallError> {
        let core = self.core();
        core.check_bounds(
            &req.domain,
            req.descriptors.len(),
            req.descriptors.iter().map(|d| d.entries.len()),
        )?;
        let call = call(req);
        let answer = core.answer(&call).await?;
        let go = core.options.go_headers.as_ref();
        Ok(response(&answer, go, core.options.headers))
    }
}

/// `req` as a protocol-free call.
fn call(req: &RateLimitRequest) -> Call<'_> {
    Call {
        domain: &req.domain,
        descriptors: req
            .descriptors
            .iter()
            .map(|d| Descriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|e| (e.key.as_str(), value_text(&e.value)))
                    .collect(),
                hits: d.hits_addend,
                // (an override of an unknown unit is none, as in the Go service)
                limit: d.limit.as_ref().and_then(|o| {
                    Some(LimitOverride {
                        requests_per_unit: o.requests_per_unit,
                        unit: override_unit(o.unit)?,
                    })
                }),
            })
            .collect(),
        hits_addend: req.hits_addend,
        hits_subtrahend: req.hits_subtrahend,
    }
}

/// `answer` as Envoy's response: a status per descriptor, and the headers
/// asked for (`go`: envoyproxy/ratelimit's; `ietf`: `RateLimit-Policy`,
/// `RateLimit` and, on a denial, `Retry-After`).
fn response(answer: &Answer<'_>, go: Option<&GoHeaders>, ietf: bool) -> RateLimitResponse {
    let mut statuses = Vec::with_capacity(answer.descriptors.len());
    let mut policy = String::new();
    let mut ratelimit = String::new();
    for d in &answer.descriptors {
        statuses.push(DescriptorStatus {
            code: if d.over { Code::OverLimit } else { Code::Ok } as i32,
            current_limit: d.limit.map(|l| PbRateLimit {
                name: l.name.to_owned(),
                requests_per_unit: l.requests_per_unit,
                unit: pb_unit(l.unit) as i32,
            }),
            limit_remaining: d.remaining,
            duration_until_reset: d.reset.map(duration),
            ..Default::default()
        });
        if let Some(item) = &d.ietf {
            fields::push_policy_item(&mut policy, &item.name, item.quota, item.window);
            fields::push_ratelimit_item(&mut ratelimit, &item.name, item.remaining, Some(item.t));
        }
    }
    let mut headers = Vec::new();
    if let Some(names) = go {
        go_headers(names, answer, &statuses, &mut headers);
    }
    if ietf {
        if !policy.is_empty() {
            headers.push(header("RateLimit-Policy", policy));
            headers.push(header("RateLimit", ratelimit));
        }
        if answer.denied
            && let Some(secs) = answer.retry_after
        {
            headers.push(header("Retry-After", secs.to_string()));
        }
    }
    RateLimitResponse {
        overall_code: if answer.denied {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32,
        statuses,
        response_headers_to_add: headers,
        ..Default::default()
    }
}

/// A descriptor value as text: itself when it is UTF-8 (as Envoy sends a
/// proto `string`); else each byte that is not part of a UTF-8 character as
/// `\xNN`, so that distinct values stay distinct (a value that reads as
/// such an escape shares its counter: never more admitted).
fn value_text(value: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(value) {
        return Cow::Borrowed(text);
    }
    let mut text = String::with_capacity(value.len() + 8);
    for chunk in value.utf8_chunks() {
        text.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(text, "\\x{b:02x}");
        }
    }
    Cow::Owned(text)
}

/// `unit` as Envoy's protocol writes it.
fn pb_unit(unit: Unit) -> PbUnit {
    match unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

/// `envoy.type.v3.RateLimitUnit` (an override's unit) as a [`Unit`].
fn override_unit(unit: i32) -> Option<Unit> {
    // SECOND = 1, MINUTE, HOUR, DAY, MONTH = 5, YEAR = 6, WEEK = 7
    Some(match unit {
        1 => Unit::Second,
        2 => Unit::Minute,
        3 => Unit::Hour,
        4 => Unit::Day,
        5 => Unit::Month,
        6 => Unit::Year,
        7 => Unit::Week,
        _ => return None,
    })
}

/// `d` in whole seconds, rounded up, as a `duration_until_reset`: Envoy
/// builds `X-RateLimit-Reset` from its seconds alone (as
/// envoyproxy/ratelimit sends them), so 0.66 s must read 1, not 0.
fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(ceil_secs(d)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// envoyproxy/ratelimit's response headers ([`ServiceOptions::go_headers`](crate::service::ServiceOptions::go_headers)):
/// those of the descriptor closest to its limit (the fewest remaining of
/// those with a limit; a descriptor over its limit, not in quota mode,
/// wins, the last such one), as that service picks it.
fn go_headers(
    names: &GoHeaders,
    answer: &Answer<'_>,
    statuses: &[DescriptorStatus],
    headers: &mut Vec<HeaderValue>,
) {
    let mut tightest: Option<&DescriptorStatus> = None;
    let mut fewest = u32::MAX;
    for (d, status) in answer.descriptors.iter().zip(statuses) {
        let Some(_) = &status.current_limit else {
            continue;
        };
        if status.limit_remaining < fewest {
            tightest = Some(status);
            fewest = status.limit_remaining;
        }
        if status.code == Code::OverLimit as i32 && !d.quota_mode {
            tightest = Some(status);
            fewest = 0;
        }
    }
    let Some(status) = tightest else { return };
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds.max(0));
    headers.push(header(&names.limit, limit.to_string()));
    headers.push(header(&names.remaining, status.limit_remaining.to_string()));
    headers.push(header(&names.reset, reset.to_string()));
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.should_rate_limit_inner(&request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }
}

impl From<CallError> for Status {
    fn from(e: CallError) -> Self {
        match &e {
            CallError::Invalid(_) => Status::invalid_argument(e.to_string()),
            CallError::Store(_) => Status::unavailable(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_are_not_utf8_stay_apart_as_text() {
        assert_eq!(value_text(b"plain"), "plain");
        assert_eq!(value_text("é".as_bytes()), "é");
        assert_eq!(value_text(b"k-\xff"), "k-\\xff");
        assert_eq!(value_text(b"\xc3(\xfe"), "\\xc3(\\xfe");
        assert_ne!(value_text(b"k-\xff"), value_text(b"k-\xfe"));
    }
}
