//! The quota service's bound, checked with simulated Envoys
//! (`common/envoy.rs`) in simulated time on the memory store and on a
//! private Redis, several service instances sharing one store: Envoys
//! joining and leaving, bursting, going silent, reconnecting at every
//! report, and an instance dying. Over every window of length `t`, what
//! all Envoys admit of one bucket stays within `C + ρ·(t + T + m + R⁺)`
//! (the guide's quota service chapter); and the limit is used, and
//! divided fairly, not just never passed.

mod common;

use std::time::Duration;

use common::envoy::{Id, SimEnvoy, id, most_in_window, send};
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit::clock::{Clock, ManualClock};
use tower_redis_ratelimit::store::Store;
use tower_redis_ratelimit_server::rlqs::config::Blanket;
use tower_redis_ratelimit_server::rlqs::{DomainConfig, MARGIN, QuotaOptions, QuotaService};

/// 600 a minute (ρ = 10/s), reported every second, assignments of 3 s.
const CONFIG: &str = "
domain: sim
reporting_interval: 1s
buckets:
  - name: per-user
    id: { user: \"*\" }
    requests_per_unit: 600
    unit: minute
";
const LIMIT: f64 = 600.0;
const WINDOW: f64 = 60.0;
const INTERVAL: f64 = 1.0;

fn rho() -> f64 {
    LIMIT / WINDOW
}

/// The bound over a window of `t` seconds: `C + ρ·(t + T + m + R⁺)`.
fn bound(t: f64) -> f64 {
    let c = DomainConfig::parse("sim.yaml", CONFIG).expect("config");
    let lead = c.assignment_ttl.as_secs_f64() + MARGIN.as_secs_f64() + INTERVAL.max(1.0);
    let capacity = LIMIT.max((rho() * lead).ceil() + 1.0);
    capacity + rho() * (t + lead)
}

fn services<S: Store + Clone>(store: &S, clock: &ManualClock, n: usize) -> Vec<QuotaService> {
    services_of(CONFIG, store, clock, n)
}

fn services_of<S: Store + Clone>(
    config: &str,
    store: &S,
    clock: &ManualClock,
    n: usize,
) -> Vec<QuotaService> {
    (0..n)
        .map(|_| {
            QuotaService::new(
                vec![DomainConfig::parse("sim.yaml", config).expect("config")],
                store.clone(),
                QuotaOptions {
                    clock: Clock::Manual(clock.clone()),
                    ..QuotaOptions::default()
                },
            )
            .expect("service")
        })
        .collect()
}

/// One simulated Envoy's life and traffic.
#[derive(Clone)]
struct Spec {
    instance: usize,
    join: f64,
    leave: f64,
    /// No stream (no report sent, no answer received) in this span.
    silent: Option<(f64, f64)>,
    /// Requests per second at a time.
    rate: fn(f64) -> f64,
    /// Opens a new stream at every report (a reconnect storm).
    reconnect_always: bool,
}

fn steady(r: f64) -> fn(f64) -> f64 {
    match r as u32 {
        1 => |_| 1.0,
        5 => |_| 5.0,
        20 => |_| 20.0,
        40 => |_| 40.0,
        _ => |_| 10.0,
    }
}

/// 300 requests a second for 2 s every 20 s, else 1.
fn bursty(t: f64) -> f64 {
    if t % 20.0 < 2.0 { 300.0 } else { 1.0 }
}

struct Outcome {
    /// Admission times of each bucket, in order.
    admitted: Vec<Vec<f64>>,
    /// Admissions of each Envoy in a span ([`Scenario::measure`]).
    per_envoy: Vec<u64>,
}

struct Scenario {
    specs: Vec<Spec>,
    duration: f64,
    /// An instance dies at a time: its Envoys lose their stream and the
    /// responses on their way, and reconnect to the next instance.
    kill: Option<(f64, usize)>,
    buckets: Vec<Id>,
    /// The span whose admissions `per_envoy` counts.
    measure: (f64, f64),
    /// Every Envoy reports at the turn of the wall clock's second, give or
    /// take up to 30 ms (Envoys started together), so that reports fall on
    /// either side of the demand counters' intervals.
    on_the_boundary: bool,
}

async fn run(services: &[QuotaService], clock: &ManualClock, s: &Scenario) -> Outcome {
    let dt = 0.01;
    let delay = 0.05;
    let mut envoys: Vec<SimEnvoy> = s
        .specs
        .iter()
        .map(|spec| SimEnvoy::new(spec.instance, Blanket::DenyAll))
        .collect();
    let mut carry = vec![0.0f64; envoys.len()];
    let mut next_report: Vec<f64> = s
        .specs
        .iter()
        .enumerate()
        .map(|(i, sp)| sp.join + INTERVAL * (0.1 + 0.8 * (i as f64 / s.specs.len() as f64)))
        .collect();
    let mut turn = vec![0usize; envoys.len()];
    let mut jitter: Vec<u64> = (0..envoys.len() as u64).map(|i| i * 7_919 + 1).collect();
    let mut admitted = vec![Vec::new(); s.buckets.len()];
    let mut per_envoy = vec![0u64; envoys.len()];
    let mut killed = false;
    let steps = (s.duration / dt) as u64;
    for step in 0..steps {
        let now = step as f64 * dt;
        // every token admitted so far was paid for: taken from the budget
        // for an assignment before it was sent
        if step % 100 == 0 {
            let admitted_so_far: usize = admitted.iter().map(Vec::len).sum();
            let paid: u64 = services
                .iter()
                .map(|svc| svc.metrics().rule("sim", "per-user").assigned_tokens())
                .sum();
            assert!(
                admitted_so_far as u64 <= paid,
                "at {now:.0} s: {admitted_so_far} admitted, {paid} paid for"
            );
        }
        if let Some((when, dead)) = s.kill
            && !killed
            && now >= when
        {
            killed = true;
            for e in envoys.iter_mut().filter(|e| e.instance == dead) {
                e.stream = None;
                e.lose_inbox();
                e.instance = (dead + 1) % services.len();
            }
        }
        for (i, (e, spec)) in envoys.iter_mut().zip(&s.specs).enumerate() {
            if now < spec.join {
                continue;
            }
            if now >= spec.leave {
                e.stream = None;
                continue;
            }
            let silent = spec.silent.is_some_and(|(a, b)| now >= a && now < b);
            if silent {
                // the stream broke: what was on its way is lost
                e.stream = None;
                e.lose_inbox();
            }
            carry[i] += (spec.rate)(now) * dt;
            while carry[i] >= 1.0 {
                carry[i] -= 1.0;
                let b = turn[i] % s.buckets.len();
                turn[i] += 1;
                if e.request(&s.buckets[b], now) {
                    admitted[b].push(now);
                    if now >= s.measure.0 && now < s.measure.1 {
                        per_envoy[i] += 1;
                    }
                }
            }
            let fresh = e.fresh_reports();
            if !silent {
                send(services, clock, e, "sim", fresh, now, delay).await;
            }
            if now >= next_report[i] {
                next_report[i] += INTERVAL;
                if s.on_the_boundary {
                    // a jitter of -3 to +3 steps, from a fixed sequence
                    jitter[i] = jitter[i]
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    let steps = ((jitter[i] >> 33) % 7) as f64 - 3.0;
                    next_report[i] = (now / INTERVAL).floor() * INTERVAL + INTERVAL + steps * dt;
                }
                let usages = e.report();
                if !silent {
                    if spec.reconnect_always {
                        e.stream = None;
                    }
                    send(services, clock, e, "sim", usages, now, delay).await;
                }
            }
            e.apply_due(now);
        }
    }
    if std::env::var_os("RLQS_SIM_DEBUG").is_some() {
        for (b, times) in admitted.iter().enumerate() {
            let mut per_s = vec![0u32; s.duration as usize + 1];
            for t in times {
                per_s[*t as usize] += 1;
            }
            eprintln!("bucket {b}: {per_s:?}");
        }
        for (i, svc) in services.iter().enumerate() {
            let c = svc.metrics().rule("sim", "per-user");
            eprintln!(
                "instance {i}: assigned {} allowed {}",
                c.assigned_tokens(),
                c.allowed()
            );
        }
    }
    Outcome {
        admitted,
        per_envoy,
    }
}

fn check_bound(o: &Outcome) {
    for times in &o.admitted {
        for t in [1.0, 5.0, 10.0, 30.0, 60.0, 120.0] {
            let most = most_in_window(times, t) as f64;
            eprintln!("window {t} s: at most {most} admitted, bound {}", bound(t));
            assert!(
                most <= bound(t),
                "{most} admitted in a window of {t} s, past the bound {}",
                bound(t)
            );
        }
    }
}

/// Twelve Envoys on two instances: steady ones, three that join late and
/// leave, two that burst, two that go silent for 20 s, one slow one;
/// instance 0 dies at 70 s.
fn storm() -> Scenario {
    let mut specs = Vec::new();
    let plain = |instance, rate: fn(f64) -> f64| Spec {
        instance,
        join: 0.0,
        leave: f64::INFINITY,
        silent: None,
        rate,
        reconnect_always: false,
    };
    for i in 0..4 {
        specs.push(plain(i % 2, steady(20.0)));
    }
    for i in 0..3 {
        specs.push(Spec {
            join: 30.0 + f64::from(i),
            leave: 90.0,
            ..plain(i as usize % 2, steady(40.0))
        });
    }
    specs.push(plain(0, bursty));
    specs.push(plain(1, bursty));
    for i in 0..2 {
        specs.push(Spec {
            silent: Some((40.0, 60.0)),
            ..plain(i, steady(20.0))
        });
    }
    specs.push(plain(1, steady(1.0)));
    Scenario {
        specs,
        duration: 150.0,
        kill: Some((70.0, 0)),
        buckets: vec![id(&[("user", "alice")]), id(&[("user", "bob")])],
        measure: (0.0, 150.0),
        on_the_boundary: false,
    }
}

async fn storm_holds_the_bound_and_uses_the_limit<S: Store + Clone>(store: S) {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let svcs = services(&store, &clock, 2);
    let s = storm();
    let o = run(&svcs, &clock, &s).await;
    check_bound(&o);
    // demand is far above the limit all along: most of it is used
    for times in &o.admitted {
        let used = times.len() as f64;
        let possible = LIMIT + rho() * s.duration;
        assert!(
            used >= 0.6 * rho() * s.duration,
            "{used} admitted of {possible} possible"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_envoys_holds_the_bound_on_memory() {
    storm_holds_the_bound_and_uses_the_limit(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_envoys_holds_the_bound_on_redis() {
    let redis = common::Redis::start();
    storm_holds_the_bound_and_uses_the_limit(common::redis_store(&redis)).await;
}

async fn reconnect_storm<S: Store + Clone>(store: S) {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let svcs = services(&store, &clock, 3);
    let specs = (0..9)
        .map(|i| Spec {
            instance: i % 3,
            join: 0.0,
            leave: f64::INFINITY,
            silent: None,
            rate: steady(40.0),
            reconnect_always: true,
        })
        .collect();
    let s = Scenario {
        specs,
        duration: 90.0,
        kill: None,
        buckets: vec![id(&[("user", "carol")])],
        measure: (0.0, 90.0),
        on_the_boundary: false,
    };
    let o = run(&svcs, &clock, &s).await;
    check_bound(&o);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_reconnecting_at_every_report_hold_the_bound_on_memory() {
    reconnect_storm(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_reconnecting_at_every_report_hold_the_bound_on_redis() {
    let redis = common::Redis::start();
    reconnect_storm(common::redis_store(&redis)).await;
}

async fn fair_and_back<S: Store + Clone>(store: S) {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let svcs = services(&store, &clock, 2);
    // four equal Envoys, then the fourth goes silent for good at 60 s
    let specs: Vec<Spec> = (0..4)
        .map(|i| Spec {
            instance: i % 2,
            join: 0.0,
            leave: f64::INFINITY,
            silent: (i == 3).then_some((60.0, f64::INFINITY)),
            rate: steady(40.0),
            reconnect_always: false,
        })
        .collect();
    let s = Scenario {
        specs,
        duration: 120.0,
        kill: None,
        buckets: vec![id(&[("user", "dave")])],
        measure: (20.0, 60.0),
        on_the_boundary: false,
    };
    let o = run(&svcs, &clock, &s).await;
    check_bound(&o);
    // equal demand, equal shares (within a third of the mean)
    let mean = o.per_envoy.iter().sum::<u64>() as f64 / 4.0;
    for (i, n) in o.per_envoy.iter().enumerate() {
        assert!(
            (*n as f64 - mean).abs() <= mean / 3.0,
            "Envoy {i} admitted {n}, the mean is {mean}: {:?}",
            o.per_envoy
        );
    }
    // the silent one's share comes back after its TTL: the three others
    // use the whole rate from 70 s on
    let late = o.admitted[0].iter().filter(|t| **t >= 70.0).count() as f64;
    assert!(
        late >= 0.8 * rho() * 50.0,
        "{late} admitted in the last 50 s, of {}",
        rho() * 50.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_envoys_get_equal_shares_and_a_silent_ones_comes_back_on_memory() {
    fair_and_back(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_envoys_get_equal_shares_and_a_silent_ones_comes_back_on_redis() {
    let redis = common::Redis::start();
    fair_and_back(common::redis_store(&redis)).await;
}

/// Twenty Envoys arriving within a second on an idle budget, each far
/// over the limit: none has a share yet, so each is first assigned the
/// whole rate, paid from the full budget. This is the case the bound's
/// `C` is for: what they admit in the first minute comes within two
/// thirds of the bound, and stays under it.
async fn crowd<S: Store + Clone>(store: S) {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let svcs = services(&store, &clock, 2);
    let specs = (0..20)
        .map(|i| Spec {
            instance: i % 2,
            join: i as f64 * 0.05,
            leave: f64::INFINITY,
            silent: None,
            rate: |_| 100.0,
            reconnect_always: false,
        })
        .collect();
    let s = Scenario {
        specs,
        duration: 60.0,
        kill: None,
        buckets: vec![id(&[("user", "erin")])],
        measure: (0.0, 60.0),
        on_the_boundary: false,
    };
    let o = run(&svcs, &clock, &s).await;
    check_bound(&o);
    // most of the budget's 600 and a minute's refill admitted in the first
    // minute: the bound is near what can happen, not a loose one
    let minute = most_in_window(&o.admitted[0], WINDOW) as f64;
    assert!(
        minute >= 0.6 * bound(WINDOW),
        "{minute} admitted in a minute: the crowd should spend the budget ({})",
        bound(WINDOW)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_arriving_at_once_spends_the_budget_within_the_bound_on_memory() {
    crowd(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_arriving_at_once_spends_the_budget_within_the_bound_on_redis() {
    let redis = common::Redis::start();
    crowd(common::redis_store(&redis)).await;
}

/// Sixteen Envoys sharing a limit of 100 a second, at 25 a second each:
/// each one's share (6.25 a second) is far from the whole rate it is
/// first given, and the budget, emptied by those first assignments, cannot
/// pay a new bucket at once. The shares must still come to the whole
/// limit: an Envoy keeps (and renews) the smaller bucket it holds while its
/// share grows, rather than buying a new one at every report (which used
/// a fifth of the limit, found by the `quota_load` benchmark).
async fn many_small_shares<S: Store + Clone>(store: S) {
    let config = CONFIG.replace("requests_per_unit: 600", "requests_per_unit: 6000");
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let svcs = services_of(&config, &store, &clock, 2);
    let specs = (0..16)
        .map(|i| Spec {
            instance: i % 2,
            join: 0.0,
            leave: f64::INFINITY,
            silent: None,
            rate: |_| 25.0,
            reconnect_always: false,
        })
        .collect();
    let s = Scenario {
        specs,
        duration: 90.0,
        kill: None,
        buckets: vec![id(&[("user", "frank")])],
        measure: (30.0, 90.0),
        on_the_boundary: true,
    };
    let o = run(&svcs, &clock, &s).await;
    let late: u64 = o.per_envoy.iter().sum();
    assert!(
        late as f64 >= 0.8 * 100.0 * 60.0,
        "{late} admitted in the last 60 s, of 6,000: {:?}",
        o.per_envoy
    );
    // and never more than the limit's rate over that minute, but for the
    // budget's capacity (6,000) and one lease
    assert!(late as f64 <= 6_000.0 + 100.0 * 65.0, "{late}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_small_shares_use_the_whole_limit_on_memory() {
    many_small_shares(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_small_shares_use_the_whole_limit_on_redis() {
    let redis = common::Redis::start();
    many_small_shares(common::redis_store(&redis)).await;
}
