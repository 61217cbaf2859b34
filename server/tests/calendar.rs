//! The `calendar` extension of `rate_limit`: months of a time zone's
//! calendar, where `unit: month` alone stays the Go service's 30 days.

mod common;

use std::time::SystemTime;

use common::{Redis, ask, code, config, desc, redis_store};
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit_server::config::{Config, LoadOptions};
use tower_redis_ratelimit_server::pb::rate_limit_response::Code;
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

const YAML: &str = "domain: ai
descriptors:
  - key: user
    rate_limit: {unit: month, requests_per_unit: 3, calendar: UTC}
  - key: go
    rate_limit: {unit: month, requests_per_unit: 3}
";

/// Seconds since the epoch of 00:00 UTC on the 1st of month `m` of `y`.
fn first_of(y: i64, m: i64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    ((era * 146_097 + doe - 719_468) * 86_400) as u64
}

/// Seconds from now to the next 00:00 UTC on a 1st, and to the end of the
/// Go service's 30-day window.
fn until_ends() -> (u64, u64) {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (mut y, mut m) = (1970, 1);
    while first_of(y, m) <= now {
        (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    }
    let month = 30 * 86_400;
    (first_of(y, m) - now, month - now % month)
}

async fn runs_to_the_end_of_the_utc_month(service: RlsService) {
    let mut client = common::serve(service).await;
    for _ in 0..3 {
        let r = ask(&mut client, "ai", vec![desc(&[("user", "a")])], 1).await;
        assert_eq!(code(&r.statuses[0]), Code::Ok);
    }
    let r = ask(&mut client, "ai", vec![desc(&[("user", "a")])], 1).await;
    assert_eq!(code(&r.statuses[0]), Code::OverLimit);
    let (calendar, go) = until_ends();
    let reset = r.statuses[0].duration_until_reset.expect("reset").seconds as u64;
    assert!(calendar.abs_diff(reset) <= 5, "{reset} s, want {calendar}");
    // `unit: month` without `calendar`: the Go service's 30 days from the epoch
    let r = ask(&mut client, "ai", vec![desc(&[("go", "a")])], 1).await;
    let reset = r.statuses[0].duration_until_reset.expect("reset").seconds as u64;
    assert!(go.abs_diff(reset) <= 5, "{reset} s, want {go}");
}

#[tokio::test]
async fn a_calendar_month_runs_to_local_midnight_on_the_1st_on_the_memory_store() {
    let service = RlsService::new(config(YAML), MemoryStore::new(), ServiceOptions::default())
        .expect("service");
    runs_to_the_end_of_the_utc_month(service).await;
}

#[tokio::test]
async fn a_calendar_month_runs_to_local_midnight_on_the_1st_on_redis() {
    let redis = Redis::start();
    let service = RlsService::new(config(YAML), redis_store(&redis), ServiceOptions::default())
        .expect("service");
    runs_to_the_end_of_the_utc_month(service).await;
}

#[test]
fn a_bad_calendar_is_rejected_with_its_path_and_line() {
    let cases = [
        (
            "{unit: month, requests_per_unit: 3, calendar: Mars/Olympus}",
            "unknown time zone",
        ),
        (
            "{unit: day, requests_per_unit: 3, calendar: UTC}",
            "goes with `unit: month`",
        ),
        (
            "{unit: month, unit_multiplier: 2, requests_per_unit: 3, calendar: UTC}",
            "goes with `unit: month`",
        ),
        (
            "{duration: 30d, requests_per_unit: 3, calendar: UTC}",
            "goes with `unit: month`",
        ),
        (
            "{unit: month, requests_per_unit: 3, calendar: UTC, strategy: gcra}",
            "fixed window",
        ),
    ];
    for (limit, message) in cases {
        let text = format!("domain: ai\ndescriptors:\n  - key: user\n    rate_limit: {limit}\n");
        let e = Config::from_sources([("api.yaml", text.as_str())], LoadOptions::default())
            .unwrap_err();
        assert!(e.path.ends_with("rate_limit.calendar"), "{limit}: {e}");
        assert_eq!(e.line, 4, "{limit}: {e}");
        assert!(e.message.contains(message), "{limit}: {e}");
    }
}
