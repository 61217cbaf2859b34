//! HTTP throughput of the middleware next to its baselines, with `wrk`, in one run:
//!
//! 1. `bare`: an axum "hello" route;
//! 2. `handwritten`: the same route whose handler runs one `EVALSHA` on a
//!    shared multiplexed Redis connection, written by hand: a minimal fixed
//!    window (`INCRBY`, `PEXPIRE` on the first hit; default) or a GCRA script
//!    with `--strategy gcra`;
//! 3. `layer`: the same route behind `RateLimitLayer` (RedisStore, one quota
//!    of the same strategy, `key::PeerIp`, IETF headers).
//!
//! Then a flood: one client already denied keeps sending, and the Redis
//! commands per denied request are read from `INFO commandstats`.
//!
//! The server (this process) and Redis run on core 0 and wrk on core 1 with
//! `taskset`, where there are two cores (`--pin SERVER,WRK`, `--no-pin`).
//!
//! ```sh
//! cargo bench -p tower-redis-ratelimit-tests --bench http --features axum                       # wrk -t1 -c64 -d5s, 1 round
//! cargo bench -p tower-redis-ratelimit-tests --bench http --features axum -- --rounds 3 --duration 10
//! cargo bench -p tower-redis-ratelimit-tests --bench http --features axum -- --strategy gcra
//! ```
//!
//! It starts its own `redis-server` on a free loopback port (never 6379)
//! and needs `wrk` and `redis-server` on the PATH (`apt-get install -y wrk
//! redis-server`). The limits are set so that nothing is denied in the
//! throughput runs: every request costs the store its full work.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
#[allow(unreachable_pub)]
mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::oneshot;
use tower_redis_ratelimit::middleware::HeaderStyle;
use tower_redis_ratelimit::{Quota, Rate, RateLimitLayer, RateLimiter, RedisStore, key};

/// A fixed window as one would write it by hand: INCRBY, PEXPIRE on the first hit.
const HANDWRITTEN_FIXED: &str = r"
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
if n == tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if n > tonumber(ARGV[1]) then redis.call('DECRBY', KEYS[1], ARGV[2]) return {0, n} end
return {1, n}
";

/// Which strategy `handwritten` and `layer` use (`--strategy`).
static STRATEGY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn fixed_window() -> bool {
    STRATEGY.get().is_none_or(|s| s == "fixed-window")
}

/// One quota of the benchmarked strategy, never exhausted.
fn huge_quota() -> Quota {
    if fixed_window() {
        Quota::fixed_window(Rate::per_minute(HUGE)).name("minute")
    } else {
        Quota::gcra(Rate::per_second(HUGE)).name("second")
    }
}

/// A GCRA in integer microseconds on Redis's clock, as one would write it by hand.
const HANDWRITTEN_GCRA: &str = r"
local burst = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
if new_tat - burst * interval > now then
  return {0, 0}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000))
return {1, math.floor((now - (new_tat - burst * interval)) / interval)}
";

/// Nothing is ever denied at this rate: 10^9 per second.
const HUGE: u64 = 1_000_000_000;

struct Args {
    duration: u64,
    connections: u32,
    threads: u32,
    rounds: usize,
    modes: Vec<String>,
    flood: bool,
    strategy: String,
    /// The cores of the server (and Redis) and of wrk (`--pin`), if pinned.
    pin: Option<(usize, usize)>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        duration: 5,
        connections: 64,
        threads: 1,
        rounds: 1,
        modes: vec!["bare".into(), "handwritten".into(), "layer".into()],
        flood: true,
        strategy: "fixed-window".into(),
        pin: default_pin(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            // cargo bench passes --bench to harness = false targets
            "--bench" => {}
            "--duration" => args.duration = value()?.parse().map_err(|e| format!("{e}"))?,
            "--connections" => args.connections = value()?.parse().map_err(|e| format!("{e}"))?,
            "--threads" => args.threads = value()?.parse().map_err(|e| format!("{e}"))?,
            "--rounds" => args.rounds = value()?.parse().map_err(|e| format!("{e}"))?,
            "--modes" => args.modes = value()?.split(',').map(str::to_owned).collect(),
            "--no-flood" => args.flood = false,
            "--no-pin" => args.pin = None,
            "--pin" => {
                let v = value()?;
                let (server, load) = v
                    .split_once(',')
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                    .ok_or(format!("--pin SERVER_CPU,WRK_CPU, not {v}"))?;
                args.pin = Some((server, load));
            }
            "--strategy" => match value()?.as_str() {
                s @ ("fixed-window" | "gcra") => args.strategy = s.to_owned(),
                other => return Err(format!("--strategy: fixed-window or gcra, not {other}")),
            },
            "--help" | "-h" => {
                return Err(
                    "usage: cargo bench -p tower-redis-ratelimit-tests --bench http --features axum -- [--duration SECS] [--connections N] [--threads N] \
                     [--rounds N] [--modes bare,handwritten,layer] [--strategy fixed-window|gcra] [--no-flood] \
                     [--pin SERVER_CPU,WRK_CPU | --no-pin]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// The benchmark's private redis-server (the test fixture) and its statistics.
struct Redis {
    server: common::RedisServer,
}

impl Redis {
    fn start() -> Self {
        Redis {
            server: common::RedisServer::start(),
        }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> Result<T, String> {
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        let mut conn = client.get_connection().map_err(|e| e.to_string())?;
        cmd.query(&mut conn).map_err(|e| e.to_string())
    }

    /// Redis's CPU time so far (user + system), in seconds.
    fn cpu(&self) -> Result<f64, String> {
        let info: String = self.query(redis::cmd("INFO").arg("cpu"))?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok(field("used_cpu_user:") + field("used_cpu_sys:"))
    }

    /// Redis CPU per EVALSHA (µs) since the last reset.
    fn evalsha_usec(&self) -> Result<f64, String> {
        let info: String = self.query(redis::cmd("INFO").arg("commandstats"))?;
        Ok(info
            .lines()
            .find_map(|l| l.trim().strip_prefix("cmdstat_evalsha:"))
            .and_then(|s| {
                s.split(',')
                    .find_map(|kv| kv.strip_prefix("usec_per_call="))
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0))
    }

    /// Calls of every command since the last reset, INFO/CONFIG excluded
    /// (commands run inside scripts count too), and of EVALSHA alone.
    fn commands(&self) -> Result<(u64, u64), String> {
        let info: String = self.query(redis::cmd("INFO").arg("commandstats"))?;
        let (mut all, mut evalsha) = (0, 0);
        for line in info.lines() {
            let Some((name, stats)) = line
                .trim()
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let calls: u64 = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            if name.starts_with("info") || name.starts_with("config") {
                continue;
            }
            all += calls;
            if name == "evalsha" {
                evalsha += calls;
            }
        }
        Ok((all, evalsha))
    }
}

#[derive(Clone)]
struct Handwritten {
    conn: redis::aio::MultiplexedConnection,
    script: redis::Script,
    fixed: bool,
}

async fn handwritten(
    State(st): State<Handwritten>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let mut conn = st.conn.clone();
    let mut invocation = st.script.key(format!("hw:{}", peer.ip()));
    invocation.arg(HUGE).arg(1);
    if st.fixed {
        invocation.arg(60_000);
    }
    let reply: redis::RedisResult<(i64, i64)> = invocation.invoke_async(&mut conn).await;
    match reply {
        Ok((1, _)) => "hello".into_response(),
        Ok(_) => StatusCode::TOO_MANY_REQUESTS.into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn app(mode: &str, redis_url: &str) -> Result<Router, Box<dyn std::error::Error>> {
    let hello = || get(|| async { "hello" });
    let limiter = |quota: Quota| -> Result<RateLimiter, Box<dyn std::error::Error>> {
        let pool = deadpool_redis::Config::from_url(redis_url)
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
        Ok(RateLimiter::builder()
            .store(RedisStore::new(pool))
            .prefix(mode)
            .quota(quota)
            .build()?)
    };
    Ok(match mode {
        "bare" => Router::new().route("/", hello()),
        "handwritten" => {
            let client = redis::Client::open(redis_url)?;
            let conn = client.get_multiplexed_async_connection().await?;
            let fixed = fixed_window();
            let script = redis::Script::new(if fixed {
                HANDWRITTEN_FIXED
            } else {
                HANDWRITTEN_GCRA
            });
            let mut c = conn.clone();
            script.prepare_invoke().load_async(&mut c).await?;
            Router::new()
                .route("/", get(handwritten))
                .with_state(Handwritten {
                    conn,
                    script,
                    fixed,
                })
        }
        "limiter" => {
            // Diagnosis: the limiter called by hand in the handler, no layer.
            let limiter = limiter(huge_quota())?;
            Router::new()
                .route(
                    "/",
                    get(
                        |State(l): State<RateLimiter>,
                         ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                            match l.check(format!("ip:{}", peer.ip())).await {
                                Ok(d) if d.allowed() => "hello".into_response(),
                                Ok(_) => StatusCode::TOO_MANY_REQUESTS.into_response(),
                                Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                            }
                        },
                    ),
                )
                .with_state(limiter)
        }
        "layer" => {
            let layer =
                RateLimitLayer::new(limiter(huge_quota())?, key::PeerIp).headers(HeaderStyle::Ietf);
            Router::new().route("/", hello()).layer(layer)
        }
        "flood" => {
            // Every wrk connection comes from 127.0.0.1: one client, denied
            // after its first 10 requests of the minute.
            let quota = Quota::gcra(Rate::per_minute(10)).name("minute");
            let layer =
                RateLimitLayer::new(limiter(quota)?, key::PeerIp).headers(HeaderStyle::Ietf);
            Router::new().route("/", hello()).layer(layer)
        }
        other => return Err(format!("unknown mode {other}").into()),
    })
}

/// Serves `mode` on its own runtime until `stop` fires.
fn serve(
    mode: &str,
    redis_url: &str,
) -> Result<(SocketAddr, oneshot::Sender<()>, std::thread::JoinHandle<()>), String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (mode, url) = (mode.to_owned(), redis_url.to_owned());
    let handle = std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = ready_tx.send(Err(e.to_string()));
                return;
            }
        };
        rt.block_on(async move {
            let started = async {
                let app = app(&mode, &url).await.map_err(|e| e.to_string())?;
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .map_err(|e| e.to_string())?;
                let addr = listener.local_addr().map_err(|e| e.to_string())?;
                Ok::<_, String>((app, listener, addr))
            };
            match started.await {
                Ok((app, listener, addr)) => {
                    let _ = ready_tx.send(Ok(addr));
                    let server = axum::serve(
                        listener,
                        app.into_make_service_with_connect_info::<SocketAddr>(),
                    )
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    });
                    let _ = server.await;
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        });
        rt.shutdown_timeout(Duration::from_secs(1));
    });
    let addr = ready_rx.recv().map_err(|e| e.to_string()).and_then(|r| r)?;
    Ok((addr, stop_tx, handle))
}

#[derive(Debug, Default, Clone, Copy)]
struct Wrk {
    requests: u64,
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    non_2xx: u64,
    /// Redis CPU per EVALSHA.
    redis_us: f64,
    /// This process's CPU (the server) per request.
    server_cpu_us: f64,
    /// Redis's CPU per request.
    redis_cpu_us: f64,
}

fn latency_us(s: &str) -> Option<f64> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
    let v: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => v,
        "ms" => v * 1_000.0,
        "s" => v * 1_000_000.0,
        _ => return None,
    })
}

/// Server and Redis on core 0, wrk on core 1, where there are two cores and
/// `taskset`: three processes left to float over two cores swung the
/// layer's ratio to the hand-written handler between 0.80 and 1.18.
fn default_pin() -> Option<(usize, usize)> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let taskset = Command::new("taskset")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    (cores >= 2 && taskset).then_some((0, 1))
}

/// Pins every thread of process `pid` to `cpu` (threads it starts later
/// inherit it).
fn pin(pid: u32, cpu: usize) -> Result<(), String> {
    let out = Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .output()
        .map_err(|e| format!("cannot run taskset ({e}); apt-get install -y util-linux"))?;
    if !out.status.success() {
        return Err(format!(
            "taskset -p -c {cpu} {pid}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn wrk(args: &Args, addr: SocketAddr, duration: u64) -> Result<Wrk, String> {
    let mut command = match args.pin {
        Some((_, cpu)) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string(), "wrk"]);
            c
        }
        None => Command::new("wrk"),
    };
    let out = command
        .arg(format!("-t{}", args.threads))
        .arg(format!("-c{}", args.connections))
        .arg(format!("-d{duration}s"))
        .arg("--latency")
        .arg(format!("http://{addr}/"))
        .output()
        .map_err(|e| format!("cannot run wrk ({e}); apt-get install -y wrk"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("wrk failed: {text}"));
    }
    let mut w = Wrk::default();
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            w.rps = v.trim().parse().unwrap_or(0.0);
        } else if let Some(v) = t.strip_prefix("50%") {
            w.p50_us = latency_us(v.trim()).unwrap_or(f64::NAN);
        } else if let Some(v) = t.strip_prefix("99%") {
            w.p99_us = latency_us(v.trim()).unwrap_or(f64::NAN);
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            w.non_2xx = v.trim().parse().unwrap_or(0);
        } else if t.contains(" requests in ") {
            w.requests = t
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        }
    }
    Ok(w)
}

/// This process's CPU time so far (user + system), in seconds, from
/// /proc/self/stat (0 where there is no /proc).
fn own_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the
    // 12th and 13th of them, in clock ticks (100 per second on Linux).
    let after = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn median(mut v: Vec<Wrk>) -> Wrk {
    v.sort_by(|a, b| a.rps.total_cmp(&b.rps));
    v[v.len() / 2]
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let _ = STRATEGY.set(args.strategy.clone());
    let redis = Redis::start();
    let pinned = match args.pin {
        Some((server, load)) => {
            pin(std::process::id(), server)?;
            pin(redis.server.pid(), server)?;
            format!("server and Redis on core {server}, wrk on core {load}")
        }
        None => "not pinned".to_owned(),
    };
    println!(
        "wrk -t{} -c{} -d{}s --latency, {} round(s), strategy {}; redis-server on port {}; {pinned}",
        args.threads,
        args.connections,
        args.duration,
        args.rounds,
        args.strategy,
        redis.server.port()
    );
    let mut results: Vec<(String, Vec<Wrk>)> =
        args.modes.iter().map(|m| (m.clone(), Vec::new())).collect();
    for round in 1..=args.rounds {
        for (mode, runs) in &mut results {
            let (addr, stop, handle) = serve(mode, &redis.url())?;
            wrk(&args, addr, 1)?; // warm-up: connections, script cache, allocator
            redis.query::<()>(redis::cmd("CONFIG").arg("RESETSTAT"))?;
            let (cpu0, rcpu0) = (own_cpu(), redis.cpu()?);
            let mut w = wrk(&args, addr, args.duration)?;
            let (cpu1, rcpu1) = (own_cpu(), redis.cpu()?);
            w.redis_us = redis.evalsha_usec()?;
            let requests = w.requests.max(1) as f64;
            w.server_cpu_us = (cpu1 - cpu0) * 1e6 / requests;
            w.redis_cpu_us = (rcpu1 - rcpu0) * 1e6 / requests;
            let _ = stop.send(());
            let _ = handle.join();
            println!(
                "round {round} {mode:>12}: {:>9.0} req/s  p50 {:>7.0} µs  p99 {:>7.0} µs  \
                 CPU/request: server {:.1} µs, Redis {:.1} µs ({:.2} µs in EVALSHA)  non-2xx {}",
                w.rps, w.p50_us, w.p99_us, w.server_cpu_us, w.redis_cpu_us, w.redis_us, w.non_2xx
            );
            runs.push(w);
        }
    }
    // Side by side in each round: the layer's throughput over the hand-written one's.
    let runs = |name: &str| results.iter().find(|(m, _)| m == name).map(|(_, r)| r);
    if let (Some(hand), Some(layer)) = (runs("handwritten"), runs("layer")) {
        let mut ratios: Vec<f64> = hand
            .iter()
            .zip(layer)
            .map(|(h, l)| 100.0 * l.rps / h.rps)
            .collect();
        let list: Vec<String> = ratios.iter().map(|r| format!("{r:.1}%")).collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "\nlayer / hand-written, per round: {} (median {:.1}%)",
            list.join(", "),
            ratios[ratios.len() / 2]
        );
    }
    let medians: Vec<(String, Wrk)> = results
        .into_iter()
        .filter(|(_, r)| !r.is_empty())
        .map(|(m, r)| (m, median(r)))
        .collect();
    let hand = medians
        .iter()
        .find(|(m, _)| m == "handwritten")
        .map(|(_, w)| w.rps);
    println!();
    println!("| mode | req/s | p50 | p99 | vs hand-written | server CPU/req | Redis CPU/req |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (mode, w) in &medians {
        let rel = hand.map_or("".into(), |h| format!("{:.1}%", 100.0 * w.rps / h));
        println!(
            "| {mode} | {:.0} | {:.0} µs | {:.0} µs | {rel} | {:.1} µs | {:.1} µs |",
            w.rps, w.p50_us, w.p99_us, w.server_cpu_us, w.redis_cpu_us
        );
    }

    if args.flood {
        let (addr, stop, handle) = serve("flood", &redis.url())?;
        redis.query::<()>(redis::cmd("CONFIG").arg("RESETSTAT"))?;
        let w = wrk(&args, addr, args.duration)?;
        let (all, evalsha) = redis.commands()?;
        let _ = stop.send(());
        let _ = handle.join();
        let denied = w.non_2xx.max(1);
        println!();
        println!(
            "flood (one client, 10/minute): {} requests, {} denied; Redis: {evalsha} EVALSHA, \
             {all} commands in all = {:.5} commands per denied request (1 per {:.0})",
            w.requests,
            w.non_2xx,
            all as f64 / denied as f64,
            denied as f64 / all.max(1) as f64
        );
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("benches/http: {e}");
        std::process::exit(1);
    }
}
