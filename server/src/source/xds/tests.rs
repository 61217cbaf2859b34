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

/// The log lines of a client handling the responses `bad(type_url,
/// nonce)` for `kinds` in turn, each of which is NACKed with its error.
fn refusal_log(kinds: impl IntoIterator<Item = &'static str>) -> String {
    use std::sync::{Arc, Mutex};

    use tower_redis_ratelimit::MemoryStore;

    use crate::config::Config;
    use crate::service::ServiceOptions;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_or(Ok(0), |mut v| {
                v.extend_from_slice(buf);
                Ok(buf.len())
            })
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let service = RlsService::new(
        Config::default(),
        MemoryStore::new(),
        ServiceOptions::default(),
    )
    .expect("service");
    let mut client = XdsClient::new(service, "127.0.0.1:1", LoadOptions::default());
    tracing::subscriber::with_default(subscriber, || {
        for (nonce, type_url) in kinds.into_iter().enumerate() {
            let bad = DiscoveryResponse {
                version_info: "v2".to_owned(),
                resources: vec![prost_types::Any {
                    type_url: type_url.to_owned(),
                    value: vec![0xff],
                }],
                type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
                nonce: nonce.to_string(),
                ..Default::default()
            };
            let nack = client.handle(bad);
            assert!(nack.is_some_and(|n| n.error_detail.is_some()), "{nonce}");
        }
    });
    let text = lines
        .0
        .lock()
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    text.unwrap_or_default()
}

/// A server that resends a refused snapshot in a loop gets one line a
/// second at most, and every NACK; a refusal unlike the last one logged
/// has its line at once.
#[test]
fn a_refused_snapshot_resent_in_a_loop_is_logged_once_a_second_a_new_one_at_once() {
    let loop_then_new =
        std::iter::repeat_n("type.googleapis.com/x", 50).chain([RATE_LIMIT_CONFIG_TYPE]);
    let text = refusal_log(loop_then_new);
    let refused = text.matches("snapshot refused").count();
    // (the loop's first line, perhaps a second one past a second, and the
    // new refusal's)
    assert!((2..=3).contains(&refused), "{refused} lines:\n{text}");
    assert!(text.contains("not a RateLimitConfig"), "{text}");
}

/// Two refused snapshots in turn are logged a line a second at most too.
#[test]
fn two_refused_snapshots_in_turn_are_logged_once_a_second_each_kind() {
    let in_turn = (0..50).map(|i| {
        if i % 2 == 0 {
            "type.googleapis.com/x"
        } else {
            RATE_LIMIT_CONFIG_TYPE
        }
    });
    let refused = refusal_log(in_turn).matches("snapshot refused").count();
    assert!((1..=4).contains(&refused), "{refused} lines");
}
