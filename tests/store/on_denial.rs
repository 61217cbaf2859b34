//! Recording a denial (`RateLimiterBuilder::on_denial`, `limiter::OnDenial`):
//! a denied call records its cost past the limit in the same atomic store
//! call. On the memory store and a real Redis, for every strategy: the state
//! it leaves is exactly what a denied `check_n` then `penalize(cost)` leaves
//! (differential, under one manual clock, one quota and several, and joint
//! decisions of mixed modes); nothing is lost under concurrency or batching;
//! huge costs stay bounded.

use crate::common;

use std::time::Duration;

use common::RedisServer;
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::error::StoreError;
use tower_redis_ratelimit::limiter::{AllOrNothing, OnDenial};
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Decision, MemoryStore, Quota, Rate, RateLimiter, RedisStore};

/// A store of either kind.
#[derive(Clone)]
enum Store {
    Memory(MemoryStore),
    Redis(RedisStore),
}

impl Store {
    fn limiter(
        &self,
        prefix: &str,
        quotas: &[Quota],
        clock: &ManualClock,
        mode: OnDenial,
    ) -> RateLimiter {
        let b = RateLimiter::builder()
            .prefix(prefix)
            .quotas(quotas.to_vec())
            .clock(clock.clone())
            .on_denial(mode);
        match self {
            Store::Memory(s) => b.store(s.clone()).build().unwrap(),
            Store::Redis(s) => b.store(s.clone()).build().unwrap(),
        }
    }
}

/// The stores every test runs on: a memory store, and a Redis of its own.
fn stores() -> (Vec<Store>, RedisServer) {
    let server = RedisServer::start();
    let redis = RedisStore::new(server.pool(4)).timeout(common::GENEROUS);
    (
        vec![Store::Memory(MemoryStore::new()), Store::Redis(redis)],
        server,
    )
}

/// A small deterministic generator (a test's sequence is the same on
/// every run and every store).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A named quota of strategy `s` (`None`: an aligned fixed window) at `n`
/// per `period`, burst `n + 2` where it takes one.
fn quota(s: Option<Strategy>, n: u64, period: Duration, name: &str) -> Quota {
    let q = match s {
        None => Quota::fixed_window(Rate::new(n, period)).aligned(),
        Some(s) => {
            let q = Quota::new(s, Rate::new(n, period));
            if s.takes_burst() { q.burst(n + 2) } else { q }
        }
    };
    q.name(name)
}

/// Every strategy a denial records on (concurrency: see
/// `concurrency_quotas_are_never_recorded_on`), and the aligned window.
fn recording_strategies() -> Vec<Option<Strategy>> {
    let mut out: Vec<Option<Strategy>> = Strategy::ALL
        .into_iter()
        .filter(|s| *s != Strategy::Concurrency)
        .map(Some)
        .collect();
    out.push(None);
    out
}

/// A decision as compared (all but `recorded`, and the lease).
fn comparable(d: &Decision) -> impl PartialEq + std::fmt::Debug {
    (
        d.allowed(),
        d.limit(),
        d.remaining(),
        d.reset_after(),
        d.retry_after(),
        d.quota(),
        d.delay(),
        d.quotas().collect::<Vec<_>>(),
    )
}

/// The capacity a cost is compared with.
fn capacity(q: &Quota) -> u64 {
    q.limit()
}

/// Drives `rec` (recording as `mode`) and a reference on other keys of the
/// same store, which checks with `OnDenial::Nothing` and, when denied,
/// penalizes as the mode says (`Record`: every quota; `RecordIfOver`: each
/// quota that denies, through a limiter of that quota alone on the same
/// storage key), over `steps` random steps; every decision and every peek
/// after must be the same.
async fn differential(store: &Store, quotas: &[Quota], mode: OnDenial, seed: u64, steps: usize) {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let tag = format!("{seed}-{mode:?}-{}", quotas.len());
    let rec = store.limiter(&format!("rec-{tag}"), quotas, &clock, mode);
    let reference = store.limiter(&format!("ref-{tag}"), quotas, &clock, OnDenial::Nothing);
    // (each quota alone on the reference's keys: its storage key is its name's)
    let alone: Vec<RateLimiter> = quotas
        .iter()
        .map(|q| {
            store.limiter(
                &format!("ref-{tag}"),
                std::slice::from_ref(q),
                &clock,
                OnDenial::Nothing,
            )
        })
        .collect();
    let caps: Vec<u64> = quotas.iter().map(capacity).collect();
    let max_cap = *caps.iter().max().unwrap();
    let min_cap = *caps.iter().min().unwrap();
    let mut rng = Lcg(seed);
    let key = "k";
    let mut recorded = 0;
    for step in 0..steps {
        let what = format!("{tag} step {step} {quotas:?}");
        if rng.below(4) == 0 {
            clock.advance(Duration::from_micros(rng.below(3_000_000)));
            continue;
        }
        let cost = match rng.below(9) {
            0 => 0,
            1 | 2 => 1,
            3 => min_cap,
            4 => min_cap + 1,
            5 => max_cap + 1,
            6 => [u64::MAX, 1 << 60, 1 << 50][rng.below(3) as usize],
            _ => rng.below(max_cap + 2),
        };
        // each quota's own verdict on the reference before the check (a
        // cost above a capacity never fits; else a joint peek, which
        // consumes nothing)
        let mut denies = Vec::new();
        for (q, lim) in caps.iter().zip(&alone) {
            denies.push(if cost > *q {
                true
            } else {
                let d = AllOrNothing::new()
                    .part(lim, key, cost)
                    .peek()
                    .await
                    .unwrap();
                !d.allowed()
            });
        }
        let got = rec.check_n(key, cost).await.unwrap();
        let want = reference.check_n(key, cost).await.unwrap();
        assert_eq!(got.allowed(), want.allowed(), "{what}: cost {cost}");
        if got.allowed() || cost == 0 {
            assert_eq!(comparable(&got), comparable(&want), "{what}: cost {cost}");
            assert!(!got.recorded(), "{what}");
        } else {
            recorded += 1;
            assert!(got.recorded(), "{what}: cost {cost}, {got:?}");
            match mode {
                OnDenial::Record => reference.penalize(key, cost).await.unwrap(),
                _ => {
                    for (lim, denies) in alone.iter().zip(&denies) {
                        if *denies {
                            lim.penalize(key, cost).await.unwrap();
                        }
                    }
                }
            }
            if cost > min_cap {
                // the reference's denial read no state: the recorded one
                // never fits either
                assert_eq!(got.retry_after(), None, "{what}: cost {cost}");
            } else {
                // the state after: what a check of the cost gets now (still
                // denied, so it consumes nothing)
                let after = reference.check_n(key, cost).await.unwrap();
                assert!(after.denied(), "{what}");
                assert_eq!(comparable(&got), comparable(&after), "{what}: cost {cost}");
            }
        }
        let (a, b) = (
            rec.peek(key).await.unwrap(),
            reference.peek(key).await.unwrap(),
        );
        assert_eq!(
            comparable(&a),
            comparable(&b),
            "{what}: peek after cost {cost}"
        );
    }
    assert!(recorded >= 5, "{tag}: only {recorded} recorded denials");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_denial_leaves_what_check_n_then_penalize_leaves_on_one_quota() {
    let (stores, _server) = stores();
    for store in &stores {
        for (i, s) in recording_strategies().into_iter().enumerate() {
            let q = quota(s, 4, Duration::from_secs(10), "a");
            for mode in [OnDenial::Record, OnDenial::RecordIfOver] {
                differential(store, std::slice::from_ref(&q), mode, 11 + i as u64, 80).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_denial_leaves_what_check_n_then_penalize_leaves_on_several_quotas() {
    let (stores, _server) = stores();
    let strategies = recording_strategies();
    for store in &stores {
        for (i, s) in strategies.iter().enumerate() {
            // with another strategy of a shorter period and a larger count,
            // so that either quota denies alone in some steps
            let other = strategies[(i + 3) % strategies.len()];
            let quotas = [
                quota(*s, 4, Duration::from_secs(10), "a"),
                quota(other, 6, Duration::from_secs(4), "b"),
            ];
            for mode in [OnDenial::Record, OnDenial::RecordIfOver] {
                differential(store, &quotas, mode, 101 + i as u64, 80).await;
            }
        }
    }
}

#[cfg(feature = "calendar")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_denial_on_a_calendar_window_is_its_penalize() {
    use tower_redis_ratelimit::Calendar;
    let (stores, _server) = stores();
    for store in &stores {
        let q = Quota::fixed_window(Rate::per_day(5))
            .calendar(Calendar::month("UTC"))
            .name("a");
        for mode in [OnDenial::Record, OnDenial::RecordIfOver] {
            differential(store, std::slice::from_ref(&q), mode, 7, 60).await;
            let quotas = [
                q.clone(),
                quota(Some(Strategy::Gcra), 3, Duration::from_secs(5), "b"),
            ];
            differential(store, &quotas, mode, 8, 60).await;
        }
    }
}

/// With `RecordIfOver` the quotas that would allow are left as they are;
/// with `Record` every one is recorded on.
#[tokio::test]
async fn record_if_over_leaves_the_quotas_that_allow_and_record_charges_them_all() {
    let (stores, _server) = stores();
    for (n, store) in stores.iter().enumerate() {
        let clock = ManualClock::new(Duration::from_secs(50));
        let quotas = [
            Quota::fixed_window(Rate::per_minute(10)).name("small"),
            Quota::fixed_window(Rate::per_minute(100)).name("large"),
        ];
        for (mode, large_left) in [(OnDenial::RecordIfOver, 92), (OnDenial::Record, 80)] {
            let lim = store.limiter(&format!("mix{n}-{mode:?}"), &quotas, &clock, mode);
            assert!(lim.check_n("k", 8).await.unwrap().allowed());
            let d = lim.check_n("k", 12).await.unwrap();
            assert!(d.denied() && d.recorded(), "{mode:?}: {d:?}");
            let left: Vec<u64> = d.quotas().map(|q| q.remaining()).collect();
            assert_eq!(left, [0, large_left], "{mode:?}");
            let peek = lim.peek("k").await.unwrap();
            assert_eq!(
                peek.quotas().map(|q| q.remaining()).collect::<Vec<_>>(),
                [0, large_left]
            );
            // the small window holds 20: even 1 is denied, and records
            let again = lim.check("k").await.unwrap();
            assert!(again.denied() && again.recorded());
            // a peek records nothing
            let before = lim.peek("k").await.unwrap();
            assert!(!before.recorded());
            let after = lim.peek("k").await.unwrap();
            assert_eq!(comparable(&before), comparable(&after));
        }
    }
}

/// Concurrency quotas are never recorded on; a denial only they make
/// records nothing (`recorded` false); shadow quotas never record.
#[tokio::test]
async fn concurrency_and_shadow_quotas_are_never_recorded_on() {
    let (stores, _server) = stores();
    for (n, store) in stores.iter().enumerate() {
        let clock = ManualClock::new(Duration::from_secs(50));
        let quotas = [
            Quota::concurrency(2)
                .lease_timeout(Duration::from_secs(60))
                .name("c"),
            Quota::fixed_window(Rate::per_minute(10)).name("w"),
            Quota::fixed_window(Rate::per_minute(3))
                .name("s")
                .shadow(true),
        ];
        let lim = store.limiter(&format!("conc{n}"), &quotas, &clock, OnDenial::Record);
        let held = lim.check_n("k", 2).await.unwrap();
        assert!(held.allowed());
        // the concurrency quota denies: the window records, the leases
        // stay 2, the shadow quota (which would deny) stays at 1
        let d = lim.check_n("k", 2).await.unwrap();
        assert!(d.denied() && d.recorded(), "{d:?}");
        let left: Vec<u64> = d.quotas().map(|q| q.remaining()).collect();
        assert_eq!(left, [0, 6, 1]);
        let peek = lim.peek("k").await.unwrap();
        assert_eq!(
            peek.quotas().map(|q| q.remaining()).collect::<Vec<_>>(),
            [0, 6, 1]
        );
        drop(held);
        let lim_if = store.limiter(
            &format!("conc{n}-if"),
            &quotas,
            &clock,
            OnDenial::RecordIfOver,
        );
        let held = lim_if.check_n("k", 2).await.unwrap();
        assert!(held.allowed());
        let d = lim_if.check("k").await.unwrap();
        // only the concurrency quota denies: nothing recorded
        assert!(d.denied() && !d.recorded(), "{d:?}");
        let peek = lim_if.peek("k").await.unwrap();
        assert_eq!(
            peek.quotas().map(|q| q.remaining()).collect::<Vec<_>>(),
            [0, 8, 1]
        );
        drop(held);
    }
}

/// A cost above what one call may lease of a concurrency quota (which has
/// room for it) is denied without a store call, recording nothing, and
/// takes no lease: the store would grant it.
#[tokio::test]
async fn a_cost_above_the_leases_one_call_may_take_is_denied_unrecorded() {
    let (stores, _server) = stores();
    for (n, store) in stores.iter().enumerate() {
        let clock = ManualClock::new(Duration::from_secs(50));
        let quotas = [
            Quota::concurrency(5_000)
                .lease_timeout(Duration::from_secs(60))
                .name("c"),
            Quota::fixed_window(Rate::per_minute(10_000)).name("w"),
        ];
        let lim = store.limiter(&format!("leases{n}"), &quotas, &clock, OnDenial::Record);
        let d = lim
            .check_n("k", Quota::MAX_LEASES_PER_CALL + 1)
            .await
            .unwrap();
        assert!(d.denied() && !d.recorded() && d.lease().is_none(), "{d:?}");
        let peek = lim.peek("k").await.unwrap();
        assert_eq!(
            peek.quotas().map(|q| q.remaining()).collect::<Vec<_>>(),
            [5_000, 10_000]
        );
        // (above the window's capacity, and the leases: the same)
        let d = lim.check_n("k", 10_001).await.unwrap();
        assert!(d.denied() && !d.recorded(), "{d:?}");
        let d = lim.check_n("k", 900).await.unwrap();
        assert!(d.allowed());
    }
}

/// Joint decisions of parts in every mode (set per part, or the limiter's
/// own) against a reference: the same joint decision unrecorded, then each
/// part penalized as its mode says; every decision and peek the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_joint_decision_records_each_part_as_its_mode_says() {
    let (stores, _server) = stores();
    let strategies: Vec<Strategy> = Strategy::ALL
        .into_iter()
        .filter(|s| *s != Strategy::Concurrency)
        .collect();
    for (n, store) in stores.iter().enumerate() {
        let clock = ManualClock::new(Duration::from_secs(2_000));
        let mut rng = Lcg(4242 + n as u64);
        // part i: strategy i, its mode; the limiter of part 1 records by
        // itself (RecordIfOver), the others are told per part
        let modes = [
            OnDenial::Record,
            OnDenial::RecordIfOver,
            OnDenial::Nothing,
            OnDenial::Record,
            OnDenial::RecordIfOver,
            OnDenial::Record,
        ];
        let mut recs = Vec::new();
        let mut refs = Vec::new();
        for (i, s) in strategies.iter().enumerate() {
            let q = [quota(
                Some(*s),
                3 + i as u64,
                Duration::from_secs(5 + i as u64),
                "q",
            )];
            let own = if i == 1 {
                OnDenial::RecordIfOver
            } else {
                OnDenial::Nothing
            };
            recs.push(store.limiter(&format!("jrec{n}-{i}"), &q, &clock, own));
            refs.push(store.limiter(&format!("jref{n}-{i}"), &q, &clock, OnDenial::Nothing));
        }
        let mut recorded = 0;
        for step in 0..120 {
            if rng.below(4) == 0 {
                clock.advance(Duration::from_micros(rng.below(2_000_000)));
                continue;
            }
            let costs: Vec<u64> = recs
                .iter()
                .enumerate()
                .map(|(i, _)| match rng.below(12) {
                    0 => 0,
                    1 => u64::MAX,
                    2 => 4 + i as u64,
                    _ => rng.below(3),
                })
                .collect();
            let mut joint = AllOrNothing::new();
            let mut plain = AllOrNothing::new();
            for (i, cost) in costs.iter().enumerate() {
                if i == 1 {
                    joint.push(&recs[i], "k", *cost);
                } else {
                    joint.push_with(&recs[i], "k", *cost, modes[i]);
                }
                plain.push(&refs[i], "k", *cost);
            }
            let got = joint.decide().await.unwrap();
            let want = plain.decide().await.unwrap();
            let what = format!("store {n} step {step} costs {costs:?}");
            assert_eq!(got.allowed(), want.allowed(), "{what}");
            for (i, (g, w)) in got.decisions().iter().zip(want.decisions()).enumerate() {
                let records = match modes[i] {
                    OnDenial::Record => true,
                    OnDenial::RecordIfOver => w.denied(),
                    _ => false,
                };
                let records = records && got.denied() && costs[i] > 0;
                assert_eq!(g.recorded(), records, "{what}: part {i}: {g:?}");
                if records {
                    recorded += 1;
                    refs[i].penalize("k", costs[i]).await.unwrap();
                    if costs[i] > refs[i].quotas()[0].limit() {
                        assert_eq!(g.retry_after(), None, "{what}: part {i}");
                    }
                } else {
                    assert_eq!(comparable(g), comparable(w), "{what}: part {i}");
                }
            }
            for (i, (a, b)) in recs.iter().zip(&refs).enumerate() {
                let (a, b) = (a.peek("k").await.unwrap(), b.peek("k").await.unwrap());
                assert_eq!(comparable(&a), comparable(&b), "{what}: part {i} peek");
            }
            // a joint peek records nothing
            let mut peek = AllOrNothing::new();
            for (i, cost) in costs.iter().enumerate() {
                peek.push_with(&recs[i], "k", *cost, OnDenial::Record);
            }
            let p = peek.peek().await.unwrap();
            assert!(p.decisions().iter().all(|d| !d.recorded()), "{what}");
        }
        assert!(recorded >= 20, "store {n}: only {recorded} recorded parts");
        for (i, (a, b)) in recs.iter().zip(&refs).enumerate() {
            let (a, b) = (a.peek("k").await.unwrap(), b.peek("k").await.unwrap());
            assert_eq!(
                comparable(&a),
                comparable(&b),
                "store {n}: part {i} at the end"
            );
        }
    }
}

/// A recording part's logged units count towards `MAX_LOGGED`: two
/// sliding logs of 6 000 that record a huge cost would log 12 002 times.
#[tokio::test]
async fn recorded_sliding_log_times_count_towards_max_logged() {
    let (stores, _server) = stores();
    for (n, store) in stores.iter().enumerate() {
        let clock = ManualClock::new(Duration::from_secs(50));
        let big = [Quota::sliding_window_log(Rate::per_hour(6_000)).name("l")];
        let a = store.limiter(&format!("logged{n}a"), &big, &clock, OnDenial::Record);
        let b = store.limiter(&format!("logged{n}b"), &big, &clock, OnDenial::Record);
        let e = AllOrNothing::new()
            .part(&a, "k", u64::MAX)
            .part(&b, "k", u64::MAX)
            .decide()
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::TooLarge(_)), "{e}");
        // unrecorded, the same never-fitting parts log nothing
        let d = AllOrNothing::new()
            .part_with(&a, "k", u64::MAX, OnDenial::Nothing)
            .part_with(&b, "k", u64::MAX, OnDenial::Nothing)
            .decide()
            .await
            .unwrap();
        assert!(d.denied() && d.decisions().iter().all(|d| !d.recorded()));
        // one of them records: 6 001 times at most
        let d = AllOrNothing::new()
            .part(&a, "k", u64::MAX)
            .part_with(&b, "k", u64::MAX, OnDenial::Nothing)
            .decide()
            .await
            .unwrap();
        assert!(d.denied() && d.decisions()[0].recorded() && !d.decisions()[1].recorded());
        assert_eq!(d.decisions()[0].retry_after(), None);
        assert_eq!(a.peek("k").await.unwrap().remaining(), 0);
        assert_eq!(b.peek("k").await.unwrap().remaining(), 6_000);
    }
}

/// Huge costs never panic; the debt stays within `MAX_DEBT` (a TAT within
/// 2^50 µs of now), a fixed window's count within its cap, a sliding log
/// keeps at most its count + 1 times (checked in Redis's own keys too).
#[tokio::test]
async fn huge_recorded_costs_stay_bounded() {
    let (stores, server) = stores();
    let max_debt = RateLimiter::MAX_DEBT;
    for (n, store) in stores.iter().enumerate() {
        let clock = ManualClock::new(Duration::from_secs(50));
        for s in recording_strategies() {
            let q = quota(s, 5, Duration::from_secs(10), "a");
            let prefix = format!("huge{n}-{}", s.map_or("aligned", |s| s.as_str()));
            let lim = store.limiter(&prefix, &[q], &clock, OnDenial::Record);
            for cost in [u64::MAX, u64::MAX - 1, 1 << 53, (1 << 50) + 1, 6, 5] {
                let d = lim.check_n("k", cost).await.unwrap();
                let what = format!("{prefix} cost {cost}: {d:?}");
                assert!(d.denied() && d.recorded(), "{what}");
                if cost > 7 {
                    assert_eq!(d.retry_after(), None, "{what}");
                }
                assert_eq!(d.remaining(), 0, "{what}");
                assert!(
                    d.reset_after() <= max_debt + Duration::from_secs(1),
                    "{what}"
                );
                if let Some(r) = d.retry_after() {
                    assert!(r <= max_debt + Duration::from_secs(1), "{what}");
                }
            }
            // the same as penalize's bounds: a reference penalized as much
            let reference = store.limiter(
                &format!("{prefix}-ref"),
                &[quota(s, 5, Duration::from_secs(10), "a")],
                &clock,
                OnDenial::Nothing,
            );
            for cost in [u64::MAX, u64::MAX - 1, 1 << 53, (1 << 50) + 1, 6, 5] {
                reference.penalize("k", cost).await.unwrap();
            }
            let (a, b) = (
                lim.peek("k").await.unwrap(),
                reference.peek("k").await.unwrap(),
            );
            assert_eq!(comparable(&a), comparable(&b), "{prefix}");
        }
        if let Store::Redis(_) = store {
            // the sliding log: at most 6 times in Redis
            let mut conn = server.conn().await;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{{huge{n}-sliding-window-log:k}}*"))
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(keys.len(), 1, "{keys:?}");
            let kind: String = redis::cmd("TYPE")
                .arg(&keys[0])
                .query_async(&mut conn)
                .await
                .unwrap();
            let times: u64 = match kind.as_str() {
                "string" => {
                    let len: u64 = redis::cmd("STRLEN")
                        .arg(&keys[0])
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    len / 7
                }
                "list" => redis::cmd("LLEN")
                    .arg(&keys[0])
                    .query_async(&mut conn)
                    .await
                    .unwrap(),
                other => panic!("a sliding log of type {other}"),
            };
            assert_eq!(times, 6, "{kind}");
        }
    }
}

/// Many tasks on several limiter instances of one key on one Redis (Redis's
/// clock), each reporting its cost: with `Record`, the window's count is
/// the sum of every cost (nothing lost), the admitted sum at most the
/// limit and the admissions stop at the first denial; a frozen manual
/// clock's GCRA owes exactly the sum (its TAT is `sum × interval` ahead).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reports_are_all_recorded_and_admissions_stay_exact() {
    let server = RedisServer::start();
    let instances: Vec<RateLimiter> = (0..4)
        .map(|_| {
            RateLimiter::builder()
                .store(RedisStore::new(server.pool(4)).timeout(common::GENEROUS))
                .prefix("conc")
                .quota(Quota::fixed_window(Rate::per_hour(1_000)).name("w"))
                .on_denial(OnDenial::Record)
                .build()
                .unwrap()
        })
        .collect();
    let tasks: Vec<_> = (0..256u64)
        .map(|i| {
            let lim = instances[i as usize % 4].clone();
            let cost = 1 + (i * 7) % 20;
            tokio::spawn(async move { (cost, lim.check_n("k", cost).await.unwrap()) })
        })
        .collect();
    let (mut sum, mut admitted, mut max_denied) = (0, 0, 0);
    for t in tasks {
        let (cost, d) = t.await.unwrap();
        sum += cost;
        if d.allowed() {
            admitted += cost;
        } else {
            assert!(d.recorded(), "{d:?}");
            max_denied = max_denied.max(cost);
        }
    }
    assert!(sum > 1_000);
    assert!(
        admitted <= 1_000 && admitted + 20 > 1_000,
        "admitted {admitted}"
    );
    assert!(max_denied > 0);
    let mut conn = server.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{conc:k}*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let count: u64 = redis::cmd("GET")
        .arg(&keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(count, sum);

    // a GCRA on a frozen manual clock: the debt is the sum
    let clock = ManualClock::new(Duration::from_secs(100));
    let gcra: Vec<RateLimiter> = (0..4)
        .map(|_| {
            RateLimiter::builder()
                .store(RedisStore::new(server.pool(4)).timeout(common::GENEROUS))
                .prefix("conc-gcra")
                .quota(Quota::gcra(Rate::per_second(10)).burst(50).name("g"))
                .clock(clock.clone())
                .on_denial(OnDenial::Record)
                .build()
                .unwrap()
        })
        .collect();
    let tasks: Vec<_> = (0..200u64)
        .map(|i| {
            let lim = gcra[i as usize % 4].clone();
            let cost = 1 + i % 5;
            tokio::spawn(async move { (cost, lim.check_n("k", cost).await.unwrap()) })
        })
        .collect();
    let (mut sum, mut admitted) = (0, 0);
    for t in tasks {
        let (cost, d) = t.await.unwrap();
        sum += cost;
        if d.allowed() {
            admitted += cost;
        }
    }
    assert!(admitted <= 50 && admitted + 5 > 50, "admitted {admitted}");
    // 100 ms per unit
    let owed = gcra[0].peek("k").await.unwrap().reset_after();
    assert_eq!(owed, Duration::from_millis(100 * sum), "sum {sum}");
}

/// Concurrent checks of one recording limiter go out batched (several
/// decisions per script call) and every denial records: each key's count
/// is the sum of its costs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_recorded_denials_are_each_recorded() {
    let server = RedisServer::start();
    for s in [
        Strategy::FixedWindow,
        Strategy::Gcra,
        Strategy::SlidingWindowLog,
    ] {
        let clock = ManualClock::new(Duration::from_secs(100));
        let prefix = format!("batch-{}", s.as_str());
        let lim = RateLimiter::builder()
            .store(RedisStore::new(server.pool(1)).timeout(common::GENEROUS))
            .prefix(&prefix)
            .quota(Quota::new(s, Rate::per_hour(10)).name("q"))
            .clock(clock.clone())
            .on_denial(OnDenial::Record)
            .build()
            .unwrap();
        lim.check("warm").await.unwrap();
        server.reset_stats().await;
        let tasks: Vec<_> = (0..512u64)
            .map(|i| {
                let lim = lim.clone();
                tokio::spawn(async move { lim.check_n(format!("k{}", i % 8), 3).await.unwrap() })
            })
            .collect();
        let mut recorded = 0;
        for t in tasks {
            let d = t.await.unwrap();
            assert_eq!(d.denied(), d.recorded(), "{d:?}");
            recorded += usize::from(d.recorded());
        }
        // 3 admitted per key (9 of 10), the 61 others recorded
        assert_eq!(recorded, 8 * 61);
        let calls = server.command_calls("evalsha").await;
        assert!(
            calls < 512,
            "{s}: {calls} script calls for 512 decisions: not batched"
        );
        // the same as 3 admitted and 61 penalties of 3 on a reference
        let reference = RateLimiter::builder()
            .store(MemoryStore::new())
            .prefix(&prefix)
            .quota(Quota::new(s, Rate::per_hour(10)).name("q"))
            .clock(clock.clone())
            .build()
            .unwrap();
        for _ in 0..3 {
            assert!(reference.check_n("k", 3).await.unwrap().allowed());
        }
        for _ in 0..61 {
            reference.penalize("k", 3).await.unwrap();
        }
        let want = reference.peek("k").await.unwrap();
        for k in 0..8 {
            let got = lim.peek(format!("k{k}")).await.unwrap();
            assert_eq!(comparable(&got), comparable(&want), "{s}: k{k}");
        }
    }
}

/// Local budgets spend without the store: rejected with a recording
/// `on_denial`, naming the option.
#[test]
fn recording_with_local_budgets_is_rejected_at_build() {
    let e = RateLimiter::builder()
        .store(MemoryStore::new())
        .quota(Quota::gcra(Rate::per_second(100)))
        .local_budget(10)
        .on_denial(OnDenial::RecordIfOver)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "on_denial", "{e}");
    // a budget of 1 is the normal path
    RateLimiter::builder()
        .store(MemoryStore::new())
        .quota(Quota::gcra(Rate::per_second(100)))
        .local_budget(1)
        .on_denial(OnDenial::Record)
        .build()
        .unwrap();
}

/// `number_of_cached_scripts` of `INFO memory`.
async fn cached_scripts(server: &RedisServer) -> u64 {
    let mut conn = server.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    common::info_field(&info, "number_of_cached_scripts")
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// A storage key's count (GET), 0 for none.
async fn count_of(server: &RedisServer, pattern: &str) -> u64 {
    let mut conn = server.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut conn)
        .await
        .unwrap();
    match keys.as_slice() {
        [] => 0,
        [key] => redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap(),
        more => panic!("{more:?}"),
    }
}

/// On Redis's clock a lone fixed window's costs that can fit take the fast
/// path (its own script), which for a recording limiter keeps a denial's
/// units counted (`lua/fixed_window_fast_record.lua`) up to the cap
/// `penalize` holds a count to; larger costs take the general script. Each
/// count is what check_n then penalize leaves.
#[tokio::test]
async fn the_fixed_window_fast_path_records_as_penalize_does() {
    let server = RedisServer::start();
    let build = |prefix: &str, rate: Rate, mode| {
        RateLimiter::builder()
            .store(
                RedisStore::new(server.pool(2))
                    .timeout(common::GENEROUS)
                    .batching(false),
            )
            .prefix(prefix)
            .quota(Quota::fixed_window(rate).name("w"))
            .on_denial(mode)
            .build()
            .unwrap()
    };
    let hour = Rate::per_hour(10);
    let rec = build("fast-rec", hour, OnDenial::Record);
    let reference = build("fast-ref", hour, OnDenial::Nothing);
    let mut conn = server.conn().await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut rng = Lcg(99);
    for step in 0..200 {
        let cost = match step {
            0..100 => 1 + rng.below(10),
            _ => [0, 1, 5, 10, 11, u64::MAX][rng.below(6) as usize],
        };
        let got = rec.check_n("k", cost).await.unwrap();
        let want = reference.check_n("k", cost).await.unwrap();
        assert_eq!(got.allowed(), want.allowed(), "step {step} cost {cost}");
        assert_eq!(got.recorded(), got.denied() && cost > 0, "step {step}");
        if got.denied() && cost > 0 {
            reference.penalize("k", cost).await.unwrap();
            assert_eq!(got.remaining(), 0);
            let want_retry = (cost <= 10).then(|| got.reset_after());
            assert_eq!(got.retry_after(), want_retry, "step {step}");
        } else {
            assert_eq!(got.remaining(), want.remaining(), "step {step}");
        }
        assert_eq!(
            count_of(&server, "{fast-rec:k}*").await,
            count_of(&server, "{fast-ref:k}*").await,
            "step {step} cost {cost}"
        );
        if step == 99 {
            // costs from 1 to the limit ran one script; the reference its
            // own fast path and penalize's script: three
            assert_eq!(cached_scripts(&server).await, 3, "step {step}");
        }
    }
    assert!(count_of(&server, "{fast-rec:k}*").await > 1_000);
    // the cap: 1 per 40 days repays 325 units in 2^50 µs, so a count stays
    // at most 326, on the fast path as through penalize
    let slow = Rate::new(1, Duration::from_secs(40 * 86_400));
    let rec = build("top-rec", slow, OnDenial::Record);
    let reference = build("top-ref", slow, OnDenial::Nothing);
    for _ in 0..400 {
        assert!(
            rec.check("k").await.unwrap().allowed()
                == reference.check("k").await.unwrap().allowed()
        );
        reference.penalize("k", 1).await.unwrap();
    }
    // (the reference's first check was admitted: one more penalize since)
    assert_eq!(count_of(&server, "{top-ref:k}*").await, 326);
    assert_eq!(count_of(&server, "{top-rec:k}*").await, 326);
}

/// A limiter with runtime limits records as it was built to, before and
/// after its limits change (the limiter in force carries `on_denial`), as
/// check_n then penalize do, for every strategy that keeps a rescaled
/// debt (a named quota's TAT keeps its interval beside it).
#[tokio::test]
async fn runtime_limits_keep_recording_after_their_limits_change() {
    let (stores, _server) = stores();
    for (n, store) in stores.iter().enumerate() {
        for s in [Strategy::Gcra, Strategy::TokenBucket, Strategy::LeakyBucket] {
            let clock = ManualClock::new(Duration::from_secs(50));
            let build = |prefix: String, mode| {
                let b = RateLimiter::builder()
                    .prefix(prefix)
                    .quota(Quota::new(s, Rate::per_minute(6)).name("g"))
                    .clock(clock.clone())
                    .on_denial(mode)
                    .runtime_limits();
                match store {
                    Store::Memory(s) => b.store(s.clone()).build().unwrap(),
                    Store::Redis(s) => b.store(s.clone()).build().unwrap(),
                }
            };
            let rec = build(format!("runtime{n}-{s}"), OnDenial::Record);
            let reference = build(format!("runtime{n}-{s}-ref"), OnDenial::Nothing);
            let both = [&rec, &reference];
            for (step, cost) in [(0, 8), (1, 20), (2, 1)] {
                if step == 1 {
                    for lim in both {
                        lim.limits()
                            .unwrap()
                            .set_quotas([Quota::new(s, Rate::per_minute(12)).name("g")])
                            .unwrap();
                    }
                }
                let d = rec.check_n("k", cost).await.unwrap();
                assert!(d.denied() && d.recorded(), "{s} step {step}: {d:?}");
                assert!(reference.check_n("k", cost).await.unwrap().denied());
                reference.penalize("k", cost).await.unwrap();
                let (a, b) = (
                    rec.peek("k").await.unwrap(),
                    reference.peek("k").await.unwrap(),
                );
                assert_eq!(comparable(&a), comparable(&b), "{s} step {step}");
                assert!(
                    a.reset_after() > Duration::from_secs(60),
                    "{s} step {step}: {a:?}"
                );
            }
        }
    }
}

/// The memory store and Redis record alike: every decision (recorded or
/// not, with the state after) and every peek the same, for every strategy,
/// one quota and several, under one manual clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_record_alike() {
    let (stores, _server) = stores();
    let strategies = recording_strategies();
    for (i, s) in strategies.iter().enumerate() {
        let one = vec![quota(*s, 4, Duration::from_secs(10), "a")];
        let other = strategies[(i + 2) % strategies.len()];
        let two = vec![one[0].clone(), quota(other, 6, Duration::from_secs(4), "b")];
        for (quotas, mode) in [
            (one, OnDenial::Record),
            (two.clone(), OnDenial::Record),
            (two, OnDenial::RecordIfOver),
        ] {
            let clock = ManualClock::new(Duration::from_secs(1_000));
            let tag = format!("alike-{i}-{}-{mode:?}", quotas.len());
            let [memory, redis] = [0, 1].map(|j| stores[j].limiter(&tag, &quotas, &clock, mode));
            let mut rng = Lcg(500 + i as u64);
            for step in 0..60 {
                if rng.below(4) == 0 {
                    clock.advance(Duration::from_micros(rng.below(3_000_000)));
                    continue;
                }
                let cost = [0, 1, 1, 2, 4, 5, 7, u64::MAX][rng.below(8) as usize];
                let (m, r) = (
                    memory.check_n("k", cost).await.unwrap(),
                    redis.check_n("k", cost).await.unwrap(),
                );
                assert_eq!(m.recorded(), r.recorded(), "{tag} step {step}");
                assert_eq!(
                    comparable(&m),
                    comparable(&r),
                    "{tag} step {step} cost {cost}"
                );
                let (m, r) = (
                    memory.peek("k").await.unwrap(),
                    redis.peek("k").await.unwrap(),
                );
                assert_eq!(comparable(&m), comparable(&r), "{tag} step {step} peek");
            }
        }
    }
}

/// With the penalty box, a recorded denial starts the block as any denial
/// does; while blocked, calls are denied without reading the quotas and
/// record nothing; memory and Redis alike.
#[tokio::test]
async fn a_recorded_denial_starts_a_block_and_blocked_calls_record_nothing() {
    let (stores, _server) = stores();
    let mut seen = Vec::new();
    for (n, store) in stores.iter().enumerate() {
        for quotas in [
            vec![Quota::gcra(Rate::per_minute(6)).name("g")],
            vec![
                Quota::gcra(Rate::per_minute(6)).name("g"),
                Quota::fixed_window(Rate::per_hour(100)).name("w"),
            ],
        ] {
            let clock = ManualClock::new(Duration::from_secs(50));
            let b = RateLimiter::builder()
                .prefix(format!("block{n}-{}", quotas.len()))
                .quotas(quotas.clone())
                .clock(clock.clone())
                .block_for(Duration::from_secs(600))
                .on_denial(OnDenial::Record);
            let lim = match store {
                Store::Memory(s) => b.store(s.clone()).build().unwrap(),
                Store::Redis(s) => b.store(s.clone()).build().unwrap(),
            };
            assert!(lim.check_n("k", 6).await.unwrap().allowed());
            let d = lim.check_n("k", 2).await.unwrap();
            assert!(d.denied() && d.recorded(), "{d:?}");
            assert_eq!(d.retry_after(), Some(Duration::from_secs(600)));
            // (a peek while blocked shows the block: the debt is in `d`)
            clock.advance(Duration::from_secs(1));
            let blocked = lim.check_n("k", 3).await.unwrap();
            assert!(blocked.denied() && !blocked.recorded(), "{blocked:?}");
            // the debt is the 8 units recorded, less the second that passed
            lim.unblock("k").await.unwrap();
            let after = lim.peek("k").await.unwrap();
            assert_eq!(
                after.quotas().next().unwrap().reset_after() + Duration::from_secs(1),
                d.quotas().next().unwrap().reset_after()
            );
            assert_eq!(
                after.quotas().next().unwrap().reset_after(),
                Duration::from_secs(79)
            );
            seen.push(format!(
                "{:?} {:?} {:?}",
                comparable(&d),
                comparable(&blocked),
                comparable(&after)
            ));
        }
    }
    // memory and Redis alike
    assert_eq!(seen[..2], seen[2..]);
}
