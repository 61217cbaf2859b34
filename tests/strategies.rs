//! Every strategy with a manual clock, on Redis and on the memory store:
//! admissions, `remaining`, `reset_after`, `retry_after` and `delay` checked to
//! the microsecond at the boundaries.

mod common;

use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::{
    Decision, ManualClock, MemoryStore, Quota, Rate, RateLimiter, RedisStore,
};

const T0: Duration = Duration::from_secs(1_000_000);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}

/// The same quota on a Redis store and a memory store, each with its own clock at T0.
fn limiters(server: &RedisServer, quota: Quota, prefix: &str) -> Vec<(RateLimiter, ManualClock)> {
    let redis_clock = ManualClock::new(T0);
    let memory_clock = ManualClock::new(T0);
    let redis = RateLimiter::builder()
        .store(RedisStore::new(server.pool(4)).timeout(Duration::from_secs(5)))
        .prefix(prefix)
        .quota(quota.clone())
        .clock(redis_clock.clone())
        .build()
        .unwrap();
    let memory = RateLimiter::builder()
        .store(MemoryStore::new())
        .prefix(prefix)
        .quota(quota)
        .clock(memory_clock.clone())
        .build()
        .unwrap();
    vec![(redis, redis_clock), (memory, memory_clock)]
}

#[track_caller]
fn allowed(d: &Decision, remaining: u64, reset_after: Duration) {
    assert!(d.allowed, "expected allowed: {d:?}");
    assert_eq!(d.remaining, remaining, "remaining: {d:?}");
    assert_eq!(d.reset_after, reset_after, "reset_after: {d:?}");
    assert_eq!(d.retry_after, None, "retry_after: {d:?}");
}

#[track_caller]
fn denied(d: &Decision, remaining: u64, retry_after: Option<Duration>) {
    assert!(!d.allowed, "expected denied: {d:?}");
    assert_eq!(d.remaining, remaining, "remaining: {d:?}");
    assert_eq!(d.retry_after, retry_after, "retry_after: {d:?}");
    assert_eq!(d.delay, None);
}

#[tokio::test]
async fn fixed_window_admits_limit_then_waits_for_the_window_end() {
    let server = RedisServer::start();
    let q = Quota::fixed_window(Rate::new(5, Duration::from_secs(10)));
    for (lim, clock) in limiters(&server, q, "fw") {
        for i in 0..5 {
            allowed(&lim.check("k").await.unwrap(), 4 - i, ms(10_000));
        }
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(10_000)));
        clock.advance(ms(3_500));
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(6_500)));
        assert_eq!(d.reset_after, ms(6_500));
        clock.advance(ms(6_500) - us(1));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        clock.advance(us(1));
        allowed(&lim.check("k").await.unwrap(), 4, ms(10_000));
        // a cost that can never fit: denied, nothing consumed, no retry time
        denied(&lim.check_n("k", 6).await.unwrap(), 4, None);
        allowed(&lim.check_n("k", 4).await.unwrap(), 0, ms(10_000));
        // peek: cost 0 consumes nothing
        let p = lim.peek("other").await.unwrap();
        allowed(&p, 5, Duration::ZERO);
        allowed(&lim.peek("k").await.unwrap(), 0, ms(10_000));
    }
}

#[tokio::test]
async fn sliding_window_log_is_exact_over_any_window() {
    let server = RedisServer::start();
    let q = Quota::sliding_window_log(Rate::new(5, Duration::from_secs(10)));
    for (lim, clock) in limiters(&server, q, "swl") {
        allowed(&lim.check_n("k", 2).await.unwrap(), 3, ms(10_000));
        clock.advance(ms(4_000));
        allowed(&lim.check("k").await.unwrap(), 2, ms(10_000));
        allowed(&lim.check_n("k", 2).await.unwrap(), 0, ms(10_000));
        // the two entries at t=0 leave the window at t=10s
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(6_000)));
        assert_eq!(d.reset_after, ms(10_000));
        clock.advance(ms(6_000) - us(1));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        // needing 3 free slots means waiting for the third-oldest entry (t=4s)
        denied(
            &lim.check_n("k", 3).await.unwrap(),
            0,
            Some(ms(4_000) + us(1)),
        );
        clock.advance(us(1));
        allowed(&lim.check("k").await.unwrap(), 1, ms(10_000));
        allowed(&lim.check("k").await.unwrap(), 0, ms(10_000));
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
        allowed(&lim.peek("k").await.unwrap(), 0, ms(10_000));
    }
}

#[tokio::test]
async fn sliding_window_counter_weights_the_previous_window() {
    let server = RedisServer::start();
    let q = Quota::sliding_window_counter(Rate::new(5, Duration::from_secs(10)));
    for (lim, clock) in limiters(&server, q, "swc") {
        // T0 is aligned to the 10 s windows
        for i in 0..5 {
            allowed(&lim.check("k").await.unwrap(), 4 - i, ms(20_000));
        }
        // the current window is full: wait for the next one, plus 1 µs for the
        // previous window's weight to drop below 5
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(10_000) + us(1)));
        clock.advance(ms(10_000));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        clock.advance(ms(2_000));
        // 2 s into the window: estimate = floor(5 * 0.8) = 4
        allowed(&lim.check("k").await.unwrap(), 0, ms(18_000));
        // next slot once floor(5 * (1 - e/10s)) <= 3, i.e. e > 2 s
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        clock.advance(ms(2_000));
        allowed(&lim.check("k").await.unwrap(), 0, ms(16_000));
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
        // two windows later everything is forgotten
        clock.advance(ms(20_000));
        allowed(&lim.peek("k").await.unwrap(), 5, Duration::ZERO);
    }
}

#[tokio::test]
async fn token_bucket_refills_one_token_per_interval() {
    let server = RedisServer::start();
    // 5 per 10 s: one token every 2 s, bucket of 5
    let q = Quota::token_bucket(Rate::new(5, Duration::from_secs(10)));
    for (lim, clock) in limiters(&server, q, "tb") {
        for i in 0..5 {
            allowed(&lim.check("k").await.unwrap(), 4 - i, ms(2_000 * (i + 1)));
        }
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
        clock.advance(ms(1_500));
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(500)));
        assert_eq!(d.reset_after, ms(8_500));
        clock.advance(ms(500));
        allowed(&lim.check("k").await.unwrap(), 0, ms(10_000));
        clock.advance(ms(5_000)); // t = 7 s: two tokens since t = 2 s, next at 8 s
        denied(&lim.check_n("k", 3).await.unwrap(), 2, Some(ms(1_000)));
        allowed(&lim.check_n("k", 2).await.unwrap(), 0, ms(9_000));
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
        clock.advance(ms(60_000));
        allowed(&lim.peek("k").await.unwrap(), 5, Duration::ZERO);
    }
}

#[tokio::test]
async fn gcra_spaces_requests_after_the_burst() {
    let server = RedisServer::start();
    let q = Quota::gcra(Rate::new(5, Duration::from_secs(10)));
    for (lim, clock) in limiters(&server, q, "gcra") {
        for i in 0..5 {
            allowed(&lim.check("k").await.unwrap(), 4 - i, ms(2_000 * (i + 1)));
        }
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
        clock.advance(ms(2_000) - us(1));
        denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
        clock.advance(us(1));
        allowed(&lim.check("k").await.unwrap(), 0, ms(10_000));
        denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
    }
    // burst 1: strictly one request per interval
    let q = Quota::gcra(Rate::new(5, Duration::from_secs(10))).burst(1);
    for (lim, clock) in limiters(&server, q, "gcra1") {
        allowed(&lim.check("k").await.unwrap(), 0, ms(2_000));
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
        clock.advance(ms(1_000));
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(1_000)));
        clock.advance(ms(1_000));
        allowed(&lim.check("k").await.unwrap(), 0, ms(2_000));
        let d = lim.check_n("k", 2).await.unwrap();
        denied(&d, 0, None);
        assert_eq!(d.limit, 1);
    }
}

#[tokio::test]
async fn leaky_bucket_queues_with_delays_and_denies_when_full() {
    let server = RedisServer::start();
    // drains one request every 2 s; three may wait
    let q = Quota::leaky_bucket(Rate::new(5, Duration::from_secs(10))).burst(3);
    for (lim, clock) in limiters(&server, q, "lb") {
        for i in 0..3u64 {
            let d = lim.check("k").await.unwrap();
            allowed(&d, 2 - i, ms(2_000 * (i + 1)));
            let want = (i > 0).then(|| ms(2_000 * i));
            assert_eq!(d.delay, want, "{d:?}");
        }
        denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
        clock.advance(ms(2_000));
        let d = lim.check("k").await.unwrap();
        allowed(&d, 0, ms(6_000));
        assert_eq!(d.delay, Some(ms(4_000)));
        denied(&lim.check_n("k", 4).await.unwrap(), 0, None);
    }
}

#[tokio::test]
async fn concurrency_holds_leases_until_released_or_expired() {
    let server = RedisServer::start();
    let q = Quota::concurrency(2).lease_timeout(Duration::from_secs(30));
    for (lim, clock) in limiters(&server, q, "conc") {
        let a = lim.check("k").await.unwrap();
        allowed(&a, 1, ms(30_000));
        clock.advance(ms(1_000));
        let b = lim.check("k").await.unwrap();
        allowed(&b, 0, ms(30_000));
        // the first lease expires 29 s from now
        let d = lim.check("k").await.unwrap();
        denied(&d, 0, Some(ms(29_000)));
        assert!(d.lease.is_none());
        lim.release(a.lease.as_ref().unwrap()).await.unwrap();
        lim.release(a.lease.as_ref().unwrap()).await.unwrap(); // twice is harmless
        let c = lim.check("k").await.unwrap();
        allowed(&c, 0, ms(30_000));
        assert_ne!(
            c.lease.as_ref().unwrap().id(),
            b.lease.as_ref().unwrap().id()
        );
        // leases of a crashed holder expire after the timeout
        clock.advance(ms(30_000));
        allowed(&lim.check_n("k", 2).await.unwrap(), 0, ms(30_000));
        denied(&lim.check_n("k", 3).await.unwrap(), 0, None);
        // a peek takes no lease
        assert!(lim.peek("k").await.unwrap().lease.is_none());
    }
}

#[tokio::test]
async fn a_clock_going_backwards_never_admits_more() {
    let server = RedisServer::start();
    for q in [
        Quota::fixed_window(Rate::per_second(3)),
        Quota::sliding_window_log(Rate::per_second(3)),
        Quota::sliding_window_counter(Rate::per_second(3)),
        Quota::token_bucket(Rate::per_second(3)),
        Quota::gcra(Rate::per_second(3)),
        Quota::leaky_bucket(Rate::per_second(3)),
        Quota::concurrency(3),
    ] {
        for (lim, clock) in limiters(&server, q.clone(), "back") {
            clock.advance(ms(500));
            for _ in 0..3 {
                assert!(lim.check("k").await.unwrap().allowed, "{q:?}");
            }
            clock.set(T0);
            let d = lim.check("k").await.unwrap();
            assert!(!d.allowed, "{q:?}: {d:?}");
        }
    }
}
