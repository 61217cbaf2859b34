//! `examples/tokens/`: token budgets checked before the request and
//! charged when the stream is done (Envoy's `apply_on_stream_done`),
//! reservations settled with `hits_subtrahend`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tower_redis_ratelimit::MemoryStore;

use super::*;
use crate::pb::rate_limit_response::Code;
use crate::pb::{RateLimitRequest, RateLimitResponse};
use crate::service::{RlsService, ServiceOptions};

pub(super) const TOKENS_ENVOY: &str = "examples/tokens/envoy.yaml";
const TOKENS_CONFIG: &str = "examples/tokens/config";
pub(super) const TOKENS_FILE: &str = "examples/tokens/config/ai.yaml";
/// The budgets of `examples/tokens/config/ai.yaml`.
const USER_BUDGET: u64 = 100_000;
const ORG_BUDGET: u64 = 10_000_000;
/// The lines of `ai.yaml` that set them (an edit adds a `charge` after).
const USER_LIMIT: &str = "      requests_per_unit: 100000\n";
const ORG_LIMIT: &str = "      requests_per_unit: 10000000\n";

/// Waits out the last seconds of an hour, so that a test of the example's
/// hour (a fixed window aligned to the epoch) and calendar month of UTC
/// (which starts on an hour) runs inside one window.
async fn inside_one_hour() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let into = now.as_secs() % 3600;
    if into >= 3600 - 30 {
        tokio::time::sleep(Duration::from_secs(3600 - into + 1)).await;
    }
}

/// `examples/tokens/config/ai.yaml` with `edit` applied to its text (which
/// must change it), loaded.
fn tokens_config_edited(edit: impl Fn(&str) -> String) -> Config {
    let text = read(root().join(TOKENS_FILE));
    let edited = edit(&text);
    assert_ne!(edited, text, "the edit changed nothing");
    match Config::from_sources([("ai.yaml", edited.as_str())], LoadOptions::default()) {
        Ok(c) => {
            assert!(c.warnings().is_empty(), "{:?}", c.warnings());
            c
        }
        Err(e) => panic!("{e}"),
    }
}

/// Envoy's two calls for the token example, against the service: the
/// descriptors its route's `rate_limits` make, before the request (the
/// entries without `apply_on_stream_done`) and when the stream is done.
struct Gateway {
    envoy: Envoy,
    service: RlsService,
}

impl Gateway {
    fn new(config: Config) -> Gateway {
        let service = match RlsService::new(config, MemoryStore::new(), ServiceOptions::default()) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        Gateway {
            envoy: Envoy::read(TOKENS_ENVOY),
            service,
        }
    }

    /// The call Envoy sends for a request of `user` in `org`: before the
    /// request, or when the stream is done with `usage` tokens in the
    /// dynamic metadata; `hits_subtrahend` as given (0: none, as Envoy).
    fn request(
        &self,
        on_stream_done: bool,
        user: &str,
        org: &str,
        usage: u64,
        hits_subtrahend: u32,
    ) -> RateLimitRequest {
        let headers = [("x-user-id", user), ("x-org-id", org)];
        let client = Client {
            addr: "10.0.0.1",
            headers: &headers,
        };
        let request = RateLimitRequest {
            domain: self.envoy.domain().to_owned(),
            descriptors: self
                .envoy
                .limits()
                .iter()
                .filter(|l| l.on_stream_done == on_stream_done)
                .filter_map(|l| l.descriptor(&client, usage))
                .collect(),
            hits_addend: 0,
            hits_subtrahend,
        };
        // [user, org]: the statuses are read in this order
        let keys: Vec<&str> = request
            .descriptors
            .iter()
            .map(|d| d.entries[0].key.as_str())
            .collect();
        assert_eq!(keys, ["user", "org"]);
        request
    }

    async fn send(&self, request: RateLimitRequest) -> RateLimitResponse {
        match self.service.should_rate_limit_inner(&request).await {
            Ok(r) => r,
            Err(e) => panic!("{e:?}"),
        }
    }

    /// The call before the request: its answer.
    async fn check(&self, user: &str, org: &str) -> RateLimitResponse {
        self.send(self.request(false, user, org, 0, 0)).await
    }

    /// The call when the stream is done, `usage` tokens used (Envoy ignores
    /// the answer; returned for the test).
    async fn report(&self, user: &str, org: &str, usage: u64) -> RateLimitResponse {
        self.send(self.request(true, user, org, usage, 0)).await
    }

    /// A settle at the protocol level: the stream-done descriptors with
    /// `usage`, and `hits_subtrahend` (what was reserved).
    async fn settle(
        &self,
        user: &str,
        org: &str,
        usage: u64,
        subtrahend: u32,
    ) -> RateLimitResponse {
        self.send(self.request(true, user, org, usage, subtrahend))
            .await
    }

    /// A reservation at the protocol level: the request-time descriptors
    /// with `hits` each (as a route would send a `max_tokens` it reads
    /// from the request).
    async fn reserve(&self, user: &str, org: &str, hits: u64) -> RateLimitResponse {
        let mut request = self.request(false, user, org, 0, 0);
        for d in &mut request.descriptors {
            d.hits_addend = Some(hits);
        }
        self.send(request).await
    }
}

fn ok(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::Ok as i32
}

/// What is left of the user's (0) and the organisation's (1) budget.
fn left(r: &RateLimitResponse) -> (u32, u32) {
    (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining)
}

#[test]
fn the_token_example_checks_before_the_request_and_reports_when_the_stream_is_done() {
    let envoy = Envoy::read(TOKENS_ENVOY);
    assert_eq!(envoy.domain(), "ai");
    let config = load(TOKENS_CONFIG);
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
    let limits = envoy.limits();
    let (done, before): (Vec<&Limit>, Vec<&Limit>) = limits.iter().partition(|l| l.on_stream_done);
    assert!(!before.is_empty() && !done.is_empty());
    // before the request a look (0 hits); when the stream is done the
    // tokens that AI Gateway's external processor puts in the metadata
    for l in &before {
        assert_eq!(l.hits, Hits::Number(0));
    }
    for l in &done {
        assert_eq!(
            l.hits,
            Hits::Format("%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%".to_owned())
        );
    }
    // the same descriptors at both times, each reaching a budget
    let headers = [("x-user-id", "u1"), ("x-org-id", "o1")];
    let client = Client {
        addr: "10.0.0.1",
        headers: &headers,
    };
    let entries = |ls: &[&Limit]| -> Vec<Vec<(String, String)>> {
        ls.iter()
            .map(|l| {
                l.descriptor(&client, 0)
                    .expect("a descriptor")
                    .entries
                    .into_iter()
                    .map(|e| (e.key, String::from_utf8(e.value).expect("UTF-8")))
                    .collect()
            })
            .collect()
    };
    assert_eq!(entries(&before), entries(&done));
    assert_eq!(entries(&before).len(), 2);
    for d in entries(&before) {
        let d: Vec<(&str, &str)> = d.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert!(
            config
                .lookup("ai", &d)
                .is_some_and(|r| !r.unlimited && r.requests_per_unit > 0),
            "no budget for the descriptor {d:?}"
        );
    }
    // what the comments say: the user's hour and the organisation's
    // calendar month, both with the service's default charge (every
    // report counted)
    let Some(user) = config.lookup("ai", &[("user", "u1")]) else {
        panic!("no user budget");
    };
    assert_eq!(
        (user.requests_per_unit, user.unit, user.charge),
        (USER_BUDGET as u32, Some(Unit::Hour), None)
    );
    let Some(org) = config.lookup("ai", &[("org", "o1")]) else {
        panic!("no org budget");
    };
    assert_eq!(
        (org.requests_per_unit, org.unit, org.charge),
        (ORG_BUDGET as u32, Some(Unit::Month), None)
    );
    assert!(org.calendar.is_some());
    // a request without x-org-id sends the user's descriptor alone
    let alone = Client {
        addr: "10.0.0.1",
        headers: &[("x-user-id", "u1")],
    };
    for phase in [&before, &done] {
        assert_eq!(
            phase.iter().filter_map(|l| l.descriptor(&alone, 0)).count(),
            1
        );
    }
}

/// A look before each request, then a report of 30,000 tokens: the report
/// that takes the user past 100,000 is charged (120,000 recorded) and the
/// next request is denied; the organisation's budget (the default
/// `charge: always`)
/// counted every report, the denied one too.
#[tokio::test]
async fn a_report_past_the_budget_is_charged_and_denies_the_next_request() {
    inside_one_hour().await;
    let gw = Gateway::new(load(TOKENS_CONFIG));
    let mut admitted = 0;
    let mut used = 0;
    for _ in 0..10 {
        if !ok(&gw.check("u1", "o1").await) {
            break;
        }
        admitted += 1;
        let report = gw.report("u1", "o1", 30_000).await;
        used += 30_000;
        // (the answer to a report, which Envoy ignores: over once past)
        assert_eq!(ok(&report), used <= USER_BUDGET, "{report:?}");
    }
    assert_eq!((admitted, used), (4, 120_000));
    let look = gw.check("u1", "o1").await;
    assert!(!ok(&look));
    assert_eq!(look.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(left(&look), (0, (ORG_BUDGET - 120_000) as u32), "{look:?}");
    // another user of the organisation: its own hour is whole, the month
    // is shared
    let other = gw.check("u2", "o1").await;
    assert!(ok(&other));
    assert_eq!(
        left(&other),
        (USER_BUDGET as u32, (ORG_BUDGET - 120_000) as u32)
    );
}

/// Why the organisation's budget keeps the default `charge: always`: with
/// `over`, the report denied by the user's budget leaves the
/// organisation's (which had room) as it was, and its 30,000 tokens are
/// never counted there.
#[tokio::test]
async fn with_charge_over_the_org_would_miss_the_report_its_user_was_denied() {
    inside_one_hour().await;
    let gw = Gateway::new(tokens_config_edited(|t| {
        t.replace(ORG_LIMIT, &format!("{ORG_LIMIT}      charge: over\n"))
    }));
    while ok(&gw.check("u1", "o1").await) {
        gw.report("u1", "o1", 30_000).await;
    }
    let look = gw.check("u1", "o1").await;
    assert_eq!(left(&look), (0, (ORG_BUDGET - 90_000) as u32), "{look:?}");
}

/// Streams run at once, checked before any report, each using up to
/// `MAX_USAGE` tokens, with at most `IN_FLIGHT` running: a check is admitted
/// exactly while the tokens reported are within the user's budget (so every
/// report past it denies the next request), and the budget is overspent by
/// at most the tokens of the streams in flight when it ran out, at most
/// `IN_FLIGHT × MAX_USAGE`. The organisation's budget counts every token.
#[tokio::test]
async fn a_budget_is_overspent_by_at_most_the_streams_in_flight() {
    const IN_FLIGHT: usize = 6;
    const MAX_USAGE: u64 = 9_000;
    inside_one_hour().await;
    let gw = Gateway::new(load(TOKENS_CONFIG));
    // xorshift64: the same run every time
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut running = 0usize;
    let (mut used, mut admitted, mut denied) = (0u64, 0u32, 0u32);
    for _ in 0..400 {
        if running < IN_FLIGHT && (running == 0 || next() % 3 != 0) {
            let check = gw.check("u9", "o9").await;
            assert_eq!(
                ok(&check),
                used <= USER_BUDGET,
                "{used} tokens reported: {check:?}"
            );
            if ok(&check) {
                running += 1;
                admitted += 1;
            } else {
                denied += 1;
            }
        }
        if running > 0 && (running == IN_FLIGHT || next() % 2 == 0) {
            let usage = 1 + next() % MAX_USAGE;
            gw.report("u9", "o9", usage).await;
            used += usage;
            running -= 1;
            assert!(
                used <= USER_BUDGET + IN_FLIGHT as u64 * MAX_USAGE,
                "{used} tokens on a budget of {USER_BUDGET}"
            );
        }
    }
    while running > 0 {
        gw.report("u9", "o9", MAX_USAGE).await;
        used += MAX_USAGE;
        running -= 1;
    }
    assert!(used <= USER_BUDGET + IN_FLIGHT as u64 * MAX_USAGE, "{used}");
    assert!(used > USER_BUDGET, "the budget ran out ({used} tokens)");
    assert!(
        admitted > 10 && denied > 10,
        "{admitted} admitted, {denied} denied"
    );
    let look = gw.check("u9", "o9").await;
    assert!(!ok(&look));
    assert_eq!(
        left(&look).1 as u64,
        ORG_BUDGET - used,
        "every token counted"
    );
}

/// The values a report or a refund may carry that make no sense, on the
/// example's budgets: each has a defined answer. A report is charged as it
/// comes (Envoy sends at most 10^9 a descriptor): one of 10^9 tokens spends
/// the user's hour and, charged always, the organisation's month, to the
/// end of each window.
#[tokio::test]
async fn a_huge_report_spends_the_budgets_to_the_end_of_their_windows() {
    inside_one_hour().await;
    let gw = Gateway::new(load(TOKENS_CONFIG));
    let r = gw.report("u6", "o6", 1_000_000_000).await;
    assert!(!ok(&r));
    assert_eq!(left(&r), (0, 0), "{r:?}");
    let look = gw.check("u6", "o6").await;
    assert!(!ok(&look));
    assert_eq!(look.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(look.statuses[1].code, Code::OverLimit as i32);
    let reset = |i: usize| {
        look.statuses[i]
            .duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds)
    };
    assert!((1..=3600).contains(&reset(0)), "the hour: {}", reset(0));
    assert!(
        (1..=31 * 86_400).contains(&reset(1)),
        "the month: {}",
        reset(1)
    );
}

/// Reserve, then settle, at the protocol level (`hits_subtrahend`), with
/// both budgets `charge: admitted` as a reservation wants: the unused part
/// comes back; both fields set apply their difference; a subtrahend larger
/// than anything charged, or `u32::MAX`, gives back everything, never more
/// than the budget; a huge reservation is denied and takes nothing.
#[tokio::test]
async fn reserve_then_settle_with_hits_subtrahend_on_the_example_budgets() {
    inside_one_hour().await;
    let gw = Gateway::new(tokens_config_edited(|t| {
        t.replace(ORG_LIMIT, &format!("{ORG_LIMIT}      charge: admitted\n"))
            .replace(USER_LIMIT, &format!("{USER_LIMIT}      charge: admitted\n"))
    }));
    let (user, org) = (USER_BUDGET as u32, ORG_BUDGET as u32);
    // 5,000 reserved, 2,000 used: 3,000 back
    assert!(ok(&gw.reserve("u7", "o7", 5_000).await));
    let r = gw.settle("u7", "o7", 2_000, 5_000).await;
    assert!(ok(&r));
    assert_eq!(left(&r), (user - 2_000, org - 2_000), "{r:?}");
    // 5,000 reserved, 7,000 used: both fields, 2,000 more charged
    assert!(ok(&gw.reserve("u7", "o7", 5_000).await));
    let r = gw.settle("u7", "o7", 7_000, 5_000).await;
    assert_eq!(left(&r), (user - 9_000, org - 9_000), "{r:?}");
    // a subtrahend larger than anything charged: back to the whole
    // budget, never above it
    let r = gw.settle("u7", "o7", 0, 1_000_000).await;
    assert!(ok(&r));
    assert_eq!(left(&r), (user, org), "{r:?}");
    // u32::MAX: everything back
    assert!(ok(&gw.reserve("u7", "o7", 50_000).await));
    let r = gw.settle("u7", "o7", 0, u32::MAX).await;
    assert_eq!(left(&r), (user, org), "{r:?}");
    // a reservation larger than the budget: denied, nothing taken anywhere
    let r = gw.reserve("u7", "o7", 1_000_000_000).await;
    assert!(!ok(&r));
    assert_eq!(left(&r), (user, org), "{r:?}");
    // and one that fits the user but not what is left: denied, the
    // organisation's untouched
    assert!(ok(&gw.reserve("u7", "o7", 60_000).await));
    let r = gw.reserve("u7", "o7", 60_000).await;
    assert!(!ok(&r));
    assert_eq!(left(&r), (user - 60_000, org - 60_000), "{r:?}");
}

/// The caution: the service cannot tell which request a refund is for.
/// A refund sent for a reservation that was denied (which took nothing)
/// gives back what other requests used.
#[tokio::test]
async fn a_refund_for_a_denied_reservation_gives_back_what_others_used() {
    inside_one_hour().await;
    let gw = Gateway::new(tokens_config_edited(|t| {
        t.replace(ORG_LIMIT, &format!("{ORG_LIMIT}      charge: admitted\n"))
    }));
    // a used 8,000 of the organisation's month
    assert!(ok(&gw.reserve("a", "o8", 8_000).await));
    // b's reservation of 150,000 is over its hour: denied, nothing taken
    let r = gw.reserve("b", "o8", 150_000).await;
    assert!(!ok(&r));
    assert_eq!(left(&r).1, ORG_BUDGET as u32 - 8_000);
    // a refund of it anyway: the organisation gets a's 8,000 back
    let r = gw.settle("b", "o8", 0, 150_000).await;
    assert_eq!(left(&r).1, ORG_BUDGET as u32, "{r:?}");
}
