//! A concurrency lease whose decision never reached its caller is given back:
//! a `check` or a reservation dropped while Redis is paused (a client that
//! went away), or a call that timed out and was applied when Redis woke,
//! leaves no lease behind (against a real Redis; the key's `ZCARD` is read
//! straight from Redis).
//! The memory store decides synchronously: its call cannot be cut short.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{GENEROUS, RedisServer, warm_up};
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::{Quota, RateLimiter, RedisStore};

fn limiter(server: &RedisServer, prefix: &str, timeout: Duration) -> RateLimiter {
    RateLimiter::builder()
        .store(RedisStore::new(server.pool(4)).timeout(timeout))
        .prefix(prefix)
        .quota(Quota::concurrency(1))
        .build()
        .unwrap()
}

/// A private Redis and a limiter on it whose connection is up and whose
/// decide script is loaded (its warm-up lease given back).
async fn warmed(prefix: &str, timeout: Duration) -> (RedisServer, RateLimiter) {
    let server = RedisServer::start();
    let lim = limiter(&server, prefix, timeout);
    let warm = warm_up(&lim, "warm").await;
    lim.release(warm.lease().as_ref().unwrap()).await.unwrap();
    (server, lim)
}

/// The leases held in `key`'s concurrency set, read from Redis directly.
async fn zcard(server: &RedisServer, lim: &RateLimiter, key: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(&lim.storage_keys(key)[0])
        .query_async(&mut server.conn().await)
        .await
        .unwrap()
}

/// Waits (at most 2 s) until `key` holds no lease.
async fn until_no_lease(server: &RedisServer, lim: &RateLimiter, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let n = zcard(server, lim, key).await;
        if n == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} lease(s) still held 2 s after Redis resumed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// After the lost call: no lease is held, the next check takes the only slot.
async fn slot_is_free(server: &RedisServer, lim: &RateLimiter, key: &str) {
    until_no_lease(server, lim, key).await;
    let d = lim.check(key).await.unwrap();
    assert!(d.allowed(), "the slot is still taken: {d:?}");
    assert_eq!(zcard(server, lim, key).await, 1);
    lim.release(d.lease().as_ref().unwrap()).await.unwrap();
    assert_eq!(zcard(server, lim, key).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_dropped_while_redis_is_paused_leaves_no_lease() {
    let (server, lim) = warmed("undo-drop", GENEROUS).await;

    server.pause();
    // the caller stops waiting: the check's future is dropped mid-call,
    // its EVALSHA already sent
    let r = tokio::time::timeout(Duration::from_millis(30), lim.check("k")).await;
    assert!(r.is_err(), "a paused Redis answered: {r:?}");
    server.resume();
    slot_is_free(&server, &lim, "k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_dropped_while_redis_is_paused_leaves_no_lease() {
    let (server, lim) = warmed("undo-reserve", GENEROUS).await;
    // the take script is loaded before Redis is paused
    let r = lim.reserve_n("warm", 1).await.unwrap();
    assert!(r.decision().allowed(), "{:?}", r.decision());
    lim.settle(&r, 1).await.unwrap();
    lim.release(r.decision().lease().as_ref().unwrap())
        .await
        .unwrap();
    until_no_lease(&server, &lim, "warm").await;

    server.pause();
    // a reservation's take (another script than check's) is dropped
    // mid-call, its EVALSHA already sent
    let r = tokio::time::timeout(Duration::from_millis(30), lim.reserve_n("k", 1)).await;
    assert!(r.is_err(), "a paused Redis answered");
    server.resume();
    slot_is_free(&server, &lim, "k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_timed_out_leaves_no_lease_when_redis_wakes() {
    let (server, lim) = warmed("undo-timeout", Duration::from_millis(200)).await;

    server.pause();
    let started = Instant::now();
    let r = lim.check("k").await;
    assert!(matches!(r, Err(StoreError::Timeout(_))), "{r:?}");
    // Redis wakes after the call gave up, and runs the EVALSHA then
    tokio::time::sleep(Duration::from_millis(500).saturating_sub(started.elapsed())).await;
    server.resume();
    // the call that follows may meet a connection replaced meanwhile: warm it
    slot_is_free_after_warm_up(&server, &lim, "k").await;
}

/// [`slot_is_free`], after the store answered again (the timed-out
/// connection was replaced; a fresh one may take longer than 200 ms on a
/// loaded machine).
async fn slot_is_free_after_warm_up(server: &RedisServer, lim: &RateLimiter, key: &str) {
    until_no_lease(server, lim, key).await;
    let d = warm_up(lim, key).await;
    assert!(d.allowed(), "the slot is still taken: {d:?}");
    lim.release(d.lease().as_ref().unwrap()).await.unwrap();
    assert_eq!(zcard(server, lim, key).await, 0);
}
