//! A `ManualClock` on Redis: Redis expires keys on its own (real) clock, which
//! a manual clock need not follow. Real time passing while the manual time
//! stands still must change no decision.

mod common;

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
