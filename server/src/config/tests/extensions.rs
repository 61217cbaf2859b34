//! Our extensions (`strategy`, `burst`, `unit_multiplier`, `duration`,
//! `failure_policy`), the longest period, and what the library would
//! reject of a rule, rejected at its field and line.

use super::*;
use tower_redis_ratelimit::strategy::Strategy;

#[test]
fn extensions() {
    let c = one("
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 10, strategy: gcra, burst: 3}
  - key: b
    rate_limit: {duration: 90s, requests_per_unit: 10, strategy: sliding-window-log}
  - key: c
    rate_limit: {duration: 2 hours, requests_per_unit: 1}
");
    let a = c.lookup("d", &[("a", "")]).unwrap();
    assert_eq!(a.period_us, 300_000_000);
    assert_eq!((a.unit, a.unit_multiplier), (Some(Unit::Minute), 5));
    assert_eq!((a.strategy, a.burst), (Some(Strategy::Gcra), Some(3)));
    let b = c.lookup("d", &[("b", "")]).unwrap();
    assert_eq!((b.unit, b.period_us), (None, 90_000_000));
    assert_eq!(b.strategy, Some(Strategy::SlidingWindowLog));
    assert_eq!(
        c.lookup("d", &[("c", "")]).unwrap().period_us,
        7_200_000_000
    );
    let rl =
        |body: &str| format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{{body}}}\n");
    rejects(
        &rl("unit: second, strategy: gcar"),
        "descriptors[0].rate_limit.strategy",
        "token-bucket",
    );
    rejects(
        &rl("unit: second, strategy: concurrency"),
        "descriptors[0].rate_limit.strategy",
        "no release",
    );
    rejects(
        &rl("unit: second, burst: 2"),
        "descriptors[0].rate_limit.burst",
        "gcra",
    );
    rejects(
        &rl("unit: second, strategy: fixed-window, burst: 2"),
        "descriptors[0].rate_limit.burst",
        "takes one",
    );
    rejects(
        &rl("unit: second, burst: 0, strategy: gcra"),
        "descriptors[0].rate_limit.burst",
        "at least 1",
    );
    rejects(
        &rl("unit: second, unit_multiplier: 0"),
        "descriptors[0].rate_limit.unit_multiplier",
        "at least 1",
    );
    rejects(
        &rl("unit: year, unit_multiplier: 4294967295"),
        "descriptors[0].rate_limit.unit_multiplier",
        "longer than 366 days",
    );
    rejects(
        &rl("unit: second, duration: 5s"),
        "descriptors[0].rate_limit.unit",
        "either",
    );
    rejects(
        &rl("duration: 5s, unit_multiplier: 2"),
        "descriptors[0].rate_limit.unit_multiplier",
        "goes with `unit`",
    );
    rejects(
        &rl("duration: fortnight"),
        "descriptors[0].rate_limit.duration",
        "not a duration",
    );
    rejects(
        &rl("duration: 0s"),
        "descriptors[0].rate_limit.duration",
        "at least one microsecond",
    );
    // outside `rate_limit`, an extension is an error (Go rejects it as unknown)
    rejects(
        "domain: d\ndescriptors:\n  - key: a\n    strategy: gcra\n",
        "descriptors[0].strategy",
        "belongs in a `rate_limit`",
    );
}

#[test]
fn failure_policy_extension() {
    let c = one("domain: a\nfailure_policy: Deny\ndescriptors: []\n");
    assert_eq!(c.failure_policy("a"), Some(OnStoreError::Deny));
    assert_eq!(c.failure_policy("b"), None);
    let c = one("domain: a\ndescriptors: []\n");
    assert_eq!(c.failure_policy("a"), None);
    for (text, p) in [
        ("allow", OnStoreError::Allow),
        ("' unavailable '", OnStoreError::Unavailable),
    ] {
        let c = one(&format!("domain: a\nfailure_policy: {text}\n"));
        assert_eq!(c.failure_policy("a"), Some(p));
    }
    for bad in ["open", "''", "true", "1", "{}"] {
        let e = reject(&format!("domain: a\nfailure_policy: {bad}\n"));
        assert_eq!(
            (e.file.as_str(), e.path.as_str()),
            ("t.yaml", "failure_policy"),
            "{e}"
        );
        assert_eq!(e.line, 2, "{e}");
    }
    rejects(
        "domain: a\ndescriptors:\n  - key: k\n    failure_policy: allow\n",
        "descriptors[0].failure_policy",
        "belongs at the top of a file",
    );
    rejects(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, failure_policy: allow}\n",
        "descriptors[0].rate_limit.failure_policy",
        "belongs at the top of a file",
    );
    // merged domains may repeat it, not disagree
    let merge = LoadOptions::default().merge_domains(true);
    let files = [
        ("x.yaml", "domain: a\nfailure_policy: allow\n"),
        ("y.yaml", "domain: a\nfailure_policy: allow\n"),
        ("z.yaml", "domain: a\n"),
    ];
    let c = Config::from_sources(files, merge).expect("same policy");
    assert_eq!(c.failure_policy("a"), Some(OnStoreError::Allow));
    let files = [
        ("x.yaml", "domain: a\nfailure_policy: allow\n"),
        ("y.yaml", "domain: a\nfailure_policy: deny\n"),
    ];
    let e = Config::from_sources(files, merge).expect_err("disagree");
    assert_eq!(
        (e.file.as_str(), e.path.as_str()),
        ("y.yaml", "failure_policy")
    );
    assert!(e.message.contains("x.yaml"), "{e}");
}

// issue 34, point 8: the period's maximum, with the path and line
#[test]
fn a_period_is_at_most_366_days_named_at_its_field_and_line() {
    let rl = |body: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n{body}"
        )
    };
    assert_eq!(
        one(&rl("      unit: year\n")).rules("d")[0].period_us,
        365 * 86_400 * 1_000_000
    );
    for ok in [
        "      unit: day\n      unit_multiplier: 366\n",
        "      unit: hour\n      unit_multiplier: 8784\n",
        "      duration: 366d\n",
        "      duration: 8784 hours\n",
    ] {
        let c = one(&rl(ok));
        assert_eq!(c.rules("d")[0].period_us, 366 * 86_400 * 1_000_000, "{ok}");
    }
    for (body, field, line) in [
        (
            "      unit: year\n      unit_multiplier: 2\n",
            "unit_multiplier",
            7,
        ),
        (
            "      unit: day\n      unit_multiplier: 367\n",
            "unit_multiplier",
            7,
        ),
        (
            "      unit_multiplier: 53\n      unit: week\n",
            "unit_multiplier",
            6,
        ),
        ("      duration: 367d\n", "duration", 6),
        ("      duration: 8785 hours\n", "duration", 6),
        ("      duration: 100000d\n", "duration", 6),
    ] {
        let e = reject(&rl(body));
        assert_eq!(e.path, format!("descriptors[0].rate_limit.{field}"), "{e}");
        assert_eq!(e.line, line, "{e}");
        assert!(e.message.contains("366 days"), "{e}");
    }
}

// issue 34, point 8: what the library rejects at build, rejected by the
// loader with the path and line
#[test]
fn what_the_library_rejects_is_rejected_at_its_field_and_line() {
    let rl = |body: &str| {
        format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n{body}")
    };
    for (body, field, line, msg) in [
        (
            "      requests_per_unit: 10001\n      strategy: sliding-window-log\n",
            "requests_per_unit",
            6,
            "at most 10000",
        ),
        (
            "      requests_per_unit: 4294967295\n      strategy: token-bucket\n      burst: 1099511627777\n",
            "burst",
            8,
            "at most 1099511627776",
        ),
        (
            "      unit_multiplier: 86400\n      requests_per_unit: 1\n      strategy: gcra\n      burst: 1465\n",
            "burst",
            9,
            "to refill",
        ),
        (
            "      requests_per_unit: 1\n      burst: 5\n",
            "burst",
            7,
            "takes one",
        ),
        (
            "      requests_per_unit: 1\n      strategy: fixed-window\n      burst: 5\n",
            "burst",
            8,
            "takes one",
        ),
    ] {
        let e = reject(&rl(body));
        assert_eq!(
            e.path,
            format!("descriptors[0].rate_limit.{field}"),
            "{body}: {e}"
        );
        assert_eq!(e.line, line, "{e}");
        assert!(e.message.contains(msg), "{e}");
    }
    // at the bounds: accepted (no limiter is built for zero requests or
    // an unlimited rule, so nothing is checked there)
    for body in [
        "      requests_per_unit: 10000\n      strategy: sliding-window-log\n",
        "      requests_per_unit: 0\n      strategy: sliding-window-log\n      unit_multiplier: 2\n",
        "      requests_per_unit: 4294967295\n      strategy: token-bucket\n      burst: 1099511627776\n",
        "      unit_multiplier: 86400\n      requests_per_unit: 1\n      strategy: gcra\n      burst: 1464\n",
    ] {
        one(&rl(body));
    }
}

/// The loader accepts a rule exactly when the library builds the quota the
/// service makes of it (a fixed window aligned to the epoch without a
/// `strategy`), over every strategy and the bounds of period, count and
/// burst; an accepted one builds a service.
#[test]
fn the_loader_accepts_a_rule_exactly_when_the_library_builds_it() {
    use std::time::Duration;
    use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
    let day = 86_400_000_000u64;
    let periods = [
        ("unit: second", 1_000_000),
        ("unit: year", 365 * day),
        ("unit: day, unit_multiplier: 366", 366 * day),
        ("unit: day, unit_multiplier: 367", 367 * day),
        ("unit: year, unit_multiplier: 2", 730 * day),
        ("duration: 1us", 1),
        ("duration: 366d", 366 * day),
        ("duration: 366d 1us", 366 * day + 1),
    ];
    let counts = [1u64, 3, 10_000, 10_001, u64::from(u32::MAX)];
    let mut strategies = vec![None];
    strategies.extend(
        Strategy::ALL
            .into_iter()
            .filter(|s| *s != Strategy::Concurrency)
            .map(Some),
    );
    let bursts = [
        None,
        Some(1u64),
        Some(3),
        Some(1 << 40),
        Some((1 << 40) + 1),
        Some(u64::MAX),
    ];
    let (mut accepted, mut rejected) = (0, 0);
    for (period, period_us) in periods {
        for count in counts {
            for strategy in &strategies {
                for burst in bursts {
                    let mut body = format!("{period}, requests_per_unit: {count}");
                    if let Some(s) = strategy {
                        body.push_str(&format!(", strategy: {s}"));
                    }
                    if let Some(b) = burst {
                        body.push_str(&format!(", burst: {b}"));
                    }
                    let src = format!(
                        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{{body}}}\n"
                    );
                    let rate = Rate::new(count, Duration::from_micros(period_us));
                    let mut quota = match strategy {
                        None => Quota::fixed_window(rate).aligned(),
                        Some(s) => Quota::new(*s, rate),
                    };
                    if let Some(b) = burst {
                        quota = quota.burst(b);
                    }
                    let library = RateLimiter::builder()
                        .store(MemoryStore::with_shards(1))
                        .prefix("t")
                        .quota(quota.name("a"))
                        .build();
                    match (load(&[("t.yaml", &src)]), library) {
                        (Ok(c), Ok(_)) => {
                            accepted += 1;
                            crate::service::RlsService::new(
                                c,
                                MemoryStore::with_shards(1),
                                crate::service::ServiceOptions::default(),
                            )
                            .unwrap_or_else(|e| panic!("{body}: {e}"));
                        }
                        (Err(e), Err(_)) => {
                            rejected += 1;
                            assert!(
                                e.path.starts_with("descriptors[0].rate_limit."),
                                "{body}: {e}"
                            );
                            assert!(e.line > 0, "{body}: {e}");
                        }
                        (Ok(_), Err(e)) => {
                            panic!("{body}: loaded, and the library rejects it: {e}")
                        }
                        (Err(e), Ok(_)) => {
                            panic!("{body}: rejected, and the library builds it: {e}")
                        }
                    }
                }
            }
        }
    }
    assert!(
        accepted > 100 && rejected > 100,
        "{accepted} accepted, {rejected} rejected"
    );
}

#[test]
fn strategy_and_duration_errors_name_what_is_accepted_in_the_files_words() {
    let e = reject(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, strategy: concurrent}\n",
    );
    assert!(e.message.contains("unknown strategy \"concurrent\""), "{e}");
    assert!(!e.message.contains("concurrency"), "{e}");
    let e = reject(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {duration: -1s, requests_per_unit: 1}\n",
    );
    assert!(e.message.contains("\"-1s\" is not a duration"), "{e}");
    assert!(!e.message.contains("rate"), "{e}");
}
