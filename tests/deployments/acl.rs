//! ACL users and `RateLimiter::verify`: the crate works under the minimal ACL
//! documented in the guide's stores chapter (the test reads it from there), every command of
//! that ACL is needed, a missing permission is a clear
//! `StoreError::Refused` (never a panic, never a silent fail-open), and
//! `verify` names what a server refuses: a permission, a renamed command.

use crate::common;

use std::time::Duration;

use common::{GENEROUS, RedisServer};
use tower_redis_ratelimit::clock::ManualClock;
use tower_redis_ratelimit::error::{RefusalKind, StoreError};
use tower_redis_ratelimit::plans::{Plan, Plans};
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter, RedisStore};

const PASSWORD: &str = "limiter-secret";

/// The guide's minimal ACL (`docs/guide/stores.md`): the `ACL SETUSER limiter …` line, split into rules.
fn guide_acl() -> Vec<String> {
    let guide = include_str!("../../docs/guide/stores.md");
    let line = guide
        .lines()
        .find(|l| l.starts_with("ACL SETUSER limiter "))
        .expect("the guide's stores chapter shows the minimal ACL as `ACL SETUSER limiter …`");
    line.split_whitespace()
        .skip(3)
        .map(|rule| match rule {
            ">secret" => format!(">{PASSWORD}"),
            rule => rule.to_owned(),
        })
        .collect()
}

/// The key patterns (`~…`) of `rules`, without the `~`.
fn key_patterns(rules: &[String]) -> Vec<&str> {
    rules.iter().filter_map(|r| r.strip_prefix('~')).collect()
}

/// Whether `key` matches the ACL key pattern `pattern` (Redis glob; the
/// guide's patterns use `*` alone).
fn glob(pattern: &str, key: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == key,
        Some((head, rest)) => {
            key.starts_with(head)
                && (0..=key.len() - head.len()).any(|i| {
                    key.is_char_boundary(head.len() + i) && glob(rest, &key[head.len() + i..])
                })
        }
    }
}

/// Asserts that every key on `server` matches a key pattern of `rules`
/// (and that there is at least one).
async fn assert_keys_within(server: &RedisServer, rules: &[String]) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    assert!(!keys.is_empty());
    let patterns = key_patterns(rules);
    for key in keys {
        assert!(
            patterns.iter().any(|p| glob(p, &key)),
            "{key:?} is outside the ACL's key patterns {patterns:?}"
        );
    }
}

/// Sets the user `limiter` to exactly `rules` (after `reset`).
async fn set_user(server: &RedisServer, rules: &[String]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg("limiter").arg("reset").arg(rules);
    let () = cmd.query_async(&mut server.conn().await).await.unwrap();
}

fn url(server: &RedisServer) -> String {
    format!("redis://limiter:{PASSWORD}@127.0.0.1:{}/", server.port())
}

/// A store connecting as the user `limiter`.
fn limiter_store(server: &RedisServer) -> RedisStore {
    RedisStore::from_url(&url(server))
        .unwrap()
        .timeout(GENEROUS)
}

/// Every strategy alone and all together, a manual clock, local
/// local budgets (take and give-back), long sliding logs.
type Exercised = (RateLimiter, bool, Option<ManualClock>, u64);

/// Limiters under the prefix `api` that, together, run every branch that
/// sends a command (with the units each key is charged first: a sliding
/// log of more than 32 times is a list).
fn limiters(store: &RedisStore) -> Vec<Exercised> {
    let quota = |s: Strategy| match s {
        Strategy::Concurrency => Quota::concurrency(2),
        s => Quota::new(s, Rate::per_hour(2)),
    };
    let build = |quotas: Vec<Quota>, manual: bool, reserve: bool| {
        let mut b = RateLimiter::builder()
            .store(store.clone())
            .prefix("api")
            .quotas(quotas);
        let clock = manual.then(|| ManualClock::new(Duration::from_secs(1_000)));
        if let Some(clock) = &clock {
            b = b.clock(clock.clone());
        }
        if reserve {
            b = b.local_budget(2);
        }
        (b.build().unwrap(), reserve, clock, 0)
    };
    let mut out = Vec::new();
    for manual in [false, true] {
        for s in Strategy::ALL {
            out.push(build(vec![quota(s)], manual, false));
        }
        out.push(build(Strategy::ALL.map(quota).to_vec(), manual, false));
    }
    for s in [
        Strategy::FixedWindow,
        Strategy::SlidingWindowLog,
        Strategy::SlidingWindowCounter,
        Strategy::Gcra,
    ] {
        out.push(build(vec![Quota::new(s, Rate::per_hour(20))], false, true));
    }
    // long logs: a list, decided on (trimmed on the manual clock), given back to
    for (manual, reserve) in [(false, false), (true, false), (false, true)] {
        let mut long = build(
            vec![Quota::sliding_window_log(Rate::per_hour(40))],
            manual,
            reserve,
        );
        long.3 = 33;
        out.push(long);
    }
    out
}

/// How [`exercise`] failed.
#[derive(Debug)]
enum Failure {
    Store(StoreError),
    /// A local budget's unspent units were not given back (a give-back runs
    /// in the background and reports no error: only its effect shows).
    NotGivenBack(#[allow(dead_code)] String),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

/// Everything the limiters do: verify, decide until denied, peek, release,
/// give local budgets back, reset. The first failure, or what the reserving
/// limiters had left after their give-backs, which must be `expected` if
/// given (what they had left with every permission).
async fn exercise(limiters: &[Exercised], expected: Option<&[u64]>) -> Result<Vec<u64>, Failure> {
    let mut lefts = Vec::new();
    for (lim, reserved, clock, prefill) in limiters {
        lim.verify().await?;
        for key in ["user-1", "user-2"] {
            lim.penalize(key, *prefill).await?;
            for round in 0..2 {
                // leases held until the round ends: the later checks see them
                let mut leases = Vec::new();
                for _ in 0..3 {
                    leases.extend(lim.check(key).await?.into_lease());
                }
                for lease in &leases {
                    lim.release(lease).await?;
                }
                lim.peek(key).await?;
                // a window later: state that expired is trimmed, rewritten
                match clock {
                    Some(clock) if round == 0 => clock.advance(Duration::from_secs(7_200)),
                    _ => break,
                }
            }
        }
        lim.flush_local_budgets().await;
        if *reserved {
            let left = lim.peek("user-1").await?.remaining();
            if let Some(want) = expected.and_then(|e| e.get(lefts.len()))
                && left != *want
            {
                return Err(Failure::NotGivenBack(format!(
                    "{lim:?}: {left} left, {want} when given back"
                )));
            }
            lefts.push(left);
        }
        for key in ["user-1", "user-2"] {
            lim.reset(key).await?;
        }
    }
    Ok(lefts)
}

fn no_permission(e: &StoreError) -> bool {
    matches!(e, StoreError::Refused(r) if r.kind() == RefusalKind::NoPermission)
        && e.to_string().contains("NOPERM")
}

#[tokio::test]
async fn the_crate_works_under_the_guides_minimal_acl_and_needs_each_of_its_commands() {
    let server = RedisServer::start();
    let acl = guide_acl();
    set_user(&server, &acl).await;
    let store = limiter_store(&server);
    let lims = limiters(&store);
    let given_back = exercise(&lims, None).await.unwrap();
    // (what the local budgets had left when the give-backs ran, checked below)
    assert_eq!(given_back.len(), 5);
    // every key written was reset, none is left over
    assert_eq!(
        server.dbsize().await,
        0,
        "{:?}",
        server.keys_with_ttl().await
    );

    // every command of the ACL is needed: without it something fails, clearly
    for rule in acl.iter().filter(|r| r.starts_with('+')) {
        let without: Vec<String> = acl.iter().filter(|r| *r != rule).cloned().collect();
        set_user(&server, &without).await;
        if rule == "+ping" {
            // sent only before a call on a connection idle for a second
            tokio::time::sleep(Duration::from_millis(1_100)).await;
        }
        // fresh limiters: no local budget is left from the run before
        match exercise(&limiters(&store), Some(&given_back)).await {
            Err(Failure::Store(e)) => assert!(no_permission(&e), "without {rule}: {e:?}"),
            // commands only a give-back sends
            Err(Failure::NotGivenBack(_)) if ["+lrem", "+decrby"].contains(&rule.as_str()) => {}
            other => panic!("without {rule}: {other:?}"),
        }
        // what the failed run left
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut server.conn().await)
            .await
            .unwrap();
    }
    set_user(&server, &acl).await;
    exercise(&limiters(&store), Some(&given_back))
        .await
        .unwrap();
}

#[test]
fn the_guides_acl_allows_every_command_the_scripts_call() {
    let acl = guide_acl();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lua");
    let mut called = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "lua") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for part in text.split("call('").skip(1) {
            let command: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            called.insert(format!("+{}", command.to_ascii_lowercase()));
        }
    }
    assert!(called.contains("+time"), "{called:?}");
    let missing: Vec<_> = called.iter().filter(|c| !acl.contains(c)).collect();
    assert!(missing.is_empty(), "the guide's ACL lacks {missing:?}");
}

#[tokio::test]
async fn a_missing_permission_is_a_refused_store_error_naming_noperm() {
    let server = RedisServer::start();
    let store = limiter_store(&server);
    let lim = RateLimiter::builder()
        .store(store.clone())
        .prefix("api")
        .quota(Quota::gcra(Rate::per_minute(10)))
        .build()
        .unwrap();
    let acl = guide_acl();
    // without EVALSHA, without a command the script calls, outside the key pattern
    let other_prefix: Vec<String> = acl
        .iter()
        .map(|r| match r.as_str() {
            "~{api:*" => "~{other:*".to_owned(),
            r => r.to_owned(),
        })
        .collect();
    let without =
        |rule: &str| -> Vec<String> { acl.iter().filter(|r| *r != rule).cloned().collect() };
    for (what, rules) in [
        ("EVALSHA", without("+evalsha")),
        ("TIME", without("+time")),
        ("the key pattern", other_prefix),
    ] {
        set_user(&server, &rules).await;
        let e = lim.check("user-1").await.expect_err(what);
        assert!(no_permission(&e), "without {what}: {e:?}");
        let text = e.to_string();
        assert!(text.contains("guide::stores"), "{text}");
        let e = lim.verify().await.expect_err(what);
        assert!(no_permission(&e), "verify without {what}: {e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_on_a_refused_local_budget_take_gets_the_refusal() {
    let server = RedisServer::start();
    let store = limiter_store(&server);
    let lim = RateLimiter::builder()
        .store(store)
        .prefix("api")
        .quota(Quota::gcra(Rate::per_minute(1_000)))
        .local_budget(50)
        .build()
        .unwrap();
    let rules: Vec<String> = guide_acl()
        .into_iter()
        .filter(|r| r != "+evalsha")
        .collect();
    set_user(&server, &rules).await;
    // one task takes for the hot key, the others wait on its take
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let lim = lim.clone();
            tokio::spawn(async move { lim.check("hot").await })
        })
        .collect();
    for t in tasks {
        let e = t.await.unwrap().expect_err("EVALSHA is refused");
        assert!(no_permission(&e), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with("rate limit store refused: no ACL permission (NOPERM)"),
            "{text}"
        );
        let cause = std::error::Error::source(&e)
            .and_then(std::error::Error::source)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            cause.contains("NOPERM") || cause.contains("permission"),
            "{cause}"
        );
    }
}

#[tokio::test]
async fn verify_passes_on_a_plain_server_and_the_memory_store() {
    let server = RedisServer::start();
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .prefix("api")
        .quota(Quota::concurrency(3))
        .quota(Quota::sliding_window_log(Rate::per_minute(3)))
        .build()
        .unwrap();
    lim.verify().await.unwrap();
    let reserved = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .prefix("api")
        .quota(Quota::gcra(Rate::per_minute(30)))
        .local_budget(2)
        .build()
        .unwrap();
    reserved.verify().await.unwrap();
    // the probes leave nothing behind; every script was loaded (the decision
    // scripts, and the take and give-back of the local budgets)
    assert_eq!(server.dbsize().await, 0);
    assert!(server.command_calls("script|load").await >= 4);
    let memory = lim.with_store(MemoryStore::new());
    memory.verify().await.unwrap();
}

#[tokio::test]
async fn verify_names_what_the_server_refuses() {
    let server = RedisServer::start();
    let lim = |server: &RedisServer| {
        RateLimiter::builder()
            .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
            .prefix("api")
            .quota(Quota::gcra(Rate::per_minute(3)))
            .build()
            .unwrap()
    };
    let acl = guide_acl();
    for rule in ["+script|load", "+evalsha"] {
        let rules: Vec<String> = acl.iter().filter(|r| *r != rule).cloned().collect();
        set_user(&server, &rules).await;
        let user = RateLimiter::builder()
            .store(limiter_store(&server))
            .prefix("api")
            .quota(Quota::gcra(Rate::per_minute(3)))
            .build()
            .unwrap();
        let e = user.verify().await.expect_err(rule);
        assert!(no_permission(&e), "without {rule}: {e}");
    }

    // PING (idle connections' check), a command only local budgets'
    // take runs, PEXPIRE (a write would stay without a TTL) and the SET that
    // writes a sliding log with its TTL: each is found by verify(), which
    // leaves no key behind even then
    for (rule, strategy, reserve) in [
        ("+ping", Strategy::Gcra, false),
        ("+incrby", Strategy::FixedWindow, true),
        ("+set", Strategy::SlidingWindowLog, false),
        ("+pexpire", Strategy::FixedWindow, false),
    ] {
        let rules: Vec<String> = acl.iter().filter(|r| *r != rule).cloned().collect();
        set_user(&server, &rules).await;
        let mut builder = RateLimiter::builder()
            .store(limiter_store(&server))
            .prefix("api")
            .quota(Quota::new(strategy, Rate::per_minute(100)));
        if reserve {
            builder = builder.local_budget(10);
        }
        let e = builder.build().unwrap().verify().await.expect_err(rule);
        assert!(no_permission(&e), "without {rule} ({strategy}): {e}");
        let mut admin = server.conn().await;
        let left: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(
            left.is_empty(),
            "without {rule} ({strategy}): {left:?} left"
        );
    }
    set_user(&server, &acl).await;

    // commands renamed away in the server's config file: Lua unusable
    for command in ["EVALSHA", "SCRIPT"] {
        let dir = std::env::temp_dir().join(format!(
            "trr-renamed-{}-{command}-{}",
            std::process::id(),
            server.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("redis.conf");
        std::fs::write(&config, format!("rename-command {command} \"\"\n")).unwrap();
        let renamed = RedisServer::builder().config_file(&config).start();
        let e = lim(&renamed).verify().await.expect_err(command);
        assert!(
            matches!(&e, StoreError::Refused(r) if r.kind() == RefusalKind::UnknownCommand),
            "{command} renamed: {e:?}"
        );
        assert!(e.to_string().contains("unknown command"), "{e}");
        drop(renamed);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The ERROR lines logged about refusals (feature `tracing`).
#[cfg(feature = "tracing")]
fn refusal_errors(log: &common::logs::Capture) -> Vec<String> {
    log.lines_with("a misconfiguration, not an outage")
        .into_iter()
        .inspect(|l| assert!(l.contains("ERROR"), "{l}"))
        .collect()
}

// current_thread: the log capture below captures this thread's events.
#[tokio::test(flavor = "current_thread")]
async fn under_the_middleware_a_refusal_fails_closed_by_default_and_is_logged_at_error_and_counted()
{
    use common::http::{get_req, header, make_app, send};
    use http::StatusCode;
    use tower_redis_ratelimit::RateLimitLayer;
    use tower_redis_ratelimit::key::PeerIp;
    use tower_redis_ratelimit::middleware::FailurePolicy;

    #[cfg(feature = "tracing")]
    let log = common::logs::capture();
    let server = RedisServer::start();
    let acl = guide_acl();
    let rules: Vec<String> = acl.iter().filter(|r| *r != "+evalsha").cloned().collect();
    set_user(&server, &rules).await;
    let lim = RateLimiter::builder()
        .store(limiter_store(&server))
        .prefix("api")
        .quota(Quota::gcra(Rate::per_minute(2)))
        .build()
        .unwrap();

    // the default: 503, every time, one ERROR line for the three
    let layer = RateLimitLayer::new(lim.clone(), PeerIp);
    let app = make_app(layer.clone());
    for _ in 0..3 {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(header(&res, "retry-after"), Some("1"));
    }
    let stats = layer.stats();
    assert_eq!((stats.store_errors, stats.refused), (3, 3));
    #[cfg(feature = "tracing")]
    {
        let lines = refusal_errors(&log);
        assert_eq!(lines.len(), 1, "{}", log.text());
        assert!(lines[0].contains("NOPERM"), "{}", lines[0]);
        assert!(
            lines[0].contains("request refused with 503"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("on_refusal: FailurePolicy::Closed"),
            "{}",
            lines[0]
        );
        // not also a WARN of an outage
        assert!(log.lines_with("WARN").is_empty(), "{}", log.text());
    }

    // an outage policy does not decide refusals: Open for outages, still 503
    let app =
        make_app(RateLimitLayer::new(lim.clone(), PeerIp).on_store_error(FailurePolicy::Open));
    let res = send(&app, get_req("/")).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);

    // on_refusal(Open): through, without headers, and loud
    let layer = RateLimitLayer::new(lim.clone(), PeerIp).on_refusal(FailurePolicy::Open);
    let app = make_app(layer.clone());
    for _ in 0..3 {
        let res = send(&app, get_req("/")).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(header(&res, "ratelimit").is_none());
    }
    assert_eq!(layer.stats().refused, 3);
    #[cfg(feature = "tracing")]
    {
        let lines = refusal_errors(&log);
        assert_eq!(lines.len(), 3, "one per layer: {}", log.text());
        let last = &lines[2];
        assert!(last.contains("NOT rate limited"), "{last}");
        assert!(last.contains("on_refusal: FailurePolicy::Open"), "{last}");
    }

    // on_refusal(Fallback): decided in memory, the limit holds
    let app = make_app(
        RateLimitLayer::new(lim.clone(), PeerIp)
            .on_refusal(FailurePolicy::Fallback(MemoryStore::new())),
    );
    let statuses: Vec<StatusCode> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(send(&app, get_req("/")).await.status());
        }
        out
    };
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );

    // an outage is not a refusal: the store down, on_store_error's Open applies
    let down = RateLimiter::builder()
        .store(
            RedisStore::from_url("redis://127.0.0.1:1/")
                .unwrap()
                .timeout(GENEROUS),
        )
        .prefix("api")
        .quota(Quota::gcra(Rate::per_minute(2)))
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(down, PeerIp);
    let res = send(&make_app(layer.clone()), get_req("/")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!((layer.stats().store_errors, layer.stats().refused), (1, 0));
}

/// A `Plans` layer under a refused ACL: fails closed by default; a
/// fallback decides each request under its own plan's quotas.
#[tokio::test]
async fn plans_under_a_refused_acl_fail_closed_and_fall_back_per_plan() {
    use common::http::{get_req, make_app, send};
    use http::StatusCode;
    use tower_redis_ratelimit::RateLimitLayer;
    use tower_redis_ratelimit::key::PeerIp;
    use tower_redis_ratelimit::middleware::{FailurePolicy, PlanFromHeader};

    let server = RedisServer::start();
    let acl = guide_acl();
    // the documented line as it was: `~{api:*` its only key pattern
    let as_it_was: Vec<String> = acl
        .iter()
        .filter(|r| !r.starts_with('~') || *r == "~{api:*")
        .cloned()
        .collect();
    set_user(&server, &as_it_was).await;
    let plans = synced_plans(&limiter_store(&server));
    let header = http::HeaderName::from_static("x-plan");
    let req = |plan: &str| {
        let mut r = get_req("/");
        r.headers_mut().insert("x-plan", plan.parse().unwrap());
        r
    };
    let layer = RateLimitLayer::with_plans(plans.clone(), PeerIp, PlanFromHeader(header.clone()));
    let app = make_app(layer.clone());
    for plan in ["free", "pro"] {
        assert_eq!(
            send(&app, req(plan)).await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    assert_eq!(layer.stats().refused, 2);
    let app = make_app(
        RateLimitLayer::with_plans(plans, PeerIp, PlanFromHeader(header))
            .on_refusal(FailurePolicy::Fallback(MemoryStore::new())),
    );
    // free: 2 an hour, pro: 3
    for (plan, admitted) in [("free", 2), ("pro", 3)] {
        for i in 0..admitted {
            assert_eq!(
                send(&app, req(plan)).await.status(),
                StatusCode::OK,
                "{plan} #{i}"
            );
        }
        assert_eq!(
            send(&app, req(plan)).await.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{plan}"
        );
    }
}

/// A key of another type, a value a script fails on: refusals too (they
/// last until the key changes), each of its kind, never an outage.
#[tokio::test]
async fn a_key_of_another_type_or_a_value_the_script_fails_on_is_a_refusal() {
    let server = RedisServer::start();
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .prefix("api")
        .quota(Quota::gcra(Rate::per_minute(10)))
        .build()
        .unwrap();
    let key = lim.storage_keys("user-1").remove(0);
    let mut admin = server.conn().await;
    let () = redis::cmd("LPUSH")
        .arg(&key)
        .arg("x")
        .query_async(&mut admin)
        .await
        .unwrap();
    let e = lim.check("user-1").await.expect_err("a list");
    assert!(
        matches!(&e, StoreError::Refused(r) if r.kind() == RefusalKind::WrongType),
        "{e:?}"
    );
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    // a fixed window's count that is no number
    let lim = RateLimiter::builder()
        .store(RedisStore::new(server.pool(2)).timeout(GENEROUS))
        .prefix("api")
        .quota(Quota::fixed_window(Rate::per_minute(10)))
        .build()
        .unwrap();
    let () = redis::cmd("SET")
        .arg(lim.storage_keys("user-1").remove(0))
        .arg("not a number")
        .query_async(&mut admin)
        .await
        .unwrap();
    let e = lim.check("user-1").await.expect_err("not a number");
    assert!(
        matches!(&e, StoreError::Refused(r) if r.kind() == RefusalKind::ScriptError),
        "{e:?}"
    );
}

/// Plans of prefix `api` that sync their limits through the store, over `store`.
fn synced_plans(store: &RedisStore) -> Plans {
    Plans::builder()
        .store(store.clone())
        .prefix("api")
        .plan(
            "free",
            Plan::new([Quota::gcra(Rate::per_hour(2)).name("hour")]),
        )
        .plan(
            "pro",
            Plan::new([
                Quota::fixed_window(Rate::per_hour(3)).name("hour"),
                Quota::sliding_window_log(Rate::per_day(3)).name("day"),
            ]),
        )
        .plan("internal", Plan::unlimited())
        .default_plan("free")
        .sync_interval(Duration::from_secs(3_600))
        .build()
        .unwrap()
}

/// The case: the documented ACL line covered `{api:*` alone, so a
/// `Plans` of prefix `api` (keys `{api/free:…}`, the document `api:plans`)
/// was refused every call.
#[tokio::test]
async fn plans_with_sync_work_under_the_guides_acl_and_write_only_within_its_key_patterns() {
    let server = RedisServer::start();
    let acl = guide_acl();
    set_user(&server, &acl).await;
    let store = limiter_store(&server);
    let a = synced_plans(&store);
    let b = synced_plans(&store);
    for (plan, admitted) in [("free", 2), ("pro", 3)] {
        for i in 0..admitted {
            let d = a.check(plan, "user-1").await.unwrap().unwrap();
            assert!(d.allowed(), "{plan} #{i}");
        }
        let d = a.check(plan, "user-1").await.unwrap().unwrap();
        assert!(d.denied(), "{plan}");
    }
    assert!(a.check("internal", "user-1").await.unwrap().is_none());
    // a change published by one instance, read by the other
    let raised = a.config().plan(
        "free",
        Plan::new([Quota::gcra(Rate::per_hour(5)).name("hour")]),
    );
    a.handle().publish(raised.clone()).await.unwrap();
    assert!(b.handle().sync().await.unwrap());
    assert_eq!(b.config(), raised);
    let d = b.check("free", "user-2").await.unwrap().unwrap();
    assert!(d.allowed());
    assert_eq!(d.remaining(), 4);
    // plain limiters of the prefix beside them, one with a penalty box
    let blocking = RateLimiter::builder()
        .store(store.clone())
        .prefix("api")
        .quota(Quota::gcra(Rate::per_hour(1)))
        .block_for(Duration::from_secs(60))
        .build()
        .unwrap();
    assert!(blocking.check("user-1").await.unwrap().allowed());
    assert!(blocking.check("user-1").await.unwrap().denied());
    assert!(
        blocking
            .storage_keys("user-1")
            .iter()
            .any(|k| k.ends_with(":!"))
    );
    // a limiter with runtime limits of the same prefix: its published limits
    // are a document of their own, and leave the plans' alone
    let runtime = RateLimiter::builder()
        .store(store.clone())
        .prefix("api")
        .quota(Quota::gcra(Rate::per_hour(3)))
        .sync_interval(Duration::from_secs(3_600))
        .build()
        .unwrap();
    assert!(runtime.check("user-3").await.unwrap().allowed());
    runtime
        .limits()
        .unwrap()
        .publish_quotas([Quota::gcra(Rate::per_minute(100_000))])
        .await
        .unwrap();
    assert!(!b.handle().sync().await.unwrap(), "the plans are unchanged");
    assert_eq!(b.config(), raised);
    assert_keys_within(&server, &acl).await;
    // the block key was written: the limiter's keys, the plans' and the document
    let mut admin = server.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut admin)
        .await
        .unwrap();
    for want in ["{api:user-1}:!", "api:plans", "api:limits"] {
        assert!(keys.iter().any(|k| k == want), "{want} not in {keys:?}");
    }
    for want in ["{api/free:user-1}", "{api/pro:user-1}"] {
        assert!(
            keys.iter().any(|k| k.starts_with(want)),
            "{want} not in {keys:?}"
        );
    }
}

#[test]
fn the_key_pattern_matcher_of_these_tests_matches_as_redis_does() {
    assert!(glob("{api:*", "{api:user}:g1m/hour"));
    assert!(!glob("{api:*", "{api/free:user}:g1m/hour"));
    assert!(glob("{api/*", "{api/free:user}:g1m/hour"));
    assert!(glob("api:plans", "api:plans"));
    assert!(!glob("api:plans", "api:plans2"));
    assert!(glob("a*b*c", "a-b-b-c"));
    assert!(!glob("a*b*c", "a-c-b"));
}

/// `Plans::verify` covers every plan and the shared limits: it passes under
/// the guide's line, leaves what it found, and names a refusal of each of
/// the line's key patterns (the line as it was, `~{api:*` alone, included).
#[tokio::test]
async fn plans_verify_checks_every_plan_and_the_shared_limits() {
    let server = RedisServer::start();
    let acl = guide_acl();
    set_user(&server, &acl).await;
    let store = limiter_store(&server);
    let plans = synced_plans(&store);
    plans.verify().await.unwrap();
    assert_eq!(
        server.dbsize().await,
        0,
        "{:?}",
        server.keys_with_ttl().await
    );
    // a document there is left as it was
    let config = plans.config();
    plans.handle().publish(config.clone()).await.unwrap();
    let get = |server: &RedisServer| {
        let server = server.port();
        async move {
            let client = redis::Client::open(format!("redis://127.0.0.1:{server}/")).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            redis::cmd("GET")
                .arg("api:plans")
                .query_async::<Option<String>>(&mut conn)
                .await
                .unwrap()
        }
    };
    let before = get(&server).await;
    assert_eq!(before.as_deref(), Some(config.to_string().as_str()));
    plans.verify().await.unwrap();
    assert_eq!(get(&server).await, before);
    assert_eq!(server.dbsize().await, 1);

    // the documented line as it was (`~{api:*` its only key pattern), and
    // without each pattern plans use
    let without =
        |rule: &str| -> Vec<String> { acl.iter().filter(|r| *r != rule).cloned().collect() };
    let as_it_was: Vec<String> = acl
        .iter()
        .filter(|r| !r.starts_with('~') || *r == "~{api:*")
        .cloned()
        .collect();
    set_user(&server, &as_it_was).await;
    let e = synced_plans(&store).verify().await.expect_err("as it was");
    assert!(no_permission(&e), "the line as it was: {e:?}");
    for rule in ["~{api/*", "~api:plans"] {
        set_user(&server, &without(rule)).await;
        let e = synced_plans(&store).verify().await.expect_err(rule);
        assert!(no_permission(&e), "without {rule}: {e:?}");
    }
    // a limiter with runtime limits and sync checks its own document
    let runtime = || {
        RateLimiter::builder()
            .store(store.clone())
            .prefix("api")
            .quota(Quota::gcra(Rate::per_hour(3)))
            .sync_interval(Duration::from_secs(3_600))
            .build()
            .unwrap()
    };
    set_user(&server, &acl).await;
    runtime().verify().await.unwrap();
    set_user(&server, &without("~api:limits")).await;
    let e = runtime().verify().await.expect_err("~api:limits");
    assert!(no_permission(&e), "without ~api:limits: {e:?}");
    // plans that carry state over between plans keep it under `{api:`
    set_user(&server, &without("~{api:*")).await;
    synced_plans(&store).verify().await.unwrap();
    let carry_over = Plans::builder()
        .store(store.clone())
        .prefix("api")
        .carry_over(true)
        .plan("free", Plan::new([Quota::gcra(Rate::per_hour(2))]))
        .build()
        .unwrap();
    let e = carry_over.verify().await.expect_err("carry over");
    assert!(no_permission(&e), "carry over without ~{{api:*: {e:?}");
    // ...and only what the check reads and writes
    for rule in ["+get", "+set", "+del"] {
        set_user(&server, &without(rule)).await;
        let e = synced_plans(&store).verify().await.expect_err(rule);
        assert!(no_permission(&e), "without {rule}: {e:?}");
    }
    assert_eq!(get(&server).await, before, "a failed check changed nothing");
    // plans that do not share their limits need no document
    set_user(&server, &without("~api:plans")).await;
    let unsynced = Plans::builder()
        .store(store.clone())
        .prefix("api")
        .plan("free", Plan::new([Quota::gcra(Rate::per_hour(2))]))
        .build()
        .unwrap();
    unsynced.verify().await.unwrap();
    // a memory store always passes
    Plans::builder()
        .store(MemoryStore::new())
        .prefix("api")
        .plan("free", Plan::new([Quota::gcra(Rate::per_hour(2))]))
        .sync_interval(Duration::from_secs(1))
        .build()
        .unwrap()
        .verify()
        .await
        .unwrap();
}

/// Under an ACL without `+time` (how ElastiCache Serverless and Dragonfly
/// break Redis's clock, reproduced): `verify` on Redis's clock names the fix,
/// `Clock::Caller`, and with it every strategy, leases and local budgets
/// verify and decide as usual. A limiter of fixed windows alone never reads
/// `TIME` on Redis's clock, so it needs no fix, unless they are aligned.
#[tokio::test]
async fn without_time_in_scripts_verify_names_the_callers_clock_which_decides_every_strategy() {
    use tower_redis_ratelimit::clock::Clock;

    let server = RedisServer::start();
    let rules: Vec<String> = guide_acl().into_iter().filter(|r| r != "+time").collect();
    set_user(&server, &rules).await;
    let store = limiter_store(&server);
    let quota = |s: Strategy| match s {
        Strategy::Concurrency => Quota::concurrency(2),
        s => Quota::new(s, Rate::per_hour(2)),
    };
    let build = |quotas: Vec<Quota>, clock: Clock, reserve: bool| {
        let mut b = RateLimiter::builder()
            .store(store.clone())
            .prefix("api")
            .quotas(quotas)
            .clock(clock);
        if reserve {
            b = b.local_budget(2);
        }
        b.build().unwrap()
    };

    for s in Strategy::ALL
        .into_iter()
        .filter(|s| *s != Strategy::FixedWindow)
    {
        let e = build(vec![quota(s)], Clock::Store, false)
            .verify()
            .await
            .expect_err("TIME is refused");
        assert!(no_permission(&e), "{s}: {e:?}");
        let text = e.to_string();
        assert!(
            text.contains("TIME") && text.contains(".clock(Clock::Caller)"),
            "{s}: {text}"
        );
    }
    let e = build(vec![quota(Strategy::FixedWindow)], Clock::Store, true)
        .verify()
        .await
        .expect_err("a local budget's take reads TIME");
    assert!(e.to_string().contains("Clock::Caller"), "{e}");
    let fixed = build(vec![quota(Strategy::FixedWindow)], Clock::Store, false);
    fixed.verify().await.unwrap();
    assert!(fixed.check("fixed").await.unwrap().allowed());
    // a fixed window aligned to the epoch reads TIME: the fix, and with it
    // it verifies and decides
    let aligned = || vec![quota(Strategy::FixedWindow).aligned()];
    let e = build(aligned(), Clock::Store, false)
        .verify()
        .await
        .expect_err("an aligned window reads TIME");
    assert!(e.to_string().contains("Clock::Caller"), "{e}");
    let caller = build(aligned(), Clock::Caller, false);
    caller.verify().await.unwrap();
    assert!(caller.check("aligned").await.unwrap().allowed());

    let mut limiters: Vec<(String, RateLimiter)> = Strategy::ALL
        .into_iter()
        .map(|s| (s.to_string(), build(vec![quota(s)], Clock::Caller, false)))
        .collect();
    limiters.push((
        "all".into(),
        build(Strategy::ALL.map(quota).to_vec(), Clock::Caller, false),
    ));
    for s in [
        Strategy::Gcra,
        Strategy::SlidingWindowLog,
        Strategy::FixedWindow,
    ] {
        limiters.push((
            format!("{s} reserved"),
            build(vec![quota(s)], Clock::Caller, true),
        ));
    }
    for (i, (what, lim)) in limiters.iter().enumerate() {
        lim.verify().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        let key = format!("user-{i}");
        let mut leases = Vec::new();
        for n in 0..2 {
            let d = lim
                .check(&key)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(d.allowed(), "{what}: request {n}: {d:?}");
            leases.extend(d.lease().cloned());
        }
        let d = lim.check(&key).await.unwrap();
        assert!(!d.allowed(), "{what}: past the limit: {d:?}");
        for lease in &leases {
            lim.release(lease).await.unwrap();
        }
        lim.reset(&key).await.unwrap();
    }
    assert_keys_within(&server, &rules).await;
}

/// On a cluster, `verify` on Redis's clock runs its `TIME` probe (a script
/// with no key, on whichever node the client picks) and passes, again after
/// every node's script cache was flushed; so does the caller's clock.
#[cfg(feature = "cluster")]
#[tokio::test]
async fn verify_checks_the_script_clock_on_a_cluster() {
    use tower_redis_ratelimit::RedisClusterStore;
    use tower_redis_ratelimit::clock::Clock;

    let cluster = common::RedisCluster::start(3, 0);
    let lim = |clock: Clock| {
        let pool = deadpool_redis::cluster::Config::from_urls(cluster.urls())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap();
        RateLimiter::builder()
            .store(RedisClusterStore::new(pool).timeout(GENEROUS))
            .prefix("api")
            .quota(Quota::gcra(Rate::per_minute(3)))
            .clock(clock)
            .build()
            .unwrap()
    };
    let (store_clock, caller_clock) = (lim(Clock::Store), lim(Clock::Caller));
    for round in 0..2 {
        store_clock
            .verify()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        caller_clock
            .verify()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(caller_clock.check("k").await.unwrap().allowed());
        for node in cluster.nodes() {
            let mut conn = node.conn().await;
            let () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    }
}
