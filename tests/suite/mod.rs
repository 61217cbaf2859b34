//! One test suite for every store: strategies with exact values under a
//! manual clock, multi-quota atomicity, exactness under concurrency from
//! many limiter instances, TTLs and expiry.
//!
//! Each test is an async function over a [`Harness`], which builds limiters
//! on the store under test. `tests/suite_redis.rs`, `tests/suite_cluster.rs`
//! and `tests/suite_memory.rs` run the same functions with [`suite_tests!`],
//! each naming the tests that apply to its store (the memory store has no
//! Redis keys, so no TTL to check).
//!
//! Use it from an integration test file with `mod common; #[macro_use] mod suite;`.

#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::FromRedisValue;
use tower_redis_ratelimit::{
    Clock, Decision, ManualClock, MemoryStore, Quota, Rate, RateLimiter, RedisStore, Strategy,
};

use crate::common::RedisServer;

/// A store timeout no loaded test machine reaches: exactness tests must not
/// see a timed-out call. Timeouts have tests of their own.
pub(crate) const GENEROUS: Duration = Duration::from_secs(10);

/// The store under test.
pub(crate) trait Harness: Send + Sync {
    /// Which store, for messages.
    fn name(&self) -> &'static str;

    /// A new limiter over the store, as another app instance would build it
    /// (for Redis, with a pool of its own). All limiters of one harness share state.
    fn limiter(&self, prefix: &str, quotas: Vec<Quota>, clock: Clock) -> RateLimiter;

    /// Runs a one-key command on the node holding the key; `None` when the
    /// store is not Redis.
    fn redis<T: FromRedisValue + Send>(
        &self,
        cmd: redis::Cmd,
    ) -> impl Future<Output = Option<T>> + Send;

    /// How many keys the store holds under `prefix` (found with `SCAN`, on
    /// every master of a cluster) or, for the memory store (one per test),
    /// how many keys it holds after a sweep.
    fn key_count(&self, prefix: &str) -> impl Future<Output = u64> + Send;
}

/// Generates one `#[tokio::test]` per named suite function, each with a fresh harness.
macro_rules! suite_tests {
    ($harness:expr; $($test:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $test() {
                let harness = $harness;
                suite::$test(&harness).await;
            }
        )+
    };
}

/// The suite's tests that apply to every store.
#[allow(unused_macros)]
macro_rules! store_suite_tests {
    ($harness:expr $(, $extra:ident)* $(,)?) => {
        suite_tests!($harness;
            fixed_window_admits_limit_then_waits_for_the_window_end,
            sliding_window_log_is_exact_over_any_window,
            sliding_window_counter_weights_the_previous_window,
            token_bucket_refills_one_token_per_interval,
            gcra_spaces_requests_after_the_burst,
            leaky_bucket_queues_with_delays_and_denies_when_full,
            concurrency_holds_leases_until_released_or_expired,
            a_clock_going_backwards_never_admits_more,
            multi_quota_is_all_or_nothing,
            exactly_the_limit_is_admitted_under_concurrency_from_many_instances,
            a_multi_quota_limiter_is_exact_under_concurrency,
            concurrency_never_exceeds_its_limit_in_flight,
            all_keys_are_gone_once_their_windows_pass,
            fixed_window_on_the_store_clock_starts_at_the_first_hit,
            a_manual_clock_at_zero_or_far_ahead_is_manual_time,
            $($extra,)*
        );
    };
}

/// The whole suite, for stores whose keys are Redis keys (with TTLs).
#[allow(unused_macros)]
macro_rules! redis_suite_tests {
    ($harness:expr) => {
        store_suite_tests!(
            $harness,
            every_key_written_has_a_ttl_no_longer_than_its_window,
            a_key_found_without_ttl_is_repaired_on_denial,
        );
    };
}

// ---------------------------------------------------------------------------
// Harnesses
// ---------------------------------------------------------------------------

/// A private redis-server; every limiter gets its own pool of 4.
pub(crate) struct RedisHarness {
    pub(crate) server: RedisServer,
    conn: tokio::sync::OnceCell<redis::aio::MultiplexedConnection>,
}

impl RedisHarness {
    pub(crate) fn start() -> Self {
        Self {
            server: RedisServer::start(),
            conn: tokio::sync::OnceCell::new(),
        }
    }
}

impl Harness for RedisHarness {
    fn name(&self) -> &'static str {
        "RedisStore"
    }

    fn limiter(&self, prefix: &str, quotas: Vec<Quota>, clock: Clock) -> RateLimiter {
        RateLimiter::builder()
            .store(RedisStore::new(self.server.pool(4)).timeout(GENEROUS))
            .prefix(prefix)
            .quotas(quotas)
            .clock(clock)
            .build()
            .unwrap()
    }

    async fn redis<T: FromRedisValue + Send>(&self, cmd: redis::Cmd) -> Option<T> {
        let conn = self.conn.get_or_init(|| self.server.conn()).await;
        Some(cmd.query_async(&mut conn.clone()).await.unwrap())
    }

    async fn key_count(&self, prefix: &str) -> u64 {
        scan_count(&mut self.server.conn().await, prefix).await
    }
}

/// Keys matching `{prefix:*` on one node.
async fn scan_count(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> u64 {
    let pattern = format!("{{{prefix}:*");
    let mut cursor: u64 = 0;
    let mut total = 0;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap();
        total += batch.len() as u64;
        if next == 0 {
            return total;
        }
        cursor = next;
    }
}

/// A 3-master Redis Cluster shared by the tests of one test binary that run
/// at the same time (starting one takes a second or two); every limiter gets
/// its own cluster pool. Suite tests use distinct prefixes, so they do not
/// see each other's keys. The cluster stops when the last harness holding it
/// is dropped.
#[cfg(feature = "cluster")]
pub(crate) struct ClusterHarness {
    pub(crate) cluster: Arc<crate::common::RedisCluster>,
    conn: tokio::sync::OnceCell<redis::cluster_async::ClusterConnection>,
}

#[cfg(feature = "cluster")]
impl ClusterHarness {
    pub(crate) fn start() -> Self {
        use std::sync::{Mutex, Weak};
        static SHARED: Mutex<Weak<crate::common::RedisCluster>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        let cluster = shared.upgrade().unwrap_or_else(|| {
            let cluster = Arc::new(crate::common::RedisCluster::start(3, 0));
            *shared = Arc::downgrade(&cluster);
            cluster
        });
        Self {
            cluster,
            conn: tokio::sync::OnceCell::new(),
        }
    }
}

#[cfg(feature = "cluster")]
impl Harness for ClusterHarness {
    fn name(&self) -> &'static str {
        "RedisClusterStore"
    }

    fn limiter(&self, prefix: &str, quotas: Vec<Quota>, clock: Clock) -> RateLimiter {
        let pool = deadpool_redis::cluster::Config::from_urls(self.cluster.urls())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap();
        RateLimiter::builder()
            .store(tower_redis_ratelimit::RedisClusterStore::new(pool).timeout(GENEROUS))
            .prefix(prefix)
            .quotas(quotas)
            .clock(clock)
            .build()
            .unwrap()
    }

    async fn redis<T: FromRedisValue + Send>(&self, cmd: redis::Cmd) -> Option<T> {
        let conn = self.conn.get_or_init(|| self.cluster.conn()).await;
        Some(cmd.query_async(&mut conn.clone()).await.unwrap())
    }

    async fn key_count(&self, prefix: &str) -> u64 {
        let mut total = 0;
        for port in self.cluster.master_ports() {
            total += scan_count(&mut self.cluster.node(port).conn().await, prefix).await;
        }
        total
    }
}

/// One `MemoryStore` shared by every limiter (as one process's instances would).
pub(crate) struct MemoryHarness {
    pub(crate) store: MemoryStore,
}

impl MemoryHarness {
    pub(crate) fn new() -> Self {
        Self {
            store: MemoryStore::new(),
        }
    }
}

impl Harness for MemoryHarness {
    fn name(&self) -> &'static str {
        "MemoryStore"
    }

    fn limiter(&self, prefix: &str, quotas: Vec<Quota>, clock: Clock) -> RateLimiter {
        RateLimiter::builder()
            .store(self.store.clone())
            .prefix(prefix)
            .quotas(quotas)
            .clock(clock)
            .build()
            .unwrap()
    }

    async fn redis<T: FromRedisValue + Send>(&self, _cmd: redis::Cmd) -> Option<T> {
        None
    }

    async fn key_count(&self, _prefix: &str) -> u64 {
        self.store.sweep();
        self.store.len() as u64
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Where manual clocks start: far from zero, aligned to 10 s windows.
pub(crate) const T0: Duration = Duration::from_secs(1_000_000);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}

/// A limiter with one quota and its own manual clock at [`T0`].
fn manual(h: &impl Harness, prefix: &str, quota: Quota) -> (RateLimiter, ManualClock) {
    let clock = ManualClock::new(T0);
    let lim = h.limiter(prefix, vec![quota], clock.clone().into());
    (lim, clock)
}

/// A quota of `strategy` admitting `n` per `period` (leases time out after `period`).
pub(crate) fn quota(strategy: Strategy, n: u64, period: Duration) -> Quota {
    match strategy {
        Strategy::Concurrency => Quota::concurrency(n).lease_timeout(period),
        s => Quota::new(s, Rate::new(n, period)),
    }
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

/// PTTL of `key` in ms, if the store is Redis.
async fn pttl(h: &impl Harness, key: &str) -> Option<i64> {
    let mut cmd = redis::cmd("PTTL");
    cmd.arg(key);
    h.redis(cmd).await
}

// ---------------------------------------------------------------------------
// Strategies: exact values under a manual clock
// ---------------------------------------------------------------------------

pub(crate) async fn fixed_window_admits_limit_then_waits_for_the_window_end(h: &impl Harness) {
    let q = Quota::fixed_window(Rate::new(5, Duration::from_secs(10)));
    let (lim, clock) = manual(h, "fw", q);
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
    // a cost that can never fit: denied without reading the state (so
    // remaining 0), nothing consumed, no retry time
    denied(&lim.check_n("k", 6).await.unwrap(), 0, None);
    allowed(&lim.check_n("k", 4).await.unwrap(), 0, ms(10_000));
    // peek: cost 0 consumes nothing
    let p = lim.peek("other").await.unwrap();
    allowed(&p, 5, Duration::ZERO);
    allowed(&lim.peek("k").await.unwrap(), 0, ms(10_000));
}

pub(crate) async fn sliding_window_log_is_exact_over_any_window(h: &impl Harness) {
    let q = Quota::sliding_window_log(Rate::new(5, Duration::from_secs(10)));
    let (lim, clock) = manual(h, "swl", q);
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

pub(crate) async fn sliding_window_counter_weights_the_previous_window(h: &impl Harness) {
    let q = Quota::sliding_window_counter(Rate::new(5, Duration::from_secs(10)));
    let (lim, clock) = manual(h, "swc", q);
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

pub(crate) async fn token_bucket_refills_one_token_per_interval(h: &impl Harness) {
    // 5 per 10 s: one token every 2 s, bucket of 5
    let q = Quota::token_bucket(Rate::new(5, Duration::from_secs(10)));
    let (lim, clock) = manual(h, "tb", q);
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

pub(crate) async fn gcra_spaces_requests_after_the_burst(h: &impl Harness) {
    let q = Quota::gcra(Rate::new(5, Duration::from_secs(10)));
    let (lim, clock) = manual(h, "gcra", q);
    for i in 0..5 {
        allowed(&lim.check("k").await.unwrap(), 4 - i, ms(2_000 * (i + 1)));
    }
    denied(&lim.check("k").await.unwrap(), 0, Some(ms(2_000)));
    clock.advance(ms(2_000) - us(1));
    denied(&lim.check("k").await.unwrap(), 0, Some(us(1)));
    clock.advance(us(1));
    allowed(&lim.check("k").await.unwrap(), 0, ms(10_000));
    denied(&lim.check_n("k", 6).await.unwrap(), 0, None);

    // burst 1: strictly one request per interval
    let q = Quota::gcra(Rate::new(5, Duration::from_secs(10))).burst(1);
    let (lim, clock) = manual(h, "gcra1", q);
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

pub(crate) async fn leaky_bucket_queues_with_delays_and_denies_when_full(h: &impl Harness) {
    // drains one request every 2 s; three may wait
    let q = Quota::leaky_bucket(Rate::new(5, Duration::from_secs(10))).burst(3);
    let (lim, clock) = manual(h, "lb", q);
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

pub(crate) async fn concurrency_holds_leases_until_released_or_expired(h: &impl Harness) {
    let q = Quota::concurrency(2).lease_timeout(Duration::from_secs(30));
    let (lim, clock) = manual(h, "conc", q);
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

pub(crate) async fn a_clock_going_backwards_never_admits_more(h: &impl Harness) {
    for q in [
        Quota::fixed_window(Rate::per_second(3)),
        Quota::sliding_window_log(Rate::per_second(3)),
        Quota::sliding_window_counter(Rate::per_second(3)),
        Quota::token_bucket(Rate::per_second(3)),
        Quota::gcra(Rate::per_second(3)),
        Quota::leaky_bucket(Rate::per_second(3)),
        Quota::concurrency(3),
    ] {
        let (lim, clock) = manual(h, "back", q.clone());
        clock.advance(ms(500));
        for _ in 0..3 {
            assert!(lim.check("k").await.unwrap().allowed, "{q:?}");
        }
        clock.set(T0);
        let d = lim.check("k").await.unwrap();
        assert!(!d.allowed, "{}: {q:?}: {d:?}", h.name());
    }
}

// ---------------------------------------------------------------------------
// Several quotas
// ---------------------------------------------------------------------------

pub(crate) async fn multi_quota_is_all_or_nothing(h: &impl Harness) {
    let clock = ManualClock::new(Duration::from_secs(3_600));
    let lim = h.limiter(
        "multi",
        vec![
            Quota::fixed_window(Rate::per_minute(3)).name("minute"),
            Quota::fixed_window(Rate::per_hour(5)).name("hour"),
            Quota::concurrency(10).name("inflight"),
        ],
        clock.clone().into(),
    );
    let mut leases = Vec::new();
    for i in 0..3 {
        let d = lim.check("u").await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.quota.as_ref(), "minute");
        assert_eq!(d.remaining, 2 - i);
        assert_eq!(d.quotas.len(), 3);
        leases.push(d.lease.unwrap());
    }
    let d = lim.check("u").await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.quota.as_ref(), "minute");
    assert_eq!(d.retry_after, Some(Duration::from_secs(60)));
    // the hour quota and the lease set were not touched by the denial
    assert_eq!(d.quotas[1].remaining, 2);
    assert!(d.quotas[1].allowed);
    assert_eq!(d.quotas[2].remaining, 7);
    clock.advance(Duration::from_secs(60));
    // cost 3 fits the minute but not the hour: nothing is consumed anywhere
    let d = lim.check_n("u", 3).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.quota.as_ref(), "hour");
    assert_eq!(d.retry_after, Some(Duration::from_secs(3_540)));
    assert_eq!(d.quotas[0].remaining, 3);
    let d = lim.check_n("u", 2).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.quota.as_ref(), "hour");
    assert_eq!(d.remaining, 0);
    for l in &leases {
        lim.release(l).await.unwrap();
    }
    lim.reset("u").await.unwrap();
    assert_eq!(lim.peek("u").await.unwrap().remaining, 3);
}

// ---------------------------------------------------------------------------
// Exactness under concurrency, on the store's own clock
// ---------------------------------------------------------------------------

/// `calls` concurrent checks of one key, spread over `instances` limiters; how many were admitted.
async fn admitted(
    h: &impl Harness,
    prefix: &str,
    quotas: Vec<Quota>,
    instances: usize,
    calls: usize,
) -> u64 {
    let limiters: Vec<RateLimiter> = (0..instances)
        .map(|_| h.limiter(prefix, quotas.clone(), Clock::Store))
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..calls {
        let lim = limiters[i % instances].clone();
        let admitted = admitted.clone();
        tasks.push(tokio::spawn(async move {
            if lim.check("hot-key").await.unwrap().allowed {
                admitted.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

pub(crate) async fn exactly_the_limit_is_admitted_under_concurrency_from_many_instances(
    h: &impl Harness,
) {
    for strategy in Strategy::ALL {
        let prefix = format!("exact-{}", strategy.as_str());
        let q = quota(strategy, 100, Duration::from_secs(3600));
        let n = admitted(h, &prefix, vec![q], 8, 1000).await;
        // Every strategy is exact here: a burst within one window. The sliding
        // window counter's error bound (at most 2n per sliding window) only
        // shows across an aligned-window boundary, and even then it never
        // exceeds n within one aligned window.
        assert_eq!(n, 100, "{}: {strategy}", h.name());
    }
}

pub(crate) async fn a_multi_quota_limiter_is_exact_under_concurrency(h: &impl Harness) {
    for strategy in Strategy::ALL {
        // a second quota: all of one key's state is touched by one call (on a
        // cluster, a CROSSSLOT error would show), and it is consumed exactly as often
        let quotas = vec![
            quota(strategy, 100, Duration::from_secs(3600)).name("a"),
            Quota::fixed_window(Rate::per_hour(10_000)).name("b"),
        ];
        let prefix = format!("multi-exact-{}", strategy.as_str());
        let n = admitted(h, &prefix, quotas.clone(), 4, 400).await;
        assert_eq!(n, 100, "{}: {strategy}", h.name());
        let lim = h.limiter(&prefix, quotas, Clock::Store);
        let d = lim.peek("hot-key").await.unwrap();
        assert_eq!(
            d.quotas[1].remaining,
            10_000 - 100,
            "{}: {strategy}",
            h.name()
        );
    }
}

pub(crate) async fn concurrency_never_exceeds_its_limit_in_flight(h: &impl Harness) {
    let limiters: Vec<RateLimiter> = (0..8)
        .map(|_| h.limiter("inflight", vec![Quota::concurrency(10)], Clock::Store))
        .collect();
    let in_flight = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..400 {
        let lim = limiters[i % 8].clone();
        let (in_flight, peak, served) = (in_flight.clone(), peak.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let d = lim.check("worker").await.unwrap();
            if let Some(lease) = d.lease {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                served.fetch_add(1, Ordering::SeqCst);
                lim.release(&lease).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(peak.load(Ordering::SeqCst) <= 10);
    assert!(served.load(Ordering::SeqCst) >= 10);
    // every lease was released: the key is gone
    assert_eq!(h.key_count("inflight").await, 0, "{}", h.name());
}

// ---------------------------------------------------------------------------
// TTLs and expiry
// ---------------------------------------------------------------------------

/// The longest a key of `strategy` may live for a window of `period_ms`: the
/// sliding window counter keeps a window as the next one's "previous".
fn max_ttl_ms(strategy: Strategy, period_ms: i64) -> i64 {
    if strategy == Strategy::SlidingWindowCounter {
        2 * period_ms
    } else {
        period_ms
    }
}

pub(crate) async fn every_key_written_has_a_ttl_no_longer_than_its_window(h: &impl Harness) {
    let period = Duration::from_secs(60);
    let mut written = Vec::new();
    for strategy in Strategy::ALL {
        let lim = h.limiter("ttl", vec![quota(strategy, 5, period)], Clock::Store);
        for k in 0..3 {
            let user = format!("user-{k}");
            for _ in 0..7 {
                lim.check(&user).await.unwrap();
            }
            written.push((strategy, lim.storage_keys(&user).remove(0)));
        }
    }
    // nothing else was stored
    assert_eq!(h.key_count("ttl").await, 3 * Strategy::ALL.len() as u64);
    for (strategy, key) in written {
        let ttl = pttl(h, &key).await.expect("a Redis store");
        let max = max_ttl_ms(strategy, 60_000);
        assert!(ttl > 0 && ttl <= max, "{}: {key}: PTTL {ttl}", h.name());
    }
}

pub(crate) async fn a_key_found_without_ttl_is_repaired_on_denial(h: &impl Harness) {
    for strategy in Strategy::ALL {
        let lim = h.limiter(
            "repair",
            vec![quota(strategy, 1, Duration::from_secs(60))],
            Clock::Store,
        );
        assert!(lim.check("k").await.unwrap().allowed);
        let key = lim.storage_keys("k").remove(0);
        let mut persist = redis::cmd("PERSIST");
        persist.arg(&key);
        let removed: i64 = h.redis(persist).await.expect("a Redis store");
        assert_eq!(removed, 1, "{strategy}: the key had a TTL to remove");
        assert_eq!(pttl(h, &key).await, Some(-1));
        assert!(!lim.check("k").await.unwrap().allowed);
        let ttl = pttl(h, &key).await.unwrap();
        let max = max_ttl_ms(strategy, 60_000);
        assert!(
            ttl > 0 && ttl <= max,
            "{}: {strategy}: PTTL {ttl}",
            h.name()
        );
    }
}

pub(crate) async fn all_keys_are_gone_once_their_windows_pass(h: &impl Harness) {
    let period = Duration::from_millis(200);
    for strategy in Strategy::ALL {
        let lim = h.limiter("gone", vec![quota(strategy, 3, period)], Clock::Store);
        for k in 0..20 {
            lim.check_n(format!("k{k}"), 2).await.unwrap();
        }
    }
    assert!(h.key_count("gone").await > 0);
    // Keys expire (at most two 200 ms windows); poll against a deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = h.key_count("gone").await;
        if left == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: {left} keys left",
            h.name()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn fixed_window_on_the_store_clock_starts_at_the_first_hit(h: &impl Harness) {
    let period = Duration::from_secs(60);
    let single = h.limiter(
        "fwclock",
        vec![Quota::fixed_window(Rate::new(3, period))],
        Clock::Store,
    );
    let multi = h.limiter(
        "fwclock-multi",
        vec![
            Quota::fixed_window(Rate::new(3, period)).name("a"),
            Quota::fixed_window(Rate::new(100, period)).name("b"),
        ],
        Clock::Store,
    );
    for lim in [single, multi] {
        assert_eq!(lim.peek("k").await.unwrap().reset_after, Duration::ZERO);
        for left in [2, 1, 0] {
            let d = lim.check("k").await.unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, left);
            assert!(d.reset_after <= period && d.reset_after > period - Duration::from_secs(5));
        }
        let d = lim.check("k").await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after, Some(d.reset_after));
        assert!(d.reset_after <= period && d.reset_after > period - Duration::from_secs(5));
        // the denial consumed nothing, and cost above the limit never fits
        let d = lim.check_n("k", 4).await.unwrap();
        assert_eq!((d.allowed, d.retry_after), (false, None));
        assert_eq!(lim.peek("k").await.unwrap().remaining, 0);
        // on Redis, the window is the key's TTL and the count is a plain counter
        let mut get = redis::cmd("GET");
        get.arg(&lim.storage_keys("k")[0]);
        if let Some(count) = h.redis::<u64>(get).await {
            assert_eq!(count, 3, "{}", h.name());
        }
    }
}

// ---------------------------------------------------------------------------
// Manual clock readings anywhere in range
// ---------------------------------------------------------------------------

/// A decision without its random lease id.
fn comparable(d: &Decision) -> String {
    let quotas: Vec<_> = d
        .quotas
        .iter()
        .map(|q| {
            (
                q.allowed,
                q.remaining,
                q.reset_after,
                q.retry_after,
                q.name.clone(),
            )
        })
        .collect();
    format!(
        "allowed {} remaining {} reset {:?} retry {:?} delay {:?} quota {} lease {} {quotas:?}",
        d.allowed,
        d.remaining,
        d.reset_after,
        d.retry_after,
        d.delay,
        d.quota,
        d.lease.is_some()
    )
}

/// A few calls on a manual clock starting at `start`, advancing it.
async fn clock_script(
    h: &impl Harness,
    prefix: &str,
    quotas: Vec<Quota>,
    start: Duration,
) -> Vec<String> {
    let clock = ManualClock::new(start);
    let lim = h.limiter(prefix, quotas, clock.clone().into());
    let mut out = Vec::new();
    let mut step = async |cost: u64, advance: Duration| {
        let d = lim
            .check_n("k", cost)
            .await
            .unwrap_or_else(|e| panic!("{}: {prefix} at {:?}: {e}", h.name(), clock.now()));
        out.push(comparable(&d));
        clock.advance(advance);
    };
    step(1, us(1)).await; // 0 then 1 on Redis: the state written at 0 is read at 1
    step(1, Duration::ZERO).await;
    step(1, us(1)).await;
    step(2, ms(3_000)).await;
    step(1, ms(10_000)).await;
    step(1, Duration::ZERO).await;
    step(0, Duration::ZERO).await;
    out
}

/// A manual clock at 0 or 1 µs (or very late) is a manual time like any other,
/// on every strategy and on several quotas at once: the decisions are those
/// of the same calls at T0 (shifted to keep the aligned windows' phase).
pub(crate) async fn a_manual_clock_at_zero_or_far_ahead_is_manual_time(h: &impl Harness) {
    let period = Duration::from_secs(10);
    let mut configs: Vec<(String, Vec<Quota>)> = Strategy::ALL
        .iter()
        .map(|s| (s.as_str().to_owned(), vec![quota(*s, 2, period)]))
        .collect();
    configs.push((
        "multi".to_owned(),
        vec![
            Quota::fixed_window(Rate::new(2, period)).name("a"),
            Quota::gcra(Rate::new(3, period)).name("b"),
        ],
    ));
    configs.push((
        "fw-multi".to_owned(),
        vec![
            Quota::fixed_window(Rate::new(2, period)).name("a"),
            Quota::fixed_window(Rate::new(3, period)).name("b"),
        ],
    ));
    let late = ManualClock::MAX - Duration::from_secs(3_600);
    for start in [Duration::ZERO, us(1), us(1 << 52), late] {
        for (name, quotas) in &configs {
            let phase = us((start.as_micros() % period.as_micros()) as u64);
            let want = clock_script(
                h,
                &format!("clk-ref-{name}-{}", start.as_micros()),
                quotas.clone(),
                T0 + phase,
            )
            .await;
            let got = clock_script(
                h,
                &format!("clk-{name}-{}", start.as_micros()),
                quotas.clone(),
                start,
            )
            .await;
            assert_eq!(got, want, "{}: {name} starting at {start:?}", h.name());
        }
    }
}
