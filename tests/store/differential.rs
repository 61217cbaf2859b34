//! MemoryStore vs RedisStore on random operation sequences under the same
//! manual clock: every decision must be identical.
//!
//! The Redis side runs each operation on [`REPLICAS`] copies of its key at
//! once, through one limiter: the checks go out batched (several decisions
//! per script call, `src/store/redis/batch.rs`), and every copy must decide
//! as the memory store does.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::RedisServer;
use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::decision::Lease;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Decision, MemoryStore, Quota, Rate, RateLimiter, RedisStore};

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Check {
        key: u8,
        cost: u64,
    },
    Reset(u8),
    Release(usize),
    /// `penalize` (units > 0) or `reward` (units < 0)
    Adjust {
        key: u8,
        units: i64,
    },
    /// `reserve_n(estimate)`, then `settle(actual)`
    Settle {
        key: u8,
        estimate: u64,
        actual: u64,
    },
    /// the clock steps back (only where no state can expire: see
    /// `memory_and_redis_agree_when_the_clock_steps_back`)
    Back(u64),
    /// the limits change: every (named) quota takes this count, period and
    /// burst, keeping its strategy and name (a new limiter on the same stores)
    Limits {
        count: u64,
        period_ms: u64,
        burst: Option<u64>,
    },
}

fn op(max_step_us: u64) -> impl proptest::strategy::Strategy<Value = Op> {
    prop_oneof![
        3 => (0..max_step_us).prop_map(Op::Advance),
        // small steps too, to land near boundaries
        1 => (0u64..3).prop_map(Op::Advance),
        8 => (0u8..3, prop_oneof![4 => Just(1u64), 1 => 0u64..6]).prop_map(|(key, cost)| Op::Check { key, cost }),
        1 => (0u8..3).prop_map(Op::Reset),
        1 => (0usize..8).prop_map(Op::Release),
        1 => (0u8..3, -4i64..5).prop_map(|(key, units)| Op::Adjust { key, units }),
        1 => (0u8..3, 0u64..6, 0u64..8).prop_map(|(key, estimate, actual)| Op::Settle { key, estimate, actual }),
    ]
}

/// A quota of strategy `s` at `n` per `period`, with `burst` where it takes one.
fn quota_of(s: Strategy, n: u64, period: Duration, burst: Option<u64>) -> Quota {
    match s {
        Strategy::Concurrency => Quota::concurrency(n).lease_timeout(period),
        s => {
            let q = Quota::new(s, Rate::new(n, period));
            match (s, burst) {
                (Strategy::TokenBucket | Strategy::LeakyBucket | Strategy::Gcra, Some(b)) => {
                    q.burst(b)
                }
                _ => q,
            }
        }
    }
}

/// A quota of any strategy, or a fixed window aligned to the epoch.
fn quota() -> impl proptest::strategy::Strategy<Value = Quota> {
    // (None: an aligned fixed window)
    let mut strategies: Vec<Option<Strategy>> = Strategy::ALL.into_iter().map(Some).collect();
    strategies.push(None);
    let strategy = proptest::sample::select(strategies);
    let period_ms = proptest::sample::select(vec![1_000u64, 7_000, 10_000, 60_000]);
    (strategy, 1u64..6, period_ms, proptest::option::of(1u64..7)).prop_map(
        |(s, n, period_ms, burst)| {
            let period = Duration::from_millis(period_ms);
            match s {
                Some(s) => quota_of(s, n, period, burst),
                None => quota_of(Strategy::FixedWindow, n, period, burst).aligned(),
            }
        },
    )
}

/// A decision without its lease id (which is random per limiter instance).
fn comparable(d: &Decision) -> impl PartialEq + std::fmt::Debug {
    (
        d.allowed(),
        d.shadow_denied(),
        d.limit(),
        d.remaining(),
        d.reset_after(),
        d.retry_after(),
        d.quota(),
        d.delay(),
        d.quotas().collect::<Vec<_>>(),
        d.lease().is_some(),
    )
}

static CASE: AtomicUsize = AtomicUsize::new(0);

/// How many copies of each key the Redis side runs at once: more than a
/// lane's calls in flight (two per connection), so that checks queue and go
/// out in batches.
const REPLICAS: usize = 6;

/// The Redis keys of the memory store's `k{key}`: one per replica.
fn replicas(key: u8) -> Vec<String> {
    (0..REPLICAS).map(|r| format!("r{r}k{key}")).collect()
}

/// `check_n(key, cost)` on every replica of `key` at once (spawned, so that
/// they are in flight together), in replica order.
async fn check_replicas(lim: &RateLimiter, key: u8, cost: u64) -> Vec<Decision> {
    let calls: Vec<_> = replicas(key)
        .into_iter()
        .map(|k| {
            let lim = lim.clone();
            tokio::spawn(async move { lim.check_n(&k, cost).await.unwrap() })
        })
        .collect();
    let mut out = Vec::new();
    for call in calls {
        out.push(call.await.unwrap());
    }
    out
}

async fn run_case(
    server: &RedisServer,
    quotas: Vec<Quota>,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    let mut quotas: Vec<Quota> = quotas
        .into_iter()
        .enumerate()
        .map(|(i, q)| q.name(format!("q{i}")))
        .collect();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (memory_store, pool) = (MemoryStore::new(), server.pool(2));
    let build = |memory: bool, quotas: &[Quota]| {
        let b = RateLimiter::builder()
            .prefix(format!("diff{case}"))
            .quotas(quotas.to_vec())
            .clock(clock.clone());
        if memory {
            b.store(memory_store.clone()).build().unwrap()
        } else {
            b.store(RedisStore::new(pool.clone()).timeout(Duration::from_secs(10)))
                .build()
                .unwrap()
        }
    };
    let (mut redis, mut memory) = (build(false, &quotas), build(true, &quotas));
    // (each memory lease with the lease of every replica)
    let mut leases: Vec<(Vec<Lease>, Lease)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Advance(us) => clock.advance(Duration::from_micros(*us)),
            Op::Check { key, cost } => {
                let m = memory.check_n(&format!("k{key}"), *cost).await.unwrap();
                let rs = check_replicas(&redis, *key, *cost).await;
                for (replica, r) in rs.iter().enumerate() {
                    prop_assert_eq!(
                        comparable(r),
                        comparable(&m),
                        "replica {} step {} {:?} of {:?}",
                        replica,
                        step,
                        op,
                        ops
                    );
                }
                if let Some(b) = m.lease() {
                    let a: Vec<Lease> = rs.iter().filter_map(|r| r.lease().cloned()).collect();
                    prop_assert_eq!(a.len(), REPLICAS);
                    leases.push((a, b.clone()));
                }
            }
            Op::Reset(key) => {
                for k in replicas(*key) {
                    redis.reset(&k).await.unwrap();
                }
                memory.reset(&format!("k{key}")).await.unwrap();
            }
            Op::Release(i) => {
                if !leases.is_empty() {
                    let (a, b) = leases.remove(i % leases.len());
                    for lease in &a {
                        redis.release(lease).await.unwrap();
                    }
                    memory.release(&b).await.unwrap();
                }
            }
            Op::Adjust { key, units } => {
                let by = units.unsigned_abs();
                for k in replicas(*key) {
                    if *units >= 0 {
                        redis.penalize(&k, by).await.unwrap();
                    } else {
                        redis.reward(&k, by).await.unwrap();
                    }
                }
                let key = format!("k{key}");
                if *units >= 0 {
                    memory.penalize(&key, by).await.unwrap();
                } else {
                    memory.reward(&key, by).await.unwrap();
                }
            }
            Op::Settle {
                key,
                estimate,
                actual,
            } => {
                let m = memory
                    .reserve_n(&format!("k{key}"), *estimate)
                    .await
                    .unwrap();
                let mut a = Vec::new();
                for k in replicas(*key) {
                    let r = redis.reserve_n(&k, *estimate).await.unwrap();
                    prop_assert_eq!(
                        comparable(r.decision()),
                        comparable(m.decision()),
                        "{} step {} {:?} of {:?}",
                        k,
                        step,
                        op,
                        ops
                    );
                    redis.settle(&r, *actual).await.unwrap();
                    a.extend(r.decision().lease().cloned());
                }
                memory.settle(&m, *actual).await.unwrap();
                if let Some(b) = m.decision().lease() {
                    prop_assert_eq!(a.len(), REPLICAS);
                    leases.push((a, b.clone()));
                }
            }
            Op::Back(us) => clock.set(clock.now().saturating_sub(Duration::from_micros(*us))),
            Op::Limits {
                count,
                period_ms,
                burst,
            } => {
                let period = Duration::from_millis(*period_ms);
                quotas = quotas
                    .iter()
                    .enumerate()
                    .map(|(i, q)| {
                        // (a sliding log keeps its period: on a manual clock
                        // Redis keeps a log a grace period past its TTL, the
                        // old period, where the memory store has dropped it,
                        // and a longer period would read it; on Redis's clock
                        // both drop it)
                        let period = match q.strategy() {
                            Strategy::SlidingWindowLog => q.rate().period(),
                            _ => period,
                        };
                        let new = quota_of(q.strategy(), *count, period, *burst);
                        let new = if q.is_aligned() { new.aligned() } else { new };
                        new.name(format!("q{i}"))
                    })
                    .collect();
                (redis, memory) = (build(false, &quotas), build(true, &quotas));
            }
        }
        if matches!(op, Op::Adjust { .. } | Op::Settle { .. }) {
            // what the adjustment left, at once
            for key in 0..3 {
                let m = memory.peek(&format!("k{key}")).await.unwrap();
                for k in replicas(key) {
                    let r = redis.peek(&k).await.unwrap();
                    prop_assert_eq!(
                        comparable(&r),
                        comparable(&m),
                        "peek {} after step {} {:?} of {:?}",
                        k,
                        step,
                        op,
                        ops
                    );
                }
            }
        }
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn memory_and_redis_decide_identically_for_one_quota() {
    let server = RedisServer::start();
    let rt = runtime();
    proptest!(ProptestConfig::with_cases(400), |(q in quota(), ops in proptest::collection::vec(op(4_000_000), 1..60))| {
        rt.block_on(run_case(&server, vec![q], ops))?;
    });
}

#[test]
fn memory_and_redis_decide_identically_for_several_quotas() {
    let server = RedisServer::start();
    let rt = runtime();
    proptest!(ProptestConfig::with_cases(200), |(qs in proptest::collection::vec(quota(), 2..4), ops in proptest::collection::vec(op(4_000_000), 1..60))| {
        rt.block_on(run_case(&server, qs, ops))?;
    });
}

/// Leaky buckets charged (`penalize`, a settle's excess: the end of the
/// queue pushed past the burst) and never given back (`reward`, a settle
/// below the estimate), alone or beside a GCRA, which adjusts both ways:
/// decisions, delays included, and what each adjustment left alike.
#[test]
fn memory_and_redis_decide_identically_for_charged_leaky_buckets() {
    let server = RedisServer::start();
    let rt = runtime();
    let leaky = (
        1u64..6,
        proptest::sample::select(vec![1_000u64, 7_000, 10_000]),
        proptest::option::of(1u64..7),
    )
        .prop_map(|(n, period_ms, burst)| {
            quota_of(
                Strategy::LeakyBucket,
                n,
                Duration::from_millis(period_ms),
                burst,
            )
        });
    let quotas = (leaky, any::<bool>()).prop_map(|(q, beside)| {
        let mut qs = vec![q];
        if beside {
            qs.push(Quota::gcra(Rate::new(4, Duration::from_secs(5))));
        }
        qs
    });
    let check = (0u8..2, prop_oneof![3 => Just(1u64), 1 => 0u64..6])
        .prop_map(|(key, cost)| Op::Check { key, cost });
    let adjust = (0u8..2, -6i64..9).prop_map(|(key, units)| Op::Adjust { key, units });
    let settle = (0u8..2, 0u64..5, 0u64..12).prop_map(|(key, estimate, actual)| Op::Settle {
        key,
        estimate,
        actual,
    });
    let ops = prop_oneof![
        3 => (0u64..4_000_000).prop_map(Op::Advance),
        1 => (0u64..3).prop_map(Op::Advance),
        4 => check,
        2 => adjust,
        2 => settle,
    ];
    proptest!(ProptestConfig::with_cases(150), |(qs in quotas, ops in proptest::collection::vec(ops, 1..60))| {
        rt.block_on(run_case(&server, qs, ops))?;
    });
}

/// The sliding log with longer logs than `quota()` gives: many entries leave
/// the window between two requests (the script's gallop and bisection), and
/// costs above 1 (a batched push).
#[test]
fn memory_and_redis_decide_identically_for_long_sliding_logs() {
    let server = RedisServer::start();
    let rt = runtime();
    let check = (0u8..2, prop_oneof![3 => Just(1u64), 1 => 1u64..12])
        .prop_map(|(key, cost)| Op::Check { key, cost });
    let adjust = (0u8..2, -12i64..13).prop_map(|(key, units)| Op::Adjust { key, units });
    let settle = (0u8..2, 1u64..12, 0u64..14).prop_map(|(key, estimate, actual)| Op::Settle {
        key,
        estimate,
        actual,
    });
    let ops = prop_oneof![
        1 => (0u64..3_000_000).prop_map(Op::Advance),
        6 => check,
        1 => adjust,
        1 => settle,
    ];
    proptest!(ProptestConfig::with_cases(100), |(n in 10u64..60, ops in proptest::collection::vec(ops, 1..150))| {
        let q = Quota::sliding_window_log(Rate::new(n, Duration::from_secs(10)));
        rt.block_on(run_case(&server, vec![q], ops))?;
    });
}

/// A clock that steps back (NTP, a manual clock set back): a request is
/// logged at the newest time already logged, and every strategy answers as
/// the memory store does. No state may expire here (every step forward is
/// short, all of them together less than the period): on a manual clock
/// Redis keeps expired state a grace period longer, which a step back would
/// bring back where the memory store has dropped it (on Redis's own clock
/// both drop it).
#[test]
fn memory_and_redis_agree_when_the_clock_steps_back() {
    let server = RedisServer::start();
    let rt = runtime();
    // (None: an aligned fixed window)
    let strategy = proptest::sample::select(vec![
        Some(Strategy::FixedWindow),
        Some(Strategy::SlidingWindowLog),
        Some(Strategy::SlidingWindowCounter),
        None,
    ]);
    let check = (0u8..2, prop_oneof![3 => Just(1u64), 1 => 0u64..8])
        .prop_map(|(key, cost)| Op::Check { key, cost });
    let adjust = (0u8..2, -8i64..9).prop_map(|(key, units)| Op::Adjust { key, units });
    let settle = (0u8..2, 1u64..8, 0u64..10).prop_map(|(key, estimate, actual)| Op::Settle {
        key,
        estimate,
        actual,
    });
    let ops = prop_oneof![
        2 => (0u64..50_000).prop_map(Op::Advance),
        1 => (0u64..3).prop_map(Op::Advance),
        1 => (0u64..60_000).prop_map(Op::Back),
        1 => (0u64..3).prop_map(Op::Back),
        6 => check,
        1 => adjust,
        1 => settle,
    ];
    // at most 150 steps of under 50 ms: under 7.5 s of the 10 s period
    proptest!(ProptestConfig::with_cases(150), |(s in strategy, n in 5u64..40, ops in proptest::collection::vec(ops, 1..150))| {
        let rate = Rate::new(n, Duration::from_secs(10));
        let q = match s {
            Some(s) => Quota::new(s, rate),
            // The clock starts at 1 700 000 000 s, the very start of an
            // aligned window of 10 s: the first step back would end it,
            // and expire its state (kept a grace period longer by Redis
            // under a manual clock). A window of 60 s holds the start 20 s
            // in, and every step (at most 9 s back, 7.5 s forward) inside.
            None => Quota::fixed_window(Rate::new(n, Duration::from_secs(60))).aligned(),
        };
        rt.block_on(run_case(&server, vec![q], ops))?;
    });
}

/// Limits that change while keys hold state (issue 26): every strategy's
/// kept state, rescaled or not, decides alike on both stores. Sizes and
/// periods vary widely, so that a TAT moves between intervals of very
/// different lengths.
#[test]
fn memory_and_redis_decide_identically_when_limits_change() {
    let server = RedisServer::start();
    let rt = runtime();
    let limits = (
        prop_oneof![1u64..6, 20u64..1_000],
        proptest::sample::select(vec![1_000u64, 7_000, 60_000, 3_600_000]),
        proptest::option::of(1u64..20),
    )
        .prop_map(|(count, period_ms, burst)| Op::Limits {
            count,
            period_ms,
            burst,
        });
    let ops = prop_oneof![
        8 => op(4_000_000),
        1 => limits,
    ];
    proptest!(ProptestConfig::with_cases(300), |(qs in proptest::collection::vec(quota(), 1..3), ops in proptest::collection::vec(ops, 1..60))| {
        rt.block_on(run_case(&server, qs, ops))?;
    });
}

/// Shadow quotas (`Quota::shadow`, never on a concurrency quota) among
/// enforced ones, and limiters of shadow quotas only.
#[test]
fn memory_and_redis_decide_identically_with_shadow_quotas() {
    let server = RedisServer::start();
    let rt = runtime();
    let quotas = proptest::collection::vec((quota(), any::<bool>()), 1..4).prop_map(|qs| {
        qs.into_iter()
            .map(|(q, shadow)| {
                let shadow = shadow && q.strategy() != Strategy::Concurrency;
                q.shadow(shadow)
            })
            .collect::<Vec<_>>()
    });
    proptest!(ProptestConfig::with_cases(200), |(qs in quotas, ops in proptest::collection::vec(op(4_000_000), 1..60))| {
        rt.block_on(run_case(&server, qs, ops))?;
    });
}
