//! Plans (tiers) and limits changed while running, on a private Redis and on
//! the memory store alike: each scenario runs on both, under a manual clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{GENEROUS, RedisServer};
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::plans::{Plan, Plans, PlansBuilder, PlansConfig};
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore};

/// The two stores every scenario runs on.
enum Store<'a> {
    Redis(&'a RedisServer),
    Memory(MemoryStore),
}

impl Store<'_> {
    fn builder(&self, clock: &ManualClock, prefix: &str) -> PlansBuilder {
        let b = Plans::builder().prefix(prefix).clock(clock.clone());
        match self {
            Store::Redis(server) => b.store(RedisStore::new(server.pool(2)).timeout(GENEROUS)),
            Store::Memory(store) => b.store(store.clone()),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Store::Redis(_) => "redis",
            Store::Memory(_) => "memory",
        }
    }
}

fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(3_600))
}

fn tiers() -> PlansConfig {
    PlansConfig::new("free")
        .plan(
            "free",
            Plan::new([
                Quota::fixed_window(Rate::per_minute(3)).name("minute"),
                Quota::fixed_window(Rate::per_day(1_000)).name("day"),
            ]),
        )
        .plan(
            "pro",
            Plan::new([Quota::fixed_window(Rate::per_minute(6)).name("minute")]),
        )
        .plan("internal", Plan::unlimited())
}

async fn allowed(plans: &Plans, plan: &str, key: &str) -> bool {
    plans
        .check(plan, key)
        .await
        .unwrap()
        .expect("a limited plan")
        .allowed()
}

async fn each_plan_has_its_own_quotas_and_state(store: Store<'_>) {
    let s = store.name();
    let clock = clock();
    let plans = store
        .builder(&clock, &format!("tiers-{s}"))
        .config(tiers())
        .build()
        .unwrap();
    for i in 0..3 {
        assert!(allowed(&plans, "free", "u").await, "{s}: free #{i}");
    }
    assert!(!allowed(&plans, "free", "u").await, "{s}: free is 3/minute");
    // an unknown plan is the default plan, with its state
    assert!(
        !allowed(&plans, "gold", "u").await,
        "{s}: unknown plan = free"
    );
    // the same caller on another plan starts fresh (no shared state)
    for i in 0..6 {
        assert!(allowed(&plans, "pro", "u").await, "{s}: pro #{i}");
    }
    assert!(!allowed(&plans, "pro", "u").await, "{s}: pro is 6/minute");
    // unlimited: no decision, no store call
    for _ in 0..100 {
        assert!(plans.check("internal", "u").await.unwrap().is_none());
    }
    let free = plans.resolve(Some("free"));
    let pro = plans.resolve(Some("pro"));
    assert_eq!(free.name(), "free");
    assert_eq!(plans.resolve(Some("nope")).name(), "free");
    assert_eq!(
        free.limiter().unwrap().storage_keys("u"),
        [
            format!("{{tiers-{s}/free:u}}:f1m/minute"),
            format!("{{tiers-{s}/free:u}}:f1d/day")
        ]
    );
    assert_eq!(
        pro.limiter().unwrap().storage_keys("u"),
        [format!("{{tiers-{s}/pro:u}}:f1m/minute")]
    );
    // a minute later the free caller is admitted again
    clock.advance(Duration::from_secs(60));
    assert!(allowed(&plans, "free", "u").await, "{s}");
}

#[tokio::test]
async fn each_plan_has_its_own_quotas_and_state_on_redis() {
    let redis = RedisServer::start();
    each_plan_has_its_own_quotas_and_state(Store::Redis(&redis)).await;
}

#[tokio::test]
async fn each_plan_has_its_own_quotas_and_state_in_memory() {
    each_plan_has_its_own_quotas_and_state(Store::Memory(MemoryStore::new())).await;
}

/// A plan's keys are no limiter's: a limiter whose prefix reads as a plan's
/// (`tiers.free` beside the plans of prefix `tiers`) has keys of its own, and
/// a prefix with the plans' separator `/` is refused at `build()`.
async fn a_limiters_prefix_never_names_a_plans_keys(store: Store<'_>) {
    let (s, clock) = (store.name(), clock());
    let plans = store
        .builder(&clock, &format!("sep-{s}"))
        .config(tiers())
        .build()
        .unwrap();
    let limiter = |prefix: String| {
        let b = RateLimiter::builder()
            .prefix(prefix)
            .clock(clock.clone())
            .quota(Quota::fixed_window(Rate::per_minute(3)).name("minute"));
        match &store {
            Store::Redis(server) => b.store(RedisStore::new(server.pool(2)).timeout(GENEROUS)),
            Store::Memory(m) => b.store(m.clone()),
        }
        .build()
    };
    let dotted = limiter(format!("sep-{s}.free")).unwrap();
    for i in 0..3 {
        assert!(dotted.check("u").await.unwrap().allowed(), "{s}: #{i}");
    }
    assert!(dotted.check("u").await.unwrap().denied(), "{s}");
    // the plan's own minute is untouched (it shared the key before)
    for i in 0..3 {
        assert!(allowed(&plans, "free", "u").await, "{s}: plan #{i}");
    }
    assert_ne!(
        dotted.storage_keys("u")[0],
        plans
            .resolve(Some("free"))
            .limiter()
            .unwrap()
            .storage_keys("u")[0]
    );
    let err = limiter(format!("sep-{s}/free")).unwrap_err();
    assert_eq!(err.field(), "prefix", "{s}: {err}");
}

#[tokio::test]
async fn a_limiters_prefix_never_names_a_plans_keys_on_redis() {
    let redis = RedisServer::start();
    a_limiters_prefix_never_names_a_plans_keys(Store::Redis(&redis)).await;
}

#[tokio::test]
async fn a_limiters_prefix_never_names_a_plans_keys_in_memory() {
    a_limiters_prefix_never_names_a_plans_keys(Store::Memory(MemoryStore::new())).await;
}

#[tokio::test]
async fn carry_over_keeps_a_callers_state_across_plans_of_the_same_quota() {
    let clock = clock();
    let plans = Store::Memory(MemoryStore::new())
        .builder(&clock, "carry")
        .config(tiers())
        .carry_over(true)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(allowed(&plans, "free", "u").await);
    }
    // upgraded: the 3 already used count against pro's 6
    for _ in 0..3 {
        assert!(allowed(&plans, "pro", "u").await);
    }
    assert!(!allowed(&plans, "pro", "u").await);
}

/// A quota of `strategy` at `count` per minute, named "q" (the name keeps its
/// storage key across changes of count).
fn quota(strategy: Strategy, count: u64) -> Quota {
    match strategy {
        Strategy::Concurrency => Quota::concurrency(count).name("q"),
        s => Quota::new(s, Rate::per_minute(count)).name("q"),
    }
}

fn one_plan(q: Quota) -> Plan {
    Plan::new([q])
}

/// For every strategy: a caller who has used some of its quota; lowering
/// the limit below what was used denies at once, raising it admits at once,
/// at the same instant (the state in the store is kept, the new limit read
/// from the next request).
async fn limits_change_while_running(store: Store<'_>) {
    let s = store.name();
    for strategy in Strategy::ALL {
        let clock = clock();
        // Window strategies: 5 of 10 used, then 4 (denied), then 8 (admitted).
        // TAT strategies keep the time owed (5 × 6 s = 30 s): at 1 per minute
        // that is more than the whole burst (denied), at 10 per minute half.
        let (start, lower, raise) = match strategy {
            Strategy::Gcra | Strategy::TokenBucket | Strategy::LeakyBucket => (10, 1, 10),
            _ => (10, 4, 8),
        };
        let plans = store
            .builder(&clock, &format!("live-{s}-{strategy}"))
            .plan("p", one_plan(quota(strategy, start)))
            .build()
            .unwrap();
        let handle = plans.handle();
        let mut leases = Vec::new();
        for i in 0..5 {
            let d = plans.check("p", "u").await.unwrap().unwrap();
            assert!(d.allowed(), "{s} {strategy} #{i}");
            leases.extend(d.into_lease());
        }
        handle
            .set_plan("p", one_plan(quota(strategy, lower)))
            .unwrap();
        let d = plans.check("p", "u").await.unwrap().unwrap();
        assert!(d.denied(), "{s} {strategy}: lowered to {lower}: {d:?}");
        assert_eq!(d.limit(), lower, "{s} {strategy}");
        handle
            .set_plan("p", one_plan(quota(strategy, raise)))
            .unwrap();
        let d = plans.check("p", "u").await.unwrap().unwrap();
        assert!(d.allowed(), "{s} {strategy}: raised to {raise}: {d:?}");
        if let Some(lease) = d.lease() {
            plans
                .resolve(Some("p"))
                .limiter()
                .unwrap()
                .release(lease)
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn limits_change_while_running_on_redis() {
    let redis = RedisServer::start();
    limits_change_while_running(Store::Redis(&redis)).await;
}

#[tokio::test]
async fn limits_change_while_running_in_memory() {
    limits_change_while_running(Store::Memory(MemoryStore::new())).await;
}

#[tokio::test]
async fn an_invalid_change_is_rejected_naming_the_field_and_the_old_limits_stay() {
    let clock = clock();
    let plans = Store::Memory(MemoryStore::new())
        .builder(&clock, "invalid")
        .config(tiers())
        .build()
        .unwrap();
    let e = plans
        .handle()
        .set_plan(
            "pro",
            Plan::new([
                Quota::gcra(Rate::per_minute(60)),
                Quota::fixed_window(Rate::per_minute(5)).burst(3),
            ]),
        )
        .unwrap_err();
    assert_eq!(e.field(), "plans.pro.quotas[1].burst", "{e}");
    let e = plans
        .handle()
        .replace(tiers().default_plan("gold"))
        .unwrap_err();
    assert_eq!(e.field(), "default", "{e}");
    assert!(e.to_string().contains("\"gold\""), "{e}");
    let e = plans
        .handle()
        .set_plan("bad name", Plan::unlimited())
        .unwrap_err();
    assert_eq!(e.field(), "plans.bad name", "{e}");
    assert_eq!(plans.config(), tiers());
    let e = Plans::builder()
        .store(MemoryStore::new())
        .plan("a", Plan::new(Vec::<Quota>::new()))
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "plans.a.quotas", "{e}");
}

/// A quota's or plan's own error inside a configuration reads once: one
/// prefix, the whole path, the message.
#[cfg(feature = "serde")]
#[test]
fn a_nested_config_error_reads_once_with_its_whole_path() {
    let prefix = "invalid rate limiter configuration: ";
    let rate = "invalid rate \"10/eon\" at byte 3:";
    for (json, field) in [
        // a plan as one string, its quotas as one string, a list of strings
        (
            r#"{"default": "free", "plans": {"free": "60/min; 10/eon"}}"#,
            "plans.free.quotas[1].rate",
        ),
        (
            r#"{"default": "free", "plans": {"free": {"quotas": "60/min; 10/eon"}}}"#,
            "plans.free.quotas[1].rate",
        ),
        (
            r#"{"default": "free", "plans": {"free": {"quotas": ["60/min", "10/eon"]}}}"#,
            "plans.free.quotas[1].rate",
        ),
        (
            r#"{"default": "free", "plans": {"free": "60/min burst=x"}}"#,
            "plans.free.quotas[0].burst",
        ),
    ] {
        let mut de = serde_json::Deserializer::from_str(json);
        let e = PlansConfig::deserialize_from(&mut de).unwrap_err();
        assert_eq!(e.field(), field, "{json}: {e}");
        let text = e.to_string();
        assert!(text.starts_with(&format!("{prefix}{field}: ")), "{text}");
        assert_eq!(text.matches(prefix).count(), 1, "{text}");
        if field.ends_with("rate") {
            assert!(text.contains(rate), "{text}");
        }
    }
    let toml = "default = \"free\"\n[plans]\nfree = { quotas = [\"60/min\", \"10/eon\"] }\n";
    let e = PlansConfig::deserialize_from(toml::Deserializer::parse(toml).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{prefix}plans.free.quotas[1].rate: invalid rate \"10/eon\" at byte 3: unknown period unit \"eon\"; use us (or µs, usec, micros, microsecond[s]), ms (msec, millis, millisecond[s]), s (sec, secs, second[s]), m (min, mins, minute[s]), h (hr, hrs, hour[s]) or d (day, days)"
        )
    );
    // the text notation too
    let e = "default free\nplan free: 60/min; 10/eon\n"
        .parse::<PlansConfig>()
        .unwrap_err();
    assert_eq!(e.field(), "plans.free.quotas[1].rate", "{e}");
    assert_eq!(e.to_string().matches(prefix).count(), 1, "{e}");
}

/// Two instances (two `Plans`) on one store: a change published by one is
/// read by the other's sync.
async fn a_published_change_reaches_the_other_instance(store: Store<'_>) {
    let s = store.name();
    let clock = clock();
    let prefix = format!("shared-{s}");
    let build = || {
        store
            .builder(&clock, &prefix)
            .config(tiers())
            .sync_interval(Duration::from_secs(3_600))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    for _ in 0..3 {
        assert!(allowed(&b, "free", "u").await);
    }
    assert!(!allowed(&b, "free", "u").await);
    let raised = tiers().plan(
        "free",
        Plan::new([Quota::fixed_window(Rate::per_minute(5)).name("minute")]),
    );
    a.handle().publish(raised.clone()).await.unwrap();
    assert_eq!(a.config(), raised);
    // b has not read the store yet
    assert!(!allowed(&b, "free", "u").await, "{s}");
    assert!(b.handle().sync().await.unwrap(), "{s}: b changed");
    assert_eq!(b.config(), raised, "{s}");
    assert!(!b.handle().sync().await.unwrap(), "{s}: nothing new");
    // the same state (3 used of the minute window), the new limit: 2 more
    assert!(allowed(&b, "free", "u").await, "{s}");
    assert!(allowed(&a, "free", "u").await, "{s}");
    assert!(!allowed(&b, "free", "u").await, "{s}");
}

#[tokio::test]
async fn a_published_change_reaches_the_other_instance_on_redis() {
    let server = RedisServer::start();
    a_published_change_reaches_the_other_instance(Store::Redis(&server)).await;
    // what Redis holds: the text notation, under the prefix
    let text: String = redis::cmd("GET")
        .arg("shared-redis:plans")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    assert!(text.starts_with("default free\n"), "{text}");
    assert!(
        text.contains("plan free: fixed-window 5/min name=minute"),
        "{text}"
    );
}

#[tokio::test]
async fn a_published_change_reaches_the_other_instance_in_memory() {
    a_published_change_reaches_the_other_instance(Store::Memory(MemoryStore::new())).await;
}

/// The store is read at most once per interval, in a task of its own that
/// a check starts once the interval has passed (tokio's paused clock).
#[tokio::test(start_paused = true)]
async fn instances_read_the_shared_limits_at_most_once_per_interval() {
    let store = MemoryStore::new();
    let clock = clock();
    let build = || {
        Store::Memory(store.clone())
            .builder(&clock, "poll")
            .config(tiers())
            .sync_interval(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    b.resolve(None); // the first read (nothing published yet)
    tokio::task::yield_now().await;
    let raised = tiers().plan("pro", Plan::new([Rate::per_minute(600)]));
    a.handle().publish(raised.clone()).await.unwrap();
    tokio::time::advance(Duration::from_secs(4)).await;
    b.resolve(None);
    tokio::task::yield_now().await;
    assert_eq!(b.config(), tiers(), "not before the interval");
    tokio::time::advance(Duration::from_secs(1)).await;
    b.resolve(None);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(b.config(), raised, "read once the interval passed");
}

/// A sync that reads the store while the same instance publishes must not
/// put back what it read: the instance ends on what it published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_racing_a_publish_does_not_undo_it_on_redis() {
    let server = RedisServer::start();
    let store = Store::Redis(&server);
    let clock = clock();
    let one = tiers().plan("pro", Plan::new([Rate::per_minute(100)]));
    let three = tiers().plan("pro", Plan::new([Rate::per_minute(300)]));
    for round in 0..20 {
        let prefix = format!("race{round}");
        let build = || {
            store
                .builder(&clock, &prefix)
                .config(tiers())
                .sync_interval(Duration::from_secs(3_600))
                .build()
                .unwrap()
        };
        build().handle().publish(one.clone()).await.unwrap();
        let c = build();
        let (h1, h2) = (c.handle(), c.handle());
        let (synced, published) = tokio::join!(h1.sync(), h2.publish(three.clone()));
        synced.unwrap();
        published.unwrap();
        // whatever the order, a later sync leaves it on what it published
        c.handle().sync().await.unwrap();
        assert_eq!(c.config(), three, "round {round}");
    }
}

/// A quota named "q" of `strategy`: `count` per `period` (for concurrency:
/// `count` in flight, leases of `period`), with `burst` where it takes one.
fn named(strategy: Strategy, count: u64, period: Duration, burst: Option<u64>) -> Quota {
    unnamed(strategy, count, period, burst).name("q")
}

/// [`named`] without a name: a plan knows it by its strategy and period.
fn unnamed(strategy: Strategy, count: u64, period: Duration, burst: Option<u64>) -> Quota {
    let q = match strategy {
        Strategy::Concurrency => Quota::concurrency(count).lease_timeout(period),
        s => Quota::new(s, Rate::new(count, period)),
    };
    match burst {
        Some(b) => q.burst(b),
        None => q,
    }
}

/// One change of limits: a caller uses `used` units under `before`; after
/// the change to `after`, at the same instant, exactly `admitted` requests in
/// a row are admitted, and the next denial's retry is `retry` (where it is
/// simple to say: not the sliding window counter's weighted one).
struct Change {
    what: &'static str,
    before: Quota,
    used: u64,
    after: Quota,
    admitted: u64,
    retry: Option<Duration>,
}

/// The changes of limits of issue 26 for `strategy`: raising the rate, the
/// count, the burst; lowering each; changing the period of a named quota.
/// Raising never denies what the old limits admitted; lowering never admits
/// more than the new limits, counting what was used under the old ones
/// (see the guide's plans chapter, "Changing limits while running").
fn changes(strategy: Strategy, name: bool) -> Vec<Change> {
    let (min, hour) = (Duration::from_secs(60), Duration::from_secs(3_600));
    let s20 = Duration::from_secs(20);
    let q = |count, period, burst| {
        if name {
            named(strategy, count, period, burst)
        } else {
            unnamed(strategy, count, period, burst)
        }
    };
    let tat = matches!(
        strategy,
        Strategy::Gcra | Strategy::TokenBucket | Strategy::LeakyBucket
    );
    // the retry where the state is a count: the window's end, the oldest
    // time's or lease's; none asserted for the weighted sliding counter
    let count_retry = |d: Duration| (strategy != Strategy::SlidingWindowCounter).then_some(d);
    let mut out = vec![
        // 5 of 10 used; the state is kept and counted against 20: 15 more
        // (TAT before the fix: the 30 s owed counted as 10 of 3 s each)
        Change {
            what: "count raised",
            before: q(10, min, None),
            used: 5,
            after: q(20, min, None),
            admitted: 15,
            retry: if tat {
                Some(Duration::from_secs(3))
            } else {
                count_retry(min)
            },
        },
        // 5 of 10 used, lowered to 4: none more (TAT before the fix: the 30 s
        // owed counted as 2 of 15 s each, 2 more)
        Change {
            what: "count lowered",
            before: q(10, min, None),
            used: 5,
            after: q(4, min, None),
            admitted: 0,
            retry: if tat {
                Some(Duration::from_secs(30))
            } else {
                count_retry(min)
            },
        },
    ];
    if tat {
        out.extend([
            // issue 26's case: 10 per 20 s, burst 16, 3 used, raised to 1000
            // per 20 s: 13 more (before the fix: denied, retry 5.7 s)
            Change {
                what: "rate raised, burst kept",
                before: q(10, s20, Some(16)),
                used: 3,
                after: q(1_000, s20, Some(16)),
                admitted: 13,
                retry: Some(Duration::from_millis(20)),
            },
            // 16 of 16 used at 1000 per 20 s, lowered to 10 per 20 s: none
            // until one unit drained at the new rate (before the fix: the
            // 320 ms owed were 0.16 of a unit, 15 more at once)
            Change {
                what: "rate lowered, burst kept",
                before: q(1_000, s20, Some(16)),
                used: 16,
                after: q(10, s20, Some(16)),
                admitted: 0,
                retry: Some(Duration::from_secs(2)),
            },
            // an interval past 2^39 µs (6.4 days: the 13-byte value), and back
            Change {
                what: "a 30-day interval raised",
                before: q(1, Duration::from_secs(30 * 86_400), Some(2)),
                used: 1,
                after: q(10, min, None),
                admitted: 9,
                retry: Some(Duration::from_secs(6)),
            },
            Change {
                what: "lowered to a 30-day interval",
                before: q(10, min, None),
                used: 5,
                after: q(1, Duration::from_secs(30 * 86_400), Some(10)),
                admitted: 5,
                retry: Some(Duration::from_secs(30 * 86_400)),
            },
            // 1 000 units of 1 µs owed, lowered to 1 per 366 days: what is
            // owed is capped at 2^50 µs (about 35.7 years)
            Change {
                what: "lowered past the cap",
                before: q(1_000, Duration::from_millis(1), None),
                used: 1_000,
                after: q(1, Duration::from_secs(366 * 86_400), None),
                admitted: 0,
                retry: Some(Duration::from_micros(1 << 50)),
            },
            Change {
                what: "burst raised",
                before: q(10, min, Some(5)),
                used: 5,
                after: q(10, min, Some(10)),
                admitted: 5,
                retry: Some(Duration::from_secs(6)),
            },
            Change {
                what: "burst lowered",
                before: q(10, min, Some(10)),
                used: 6,
                after: q(10, min, Some(4)),
                admitted: 0,
                retry: Some(Duration::from_secs(18)),
            },
        ]);
    }
    match strategy {
        // the state is a count per window of the period: a new period starts
        // afresh (the key names the period)
        Strategy::FixedWindow | Strategy::SlidingWindowCounter => out.push(Change {
            what: "period lengthened (a new key)",
            before: q(10, min, None),
            used: 5,
            after: q(10, hour, None),
            admitted: 10,
            retry: count_retry(hour),
        }),
        // times, leases, a TAT with its interval: the key is kept, the state
        // counted under the new period (before the fix: a new key, 10 more)
        _ => {
            out.push(Change {
                what: "period lengthened",
                before: q(10, min, None),
                used: 5,
                after: q(10, hour, None),
                admitted: 5,
                retry: Some(match strategy {
                    Strategy::Concurrency => min,
                    Strategy::SlidingWindowLog => hour,
                    _ => Duration::from_secs(360),
                }),
            });
            if tat {
                // 10 of 10 per hour used, then 10 per minute: one more
                // every 6 s (the units kept, drained at the new rate)
                out.push(Change {
                    what: "period shortened",
                    before: q(10, hour, None),
                    used: 10,
                    after: q(10, min, None),
                    admitted: 0,
                    retry: Some(Duration::from_secs(6)),
                });
            }
        }
    }
    out
}

/// Every change of [`changes`] for every strategy, on `store` under a
/// manual clock: the number admitted at once after the change and the
/// retry of the first denial.
async fn a_change_of_limits_keeps_what_was_used(store: Store<'_>, name: bool) {
    let s = store.name();
    // every case is run, and every one that fails is listed
    let mut failed = Vec::new();
    for strategy in Strategy::ALL {
        for (i, c) in changes(strategy, name).into_iter().enumerate() {
            // (an unnamed quota of another period is another quota)
            if !name && c.before.rate().period() != c.after.rate().period() {
                continue;
            }
            let clock = clock();
            let plans = store
                .builder(&clock, &format!("rescale-{s}-{name}-{strategy}-{i}"))
                .plan("p", one_plan(c.before.clone()))
                .build()
                .unwrap();
            let what = format!("{s} {strategy} {}", c.what);
            let mut leases = Vec::new();
            for _ in 0..c.used {
                let d = plans.check("p", "u").await.unwrap().unwrap();
                assert!(d.allowed(), "{what}: used");
                leases.extend(d.into_lease());
            }
            plans
                .handle()
                .set_plan("p", one_plan(c.after.clone()))
                .unwrap();
            let mut admitted = 0;
            let denied = loop {
                let d = plans.check("p", "u").await.unwrap().unwrap();
                if d.denied() || admitted > 2_000 {
                    break d;
                }
                admitted += 1;
                leases.extend(d.into_lease());
            };
            // and again at once: the same answer (a rescaled state is written
            // down by the first decision, denied or not)
            let again = plans.check("p", "u").await.unwrap().unwrap();
            let retry = denied.retry_after();
            if admitted != c.admitted
                || c.retry.is_some_and(|r| retry != Some(r))
                || again.allowed()
                || again.retry_after() != retry
            {
                failed.push(format!(
                    "{what}: admitted {admitted} (expected {}), retry {retry:?} (expected {:?}), \
                     again {:?} {:?}",
                    c.admitted,
                    c.retry,
                    again.allowed(),
                    again.retry_after()
                ));
            }
            drop(leases);
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[tokio::test]
async fn a_change_of_limits_keeps_what_was_used_on_redis() {
    let redis = RedisServer::start();
    a_change_of_limits_keeps_what_was_used(Store::Redis(&redis), true).await;
}

#[tokio::test]
async fn a_change_of_limits_keeps_what_was_used_in_memory() {
    a_change_of_limits_keeps_what_was_used(Store::Memory(MemoryStore::new()), true).await;
}

/// An unnamed quota of a plan is known by its strategy and period: a new
/// count or burst keeps what was used, as a named one's does (it moved to a
/// fresh key: lowering 10/min with 5 used to 4/min admitted 4 more, and a
/// text plan's `20/day` lowered to `10/day` with 18 used admitted 10).
#[tokio::test]
async fn a_change_of_an_unnamed_quota_keeps_what_was_used_on_redis() {
    let redis = RedisServer::start();
    a_change_of_limits_keeps_what_was_used(Store::Redis(&redis), false).await;
}

#[tokio::test]
async fn a_change_of_an_unnamed_quota_keeps_what_was_used_in_memory() {
    a_change_of_limits_keeps_what_was_used(Store::Memory(MemoryStore::new()), false).await;
}

/// Two unnamed quotas of one strategy and period in a plan would share a
/// key: refused, naming the field.
#[tokio::test]
async fn two_unnamed_quotas_of_one_strategy_and_period_in_a_plan_are_refused() {
    let plan = Plan::new([
        Quota::fixed_window(Rate::per_minute(10)),
        Quota::fixed_window(Rate::per_minute(20)),
    ]);
    let err = Plans::builder()
        .store(MemoryStore::new())
        .plan("free", plan)
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "plans.free.quotas[1].name", "{err}");
}

/// Issue 26's case on Redis's own clock (`TIME`): 10 per 20 s, burst 16, 3
/// used, raised to 1 000 per 20 s: admitted with 12 left (time passing only
/// drains more). The named quota's value holds its interval: 12 bytes.
#[tokio::test]
async fn raising_the_rate_admits_at_once_on_redis_time() {
    let server = RedisServer::start();
    for strategy in [Strategy::Gcra, Strategy::TokenBucket, Strategy::LeakyBucket] {
        let q = |count| named(strategy, count, Duration::from_secs(20), Some(16));
        let plans = Plans::builder()
            .prefix(format!("time-{strategy}"))
            .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
            .plan("p", one_plan(q(10)))
            .build()
            .unwrap();
        for _ in 0..3 {
            assert!(allowed(&plans, "p", "u").await, "{strategy}");
        }
        let key = plans
            .resolve(Some("p"))
            .limiter()
            .unwrap()
            .storage_keys("u")[0]
            .clone();
        let len: usize = redis::cmd("STRLEN")
            .arg(&key)
            .query_async(&mut server.conn().await)
            .await
            .unwrap();
        assert_eq!(len, 12, "{strategy}: {key}");
        plans.handle().set_plan("p", one_plan(q(1_000))).unwrap();
        let d = plans.check("p", "u").await.unwrap().unwrap();
        assert!(d.allowed(), "{strategy}: {d:?}");
        assert_eq!(d.remaining(), 12, "{strategy}");
    }
}

/// The penalty box and the admin operations of plans: a denial blocks the
/// key in its plan (`block_for`), an operator's block holds whatever the
/// key's plan, and the state of a key is read and set by plan. The block
/// key is the last key of the plan's one script call.
async fn plans_block_and_are_administered_by_key(store: Store<'_>) {
    let s = store.name();
    let clock = clock();
    let plans = store
        .builder(&clock, &format!("admin-{s}"))
        .config(tiers())
        .block_for(Duration::from_secs(600))
        .build()
        .unwrap();
    let free = plans.resolve(Some("free"));
    let keys = free.limiter().unwrap().storage_keys("u");
    assert_eq!(
        keys.last().map(String::as_str),
        Some(format!("{{admin-{s}/free:u}}:!").as_str()),
        "{s}: the block key, decided in the same call"
    );
    // the penalty: denied for ten minutes, though the window ends after one
    for _ in 0..3 {
        assert!(allowed(&plans, "free", "u").await, "{s}");
    }
    assert!(!allowed(&plans, "free", "u").await, "{s}");
    clock.advance(Duration::from_secs(120));
    let d = plans.check("free", "u").await.unwrap().unwrap();
    assert!(d.denied(), "{s}: blocked past the window");
    assert!(
        d.retry_after().unwrap() > Duration::from_secs(400),
        "{s}: {d:?}"
    );
    // the other plan's state is its own
    assert!(allowed(&plans, "pro", "u").await, "{s}");
    plans.unblock("u").await.unwrap();
    assert!(allowed(&plans, "free", "u").await, "{s}: unblocked");

    // an operator's block: whatever the plan, until unblocked
    plans.block("v", Duration::from_secs(3_600)).await.unwrap();
    for plan in ["free", "pro", "gold"] {
        let d = plans.check(plan, "v").await.unwrap().unwrap();
        assert!(d.denied(), "{s}: {plan} blocked");
        let got = plans.get(plan, "v").await.unwrap().unwrap();
        assert!(got.denied(), "{s}: get of a blocked key in {plan}");
    }
    assert!(plans.check("internal", "v").await.unwrap().is_none());
    assert!(plans.get("internal", "v").await.unwrap().is_none());
    plans.unblock("v").await.unwrap();
    for plan in ["free", "pro"] {
        assert!(allowed(&plans, plan, "v").await, "{s}: {plan} unblocked");
    }
    // read and set by plan
    assert_eq!(
        plans.get("free", "v").await.unwrap().unwrap().remaining(),
        2,
        "{s}"
    );
    plans.set_remaining("free", "v", 0).await.unwrap();
    assert_eq!(
        plans.get("free", "v").await.unwrap().unwrap().remaining(),
        0
    );
    assert_eq!(
        plans.get("pro", "v").await.unwrap().unwrap().remaining(),
        5,
        "{s}: pro untouched"
    );
    plans.reward("free", "v", 1).await.unwrap();
    assert_eq!(
        plans.get("free", "v").await.unwrap().unwrap().remaining(),
        1
    );
    plans.penalize("pro", "v", 2).await.unwrap();
    assert_eq!(plans.get("pro", "v").await.unwrap().unwrap().remaining(), 3);
    // reset: every plan's state, blocks included
    plans.block("v", Duration::from_secs(60)).await.unwrap();
    plans.reset("v").await.unwrap();
    assert_eq!(
        plans.get("free", "v").await.unwrap().unwrap().remaining(),
        3
    );
    assert_eq!(plans.get("pro", "v").await.unwrap().unwrap().remaining(), 6);
    // a plan whose limits change keeps the block
    plans.block("w", Duration::from_secs(60)).await.unwrap();
    plans
        .handle()
        .set_plan(
            "pro",
            Plan::new([Quota::fixed_window(Rate::per_minute(7)).name("minute")]),
        )
        .unwrap();
    assert!(!allowed(&plans, "pro", "w").await, "{s}: still blocked");
    // without blocking: an error, not a silent no-op
    let plain = store
        .builder(&clock, &format!("plain-{s}"))
        .config(tiers())
        .build()
        .unwrap();
    let e = plain.block("v", Duration::from_secs(1)).await.unwrap_err();
    assert!(e.to_string().contains(".blocking()"), "{e}");
}

#[tokio::test]
async fn plans_block_and_are_administered_by_key_on_redis() {
    let redis = RedisServer::start();
    plans_block_and_are_administered_by_key(Store::Redis(&redis)).await;
}

#[tokio::test]
async fn plans_block_and_are_administered_by_key_in_memory() {
    plans_block_and_are_administered_by_key(Store::Memory(MemoryStore::new())).await;
}

#[test]
fn plans_reject_a_block_that_could_not_apply() {
    let b = || Plans::builder().store(MemoryStore::new()).config(tiers());
    let e = b().block_for(Duration::ZERO).build().unwrap_err();
    assert_eq!(e.field(), "block_for", "{e}");
    let e = b()
        .block_for(Duration::from_secs(367 * 86_400))
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "block_for", "{e}");
    let e = b()
        .blocking()
        .plan(
            "dry",
            Plan::new([Quota::gcra(Rate::per_minute(1)).shadow(true)]),
        )
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "plans.dry.blocking", "{e}");
}

/// A plain limiter built with runtime limits, on `store`.
fn runtime_limiter(
    store: &Store<'_>,
    clock: &ManualClock,
    prefix: &str,
    sync: bool,
) -> RateLimiter {
    let b = RateLimiter::builder()
        .prefix(prefix)
        .clock(clock.clone())
        .quota(Quota::fixed_window(Rate::per_minute(2)).name("minute"))
        .runtime_limits();
    let b = match store {
        Store::Redis(server) => b.store(RedisStore::new(server.pool(4)).timeout(GENEROUS)),
        Store::Memory(store) => b.store(store.clone()),
    };
    let b = if sync {
        b.sync_interval(Duration::from_secs(3_600))
    } else {
        b
    };
    b.build().unwrap()
}

/// A plain limiter's limits change while it runs, by the plans' mechanism:
/// its keys stay its own, its state is kept, every clone sees the change,
/// and a change published on one instance reaches another.
async fn a_plain_limiter_changes_its_limits_while_running(store: Store<'_>) {
    let s = store.name();
    let clock = clock();
    let limiter = runtime_limiter(&store, &clock, &format!("rt-{s}"), true);
    let clone = limiter.clone();
    // the keys of the same limiter built without runtime limits
    assert_eq!(
        limiter.storage_keys("ip"),
        [format!("{{rt-{s}:ip}}:f1m/minute")],
        "{s}"
    );
    assert!(limiter.check("ip").await.unwrap().allowed());
    assert!(limiter.check("ip").await.unwrap().allowed());
    assert!(limiter.check("ip").await.unwrap().denied(), "{s}");
    let handle = limiter.limits().expect("runtime limits");
    handle
        .set_quotas([Quota::fixed_window(Rate::per_minute(5)).name("minute")])
        .unwrap();
    let d = clone.check("ip").await.unwrap();
    assert!(d.allowed(), "{s}: raised, state kept");
    assert_eq!((d.limit(), d.remaining()), (5, 2), "{s}");
    assert_eq!(
        handle.quotas(),
        [Quota::fixed_window(Rate::per_minute(5)).name("minute")]
    );
    // an invalid change names the limiter's field and changes nothing
    let e = handle
        .set_quotas([Quota::token_bucket(Rate::per_minute(5)).burst(0)])
        .unwrap_err();
    assert_eq!(e.field(), "quotas[0].burst", "{e}");
    assert_eq!(
        e.to_string()
            .matches("invalid rate limiter configuration")
            .count(),
        1
    );
    let e = handle.set_quotas(Vec::<Quota>::new()).unwrap_err();
    assert_eq!(e.field(), "quotas", "{e}");
    let e = handle.replace(tiers()).unwrap_err();
    assert_eq!(e.field(), "plans", "{e}: a limiter's limits are one plan");
    assert_eq!(limiter.check("ip").await.unwrap().limit(), 5, "{s}");
    // the admin operations act on the limits in force
    limiter.reset("ip").await.unwrap();
    assert_eq!(limiter.get("ip").await.unwrap().remaining(), 5, "{s}");
    limiter.set_remaining("ip", 1).await.unwrap();
    assert_eq!(limiter.get("ip").await.unwrap().remaining(), 1, "{s}");
    // published on one instance, read by another
    let other = runtime_limiter(&store, &clock, &format!("rt-{s}"), true);
    handle
        .publish_quotas([Quota::fixed_window(Rate::per_minute(9)).name("minute")])
        .await
        .unwrap();
    assert!(other.limits().unwrap().sync().await.unwrap(), "{s}");
    assert_eq!(other.get("ip").await.unwrap().limit(), 9, "{s}");
    // a limiter without runtime limits has no handle
    let fixed = RateLimiter::builder()
        .store(MemoryStore::new())
        .quota(Rate::per_second(1))
        .build()
        .unwrap();
    assert!(fixed.limits().is_none());
}

#[tokio::test]
async fn a_plain_limiter_changes_its_limits_while_running_on_redis() {
    let redis = RedisServer::start();
    a_plain_limiter_changes_its_limits_while_running(Store::Redis(&redis)).await;
}

#[tokio::test]
async fn a_plain_limiter_changes_its_limits_while_running_in_memory() {
    a_plain_limiter_changes_its_limits_while_running(Store::Memory(MemoryStore::new())).await;
}

/// Limits flipped while requests run on other threads: no error, no
/// panic, and every decision is made under the old limits or the new.
async fn a_change_while_requests_run_is_seen_whole(store: Store<'_>) {
    let s = store.name();
    let clock = clock();
    let limiter = runtime_limiter(&store, &clock, &format!("race-{s}"), false);
    let handle = limiter.limits().unwrap();
    let limits = |n: u64| {
        [
            Quota::fixed_window(Rate::per_minute(n)).name("minute"),
            Quota::gcra(Rate::per_hour(n * 10)).name("hour"),
        ]
    };
    handle.set_quotas(limits(100)).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..4 {
        let (limiter, stop) = (limiter.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = 0;
            while !stop.load(Ordering::Relaxed) || seen < 50 {
                let d = limiter.check(format!("k{t}-{}", seen % 7)).await.unwrap();
                let minute = d.quota_named("minute").unwrap().limit();
                let hour = d.quota_named("hour").unwrap().limit();
                assert!(
                    (minute, hour) == (100, 1_000) || (minute, hour) == (200, 2_000),
                    "a mix of limits: {minute}, {hour}"
                );
                seen += 1;
            }
            seen
        }));
    }
    for i in 0..200 {
        handle
            .set_quotas(limits(if i % 2 == 0 { 200 } else { 100 }))
            .unwrap();
        tokio::task::yield_now().await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        assert!(t.await.unwrap() >= 50, "{s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_while_requests_run_is_seen_whole_on_redis() {
    let redis = RedisServer::start();
    a_change_while_requests_run_is_seen_whole(Store::Redis(&redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_while_requests_run_is_seen_whole_in_memory() {
    a_change_while_requests_run_is_seen_whole(Store::Memory(MemoryStore::new())).await;
}

/// A configuration that changes every time: a plan and a quota named anew
/// with a new limit, and an unnamed quota whose derived name follows its
/// new rate.
fn churned(i: u64) -> PlansConfig {
    let plan = format!("plan-{i}");
    PlansConfig::new(plan.clone()).plan(
        plan,
        Plan::new([
            Quota::gcra(Rate::per_minute(i + 1)).name(format!("quota-{i}")),
            Quota::fixed_window(Rate::per_hour(1_000 + i)),
        ]),
    )
}

/// Limits published 10,000 times (plans, and a plain limiter's runtime
/// limits), each with new names and new values, with a request under each:
/// the names and limits kept for the process's life (the intern table) and
/// the memory store's scopes stay bounded, and every decision still names
/// its quota and limit right.
#[tokio::test]
async fn limits_changed_ten_thousand_times_keep_bounded_memory() {
    use tower_redis_ratelimit::decision::interned_bytes;

    let store = MemoryStore::new();
    let clock = clock();
    let plans = Store::Memory(store.clone())
        .builder(&clock, "churn")
        .config(churned(0))
        .sync_interval(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let handle = plans.handle();
    let limiter = RateLimiter::builder()
        .store(store.clone())
        .prefix("churn-one")
        .clock(clock.clone())
        .quota(Quota::token_bucket(Rate::per_second(1)))
        .runtime_limits()
        .build()
        .unwrap();
    let one = limiter.limits().unwrap();
    let mut peak_scopes = 0;
    for i in 1..=10_000u64 {
        handle.publish(churned(i)).await.unwrap();
        one.set_quotas([Quota::token_bucket(Rate::per_second(i)).name(format!("one-{i}"))])
            .unwrap();
        let d = plans.check(&format!("plan-{i}"), "user:1").await.unwrap();
        let d = d.unwrap();
        assert!(d.allowed(), "{i}");
        assert_eq!(d.quota_named(&format!("quota-{i}")).unwrap().limit(), i + 1);
        assert_eq!(d.quotas().nth(1).unwrap().limit(), 1_000 + i);
        let d = limiter.check("user:1").await.unwrap();
        assert!(d.allowed(), "{i}");
        assert_eq!(d.quota(), format!("one-{i}"));
        assert_eq!(d.limit(), i);
        // every key expires before the next change, and is swept
        clock.advance(Duration::from_secs(7_200));
        if i % 100 == 0 {
            store.sweep();
        }
        peak_scopes = peak_scopes.max(store.scopes_held());
    }
    let interned = interned_bytes();
    assert!(
        interned <= 64 * 1024,
        "{interned} bytes interned after 10,000 changes"
    );
    // keys live until the sweep every 100 changes: 3 scopes a change for
    // them, and up to 64 idle ones before a bind frees those without keys
    assert!(
        peak_scopes <= 3 * 100 + 64 + 3,
        "{peak_scopes} scopes held at most over 10,000 changes"
    );
}
