//! The two calls of local budgets (`src/limiter/local_budget.rs`) on Redis, for
//! every connection kind: the take (the limiter's decision for the reserved
//! units, whose reply also tells the decision's time) and the give-back of
//! unspent units. Each is one `EVALSHA` of a script prepared once per
//! limiter ([`Scripts`]), atomic.

use std::sync::Arc;

use super::args::clock_arg;
use super::conn::{Connections, Pooled, Request, Undo};
use super::protocol::{give_back_lease, parse_reply, takes_lease};
use super::script::LimiterScript;
use crate::error::StoreError;
use crate::quota::QuotaSpec;
use crate::store::call::{Adjustment, Call, GiveBackCall, Outcome};
use crate::strategy::Kind;

/// A limiter's take and give-back scripts and their quota arguments.
#[derive(Debug)]
pub(crate) struct Scripts {
    take: LimiterScript,
    give_back: LimiterScript,
    /// The take's `ARGV[3..]`: exactly the decision's (see `lua/single.lua`,
    /// `lua/multi.lua`); a calendar quota's are each call's (`calendar`).
    take_args: Box<[Vec<u8>]>,
    /// The give-back's per-quota arguments (see `lua/give_back.lua`).
    give_back_args: Box<[Vec<u8>]>,
    /// The quotas, if one is a calendar's: a take's and an adjust's
    /// arguments are then their call's (a give-back's need no bounds: it
    /// finds the take's window by its end, `fin`).
    calendar: Option<Box<[QuotaSpec]>>,
}

impl Scripts {
    /// The scripts for a limiter with `quotas`, in order.
    /// `block`: see [`LimiterScript::for_quotas`].
    pub(crate) fn new(quotas: &[QuotaSpec], block: Option<u64>) -> Self {
        let each = super::protocol::script_numbers;
        let encode = |v: Vec<i64>| {
            v.into_iter()
                .map(|v| v.to_string().into_bytes())
                .collect::<Box<[_]>>()
        };
        let strategies: Vec<Kind> = quotas.iter().map(|q| q.kind).collect();
        Scripts {
            take: LimiterScript::for_take(
                &strategies,
                &quotas.iter().map(|q| q.shadow).collect::<Vec<_>>(),
                block,
            ),
            give_back: LimiterScript::for_give_back(&strategies),
            take_args: super::protocol::quota_args(quotas),
            give_back_args: encode(quotas.iter().flat_map(each).collect()),
            calendar: quotas
                .iter()
                .any(|q| q.calendar.is_some())
                .then(|| quotas.to_vec().into_boxed_slice()),
        }
    }

    /// The take and give-back scripts.
    pub(crate) fn scripts(&self) -> [&LimiterScript; 2] {
        [&self.take, &self.give_back]
    }
}

/// A reservation's take: the decision of `call` (its cost the reserved
/// units), and the time Redis decided at (`TIME`, or the manual time).
pub(crate) async fn take<P: Pooled>(
    conns: &Arc<Connections<P>>,
    scripts: &Scripts,
    call: Call<'_>,
) -> Result<(Outcome, i64), StoreError> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(scripts.take.sha.as_str())
        .arg(call.keys.len())
        .arg(call.keys);
    clock_arg(&mut cmd, call.now_us);
    cmd.arg(call.cost);
    // (a calendar quota's numbers are its call's: the bounds of its window)
    let at;
    let args = match &scripts.calendar {
        None => &scripts.take_args,
        Some(quotas) => {
            at = super::protocol::quota_args_at(quotas, super::protocol::bounds_time(call.now_us));
            &at
        }
    };
    for a in args.iter() {
        cmd.arg(a.as_slice());
    }
    // (a concurrency quota's lease id)
    if !call.nonce.is_empty() {
        cmd.arg(call.nonce);
    }
    // a take that may hold a concurrency lease gives it back if its decision
    // never reaches the caller (see `protocol::decide`)
    let mut undo = takes_lease(&call).then(|| Undo::new(conns, || give_back_lease(&call)));
    let reply: Vec<u8> = conns
        .query(
            Request::Cmd(&cmd),
            Some(&scripts.take),
            undo.as_mut().map(Undo::sent_on),
        )
        .await?;
    let taken = parse_take(&reply, call.quotas.len())?;
    if let Some(undo) = undo {
        undo.disarm();
    }
    Ok(taken)
}

/// The take script's reply: the decision of `quotas` quotas, then its time.
fn parse_take(reply: &[u8], quotas: usize) -> Result<(Outcome, i64), StoreError> {
    let bad = || {
        StoreError::Protocol(format!(
            "expected a decision and its time from the take script, got {:?}",
            String::from_utf8_lossy(reply)
        ))
    };
    let space = reply.iter().rposition(|b| *b == b' ').ok_or_else(bad)?;
    let (decision, now) = (&reply[..space], &reply[space + 1..]);
    let now = std::str::from_utf8(now)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(bad)?;
    Ok((parse_reply(decision, quotas)?, now))
}

/// Gives back a reservation's unspent units: one `EVALSHA` of the
/// limiter's give-back script.
pub(crate) async fn give_back<P: Pooled>(
    conns: &Connections<P>,
    scripts: &Scripts,
    gb: &GiveBackCall<'_>,
) -> Result<(), StoreError> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(scripts.give_back.sha.as_str())
        .arg(gb.keys.len())
        .arg(gb.keys);
    clock_arg(&mut cmd, gb.now_us);
    cmd.arg(gb.units).arg(gb.at);
    for a in scripts.give_back_args.iter() {
        cmd.arg(a.as_slice());
    }
    cmd.arg(gb.fins);
    let _: redis::Value = conns
        .query(Request::Cmd(&cmd), Some(&scripts.give_back), None)
        .await?;
    Ok(())
}

/// Charges (`units > 0`) or gives back (`units < 0`) units on every quota
/// key of `keys` as its strategy's adjust block does: one `EVALSHA` of the
/// limiter's give-back script in its adjust mode (`lua/give_back.lua`).
pub(crate) async fn adjust<P: Pooled>(
    conns: &Connections<P>,
    scripts: &Scripts,
    keys: &[String],
    adjustment: Adjustment<'_>,
    now_us: Option<u64>,
) -> Result<(), StoreError> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(scripts.give_back.sha.as_str())
        .arg(keys.len())
        .arg(keys);
    clock_arg(&mut cmd, now_us);
    match adjustment {
        Adjustment::By(units) => cmd.arg(units).arg("A"),
        // (the per-quota units follow the quotas')
        Adjustment::Set(_) => cmd.arg(0).arg("S"),
    };
    match &scripts.calendar {
        None => {
            for a in scripts.give_back_args.iter() {
                cmd.arg(a.as_slice());
            }
        }
        Some(quotas) => {
            let at = super::protocol::bounds_time(now_us);
            for q in quotas.iter() {
                for v in super::protocol::script_numbers_at(q, at) {
                    cmd.arg(v);
                }
            }
        }
    }
    if let Adjustment::Set(units) = adjustment {
        cmd.arg(units);
    }
    let _: redis::Value = conns
        .query(Request::Cmd(&cmd), Some(&scripts.give_back), None)
        .await?;
    Ok(())
}

/// The block script (`lua/block_set.lua`), prepared once.
pub(crate) fn block_script() -> &'static LimiterScript {
    static SCRIPT: std::sync::OnceLock<LimiterScript> = std::sync::OnceLock::new();
    SCRIPT.get_or_init(LimiterScript::for_block)
}

/// Blocks a key until `us` µs from now (Redis's clock or the manual time);
/// `us` 0 lifts the block. One atomic call.
pub(crate) async fn block<P: Pooled>(
    conns: &Connections<P>,
    block_key: &str,
    us: u64,
    now_us: Option<u64>,
) -> Result<(), StoreError> {
    let script = block_script();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha.as_str()).arg(1).arg(block_key);
    clock_arg(&mut cmd, now_us);
    cmd.arg(us);
    let _: redis::Value = conns.query(Request::Cmd(&cmd), Some(script), None).await?;
    Ok(())
}
