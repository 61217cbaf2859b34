//! A `ManualClock` on Redis: Redis expires keys on its own (real) clock, which
//! a manual clock need not follow. Real time passing while the manual time
//! stands still must change no decision.

use crate::common;

use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisStore};

#[tokio::test]
async fn real_time_passing_while_the_manual_clock_stands_still_forgets_nothing() {
    let server = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(3_600));
    for strategy in Strategy::ALL {
        // One request per 50 ms: every key's TTL (in manual time) is at most
        // a few tens of milliseconds.
        let quota = match strategy {
            Strategy::Concurrency => Quota::concurrency(1).lease_timeout(Duration::from_millis(50)),
            s => Quota::new(s, Rate::new(1, Duration::from_millis(50))),
        };
        let lim = RateLimiter::builder()
            .store(RedisStore::new(server.pool(2)).timeout(Duration::from_secs(10)))
            .prefix(format!("still-{strategy}"))
            .clock(clock.clone())
            .quota(quota)
            .build()
            .unwrap();
        let first = lim.check("k").await.unwrap();
        assert!(first.allowed(), "{strategy}");
        // Real time goes well past every TTL the manual time asked for, which
        // has not moved: the request is as denied as it was.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = lim.check("k").await.unwrap();
        assert!(
            !again.allowed(),
            "{strategy}: Redis forgot the state: {again:?}"
        );
        // Manual time moving on frees the quota as usual.
        clock.advance(Duration::from_millis(150));
        if let Some(lease) = &first.lease() {
            lim.release(lease).await.unwrap();
        }
        assert!(lim.check("k").await.unwrap().allowed(), "{strategy}");
    }
}

#[tokio::test]
async fn a_long_sliding_log_denies_with_the_retry_of_the_time_that_must_leave_first() {
    // 40 times, one a second: past 32 the log is a list on Redis. A denial's
    // retry is the wait for the (n - cost + 1)-th newest time to leave the
    // window: the oldest for cost 1, the newest for cost n, one between.
    let server = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let quota = Quota::sliding_window_log(Rate::new(40, Duration::from_secs(100)));
    let build = |redis: bool| {
        let builder = RateLimiter::builder()
            .prefix("longlog")
            .clock(clock.clone())
            .quota(quota.clone());
        if redis {
            builder
                .store(RedisStore::new(server.pool(2)).timeout(Duration::from_secs(10)))
                .build()
                .unwrap()
        } else {
            builder
                .store(tower_redis_ratelimit::MemoryStore::new())
                .build()
                .unwrap()
        }
    };
    let (on_redis, in_memory) = (build(true), build(false));
    for i in 0..40 {
        if i > 0 {
            clock.advance(Duration::from_secs(1));
        }
        for lim in [&on_redis, &in_memory] {
            assert!(lim.check("k").await.unwrap().allowed(), "request {i}");
        }
    }
    // now = 39 s; the times are 0, 1, …, 39 s
    for (cost, retry) in [(1, 61), (5, 65), (39, 99), (40, 100)] {
        let redis = on_redis.check_n("k", cost).await.unwrap();
        let memory = in_memory.check_n("k", cost).await.unwrap();
        assert!(!redis.allowed(), "cost {cost}");
        assert_eq!(
            redis.retry_after(),
            Some(Duration::from_secs(retry)),
            "cost {cost}"
        );
        assert_eq!(
            (redis.retry_after(), redis.remaining(), redis.reset_after()),
            (
                memory.retry_after(),
                memory.remaining(),
                memory.reset_after()
            ),
            "cost {cost}"
        );
    }
}
