//! Rate strings (`"10/s"`, `"5 per 2 hours"`, `"10/min; 1000/day"`): parsing
//! never panics, errors point inside the input, and every parsed rate
//! formats to a string that parses back to the same rate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_redis_ratelimit::Rate;

fn round_trips(rate: Rate) {
    let text = rate.to_string();
    let again: Rate = text
        .parse()
        .unwrap_or_else(|e| panic!("{rate:?} formats as {text:?}, which does not parse: {e}"));
    assert_eq!(again, rate, "{text:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    match input.parse::<Rate>() {
        Ok(rate) => round_trips(rate),
        Err(e) => {
            assert!(e.position() <= input.len(), "{e}");
            let _ = e.to_string();
        }
    }
    match Rate::parse_list(input) {
        Ok(rates) => {
            assert!(!rates.is_empty());
            for rate in rates {
                round_trips(rate);
            }
        }
        Err(e) => {
            assert!(e.position() <= input.len(), "{e}");
            let _ = e.to_string();
        }
    }
});
