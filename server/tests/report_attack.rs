//! Attacks on usage reports (`charge`), refunds (`hits_subtrahend`) and the
//! answers after a denied call's hits are recorded, on the memory store and
//! a private Redis: every knob at 0, huge and `u32::MAX`/`u64::MAX`, many
//! and duplicated descriptors, overrides, quota and shadow mode, replaced,
//! unlimited and zero limits, every strategy, races, and each call pattern
//! a gateway uses (check before, report after, reserve then settle).
//!
//! A test that passes documents a defence. A test marked `#[ignore]`
//! asserts the correct behaviour of a bug found here (its reason says
//! what is wrong); run them with `--ignored`.

// (a spawned call's future is deep: the Redis client's connect)
#![recursion_limit = "256"]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit_server::config::Charge;
use tower_redis_ratelimit_server::pb::rate_limit_descriptor::RateLimitOverride;
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tower_redis_ratelimit_server::service::{CallError, RlsService, ServiceOptions};

/// Every kind of rule, each 100 an hour unless it says.
const CONFIG: &str = r#"
domain: atk
descriptors:
  - key: fw
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: org
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: always
    rate_limit: {unit: hour, requests_per_unit: 1000, charge: always}
  - key: admitted
    rate_limit: {unit: hour, requests_per_unit: 100, charge: admitted}
  - key: fixed-window
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: fixed-window}
  - key: sliding-window-log
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: sliding-window-log}
  - key: sliding-window-counter
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: sliding-window-counter}
  - key: token-bucket
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: token-bucket}
  - key: leaky-bucket
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: leaky-bucket}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 100, strategy: gcra}
  - key: biglog
    rate_limit: {unit: hour, requests_per_unit: 10000, strategy: sliding-window-log}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 100, calendar: UTC}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: zero
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: old
    rate_limit: {name: old, unit: hour, requests_per_unit: 100}
  - key: new
    rate_limit:
      name: new
      unit: hour
      requests_per_unit: 100
      replaces: [{name: old}]
  - key: huge
    rate_limit: {unit: hour, requests_per_unit: 4294967295}
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 10}
"#;

/// The strategies that record and give back (a leaky bucket does neither,
/// see its own tests).
const STRATEGIES: [&str; 6] = [
    "fw",
    "fixed-window",
    "sliding-window-log",
    "sliding-window-counter",
    "token-bucket",
    "gcra",
];

fn service<S: Store + Clone>(store: S, options: ServiceOptions) -> RlsService {
    RlsService::new(config(CONFIG), store, options).expect("service")
}

fn headers() -> ServiceOptions {
    ServiceOptions::default().headers(true)
}

async fn try_call(
    svc: &RlsService,
    descriptors: Vec<RateLimitDescriptor>,
    hits: u32,
    subtrahend: u32,
) -> Result<RateLimitResponse, CallError> {
    svc.should_rate_limit_inner(&RateLimitRequest {
        domain: "atk".into(),
        descriptors,
        hits_addend: hits,
        hits_subtrahend: subtrahend,
    })
    .await
}

/// One call: `descriptors`, the request's `hits_addend` and
/// `hits_subtrahend`.
async fn call(
    svc: &RlsService,
    descriptors: Vec<RateLimitDescriptor>,
    hits: u32,
    subtrahend: u32,
) -> RateLimitResponse {
    try_call(svc, descriptors, hits, subtrahend)
        .await
        .expect("answer")
}

fn d(key: &str, value: &str) -> RateLimitDescriptor {
    desc(&[(key, value)])
}

fn h(key: &str, value: &str, hits: u64) -> RateLimitDescriptor {
    with_hits(d(key, value), hits)
}

fn with_override(mut d: RateLimitDescriptor, n: u32) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit: n,
        // envoy.type.v3.RateLimitUnit HOUR
        unit: 3,
    });
    d
}

/// What is left of one descriptor: a look (`hits_addend: 0`).
async fn left(svc: &RlsService, key: &str, value: &str) -> (Code, u32) {
    let r = call(svc, vec![h(key, value, 0)], 0, 0).await;
    (overall(&r), r.statuses[0].limit_remaining)
}

/// The count of an aligned fixed window rule's counter (`fw`, `org`...),
/// exactly, past its limit too: a look through an override of `u32::MAX`
/// an hour, which counts in the rule's counter.
async fn count_of(svc: &RlsService, key: &str, value: &str) -> u64 {
    let r = call(svc, vec![with_override(h(key, value, 0), u32::MAX)], 0, 0).await;
    u64::from(u32::MAX) - u64::from(r.statuses[0].limit_remaining)
}

fn reset_secs(r: &RateLimitResponse, i: usize) -> i64 {
    r.statuses[i]
        .duration_until_reset
        .as_ref()
        .map_or(-1, |d| d.seconds)
}

fn retry_after(r: &RateLimitResponse) -> Option<u64> {
    header(r, "Retry-After").and_then(|v| v.parse().ok())
}

fn redis_keys(redis: &Redis) -> Vec<String> {
    redis_cli(redis, &["--scan"])
        .lines()
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs `f` on the memory store and on a private Redis.
macro_rules! both_stores {
    ($(#[$m:meta])* $memory:ident, $redis:ident, $body:ident) => {
        $(#[$m])*
        #[tokio::test]
        async fn $memory() {
            $body(MemoryStore::new(), None).await;
        }

        $(#[$m])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            let redis = Redis::start();
            $body(redis_store(&redis), Some(&redis)).await;
        }
    };
}

// ---- Retry-After after a recorded denial ------------------------------------

/// A check of 1 denied on a bucket or a sliding counter records its hit
/// (`charge: over`), so the next check of 1 fits later than the denial's
/// own decision said. The answer's Retry-After must be when the same call
/// fits: an oracle is the same check on a twin service (the same rules,
/// hence the same counters) with `--charge admitted`, which records
/// nothing, asked right after.
async fn retry_after_is_when_the_same_call_fits<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let over = service(store.clone(), headers());
    let oracle = service(store, headers().charge(Charge::Admitted));
    let mut wrong = Vec::new();
    for strategy in ["gcra", "token-bucket", "sliding-window-counter"] {
        let r = call(&over, vec![h(strategy, "ra", 100)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        let denied = call(&over, vec![h(strategy, "ra", 1)], 0, 0).await;
        assert_eq!(overall(&denied), Code::OverLimit, "{strategy}: {denied:?}");
        let truth = call(&oracle, vec![h(strategy, "ra", 1)], 0, 0).await;
        assert_eq!(overall(&truth), Code::OverLimit, "{strategy}: {truth:?}");
        let (said, fits) = (retry_after(&denied), retry_after(&truth));
        if said < fits {
            wrong.push(format!(
                "{strategy}: Retry-After {said:?} s, but a check of 1 fits only after {fits:?} s"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

both_stores!(
    retry_after_of_a_recorded_denial_in_memory,
    retry_after_of_a_recorded_denial_on_redis,
    retry_after_is_when_the_same_call_fits
);

// ---- a request too large for one store call ---------------------------------

/// Two sliding-log descriptors of 6,000 each (each within its 10,000) and
/// the organisation's fixed window (40 of 1,000): together 12,000 log
/// times, past what one store call may write, so the request is denied as
/// one that never fits. No descriptor was over its limit: by `charge:
/// over` ("the descriptors that had room are left as they were") nothing
/// may be recorded, least of all on the organisation's fixed window,
/// which has nothing to do with the log bound.
async fn too_large_charges_nothing_where_there_was_room<S: Store + Clone>(
    store: S,
    _: Option<&Redis>,
) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default().charge(Charge::Over));
    let r = call(
        &svc,
        vec![
            h("biglog", "a", 6000),
            h("biglog", "b", 6000),
            h("org", "tl", 40),
        ],
        0,
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    let org = count_of(&svc, "org", "tl").await;
    let (_, a) = left(&svc, "biglog", "a").await;
    let (_, b) = left(&svc, "biglog", "b").await;
    assert_eq!(
        (org, a, b),
        (0, 10_000, 10_000),
        "a denied call that was over no limit charged the org {org} and left the logs {a} and {b}"
    );
}

both_stores!(
    too_large_requests_charge_descriptors_with_room_in_memory,
    too_large_requests_charge_descriptors_with_room_on_redis,
    too_large_charges_nothing_where_there_was_room
);

// ---- leaky bucket -----------------------------------------------------------

/// A report past a leaky bucket's limit is recorded as on every other
/// strategy (`charge: over`: "a usage report is never lost"): the next
/// look is denied. The library's leaky bucket has no adjust (its admitted
/// requests hold their queue slots), so `penalize` leaves it as it was.
async fn leaky_bucket_records_a_report<S: Store + Clone>(store: S, _: Option<&Redis>) {
    let svc = service(store, ServiceOptions::default());
    let r = call(&svc, vec![h("leaky-bucket", "lr", 50)], 0, 0).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    let r = call(&svc, vec![h("leaky-bucket", "lr", 250)], 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    let (code, remaining) = left(&svc, "leaky-bucket", "lr").await;
    assert_eq!(
        code,
        Code::OverLimit,
        "the report of 250 was lost: {remaining} left"
    );
}

both_stores!(
    a_leaky_bucket_loses_reports_in_memory,
    a_leaky_bucket_loses_reports_on_redis,
    leaky_bucket_records_a_report
);

/// What a leaky bucket does with a refund today: nothing (documented
/// here; `hits_subtrahend` is answered as a look).
async fn leaky_bucket_refund_is_a_look<S: Store + Clone>(store: S, _: Option<&Redis>) {
    let svc = service(store, ServiceOptions::default());
    let r = call(&svc, vec![h("leaky-bucket", "lf", 50)], 0, 0).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    let before = r.statuses[0].limit_remaining;
    let r = call(&svc, vec![d("leaky-bucket", "lf")], 0, 30).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert!(
        r.statuses[0].limit_remaining <= before + 1,
        "{before} then {r:?}"
    );
}

both_stores!(
    a_leaky_bucket_ignores_refunds_in_memory,
    a_leaky_bucket_ignores_refunds_on_redis,
    leaky_bucket_refund_is_a_look
);

// ---- a sliding log's capped charge, then a refund ----------------------------

/// Two streams of one user on a sliding log of 100 an hour, reserve then
/// settle (Envoy's `hits_addend` = used, `hits_subtrahend` = reserved):
/// A reserves 60, B reserves 40 (both admitted: the log is full); A used
/// 200 (its settle charges 140 more, denied and recorded past the
/// limit); B used nothing (its settle gives 40 back). 200 were used, so
/// every later check must be denied in the window, as on every other
/// strategy (a fixed window counts 240 - 40 = 200). On the log, the
/// charge of 140 is kept as the 101 newest times (the `n + 1` cap), which
/// drops B's 40 reserved times; B's refund then removes 40 of A's
/// recorded ones: 61 times left, and 39 more are admitted.
async fn capped_log_then_refund<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    let mut walked = Vec::new();
    for strategy in STRATEGIES {
        let k = || d(strategy, "streams");
        let r = call(&svc, vec![with_hits(k(), 60)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        let r = call(&svc, vec![with_hits(k(), 40)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        // A: used 200 of its 60
        let r = call(&svc, vec![k()], 200, 60).await;
        assert_eq!(overall(&r), Code::OverLimit, "{strategy}: {r:?}");
        // B: used 0 of its 40
        call(&svc, vec![k()], 0, 40).await;
        let mut admitted = 0;
        for _ in 0..100 {
            let r = call(&svc, vec![with_hits(k(), 1)], 0, 0).await;
            if overall(&r) != Code::Ok {
                break;
            }
            admitted += 1;
        }
        if admitted > 0 {
            walked.push(format!(
                "{strategy}: {admitted} admitted after 200 used of 100"
            ));
        }
        // a denied reservation, then its refund (nothing was used): 90
        // used by others, a reservation of 20 denied and recorded (the
        // log keeps the 101 newest times), its 20 given back: the others'
        // 90 must still count
        let k = || d(strategy, "denied");
        let r = call(&svc, vec![with_hits(k(), 90)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        let r = call(&svc, vec![with_hits(k(), 20)], 0, 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{strategy}: {r:?}");
        // (the sliding log gives nothing back: it stays over)
        let r = call(&svc, vec![k()], 0, 20).await;
        if strategy != "sliding-window-log" {
            assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        }
        if r.statuses[0].limit_remaining > 10 {
            walked.push(format!(
                "{strategy}: {} left after 90 used of 100 and a denied reservation refunded",
                r.statuses[0].limit_remaining
            ));
        }
    }
    assert!(walked.is_empty(), "{walked:#?}");
}

both_stores!(
    a_refund_after_a_capped_log_charge_walks_past_in_memory,
    a_refund_after_a_capped_log_charge_walks_past_on_redis,
    capped_log_then_refund
);

// ---- one call's debt on a bucket ---------------------------------------------

/// One denied call of `u64::MAX` hits (or a report of a billion tokens)
/// on a bucket rule of 100 an hour: recorded as debt, repaid at 100 an
/// hour, capped only by the library's `MAX_DEBT` (2^50 µs, 35.7 years).
/// One call locks its descriptor (an organisation's, shared by everyone in
/// it) out for decades, and its Redis key lives as long. A fixed window
/// (the Go service's) forgets it at the end of the window, a sliding log
/// after one period (its `n + 1` cap): a bucket's recorded debt should be
/// bounded alike, at most the longest period the library takes (366 days).
async fn one_call_locks_a_bucket<S: Store + Clone>(store: S, redis: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    let most = 366 * 86_400;
    let mut long = Vec::new();
    for strategy in STRATEGIES {
        let r = call(&svc, vec![h(strategy, "debt", u64::MAX)], 0, 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{strategy}: {r:?}");
        let look = call(&svc, vec![h(strategy, "debt", 0)], 0, 0).await;
        let reset = reset_secs(&look, 0);
        if reset > most {
            long.push(format!(
                "{strategy}: locked out for {} days by one call",
                reset / 86_400
            ));
        }
    }
    if let Some(redis) = redis {
        for key in redis_keys(redis) {
            let ttl: i64 = redis_cli(redis, &["ttl", &key])
                .trim()
                .parse()
                .unwrap_or(-3);
            if ttl > most + 3600 {
                long.push(format!("key {key}: TTL {} days", ttl / 86_400));
            }
        }
    }
    assert!(long.is_empty(), "{long:#?}");
}

both_stores!(
    one_call_locks_a_bucket_for_decades_in_memory,
    one_call_locks_a_bucket_for_decades_on_redis,
    one_call_locks_a_bucket
);

// ---- duplicates under charge: always ------------------------------------------

/// A denied call with the same `charge: always` descriptor twice (40
/// each): both are recorded, 80 in all, and each status answers what is
/// left after the call, 920, as a look then says.
async fn always_duplicates_answer_what_is_left<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    call(&svc, vec![h("fw", "dup", 100)], 0, 0).await;
    let r = call(
        &svc,
        vec![
            h("fw", "dup", 1),
            h("always", "dup", 40),
            h("always", "dup", 40),
        ],
        0,
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    let (_, after) = left(&svc, "always", "dup").await;
    assert_eq!(after, 920, "both copies recorded");
    assert_eq!(
        (r.statuses[1].limit_remaining, r.statuses[2].limit_remaining),
        (after, after),
        "{r:?}"
    );
}

both_stores!(
    duplicates_recorded_by_charge_always_overstate_what_is_left_in_memory,
    duplicates_recorded_by_charge_always_overstate_what_is_left_on_redis,
    always_duplicates_answer_what_is_left
);

// ---- refunds across a window's end ----------------------------------------------

/// Seconds and milliseconds since the epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Sleeps to 100 ms into the next second.
async fn next_second() -> u64 {
    let now = now_ms();
    let target = (now / 1000 + 1) * 1000 + 100;
    tokio::time::sleep(Duration::from_millis(target - now)).await;
    target / 1000
}

/// A stream reserves 10 (a limit of 10 a second, an aligned fixed window)
/// late in one window and is done in the next, having used nothing: its
/// refund gives back 10. Those 10 were counted in the window that ended;
/// the new window holds another stream's 10. A refund must not give back
/// units that the current window never took (the library's own `settle`
/// gives back only while the reservation's units still count): after it,
/// a check in the new window is still denied. Retried when the machine is
/// too slow to keep each step inside its second.
async fn refund_in_the_next_window<S: Store + Clone>(store: S, _: Option<&Redis>) {
    let svc = service(store, ServiceOptions::default());
    for attempt in 0..5 {
        let v = format!("w{attempt}");
        let first = next_second().await;
        let r = call(&svc, vec![h("sec", &v, 10)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{r:?}");
        let second = next_second().await;
        if second != first + 1 {
            continue;
        }
        // another stream spends the new window
        let r = call(&svc, vec![h("sec", &v, 10)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{r:?}");
        // the first stream is done, used nothing
        call(&svc, vec![d("sec", &v)], 0, 10).await;
        let mut admitted = 0;
        for _ in 0..20 {
            if overall(&call(&svc, vec![h("sec", &v, 1)], 0, 0).await) == Code::Ok {
                admitted += 1;
            }
        }
        if now_ms() / 1000 != second {
            continue;
        }
        assert_eq!(
            admitted, 0,
            "the new window spent its 10, then a refund of the last window's \
             reservation admitted {admitted} more in it"
        );
        return;
    }
    panic!("no attempt kept inside its second");
}

both_stores!(
    #[ignore = "KNOWN, a stated bound (the guide's Refunds): Envoy sends no time or id of the \
                reservation a refund is for, so RateLimiter::reward gives back in the current \
                window: a stream reserved before a window's end and refunded after it adds \
                its unused part to the new window (at most one reservation's unused part per \
                stream crossing the end)"]
    a_refund_after_the_window_ends_walks_past_the_new_window_in_memory,
    a_refund_after_the_window_ends_walks_past_the_new_window_on_redis,
    refund_in_the_next_window
);

// ---- refunds of denied reservations -------------------------------------------

/// A reservation denied on its only descriptor (90 of 100 used by
/// others, 20 asked) is recorded where it is over (`charge: over`), so a
/// refund of it sent anyway (its stream done, nothing used) takes back
/// exactly what the denial recorded: the others' 90 still count.
async fn denied_reservation_refund_nets_to_zero<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    // (not the sliding log: its capped charge is a bug of its own, above)
    for strategy in STRATEGIES
        .into_iter()
        .filter(|s| *s != "sliding-window-log")
    {
        let k = || d(strategy, "dr");
        let r = call(&svc, vec![with_hits(k(), 90)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        let r = call(&svc, vec![with_hits(k(), 20)], 0, 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{strategy}: {r:?}");
        let r = call(&svc, vec![k()], 0, 20).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        let left = r.statuses[0].limit_remaining;
        assert!(
            (10..=11).contains(&left),
            "{strategy}: {left} left after 90 used"
        );
    }
    assert_eq!(count_of(&svc, "fw", "dr").await, 90);
}

both_stores!(
    a_refund_of_a_denied_reservation_nets_to_zero_under_charge_over_in_memory,
    a_refund_of_a_denied_reservation_nets_to_zero_under_charge_over_on_redis,
    denied_reservation_refund_nets_to_zero
);

/// A refund cannot tell whether its reservation was admitted. By default
/// (`charge: always`) a denied reservation is recorded on every
/// descriptor, so its refund nets to zero everywhere. A hazard the docs
/// leave to the gateway (pinned here): a refund sent for a denied
/// reservation gives back, on each of its descriptors, what that denial
/// never took there, under `charge: over` (the organisation's descriptor,
/// room left, untouched by the denial) and on every descriptor of a
/// `charge: admitted` rule. A gateway must then send `hits_subtrahend`
/// only for reservations that were admitted.
async fn denied_reservation_refund_gives_back_elsewhere<S: Store + Clone>(
    store: S,
    _: Option<&Redis>,
) {
    inside_one_hour().await;
    for (charge, org, user) in [(None, "o-dr", "u-dr"), (Some(Charge::Over), "o-do", "u-do")] {
        let options = match charge {
            Some(c) => ServiceOptions::default().charge(c),
            None => ServiceOptions::default(),
        };
        let svc = service(store.clone(), options);
        // the org has 500 used by others; the user is spent
        call(&svc, vec![h("org", org, 500)], 0, 0).await;
        call(&svc, vec![h("fw", user, 100)], 0, 0).await;
        // a reservation of 50, denied by the user's limit: the org charged
        // by default, untouched under `over`
        let r = call(&svc, vec![d("fw", user), d("org", org)], 50, 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
        let denied = count_of(&svc, "org", org).await;
        // its refund
        call(&svc, vec![d("fw", user), d("org", org)], 0, 50).await;
        let refunded = count_of(&svc, "org", org).await;
        if charge.is_none() {
            assert_eq!((denied, refunded), (550, 500), "nets to zero");
        } else {
            assert_eq!(
                (denied, refunded),
                (500, 450),
                "the org gets 50 it never gave"
            );
        }
    }
    let svc = service(store, ServiceOptions::default());
    // `charge: admitted`: 60 used, 60 more denied (nothing taken), refunded
    call(&svc, vec![h("admitted", "a-dr", 60)], 0, 0).await;
    let r = call(&svc, vec![h("admitted", "a-dr", 60)], 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let r = call(&svc, vec![d("admitted", "a-dr")], 0, 60).await;
    assert_eq!(r.statuses[0].limit_remaining, 100, "{r:?}");
}

both_stores!(
    a_refund_of_a_denied_reservation_gives_back_where_nothing_was_taken_in_memory,
    a_refund_of_a_denied_reservation_gives_back_where_nothing_was_taken_on_redis,
    denied_reservation_refund_gives_back_elsewhere
);

// ---- duplicates and refunds ---------------------------------------------------

/// One descriptor twice: a reservation's hits add up in one counter (30 +
/// 30) and its refund gives back each copy's (30 + 30): nothing is left
/// over, nothing given twice. Sixty-four copies (`--max-descriptors`) of a
/// refund of `u32::MAX` give back no more than the limit.
async fn duplicates_charge_and_refund_alike<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    call(&svc, vec![h("fw", "dups", 10)], 0, 0).await;
    let r = call(&svc, vec![d("fw", "dups"), d("fw", "dups")], 30, 0).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(count_of(&svc, "fw", "dups").await, 70);
    let r = call(&svc, vec![d("fw", "dups"), d("fw", "dups")], 0, 30).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(count_of(&svc, "fw", "dups").await, 10);
    // (not the sliding log: a refund gives it nothing back)
    for strategy in STRATEGIES
        .into_iter()
        .filter(|s| *s != "sliding-window-log")
    {
        call(&svc, vec![h(strategy, "dups64", 70)], 0, 0).await;
        let many = (0..64).map(|_| d(strategy, "dups64")).collect();
        let r = call(&svc, many, 0, u32::MAX).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        assert!(
            r.statuses.iter().all(|s| s.limit_remaining == 100),
            "{strategy}: {r:?}"
        );
        let r = call(&svc, vec![h(strategy, "dups64", 100)], 0, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{strategy}: {r:?}");
        let r = call(&svc, vec![h(strategy, "dups64", 1)], 0, 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{strategy}: {r:?}");
    }
}

both_stores!(
    duplicates_charge_and_refund_alike_in_memory,
    duplicates_charge_and_refund_alike_on_redis,
    duplicates_charge_and_refund_alike
);

// ---- refunds on every kind of limit ---------------------------------------------

/// A refund of `u32::MAX` after 30 used gives back to the limit and no
/// further, on an override (in the rule's counter), a quota-mode rule
/// alone and beside another, a shadow rule, a calendar month and the
/// largest count; it is a look on a zero, unlimited, replaced, unmatched
/// descriptor and an unknown domain, and never an error.
async fn refunds_on_every_kind<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    for (what, ds) in [
        ("override", vec![with_override(d("fw", "ov"), 50)]),
        ("quota alone", vec![d("quota", "q1")]),
        ("quota pair", vec![d("quota", "q2"), d("quota2", "q2")]),
        ("shadow", vec![d("shadow", "s")]),
        ("month", vec![d("month", "m")]),
        ("huge", vec![d("huge", "h")]),
    ] {
        let r = call(&svc, ds.clone(), 30, 0).await;
        assert_eq!(overall(&r), Code::Ok, "{what}: {r:?}");
        let r = call(&svc, ds.clone(), 0, u32::MAX).await;
        assert_eq!(overall(&r), Code::Ok, "{what}: {r:?}");
        for s in &r.statuses {
            let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
            assert_eq!(s.limit_remaining, limit, "{what}: {r:?}");
        }
    }
    // the override counted in the rule's counter, given back there
    assert_eq!(count_of(&svc, "fw", "ov").await, 0);
    for (what, ds) in [
        ("zero", vec![d("zero", "z")]),
        ("unlimited", vec![d("free", "f")]),
        ("replaced", vec![d("old", "r"), d("new", "r")]),
        ("unmatched", vec![d("nothing", "n")]),
    ] {
        let r = call(&svc, ds, 0, u32::MAX).await;
        assert_eq!(overall(&r), Code::Ok, "{what}: {r:?}");
    }
    let r = svc
        .should_rate_limit_inner(&RateLimitRequest {
            domain: "nowhere".into(),
            descriptors: vec![d("fw", "x")],
            hits_addend: 0,
            hits_subtrahend: u32::MAX,
        })
        .await
        .expect("answer");
    assert_eq!(overall(&r), Code::Ok);
    // a replaced limit is neither charged nor given back: `old` stays
    // where it was when asked alone
    call(&svc, vec![h("old", "r2", 40)], 0, 0).await;
    call(&svc, vec![d("old", "r2"), d("new", "r2")], 0, 40).await;
    assert_eq!(left(&svc, "old", "r2").await, (Code::Ok, 60));
}

both_stores!(
    refunds_on_every_kind_of_limit_stop_at_the_limit_in_memory,
    refunds_on_every_kind_of_limit_stop_at_the_limit_on_redis,
    refunds_on_every_kind
);

// ---- recording on every kind of limit -------------------------------------------

/// Reports past the limit are recorded on a calendar month (to its 1st),
/// an override (in the rule's counter), a quota-mode rule over while its
/// call passes, and never on a shadow rule (documented: a shadow
/// descriptor records nothing); `--shadow-mode` with `--charge always`
/// records nothing at all.
async fn records_on_every_kind<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store.clone(), ServiceOptions::default());
    // a calendar month
    call(&svc, vec![h("month", "rm", 80)], 0, 0).await;
    let r = call(&svc, vec![h("month", "rm", 50)], 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    // 130 of 100: even a look is denied until the 1st
    let r = call(&svc, vec![h("month", "rm", 0)], 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert!(
        (1..=31 * 86_400).contains(&reset_secs(&r, 0)),
        "to the 1st: {r:?}"
    );
    // an override of 50 an hour past its limit: recorded in `fw`'s counter
    let r = call(&svc, vec![with_override(h("fw", "ro", 70), 50)], 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    assert_eq!(count_of(&svc, "fw", "ro").await, 70);
    // quota mode: `quota` over, `quota2` with room: the call passes, and
    // the report is recorded on `quota` past its limit
    call(&svc, vec![h("quota", "rq", 100)], 0, 0).await;
    let r = call(
        &svc,
        vec![h("quota", "rq", 40), h("quota2", "rq", 40)],
        0,
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(code(&r.statuses[0]), Code::OverLimit, "{r:?}");
    assert_eq!(left(&svc, "quota2", "rq").await, (Code::Ok, 60));
    // (140 used: a refund of 40 leaves it spent)
    let r = call(&svc, vec![d("quota", "rq")], 0, 40).await;
    assert_eq!(r.statuses[0].limit_remaining, 0, "{r:?}");
    // shadow: admitted, and past its limit nothing is recorded
    call(&svc, vec![h("shadow", "rs", 90)], 0, 0).await;
    let r = call(&svc, vec![h("shadow", "rs", 50)], 0, 0).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(left(&svc, "shadow", "rs").await, (Code::Ok, 10));
    // --shadow-mode --charge always: nothing recorded past a limit
    let all = service(
        store,
        ServiceOptions::default()
            .shadow_mode(true)
            .charge(Charge::Always),
    );
    call(&all, vec![h("org", "rsm", 1000)], 0, 0).await;
    let r = call(&all, vec![h("org", "rsm", 500), h("fw", "rsm", 5)], 0, 0).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(count_of(&svc, "org", "rsm").await, 1000);
}

both_stores!(
    reports_are_recorded_on_every_kind_of_limit_in_memory,
    reports_are_recorded_on_every_kind_of_limit_on_redis,
    records_on_every_kind
);

/// A `limit` override counts in its rule's counter, and is charged as its
/// rule says: a check through an override on a `charge: admitted` rule,
/// denied, records nothing in the rule's counter (it was charged by the
/// service's default at first: recorded there).
async fn override_follows_rule_charge<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    call(&svc, vec![h("admitted", "oc", 60)], 0, 0).await;
    let r = call(&svc, vec![h("admitted", "oc", 60)], 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(left(&svc, "admitted", "oc").await, (Code::Ok, 40));
    let r = call(
        &svc,
        vec![with_override(h("admitted", "oc", 60), 100)],
        0,
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    // still 60 of 100: nothing recorded
    assert_eq!(left(&svc, "admitted", "oc").await, (Code::Ok, 40));
}

both_stores!(
    an_override_is_charged_as_its_rule_says_in_memory,
    an_override_is_charged_as_its_rule_says_on_redis,
    override_follows_rule_charge
);

// ---- a storm of odd requests --------------------------------------------------------

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }
}

const KEYS: [&str; 22] = [
    "fw",
    "org",
    "always",
    "admitted",
    "fixed-window",
    "sliding-window-log",
    "sliding-window-counter",
    "token-bucket",
    "leaky-bucket",
    "gcra",
    "biglog",
    "month",
    "quota",
    "quota2",
    "shadow",
    "zero",
    "free",
    "old",
    "new",
    "huge",
    "sec",
    "nothing",
];

/// `n` requests of 1 to 64 descriptors drawn from every kind of rule
/// (duplicates and overrides too), every hits field at 0, 1, the limit,
/// `u32::MAX` or `u64::MAX`, on services of each `charge` with headers:
/// never a panic or an error, and every answer consistent (a status per
/// descriptor, what is left never above the limit, `OVER_LIMIT` overall
/// only with a descriptor over, `Retry-After` only on a denial and at
/// least 1 s).
async fn storm(services: &[RlsService], n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let hits = [0, 1, 2, 50, 100, 10_001, u64::from(u32::MAX), u64::MAX];
    let request = [0, 1, 7, 100, u32::MAX];
    let subtrahend = [0, 0, 1, 30, 100, u32::MAX];
    let overrides = [0, 1, 100, u32::MAX];
    for i in 0..n {
        let svc = &services[i % services.len()];
        let count = match rng.next() % 4 {
            0 => 64,
            _ => 1 + (rng.next() % 6) as usize,
        };
        let mut ds = Vec::with_capacity(count);
        for _ in 0..count {
            let key = rng.pick(&KEYS);
            let value = format!("v{}", rng.next() % 3);
            let mut x = d(key, &value);
            if rng.next().is_multiple_of(2) {
                x.hits_addend = Some(rng.pick(&hits));
            }
            if rng.next().is_multiple_of(8) {
                x = with_override(x, rng.pick(&overrides));
            }
            ds.push(x);
        }
        let (hits, sub) = (rng.pick(&request), rng.pick(&subtrahend));
        let r = match try_call(svc, ds.clone(), hits, sub).await {
            Ok(r) => r,
            Err(e) => panic!("request {i} ({hits}, {sub}, {ds:?}): {e}"),
        };
        let what = || {
            let ds: Vec<String> = ds
                .iter()
                .map(|x| {
                    format!(
                        "{}={} hits {:?} limit {:?}",
                        x.entries[0].key,
                        String::from_utf8_lossy(&x.entries[0].value),
                        x.hits_addend,
                        x.limit.as_ref().map(|l| l.requests_per_unit)
                    )
                })
                .collect();
            let st: Vec<String> = r
                .statuses
                .iter()
                .map(|s| {
                    let past = s
                        .current_limit
                        .as_ref()
                        .is_some_and(|l| s.limit_remaining > l.requests_per_unit);
                    format!(
                        "{}{:?} {}/{:?} reset {:?}",
                        if past { "<<< " } else { "" },
                        code(s),
                        s.limit_remaining,
                        s.current_limit.as_ref().map(|l| l.requests_per_unit),
                        s.duration_until_reset.as_ref().map(|d| d.seconds)
                    )
                })
                .collect();
            format!(
                "request {i} (hits {hits}, subtrahend {sub}): {:?}, Retry-After {:?}\n{}",
                overall(&r),
                retry_after(&r),
                ds.iter()
                    .zip(&st)
                    .map(|(a, b)| format!("  {a}: {b}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        };
        assert_eq!(r.statuses.len(), ds.len(), "{}", what());
        let mut any_over = false;
        for (s, x) in r.statuses.iter().zip(&ds) {
            if let Some(l) = &s.current_limit {
                assert!(s.limit_remaining <= l.requests_per_unit, "{}", what());
            }
            assert!(reset_secs(&r, 0) >= -1, "{}", what());
            let over = code(s) == Code::OverLimit;
            let quota = x
                .entries
                .first()
                .is_some_and(|e| e.key.starts_with("quota"))
                && x.limit.is_none();
            any_over |= over;
            if overall(&r) == Code::Ok && over {
                assert!(quota, "an admitted call with a descriptor over: {}", what());
            }
        }
        if overall(&r) == Code::OverLimit {
            assert!(any_over, "{}", what());
        } else {
            assert_eq!(retry_after(&r), None, "{}", what());
        }
        if let Some(secs) = retry_after(&r) {
            assert!(secs >= 1, "{}", what());
        }
    }
}

fn every_charge<S: Store + Clone>(store: S) -> Vec<RlsService> {
    [Charge::Over, Charge::Admitted, Charge::Always]
        .into_iter()
        .map(|c| service(store.clone(), headers().charge(c)))
        .collect()
}

#[tokio::test]
async fn a_storm_of_odd_requests_gets_consistent_answers_in_memory() {
    storm(
        &every_charge(MemoryStore::new()),
        600,
        0x9e37_79b9_7f4a_7c15,
    )
    .await;
}

/// The storm on Redis, then: every key has a TTL (none lives for good),
/// and no script ran long (SLOWLOG, past 250 ms even on a shared machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_odd_requests_on_redis_leaves_every_key_with_a_ttl() {
    let redis = Redis::start();
    redis_cli(
        &redis,
        &["config", "set", "slowlog-log-slower-than", "250000"],
    );
    storm(
        &every_charge(redis_store(&redis)),
        300,
        0x2545_f491_4f6c_dd1d,
    )
    .await;
    let keys = redis_keys(&redis);
    assert!(!keys.is_empty());
    let forever: Vec<&String> = keys
        .iter()
        .filter(|k| redis_cli(&redis, &["pttl", k]).trim() == "-1")
        .collect();
    assert!(forever.is_empty(), "keys with no TTL: {forever:?}");
    let slow = redis_cli(&redis, &["slowlog", "len"]);
    assert_eq!(
        slow.trim(),
        "0",
        "{}",
        redis_cli(&redis, &["slowlog", "get"])
    );
}

// ---- the store work of one request ----------------------------------------------------

/// The scripts Redis has been sent (`EVALSHA`, `EVAL`: `INFO
/// commandstats` also counts the commands scripts run).
fn redis_calls(redis: &Redis) -> u64 {
    redis_cli(redis, &["info", "commandstats"])
        .lines()
        .filter(|l| l.starts_with("cmdstat_eval"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn used_memory(redis: &Redis) -> u64 {
    redis_cli(redis, &["info", "memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
        .unwrap_or(0)
}

/// One request of 64 descriptors, each over its limit (recorded) or
/// refunded: each descriptor costs at most one store call beside the
/// decision and the look after it (about 66 where a request was one
/// call), and what a request writes is bounded: 20 such requests of new
/// values on a sliding log of 10,000 (each recording at most
/// `AllOrNothing::MAX_LOGGED` times) grow Redis by under 16 MiB, each key
/// with its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_does_bounded_store_work() {
    let redis = Redis::start();
    let svc = service(redis_store(&redis), ServiceOptions::default());
    // warm: connect, load the scripts
    call(&svc, vec![h("fw", "warm", 1), h("gcra", "warm", 1)], 0, 0).await;
    call(&svc, vec![h("fw", "warm", 1000)], 0, 0).await;
    let mix = |i: usize| -> Vec<RateLimitDescriptor> {
        (0..64)
            .map(|j| {
                let key = STRATEGIES[j % STRATEGIES.len()];
                if j % 2 == 0 {
                    h(key, &format!("r{i}-{j}"), u64::MAX)
                } else {
                    d(key, &format!("r{i}-{j}"))
                }
            })
            .collect()
    };
    let mut worst = 0;
    for i in 0..5 {
        let before = redis_calls(&redis);
        let r = call(&svc, mix(i), 0, 10).await;
        assert_eq!(overall(&r), Code::OverLimit);
        // (the first loads the scripts)
        if i > 0 {
            worst = worst.max(redis_calls(&redis) - before);
        }
    }
    eprintln!("{worst} scripts for one request of 64 descriptors");
    assert!(worst <= 64 + 3, "{worst} Redis calls for one request");
    let before = used_memory(&redis);
    for i in 0..20 {
        let many = (0..64)
            .map(|j| h("biglog", &format!("m{i}-{j}"), 20_000))
            .collect();
        call(&svc, many, 0, 0).await;
    }
    let grown = used_memory(&redis).saturating_sub(before);
    eprintln!("{grown} bytes for 20 requests of 64 log descriptors");
    assert!(grown < 16 << 20, "{grown} bytes for 20 requests");
    for key in redis_keys(&redis) {
        assert_ne!(redis_cli(&redis, &["pttl", &key]).trim(), "-1", "{key}");
    }
}

// ---- an override beside its quota-mode rule ---------------------------------------

/// Quota mode: `quota` and `quota2` both past their 100, so a request
/// with both is denied (every quota-mode descriptor over). With `quota`
/// also sent through an override of 1,000 an hour (one counter: one part
/// of the joint decision, decided by the override's limiter, ranked first
/// as not quota-mode), `quota` still answers by its own 100: over, and
/// the request is denied. A shadow rule beside its override answers by
/// its own 100 alike. (Before, the override's limit answered for them:
/// `quota` OK with 1,000-odd left, and the request let through.)
async fn override_beside_quota_rule<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    call(&svc, vec![h("quota", "qo", 150)], 0, 0).await;
    call(&svc, vec![h("quota2", "qo", 100)], 0, 0).await;
    let plain = call(&svc, vec![h("quota", "qo", 1), h("quota2", "qo", 1)], 0, 0).await;
    assert_eq!(overall(&plain), Code::OverLimit, "{plain:?}");
    let mut wrong = Vec::new();
    let r = call(
        &svc,
        vec![
            h("quota", "qo", 1),
            with_override(h("quota", "qo", 1), 1000),
            h("quota2", "qo", 1),
        ],
        0,
        0,
    )
    .await;
    let q = &r.statuses[0];
    if q.limit_remaining > 100 || code(q) != Code::OverLimit {
        wrong.push(format!(
            "`quota` (150 of 100) answers {:?} with {} left",
            code(q),
            q.limit_remaining
        ));
    }
    if overall(&r) != Code::OverLimit {
        wrong.push("every quota-mode descriptor is over, and the request passes".to_owned());
    }
    let r = call(
        &svc,
        vec![
            h("shadow", "so", 1),
            with_override(h("shadow", "so", 1), 1000),
        ],
        0,
        0,
    )
    .await;
    if r.statuses[0].limit_remaining > 100 {
        wrong.push(format!(
            "`shadow` answers {} left of 100",
            r.statuses[0].limit_remaining
        ));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

both_stores!(
    an_override_beside_its_quota_mode_rule_leaves_it_its_own_limit_in_memory,
    an_override_beside_its_quota_mode_rule_leaves_it_its_own_limit_on_redis,
    override_beside_quota_rule
);

/// A quota-mode rule over its limit beside an override of its counter
/// that lets the call through: its statistics count it over (it answers
/// over), with what was used before.
async fn follower_metrics<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    call(&svc, vec![h("quota", "fm", 100)], 0, 0).await;
    let r = call(
        &svc,
        vec![
            h("quota", "fm", 1),
            with_override(h("quota", "fm", 1), 1000),
            h("quota2", "fm", 1),
        ],
        0,
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(code(&r.statuses[0]), Code::OverLimit, "{r:?}");
    assert_eq!(r.statuses[0].limit_remaining, 0, "{r:?}");
    let text = svc.metrics().render();
    let over = "ratelimit_service_rate_limit_over_limit{domain=\"atk\",key=\"quota\"}";
    // (the first call's 100 were within; this call's 1 on `quota` is over)
    assert_eq!(sample(&text, over), 1, "{text}");
}

both_stores!(
    a_quota_mode_rule_over_beside_its_override_is_counted_over_in_memory,
    a_quota_mode_rule_over_beside_its_override_is_counted_over_on_redis,
    follower_metrics
);

/// Two copies of an override whose limiters are not kept (past
/// `max_override_limiters`) are one limit, not a limit and its follower:
/// over it, both answer over.
async fn uncached_overrides_alike<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default().max_override_limiters(0));
    let r = call(&svc, vec![with_override(h("none", "uc", 15), 10)], 0, 0).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    let r = call(
        &svc,
        vec![
            with_override(h("none", "uc", 0), 10),
            with_override(h("none", "uc", 0), 10),
        ],
        0,
        0,
    )
    .await;
    let codes: Vec<Code> = r.statuses.iter().map(code).collect();
    assert_eq!(codes[0], codes[1], "{r:?}");
}

both_stores!(
    two_copies_of_an_uncached_override_answer_alike_in_memory,
    two_copies_of_an_uncached_override_answer_alike_on_redis,
    uncached_overrides_alike
);

/// A quota-mode descriptor whose hits never fit, in a call admitted by
/// the others (not every quota-mode descriptor is over), records its hits
/// (`charge: always`): none is lost.
async fn never_fitting_quota_records<S: Store + Clone>(store: S, _: Option<&Redis>) {
    inside_one_hour().await;
    let svc = service(store, ServiceOptions::default());
    let r = call(
        &svc,
        vec![h("quota", "nf", 101), h("quota2", "nf", 1)],
        0,
        0,
    )
    .await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(code(&r.statuses[0]), Code::OverLimit, "{r:?}");
    assert_eq!(count_of(&svc, "quota", "nf").await, 101);
    assert_eq!(count_of(&svc, "quota2", "nf").await, 1);
}

both_stores!(
    a_never_fitting_quota_mode_descriptor_in_an_admitted_call_records_its_hits_in_memory,
    a_never_fitting_quota_mode_descriptor_in_an_admitted_call_records_its_hits_on_redis,
    never_fitting_quota_records
);

// ---- races ----------------------------------------------------------------------------

/// 200 gateways' calls at once, spread over `services` (instances on one
/// store): a check of 1, and when admitted a report of 5 after it. Every
/// hit is recorded (an admitted check's, a denied check's where it is
/// over, every report's), so the counter ends at exactly 200 + 5 per
/// admitted check; and no more checks are admitted than fit.
async fn check_then_report_race(services: Vec<RlsService>, value: &str) {
    inside_one_hour().await;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let svc = services[i % services.len()].clone();
        let value = value.to_owned();
        tasks.push(tokio::spawn(async move {
            let r = call(&svc, vec![h("fw", &value, 1)], 0, 0).await;
            let admitted = overall(&r) == Code::Ok;
            if admitted {
                call(&svc, vec![h("fw", &value, 5)], 0, 0).await;
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += u64::from(t.await.expect("task"));
    }
    assert!((1..=100).contains(&admitted), "{admitted} checks admitted");
    let count = count_of(&services[0], "fw", value).await;
    assert_eq!(count, 200 + 5 * admitted, "{admitted} admitted");
}

/// 200 reservations of 10 at once; each admitted one settles (`hits_addend`
/// = used, 0 to 14, `hits_subtrahend` = 10); a denied one is not settled
/// (its 10 recorded where it is over). The counter ends at exactly the
/// sum used plus 10 per denied reservation: no refund given twice or
/// lost, no settle lost.
async fn reserve_then_settle_race(services: Vec<RlsService>, value: &str) {
    inside_one_hour().await;
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let svc = services[i as usize % services.len()].clone();
        let value = value.to_owned();
        tasks.push(tokio::spawn(async move {
            let r = call(&svc, vec![d("fw", &value)], 10, 0).await;
            if overall(&r) != Code::Ok {
                return (false, 0);
            }
            let used = i % 15;
            call(&svc, vec![d("fw", &value)], used as u32, 10).await;
            (true, used)
        }));
    }
    let (mut admitted, mut used, mut denied) = (0, 0, 0);
    for t in tasks {
        match t.await.expect("task") {
            (true, u) => {
                admitted += 1;
                used += u;
            }
            (false, _) => denied += 1,
        }
    }
    // (nothing is denied before the count passes 90, and an admitted
    // reservation holds at most 14 once settled: at least 7 are admitted;
    // 10 only when the settles that charge past 10 come late)
    assert!(admitted >= 7, "{admitted} reservations admitted");
    let count = count_of(&services[0], "fw", value).await;
    assert_eq!(
        count,
        used + 10 * denied,
        "{admitted} admitted, {denied} denied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_checks_reports_and_settles_are_all_recorded_in_memory() {
    let svc = service(MemoryStore::new(), ServiceOptions::default());
    check_then_report_race(vec![svc.clone()], "race-m").await;
    reserve_then_settle_race(vec![svc], "settle-m").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_checks_reports_and_settles_on_four_instances_are_all_recorded() {
    let redis = Redis::start();
    let services: Vec<RlsService> = (0..4)
        .map(|_| service(redis_store(&redis), ServiceOptions::default()))
        .collect();
    check_then_report_race(services.clone(), "race-r").await;
    reserve_then_settle_race(services, "settle-r").await;
}

// ---- the memory store and Redis answer alike --------------------------------------------

/// One script of calls (reports past the limit, looks, refunds, huge
/// hits, several descriptors) on each strategy, on the memory store and
/// on Redis: the same codes and remaining counts, resets within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_and_redis_record_and_refund_alike() {
    inside_one_hour().await;
    let redis = Redis::start();
    let memory = service(MemoryStore::new(), headers());
    let shared = service(redis_store(&redis), headers());
    let mut script: Vec<(Vec<RateLimitDescriptor>, u32, u32)> = Vec::new();
    for strategy in STRATEGIES.into_iter().chain(["leaky-bucket", "month"]) {
        let k = |hits: Option<u64>| {
            let mut x = d(strategy, "same");
            x.hits_addend = hits;
            x
        };
        script.extend([
            (vec![k(Some(60))], 0, 0),
            (vec![k(Some(50))], 0, 0),
            (vec![k(Some(0))], 0, 0),
            (vec![k(None)], 0, 30),
            (vec![k(None)], 1, 0),
            (vec![k(None), k(Some(3)), k(None)], 2, 0),
            (vec![k(Some(u64::from(u32::MAX)))], 0, 0),
            (vec![k(Some(0))], 0, 0),
            (vec![k(None)], 0, u32::MAX),
            (vec![k(None)], 200, 150),
            (
                vec![k(None), d("org", strategy), d("always", strategy)],
                70,
                0,
            ),
            (
                vec![k(None), d("org", strategy), d("always", strategy)],
                0,
                20,
            ),
        ]);
    }
    for (i, (ds, hits, sub)) in script.into_iter().enumerate() {
        let a = call(&memory, ds.clone(), hits, sub).await;
        let b = call(&shared, ds.clone(), hits, sub).await;
        let view = |r: &RateLimitResponse| -> Vec<(Code, u32)> {
            r.statuses
                .iter()
                .map(|s| (code(s), s.limit_remaining))
                .collect()
        };
        assert_eq!(
            (overall(&a), view(&a)),
            (overall(&b), view(&b)),
            "call {i} ({hits}, {sub}): memory, then Redis"
        );
        for j in 0..a.statuses.len() {
            assert!(
                reset_secs(&a, j).abs_diff(reset_secs(&b, j)) <= 2,
                "call {i}: {a:?} {b:?}"
            );
        }
        let (x, y) = (retry_after(&a), retry_after(&b));
        assert!(
            x.zip(y).map_or(x == y, |(x, y)| x.abs_diff(y) <= 2),
            "call {i}: Retry-After {x:?} in memory, {y:?} on Redis"
        );
    }
}

// ---- metrics ----------------------------------------------------------------------------

/// The statistics of reports and refunds: a denied report's hits count as
/// over the limit (as envoyproxy/ratelimit counts them); a refund counts
/// no hits; a report of `u64::MAX` counts at most `u32::MAX` hits, so
/// that no counter wraps however many are sent.
#[tokio::test]
async fn metrics_count_reports_and_refunds_without_wrapping() {
    inside_one_hour().await;
    let svc = service(MemoryStore::new(), ServiceOptions::default());
    call(&svc, vec![h("fw", "met", 100)], 0, 0).await;
    call(&svc, vec![h("fw", "met", 50)], 0, 0).await;
    call(&svc, vec![d("fw", "met")], 0, 30).await;
    let text = svc.metrics().render();
    let series =
        |name: &str| format!("ratelimit_service_rate_limit_{name}{{domain=\"atk\",key=\"fw\"}}");
    assert_eq!(sample(&text, &series("total_hits")), 150, "{text}");
    assert_eq!(sample(&text, &series("within_limit")), 100, "{text}");
    assert_eq!(sample(&text, &series("over_limit")), 50, "{text}");
    for _ in 0..100 {
        let many = (0..64).map(|_| h("gcra", "met", u64::MAX)).collect();
        call(&svc, many, 0, 0).await;
    }
    let text = svc.metrics().render();
    let total = sample(
        &text,
        "ratelimit_service_rate_limit_total_hits{domain=\"atk\",key=\"gcra\"}",
    );
    assert_eq!(total, 6_400 * u64::from(u32::MAX), "{text}");
}

// ---- the answer to a first call that never fits -----------------------------------------

/// A first call on a fresh `strategy: fixed-window` descriptor (a window
/// that opens at its first hit, not aligned to the epoch) asking more
/// than the limit: denied, and recorded (`charge: over`), which opens the
/// window now, an hour long. Its answer must say so (about 3,600 s, as a
/// look right after says), not the reset of an epoch-aligned window that
/// the descriptor does not have. A calendar month's alike: its window
/// ends on the 1st, not at the end of an epoch-aligned 30 days.
async fn first_never_fitting_call_reset<S: Store + Clone>(store: S, _: Option<&Redis>) {
    let svc = service(store, ServiceOptions::default());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    // (an aligned hour's reset is then clearly shorter than an hour)
    if now % 3600 < 120 {
        tokio::time::sleep(Duration::from_secs(120 - now % 3600)).await;
    }
    let mut wrong = Vec::new();
    for key in ["fixed-window", "month"] {
        let r = call(&svc, vec![h(key, "fresh", 500)], 0, 0).await;
        assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
        let look = call(&svc, vec![h(key, "fresh", 0)], 0, 0).await;
        assert_eq!(overall(&look), Code::OverLimit, "recorded: {look:?}");
        if reset_secs(&r, 0).abs_diff(reset_secs(&look, 0)) > 2 {
            wrong.push(format!(
                "{key}: the denial says {} s, the window it recorded in ends in {} s",
                reset_secs(&r, 0),
                reset_secs(&look, 0)
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

both_stores!(
    a_first_never_fitting_call_answers_an_epoch_aligned_reset_in_memory,
    a_first_never_fitting_call_answers_an_epoch_aligned_reset_on_redis,
    first_never_fitting_call_reset
);
