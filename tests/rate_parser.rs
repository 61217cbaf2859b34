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
        Err(e) => assert!(e.position() <= input.len(), "{input:?}: {e}"),
    }
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
