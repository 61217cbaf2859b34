//! The backoff's jitter and cap, and the NACK's message cut to its bound.

use super::*;

#[test]
fn the_backoff_doubles_with_jitter_up_to_its_cap() {
    let b = Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(2),
    };
    let mut j = Jitter(42);
    for attempt in 0..40 {
        let ceiling = Duration::from_millis(100 * (1u64 << attempt.min(20))).min(b.max);
        let mut seen = Vec::new();
        for _ in 0..50 {
            let d = b.delay(attempt, j.next());
            assert!(d >= ceiling / 2 && d <= ceiling, "{attempt}: {d:?}");
            seen.push(d);
        }
        seen.dedup();
        assert!(seen.len() > 1, "{attempt}: no jitter");
    }
    assert_eq!(b.delay(u32::MAX, 0), Duration::from_secs(1));
    // the ends of the first wait: half of initial, and initial
    assert_eq!(b.delay(0, 0), Duration::from_millis(50));
    assert_eq!(b.delay(0, 50_000_000), Duration::from_millis(100));
}

#[test]
fn a_long_error_is_cut_at_a_character() {
    let s = "é".repeat(3_000);
    let t = truncated(&s, MAX_ERROR_DETAIL);
    assert!(
        t.len() <= MAX_ERROR_DETAIL && t.ends_with("..."),
        "{}",
        t.len()
    );
    assert_eq!(truncated("short", 10), "short");
}
