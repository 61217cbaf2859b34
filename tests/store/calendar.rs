//! Calendar windows (`Quota::calendar`, feature `calendar`): months of a
//! time zone reset at its local midnight on the 1st, on the memory store
//! and on Redis, on a manual clock (the caller's path: the time travels
//! with the call) and on Redis's own; both stores decide alike.

use crate::common;

use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::clock::{Clock, ManualClock};
use tower_redis_ratelimit::{Calendar, MemoryStore, Quota, Rate, RateLimiter, RedisStore};

const S: u64 = 1_000_000;

/// Seconds since the epoch of a UTC date-time (days from civil, Hinnant).
fn utc(y: i64, m: i64, d: i64, h: i64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + h * 3_600) as u64
}

/// Local midnights on the 1st in Europe/Paris (UTC+1 in winter, UTC+2 from
/// the last Sunday of March, 01:00 UTC): February and March 2024 (a leap
/// year), and April, after the DST change (a March of 31 days less an hour).
fn paris_bounds() -> [u64; 4] {
    [
        utc(2024, 1, 31, 23), // Feb 1 00:00 CET
        utc(2024, 2, 29, 23), // Mar 1 00:00 CET
        utc(2024, 3, 31, 22), // Apr 1 00:00 CEST
        utc(2024, 4, 30, 22), // May 1 00:00 CEST
    ]
}

fn month_quota(n: u64) -> Quota {
    Quota::fixed_window(Rate::per_day(n)).calendar(Calendar::month("Europe/Paris"))
}

fn limiter(redis: Option<&RedisServer>, clock: &ManualClock, prefix: &str) -> RateLimiter {
    let b = RateLimiter::builder()
        .prefix(prefix)
        .clock(clock.clone())
        .quota(month_quota(3));
    match redis {
        Some(server) => b.store(RedisStore::new(server.pool(2)).timeout(Duration::from_secs(20))),
        None => b.store(MemoryStore::new()),
    }
    .build()
    .unwrap()
}

/// At each bound: the last microsecond before it still counts in the old
/// month (denied once 3 are spent, reset_after 1 µs), the bound itself
/// opens a fresh month; a month's reset_after runs to its local midnight.
async fn resets_exactly_at_local_midnight(lim: &RateLimiter, clock: &ManualClock) {
    let bounds = paris_bounds();
    for (i, end) in bounds.into_iter().enumerate() {
        let key = format!("u{i}");
        clock.set(Duration::from_secs(end) - Duration::from_micros(1));
        // spend the month that ends at `end`
        for _ in 0..3 {
            assert!(lim.check(&key).await.unwrap().allowed(), "before {end}");
        }
        let denied = lim.check(&key).await.unwrap();
        assert!(!denied.allowed(), "before {end}: {denied:?}");
        assert!(
            denied.reset_after() <= Duration::from_millis(1),
            "{denied:?}"
        );
        clock.set(Duration::from_secs(end));
        let fresh = lim.check(&key).await.unwrap();
        assert!(fresh.allowed(), "at {end}: {fresh:?}");
        assert_eq!(fresh.remaining(), 2);
    }
    // the month of the DST change is 31 days less an hour, to the microsecond
    clock.set(Duration::from_secs(bounds[1]));
    lim.reset("v").await.unwrap();
    let d = lim.check("v").await.unwrap();
    assert_eq!(
        d.reset_after(),
        Duration::from_secs(bounds[2] - bounds[1]),
        "March 2024 in Paris"
    );
    assert_eq!(bounds[2] - bounds[1], 31 * 86_400 - 3_600);
    // February of a leap year: 29 days
    clock.set(Duration::from_secs(bounds[0]));
    let d = lim.check("w").await.unwrap();
    assert_eq!(d.reset_after(), Duration::from_secs(29 * 86_400));
}

#[tokio::test]
async fn a_calendar_month_resets_at_local_midnight_on_the_memory_store() {
    let clock = ManualClock::new(Duration::from_secs(utc(2024, 1, 15, 0)));
    let lim = limiter(None, &clock, "cal");
    resets_exactly_at_local_midnight(&lim, &clock).await;
}

#[tokio::test]
async fn a_calendar_month_resets_at_local_midnight_on_redis_on_the_callers_time() {
    let server = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(utc(2024, 1, 15, 0)));
    let lim = limiter(Some(&server), &clock, "cal");
    resets_exactly_at_local_midnight(&lim, &clock).await;
}

#[tokio::test]
async fn a_calendar_month_on_redis_clock_is_keyed_by_its_end_and_expires_there() {
    let server = RedisServer::start();
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(Duration::from_secs(20)))
        .prefix("cal")
        .clock(Clock::Store)
        .quota(Quota::fixed_window(Rate::per_day(5)).calendar(Calendar::month("UTC")))
        .build()
        .unwrap();
    let d = lim.check("u").await.unwrap();
    assert!(d.allowed());
    // the end of this UTC month, from Redis's TIME
    let mut conn = server.conn().await;
    let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let days = secs / 86_400;
    let (mut y, mut m) = (1970i64, 1i64);
    while utc(y, m, 1, 0) / 86_400 <= days {
        (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    }
    let end = utc(y, m, 1, 0);
    let key = &lim.storage_keys("u")[0];
    assert!(key.ends_with(":z5/month@UTC"), "{key}");
    let (e, c): (u64, u64) = redis::cmd("HMGET")
        .arg(key)
        .arg("e")
        .arg("c")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((e, c), (end * S, 1));
    let ttl: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let want = (end - secs) as i64 * 1_000;
    assert!(
        (want - 5_000..=want + 1_000).contains(&ttl),
        "{ttl} vs {want}"
    );
    let rest = d.reset_after().as_millis() as i64;
    assert!(
        (want - 5_000..=want + 1_000).contains(&rest),
        "{rest} vs {want}"
    );
}

/// The same vector of times and costs on both stores: every decision alike.
#[tokio::test]
async fn a_calendar_month_decides_alike_on_memory_and_redis() {
    let server = RedisServer::start();
    let start = utc(2024, 1, 31, 22);
    let (mc, rc) = (
        ManualClock::new(Duration::from_secs(start)),
        ManualClock::new(Duration::from_secs(start)),
    );
    let quotas = || {
        vec![
            Quota::fixed_window(Rate::per_day(7)).calendar(Calendar::month("Europe/Paris")),
            Quota::fixed_window(Rate::per_day(40)).calendar(Calendar::year("America/New_York")),
        ]
    };
    let mem = RateLimiter::builder()
        .store(MemoryStore::new())
        .clock(mc.clone())
        .quotas(quotas())
        .build()
        .unwrap();
    let red = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(Duration::from_secs(20)))
        .clock(rc.clone())
        .quotas(quotas())
        .build()
        .unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..400 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // steps of up to 20 minutes, across Feb 1 in Paris and further
        let step = Duration::from_micros(x % (1_200 * S));
        mc.advance(step);
        rc.advance(step);
        let cost = (x >> 32) % 4;
        let (a, b) = (
            mem.check_n("k", cost).await.unwrap(),
            red.check_n("k", cost).await.unwrap(),
        );
        assert_eq!(a.allowed(), b.allowed(), "step {i}: {a:?} vs {b:?}");
        assert_eq!(a.remaining(), b.remaining(), "step {i}");
        assert_eq!(a.reset_after(), b.reset_after(), "step {i}");
        assert_eq!(a.retry_after(), b.retry_after(), "step {i}");
        if i % 97 == 0 {
            mem.penalize("k", 2).await.unwrap();
            red.penalize("k", 2).await.unwrap();
        }
        // reserved, then settled below or past the estimate
        if i % 13 == 0 {
            let estimate = (x >> 40) % 4;
            let (a, b) = (
                mem.reserve_n("k", estimate).await.unwrap(),
                red.reserve_n("k", estimate).await.unwrap(),
            );
            assert_eq!(
                (a.decision().allowed(), a.decision().remaining()),
                (b.decision().allowed(), b.decision().remaining()),
                "step {i}: {a:?} vs {b:?}"
            );
            assert_eq!(
                a.decision().reset_after(),
                b.decision().reset_after(),
                "step {i}"
            );
            let actual = (x >> 48) % 7;
            mem.settle(&a, actual).await.unwrap();
            red.settle(&b, actual).await.unwrap();
            let (a, b) = (mem.get("k").await.unwrap(), red.get("k").await.unwrap());
            assert_eq!(a.remaining(), b.remaining(), "step {i}: settled {actual}");
            assert_eq!(a.allowed(), b.allowed(), "step {i}");
        }
    }
}

/// A monthly token budget of 1 000 (Paris), reserved then settled: the
/// unused part of an estimate goes back into its month, usage past the
/// estimate is charged past the limit (a debt: denied, even a cost of 0,
/// until the month ends at local midnight on the 1st), and a settle after
/// the month rolled over gives nothing back to the new month but charges
/// its excess there.
async fn a_month_budget_is_reserved_and_settled(lim: &RateLimiter, clock: &ManualClock) {
    let bounds = paris_bounds();
    clock.set(Duration::from_secs(utc(2024, 2, 10, 0)));
    let rest_of_february = Duration::from_secs(bounds[1] - utc(2024, 2, 10, 0));
    let r = lim.reserve_n("t", 500).await.unwrap();
    assert!(r.decision().allowed());
    assert_eq!(r.decision().remaining(), 500);
    assert_eq!(r.decision().reset_after(), rest_of_february);
    // the reservation counts at once: a second one sees it
    assert_eq!(lim.get("t").await.unwrap().remaining(), 500);
    lim.settle(&r, 120).await.unwrap();
    assert_eq!(lim.get("t").await.unwrap().remaining(), 880, "380 back");
    // used past the estimate and the budget: all of it charged
    let r = lim.reserve_n("t", 400).await.unwrap();
    assert_eq!(r.decision().remaining(), 480);
    lim.settle(&r, 1_500).await.unwrap();
    let g = lim.get("t").await.unwrap();
    assert!(!g.allowed(), "in debt: {g:?}");
    assert_eq!(g.remaining(), 0);
    assert_eq!(g.retry_after(), Some(rest_of_february));
    // denied to the last microsecond of February, even a small estimate
    clock.set(Duration::from_secs(bounds[1]) - Duration::from_micros(1));
    assert!(!lim.reserve_n("t", 1).await.unwrap().decision().allowed());
    assert!(!lim.get("t").await.unwrap().allowed());
    // March opens at local midnight with the whole budget
    clock.set(Duration::from_secs(bounds[1]));
    let r = lim.reserve_n("t", 1_000).await.unwrap();
    assert!(r.decision().allowed(), "{:?}", r.decision());
    lim.settle(&r, 1_000).await.unwrap();
    assert_eq!(lim.get("t").await.unwrap().remaining(), 0);

    // reserved in March, settled in April
    clock.set(Duration::from_secs(bounds[2]) - Duration::from_secs(10));
    let early = lim.reserve_n("u", 300).await.unwrap();
    let late = lim.reserve_n("u", 300).await.unwrap();
    assert_eq!(late.decision().remaining(), 400);
    clock.set(Duration::from_secs(bounds[2]) + Duration::from_secs(10));
    lim.settle(&early, 100).await.unwrap();
    assert_eq!(
        lim.get("u").await.unwrap().remaining(),
        1_000,
        "nothing into April"
    );
    lim.settle(&late, 500).await.unwrap();
    assert_eq!(
        lim.get("u").await.unwrap().remaining(),
        800,
        "the excess is April's"
    );
}

#[tokio::test]
async fn a_calendar_month_budget_is_reserved_and_settled_on_the_memory_store() {
    let clock = ManualClock::new(Duration::from_secs(utc(2024, 1, 15, 0)));
    let lim = budget_limiter(None, &clock, "calbudget");
    a_month_budget_is_reserved_and_settled(&lim, &clock).await;
}

#[tokio::test]
async fn a_calendar_month_budget_is_reserved_and_settled_on_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(utc(2024, 1, 15, 0)));
    let lim = budget_limiter(Some(&server), &clock, "calbudget");
    a_month_budget_is_reserved_and_settled(&lim, &clock).await;
}

/// On Redis's own clock a reservation counts in the current month too (its
/// call brings the bounds of the caller's month, as a check's does), and a
/// settle gives back into it.
#[tokio::test]
async fn a_calendar_month_reservation_on_redis_clock_counts_in_this_month() {
    let server = RedisServer::start();
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(Duration::from_secs(20)))
        .prefix("calres")
        .clock(Clock::Store)
        .quota(Quota::fixed_window(Rate::per_day(10)).calendar(Calendar::month("UTC")))
        .build()
        .unwrap();
    let r = lim.reserve_n("u", 6).await.unwrap();
    assert!(r.decision().allowed());
    assert!(
        r.decision().reset_after() > Duration::from_secs(1),
        "{:?}",
        r.decision()
    );
    assert_eq!(lim.get("u").await.unwrap().remaining(), 4);
    lim.settle(&r, 2).await.unwrap();
    assert_eq!(lim.get("u").await.unwrap().remaining(), 8);
    let r = lim.reserve_n("u", 1).await.unwrap();
    lim.settle(&r, 30).await.unwrap();
    assert!(!lim.get("u").await.unwrap().allowed());
}

/// A limiter of a monthly budget of 1 000 (Paris) on Redis or memory.
fn budget_limiter(redis: Option<&RedisServer>, clock: &ManualClock, prefix: &str) -> RateLimiter {
    let b = RateLimiter::builder()
        .prefix(prefix)
        .clock(clock.clone())
        .quota(month_quota(1_000));
    match redis {
        Some(server) => b.store(RedisStore::new(server.pool(2)).timeout(Duration::from_secs(20))),
        None => b.store(MemoryStore::new()),
    }
    .build()
    .unwrap()
}

#[test]
fn a_calendar_quota_is_rejected_at_build_naming_the_field() {
    let build = |q: Quota| {
        RateLimiter::builder()
            .store(MemoryStore::new())
            .quota(q)
            .build()
            .unwrap_err()
    };
    let e = build(Quota::gcra(Rate::per_day(5)).calendar(Calendar::month("UTC")));
    assert_eq!(e.field(), "quota[0].calendar", "{e}");
    let e = build(month_quota(5).aligned());
    assert_eq!(e.field(), "quota[0].calendar", "{e}");
    let e = build(Quota::fixed_window(Rate::per_day(5)).calendar(Calendar::month("Mars/Olympus")));
    assert_eq!(e.field(), "quota[0].calendar", "{e}");
    assert!(e.to_string().contains("Mars/Olympus"), "{e}");
    // reservations settle into their month, but local budgets are refused
    let e = RateLimiter::builder()
        .store(MemoryStore::new())
        .quota(month_quota(1_000))
        .local_budget(10)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "local_budget", "{e}");
    assert!(e.to_string().contains("calendar"), "{e}");
}
