//! Property tests of the rate-string parser: it never panics, errors point
//! inside the input, and every rate with a whole number of milliseconds
//! formats to a string that parses back to it (the fuzz target
//! `fuzz/fuzz_targets/rate.rs` checks the same on raw bytes).

use std::time::Duration;

use proptest::prelude::*;
use tower_redis_ratelimit::Rate;

/// Strings near the grammar: counts, separators, units, noise.
fn rate_like() -> impl Strategy<Value = String> {
    let count = prop_oneof![
        (0u64..100_000).prop_map(|n| n.to_string()),
        Just("1_000".to_owned()),
        Just("99999999999999999999".to_owned()),
        Just("+5".to_owned()),
        Just(String::new()),
    ];
    let sep = prop_oneof![
        Just("/"),
        Just(" / "),
        Just(" per "),
        Just(" PER "),
        Just("per"),
        Just(""),
    ];
    let mult = prop_oneof![
        Just(String::new()),
        (0u64..10_000).prop_map(|n| n.to_string()),
        (0u64..10_000).prop_map(|n| format!("{n} ")),
        Just("99999999999999999999".to_owned()),
    ];
    let unit = prop::sample::select(vec![
        "us",
        "ms",
        "msec",
        "s",
        "sec",
        "seconds",
        "m",
        "min",
        "minute",
        "h",
        "hour",
        "hours",
        "d",
        "day",
        "days",
        "DAY",
        "fortnight",
        "",
        "µs",
    ]);
    let noise = "[ \\t;,/a-z0-9_{}\u{0}-\u{7f}é€]{0,3}";
    (noise, count, sep, mult, unit, noise)
        .prop_map(|(a, c, s, m, u, b)| format!("{a}{c}{s}{m}{u}{b}"))
}

fn check(input: &str) {
    match input.parse::<Rate>() {
        Ok(rate) => {
            let text = rate.to_string();
            assert_eq!(
                text.parse::<Rate>().as_ref(),
                Ok(&rate),
                "{input:?} -> {text:?}"
            );
        }
        Err(e) => {
            assert!(e.position() <= input.len(), "{input:?}: {e}");
            assert!(input.is_char_boundary(e.position()), "{input:?}: {e}");
            assert!(e.to_string().contains("invalid rate"), "{e}");
        }
    }
    match Rate::parse_list(input) {
        Ok(rates) => {
            assert!(!rates.is_empty());
            for rate in rates {
                assert_eq!(rate.to_string().parse::<Rate>(), Ok(rate), "{input:?}");
            }
        }
        Err(e) => {
            assert!(e.position() <= input.len(), "{input:?}: {e}");
            assert!(input.is_char_boundary(e.position()), "{input:?}: {e}");
        }
    }
}

#[test]
fn a_count_too_large_says_so_and_gives_the_maximum() {
    for input in [
        "18446744073709551616/s",
        " 99999999999999999999 per day",
        "18_446_744_073_709_551_616/min",
    ] {
        let e = input.parse::<Rate>().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("too large"), "{msg}");
        assert!(msg.contains("18446744073709551615"), "{msg}");
        assert!(!msg.contains("whole number"), "{msg}");
        assert_eq!(
            e.position(),
            input.len() - input.trim_start().len(),
            "{msg}"
        );
    }
    // the largest count parses (a quota takes less, and build() says so)
    assert_eq!(
        "18446744073709551615/s".parse::<Rate>().unwrap().count(),
        u64::MAX
    );
    let e = Rate::parse_list("10/min; 18446744073709551616/day").unwrap_err();
    assert_eq!(e.position(), 8);
    assert!(e.to_string().contains("too large"), "{e}");
    // not a number at all is still a different error
    let e = "ten/s".parse::<Rate>().unwrap_err();
    assert!(e.to_string().contains("whole number"), "{e}");
}

#[test]
fn an_unknown_unit_lists_every_accepted_unit_and_points_at_it() {
    let accepted = [
        "us", "µs", "usec", "micros", "ms", "msec", "millis", "s", "sec", "secs", "m", "min",
        "mins", "h", "hr", "hrs", "d", "day", "days",
    ];
    for (input, at) in [
        ("10/μs", 3), // Greek mu, not the micro sign
        ("10/5μs", 4),
        ("10 per 5 μs", 9),
        ("10/ｓ", 3),
        ("10/é", 3),
        ("10/fortnight", 3),
        ("10/2 lightyears", 5),
    ] {
        let e = input.parse::<Rate>().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unknown period unit"), "{msg}");
        for unit in accepted {
            assert!(msg.contains(unit), "{input:?}: {unit:?} missing from {msg}");
        }
        assert_eq!(e.position(), at, "{input:?}: {msg}");
        assert!(input.is_char_boundary(e.position()));
        // every accepted unit parses
        for unit in accepted {
            let ok = format!("10/{unit}");
            assert!(ok.parse::<Rate>().is_ok(), "{ok}");
        }
    }
    let e = "10/μs".parse::<Rate>().unwrap_err();
    assert!(e.to_string().contains("Greek"), "{e}");
    // the error quotes a long unit only in part
    let long = format!("1/{}", "x".repeat(10_000));
    let e = long.parse::<Rate>().unwrap_err();
    assert!(
        e.to_string().contains("\"xxxxxxxxxxxxxxxx…\""),
        "{}",
        &e.to_string()[..200]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_strings_never_panic(input in any::<String>()) {
        check(&input);
    }

    #[test]
    fn near_valid_strings_never_panic_and_round_trip(input in rate_like()) {
        check(&input);
    }

    #[test]
    fn lists_of_near_valid_strings_never_panic(
        parts in prop::collection::vec(rate_like(), 0..5),
        sep in prop::sample::select(vec![";", ",", "; ", " , "]),
    ) {
        check(&parts.join(sep));
    }

    #[test]
    fn every_whole_microsecond_rate_displays_as_a_string_that_parses_back(
        count in any::<u64>(),
        us in prop_oneof![
            0u64..100_000_000_000,
            Just(1_000_000u64),
            Just(60_000_000),
            Just(3_600_000_000),
            Just(86_400_000_000),
            (0u64..1_000_000).prop_map(|ms| ms * 1_000),
            // the longest period the parser accepts, in whole µs
            Just(u64::MAX / 1_000),
        ],
    ) {
        let rate = Rate::new(count, Duration::from_micros(us));
        let text = rate.to_string();
        prop_assert_eq!(text.parse::<Rate>(), Ok(rate), "{}", text);
        prop_assert_eq!(Rate::parse_list(&format!("{text}; {text}")), Ok(vec![rate, rate]));
    }
}

fn names(lim: &tower_redis_ratelimit::RateLimiter) -> Vec<&str> {
    lim.quota_names().iter().map(|n| n.as_ref()).collect()
}

/// A parsed list goes straight into the builder; every rate is a GCRA quota
/// named after it, and all of them apply.
#[tokio::test]
async fn a_parsed_list_goes_straight_into_the_builder_and_every_rate_applies() {
    use tower_redis_ratelimit::clock::ManualClock;
    use tower_redis_ratelimit::strategy::Strategy;
    use tower_redis_ratelimit::{MemoryStore, Quota, RateLimiter};

    let lim = RateLimiter::builder()
        .store(MemoryStore::new())
        .quotas(Rate::parse_list("10/min; 1000/day").unwrap())
        .build()
        .unwrap();
    assert_eq!(names(&lim), ["gcra-10-per-60s", "gcra-1000-per-86400s"]);
    let d = lim.check("k").await.unwrap();
    assert!(d.allowed());
    assert_eq!(
        (
            d.quotas().next().unwrap().remaining(),
            d.quotas().nth(1).unwrap().remaining()
        ),
        (9, 999)
    );

    let clock = ManualClock::new(Duration::from_secs(3_600));
    let lim = RateLimiter::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .quotas(Rate::parse_list("2/min, 3/day").unwrap())
        .build()
        .unwrap();
    for _ in 0..2 {
        assert!(lim.check("k").await.unwrap().allowed());
    }
    let d = lim.check("k").await.unwrap();
    assert!(!d.allowed());
    assert_eq!(d.quota().as_ref(), "gcra-2-per-60s");
    clock.advance(Duration::from_secs(60));
    assert!(lim.check("k").await.unwrap().allowed());
    clock.advance(Duration::from_secs(60));
    let d = lim.check("k").await.unwrap();
    assert!(!d.allowed(), "{d:?}");
    assert_eq!(d.quota().as_ref(), "gcra-3-per-86400s");

    // a bare rate is a GCRA quota, and mixes with quotas
    assert_eq!(
        Quota::from(Rate::per_second(5)),
        Quota::gcra(Rate::per_second(5))
    );
    assert_eq!(Quota::from(Rate::per_second(5)).strategy(), Strategy::Gcra);
    let lim = RateLimiter::builder()
        .store(MemoryStore::new())
        .quota(Rate::per_second(5))
        .quota(Quota::fixed_window(Rate::per_second(5)))
        .build()
        .unwrap();
    assert_eq!(lim.quota_names().len(), 2);

    // rates that differ only below a millisecond get distinct names
    let lim = RateLimiter::builder()
        .store(MemoryStore::new())
        .quotas(Rate::parse_list("1/1500us; 1/1ms; 1/1001us").unwrap())
        .build()
        .unwrap();
    assert_eq!(
        names(&lim),
        ["gcra-1-per-1500us", "gcra-1-per-1ms", "gcra-1-per-1001us"]
    );
    // the same rate twice is a clear error
    let e = RateLimiter::builder()
        .store(MemoryStore::new())
        .quotas(Rate::parse_list("10/min; 10/60s").unwrap())
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "quota[1].name");
    assert!(
        e.to_string().contains("the same strategy and rate twice"),
        "{e}"
    );
}
