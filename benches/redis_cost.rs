//! What one decision costs Redis, per strategy, next to a baseline in the same
//! run (compare the ratios: the machine may be shared and noisy).
//!
//! ```sh
//! cargo bench -p tower-redis-ratelimit-tests --bench redis_cost                        # both modes, every strategy
//! cargo bench -p tower-redis-ratelimit-tests --bench redis_cost -- cpu --rounds 5      # Redis CPU per decision
//! cargo bench -p tower-redis-ratelimit-tests --bench redis_cost -- keys --keys 50000   # Redis bytes per key
//! cargo bench -p tower-redis-ratelimit-tests --bench redis_cost -- keys --sweep        # and over user keys of 8 to 64 bytes
//! ```
//!
//! - `cpu`: per strategy, `CONFIG RESETSTAT`, then `--decisions` checks
//!   (default 100 000) over `--keys` user keys (default 10 000) from 256 tasks
//!   through a `RateLimiter` on `RedisStore`, with batching (the default)
//!   and with `batching(false)`, then the `usec` of `EVALSHA` from `INFO
//!   commandstats` over the decisions made: the Redis time one decision
//!   takes, script and commands included (one call may carry several
//!   decisions). Baseline: the same mix through a minimal
//!   fixed-window script (`INCRBY`, `PEXPIRE` on the first hit; no reset time
//!   returned). Limits are high, 10^6 per hour: nothing is denied (the sliding log's is
//!   its largest count, 10 000 per hour; a key sees `decisions / keys` requests). The lowest of `--rounds`
//!   rounds (default 3) is kept per strategy.
//! - `keys`: per strategy, one check on each of `--keys` user keys (default
//!   20 000; 24-byte ids `k_<22 digits>`, prefix `api`), then the growth of
//!   `used_memory` per key, against the floor: a plain `SET` of a key as long
//!   as the limiter's hash-tagged base key (`{api:k_<22 digits>}`), with an
//!   integer value and a TTL. For the sliding log and concurrency (one entry
//!   per request or lease), also the bytes each further entry adds (ten
//!   requests per key). With `--sweep`, also the ratios over user keys of
//!   8 to 64 bytes (10 000 keys each unless `--keys`) and their mean: Redis
//!   allocates a key in jemalloc's size classes, so a quota's few bytes of
//!   suffix cost 0 or 16 bytes by where the key's length falls.
//!
//! A private `redis-server` is started on a free loopback port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
#[allow(unreachable_pub)]
mod common;

use std::time::Duration;

use common::{RedisServer, info_field};
use redis::aio::MultiplexedConnection;
use tower_redis_ratelimit::strategy::Strategy;
use tower_redis_ratelimit::{Quota, Rate, RateLimiter, RedisStore};

/// The CPU baseline: a fixed window as one would write it by hand.
const BASELINE_SCRIPT: &str = r"
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return n
";

const TASKS: usize = 256;

/// The name of a strategy's row with `batching(false)`.
const OFF: &str = ", batching(false)";

struct Args {
    cpu: bool,
    keys_mode: bool,
    rounds: usize,
    decisions: usize,
    keys: Option<usize>,
    sweep: bool,
}

const USAGE: &str = "usage: cargo bench -p tower-redis-ratelimit-tests --bench redis_cost -- [cpu|keys] [--rounds R] \
    [--decisions N] [--keys K] [--sweep]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        cpu: false,
        keys_mode: false,
        rounds: 3,
        decisions: 100_000,
        keys: None,
        sweep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut number = || -> Result<usize, String> {
            let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            v.parse::<usize>().map_err(|e| format!("{v}: {e}"))
        };
        match flag.as_str() {
            "--bench" => {}
            "cpu" => a.cpu = true,
            "keys" => a.keys_mode = true,
            "--rounds" => a.rounds = number()?.max(1),
            "--decisions" => a.decisions = number()?.max(1),
            "--keys" => a.keys = Some(number()?.max(1)),
            "--sweep" => a.sweep = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if !a.cpu && !a.keys_mode {
        (a.cpu, a.keys_mode) = (true, true);
    }
    Ok(a)
}

/// The strategies measured, at a rate never reached.
fn quota(s: Strategy, count: u64) -> Quota {
    match s {
        Strategy::Concurrency => Quota::concurrency(count),
        s => Quota::new(s, Rate::per_hour(count)),
    }
}

fn limiter(server: &RedisServer, prefix: &str, q: Quota, batching: bool) -> RateLimiter {
    RateLimiter::builder()
        .store(
            RedisStore::new(server.pool(4))
                .timeout(Duration::from_secs(30))
                .batching(batching),
        )
        .prefix(prefix)
        .quota(q)
        .build()
        .unwrap()
}

async fn cmd<T: redis::FromRedisValue>(c: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await.unwrap()
}

/// `used_memory`, once Redis has finished rehashing its tables (incremental
/// rehashing holds two tables for a while after a growth).
async fn used_memory(c: &mut MultiplexedConnection) -> i64 {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let info: String = cmd(c, &["INFO", "memory"]).await;
    info_field(&info, "used_memory")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `EVALSHA`'s calls and total µs from `INFO commandstats`.
async fn evalsha_stats(c: &mut MultiplexedConnection) -> (f64, f64) {
    let info: String = cmd(c, &["INFO", "commandstats"]).await;
    let line = info_field(&info, "cmdstat_evalsha").unwrap_or_default();
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    (field("calls="), field("usec="))
}

/// Runs `decide(i)` for i in 0..n from TASKS tasks.
async fn drive<F, Fut>(n: usize, decide: F)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let decide = decide.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            while i < n {
                decide(i).await;
                i += TASKS;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

async fn cpu(server: &RedisServer, a: &Args) {
    let keys = a.keys.unwrap_or(10_000);
    let mut c = server.conn().await;
    let script = redis::Script::new(BASELINE_SCRIPT);
    println!(
        "Redis CPU per decision (EVALSHA usec over the decisions made, lowest of {} rounds; \
         {} decisions over {keys} keys from {TASKS} tasks)",
        a.rounds, a.decisions
    );
    let mut names: Vec<String> = vec!["baseline".into()];
    for s in Strategy::ALL
        .iter()
        .filter(|s| **s != Strategy::Concurrency)
    {
        names.push(s.to_string());
        names.push(format!("{s}{OFF}"));
    }
    let mut best = vec![f64::INFINITY; names.len()];
    for round in 0..a.rounds {
        for (i, name) in names.iter().enumerate() {
            let _: () = cmd(&mut c, &["FLUSHALL"]).await;
            let key = move |i: usize| format!("k{}", (i * 7919) % keys);
            if i == 0 {
                let conn = server.conn().await;
                let _: String = script
                    .prepare_invoke()
                    .load_async(&mut c.clone())
                    .await
                    .unwrap();
                let _: () = cmd(&mut c, &["CONFIG", "RESETSTAT"]).await;
                let script = script.clone();
                drive(a.decisions, move |i| {
                    let (mut conn, script) = (conn.clone(), script.clone());
                    async move {
                        let _: i64 = script
                            .key(format!("{{cpu:{}}}", key(i)))
                            .arg(1)
                            .arg(3_600_000)
                            .invoke_async(&mut conn)
                            .await
                            .unwrap();
                    }
                })
                .await;
            } else {
                let (s, batching) = match name.strip_suffix(OFF) {
                    Some(s) => (s.parse::<Strategy>().unwrap(), false),
                    None => (name.parse::<Strategy>().unwrap(), true),
                };
                // the log keeps an entry per request: its largest count
                let count = match s {
                    Strategy::SlidingWindowLog => Quota::MAX_SORTED_SET_LIMIT,
                    _ => 1_000_000,
                };
                let lim = limiter(server, "cpu", quota(s, count), batching);
                lim.check("warm-up").await.unwrap();
                let _: () = cmd(&mut c, &["CONFIG", "RESETSTAT"]).await;
                drive(a.decisions, move |i| {
                    let lim = lim.clone();
                    async move {
                        assert!(lim.check(key(i)).await.unwrap().allowed());
                    }
                })
                .await;
            }
            let (calls, usec) = evalsha_stats(&mut c).await;
            let us = usec / a.decisions as f64;
            best[i] = best[i].min(us);
            println!(
                "  round {}: {name:<40} {us:>6.2} µs  ({:.1} decisions per call)",
                round + 1,
                a.decisions as f64 / calls
            );
        }
    }
    println!("lowest per strategy, over the baseline, and batching over batching(false):");
    for (i, (name, us)) in names.iter().zip(&best).enumerate() {
        let batched = if name.ends_with(OFF) || i == 0 {
            String::new()
        } else {
            format!("  batching {:.2}× of batching(false)", us / best[i + 1])
        };
        println!("  {name:<40} {us:>6.2} µs  {:>5.2}×{batched}", us / best[0]);
    }
}

/// Redis bytes per key of each strategy, and the floor in the same run,
/// for `n` user keys of `id_len` bytes (`k_` and digits).
struct KeyBytes {
    floor: f64,
    /// (strategy, bytes per key, its first storage key, bytes per further
    /// entry for the sliding log and concurrency)
    rows: Vec<(Strategy, f64, String, Option<f64>)>,
}

async fn key_bytes(server: &RedisServer, n: usize, id_len: usize) -> KeyBytes {
    let mut c = server.conn().await;
    let digits = id_len.saturating_sub(2).max(1);
    let user = move |i: usize| format!("k_{i:0digits$}");
    let _: () = cmd(&mut c, &["FLUSHALL"]).await;
    let before = used_memory(&mut c).await;
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("SET")
            .arg(format!("{{api:{}}}", user(i)))
            .arg(1_732_312_345_678_901u64)
            .arg("PX")
            .arg(3_600_000)
            .ignore();
    }
    let () = pipe.query_async(&mut c).await.unwrap();
    let floor = (used_memory(&mut c).await - before) as f64 / n as f64;
    let mut rows = Vec::new();
    for s in Strategy::ALL {
        let lim = limiter(server, "api", quota(s, 1000), true);
        let _: () = cmd(&mut c, &["FLUSHALL"]).await;
        let before = used_memory(&mut c).await;
        let l = lim.clone();
        drive(n, move |i| {
            let l = l.clone();
            async move {
                assert!(l.check(user(i)).await.unwrap().allowed());
            }
        })
        .await;
        let one = used_memory(&mut c).await;
        let keys: i64 = cmd(&mut c, &["DBSIZE"]).await;
        assert_eq!(keys as usize, n);
        let per_key = (one - before) as f64 / n as f64;
        let mut further = None;
        if matches!(s, Strategy::SlidingWindowLog | Strategy::Concurrency) {
            let l = lim.clone();
            drive(n * 9, move |i| {
                let l = l.clone();
                async move {
                    assert!(l.check(user(i % n)).await.unwrap().allowed());
                }
            })
            .await;
            let ten = used_memory(&mut c).await;
            further = Some((ten - one) as f64 / (n * 9) as f64);
        }
        rows.push((s, per_key, lim.storage_keys(user(0))[0].clone(), further));
    }
    KeyBytes { floor, rows }
}

async fn keys(server: &RedisServer, a: &Args) {
    let n = a.keys.unwrap_or(20_000);
    println!("Redis bytes per key ({n} keys, prefix api, 24-byte user keys)");
    let b = key_bytes(server, n, 24).await;
    println!(
        "  {:<24} {:>6.0} B  (SET {{api:k_<22 digits>}} <integer> PX)",
        "floor", b.floor
    );
    for (s, per_key, key, further) in &b.rows {
        print!(
            "  {:<24} {per_key:>6.0} B  {:>5.2}×  {key}",
            s.to_string(),
            per_key / b.floor
        );
        if let Some(f) = further {
            print!("; each further entry: {f:.1} B");
        }
        println!();
    }
    if a.sweep {
        sweep(server, a).await;
    }
}

/// The bytes per key over user keys of 8 to 64 bytes: Redis allocates a key
/// in jemalloc's size classes (16 bytes apart here), and a key of under 32
/// bytes in a smaller header, so the few bytes of a quota's suffix cost 0 or
/// 16 bytes by where a key's length falls; the mean over lengths is what a
/// deployment of varied keys pays.
async fn sweep(server: &RedisServer, a: &Args) {
    let n = a.keys.unwrap_or(10_000);
    let lens: Vec<usize> = (8..=64).step_by(4).collect();
    println!("Over user keys of 8 to 64 bytes ({n} keys each): ours over the floor");
    print!("  {:<24}", "user key bytes");
    for l in &lens {
        print!(" {l:>5}");
    }
    println!("   mean");
    let mut all = Vec::new();
    for &l in &lens {
        all.push(key_bytes(server, n, l).await);
    }
    for (i, s) in Strategy::ALL.iter().enumerate() {
        print!("  {:<24}", s.to_string());
        let ratios: Vec<f64> = all.iter().map(|b| b.rows[i].1 / b.floor).collect();
        for r in &ratios {
            print!(" {r:>5.2}");
        }
        println!(
            "  {:>5.3}",
            ratios.iter().sum::<f64>() / ratios.len() as f64
        );
    }
    print!("  {:<24}", "floor, B");
    for b in &all {
        print!(" {:>5.0}", b.floor);
    }
    println!();
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if a.keys_mode {
            keys(&server, &a).await;
        }
        if a.cpu {
            cpu(&server, &a).await;
        }
    });
}
