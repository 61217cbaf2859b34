//! The `X-Forwarded-For` and RFC 7239 `Forwarded` parsers on arbitrary
//! bytes: they never panic, `X-Forwarded-For` gives one hop per non-empty
//! entry, and `Forwarded` never more hops than the value has commas plus one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_redis_ratelimit::key::{parse_forwarded, parse_x_forwarded_for};

fuzz_target!(|data: &[u8]| {
    let entries = data
        .split(|&b| b == b',')
        .filter(|e| e.iter().any(|&b| b != b' ' && b != b'\t'))
        .count();
    let xff = parse_x_forwarded_for(data);
    assert_eq!(xff.len(), entries, "{xff:?}");
    let fwd = parse_forwarded(data);
    let commas = data.iter().filter(|&&b| b == b',').count();
    assert!(fwd.len() <= commas + 1, "{fwd:?}");
});
