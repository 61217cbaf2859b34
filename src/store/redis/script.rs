//! Limiter scripts, assembled from the files in `lua/`.
//!
//! A limiter's script holds only what it uses. One quota: the prelude, then
//! `single.lua` with the strategy's block spliced in, so that a call creates
//! no Lua function (Lua builds a closure for every function definition on
//! every run, which measurably costs Redis time). Several quotas: each used
//! strategy's block wrapped as a function `S[<id>]`, then `multi.lua`. Redis
//! compiles each distinct script once; every decision is one `EVALSHA`.
//!
//! A script is assembled once per shape (its strategies, shadow flags,
//! blocking, the fast path's numbers...) while a limiter holds it: limiters
//! of one shape share its text and SHA1 ([`shared`]), so that thousands of
//! limiters cost thousands of script copies neither in memory nor in
//! assembly time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::strategy::{Adjust, Kind};

#[cfg(test)]
#[path = "script_keys.rs"]
mod keys;

/// A script's text and SHA1, shared (a clone is a reference count).
#[derive(Debug, Clone)]
pub(crate) struct LimiterScript(Arc<Text>);

/// What a [`LimiterScript`] holds.
#[derive(Debug)]
pub(crate) struct Text {
    pub(crate) source: String,
    pub(crate) sha: String,
}

impl std::ops::Deref for LimiterScript {
    type Target = Text;

    #[inline]
    fn deref(&self) -> &Text {
        &self.0
    }
}

/// What a script is assembled from: equal shapes, equal texts.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Shape {
    /// [`LimiterScript::for_quotas`] (`take`: false) and
    /// [`LimiterScript::for_take`].
    Quotas {
        strategies: Box<[Kind]>,
        shadow: Box<[bool]>,
        take: bool,
        block: Option<u64>,
        /// [`OnDenial::script_flag`](crate::limiter::OnDenial): 0, or a
        /// recording limiter's script (`lua/record.lua`).
        record: u8,
    },
    GiveBack(Box<[Kind]>),
    /// A strategy, a limit, a window in ms, and a recording limiter's
    /// count cap (`lua/fixed_window_fast_record.lua`).
    Fast(Kind, u64, u64, Option<u64>),
    /// The batch script of the decision script of this SHA1.
    Batch(Box<str>),
    BatchOne(Kind),
    BatchFast(Kind, u64, u64, Option<u64>),
}

/// The scripts held, by shape: weak, so that a shape no limiter holds any
/// more is freed with its last limiter (the process's limiters may keep
/// changing: runtime limits, reloaded configurations).
struct Cache {
    of: HashMap<Shape, Weak<Text>>,
    /// The entries at which an insert drops those of freed scripts: twice
    /// those left at the last drop, so inserts stay `O(1)` amortised.
    sweep_at: usize,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// The shapes the cache has an entry for, held or not (for tests).
#[cfg(test)]
fn cached_shapes() -> usize {
    let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache.as_ref().map_or(0, |c| c.of.len())
}

/// The script of `shape`: the one held by another limiter, else `make()`'s
/// (assembled outside the lock; of two racing, the first inserted wins).
fn shared(shape: Shape, make: impl FnOnce() -> LimiterScript) -> LimiterScript {
    let lock = || CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let held = |cache: &Option<Cache>, shape: &Shape| {
        cache
            .as_ref()
            .and_then(|c| c.of.get(shape))
            .and_then(Weak::upgrade)
            .map(LimiterScript)
    };
    if let Some(script) = held(&lock(), &shape) {
        return script;
    }
    let script = make();
    let mut guard = lock();
    if let Some(found) = held(&guard, &shape) {
        return found;
    }
    let cache = guard.get_or_insert_with(|| Cache {
        of: HashMap::new(),
        sweep_at: 64,
    });
    if cache.of.len() >= cache.sweep_at {
        cache.of.retain(|_, text| text.strong_count() > 0);
        cache.sweep_at = (2 * cache.of.len()).max(64);
    }
    cache.of.insert(shape, Arc::downgrade(&script.0));
    script
}

impl LimiterScript {
    /// A script of `source`, with its SHA1.
    pub(crate) fn new(source: String) -> Self {
        let sha = redis::Script::new(&source).get_hash().to_owned();
        LimiterScript(Arc::new(Text { source, sha }))
    }

    /// Whether `self` and `other` share one text (for tests).
    #[cfg(test)]
    pub(crate) fn ptr_eq(&self, other: &LimiterScript) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether it reads Redis's `TIME` on Redis's clock (see `lua/prelude.lua`).
    pub(crate) fn reads_time(&self) -> bool {
        self.source.starts_with("local READS_TIME = true")
    }
}

const PRELUDE: &str = include_str!("../../../lua/prelude.lua");
const ZSET: &str = include_str!("../../../lua/zset.lua");
const SINGLE: &str = include_str!("../../../lua/single.lua");
const MULTI: &str = include_str!("../../../lua/multi.lua");
/// Several limiters' decisions, all or nothing (`src/limiter/joint.rs`).
const JOINT: &str = include_str!("../../../lua/joint.lua");
/// Where `single.lua` takes its strategy's block.
const SPLICE: &str = "--@STRATEGY\n";
const GIVE_BACK: &str = include_str!("../../../lua/give_back.lua");
/// Several decisions in one call (`lua/batch.lua`), around a decision script.
const BATCH: &str = include_str!("../../../lua/batch.lua");
/// Several one-quota decisions in one call, the strategy's block in a loop.
const BATCH_ONE: &str = include_str!("../../../lua/batch_one.lua");
/// Several fast-path decisions in one call.
const BATCH_FAST: &str = include_str!("../../../lua/batch_fast.lua");
/// Where `batch_fast.lua` takes the fast path's code.
const FAST_SPLICE: &str = "--@FAST\n";
/// The fast path's lines that read its one decision's key and cost, and
/// return its reply: a batch reads and returns its own.
const FAST_HEAD: &str = "local key, cost = KEYS[1], ARGV[1]\n";
const FAST_TAIL: &str = "return reply\n";
/// The fast path's take-back of a denial, which a recording limiter's
/// replaces with `lua/fixed_window_fast_record.lua`.
const FAST_DENIED: &str = "if p > N - (cost or 1) then\n  if cost then redis.call('DECRBY', key, cost) else redis.call('DECR', key) end\nend\n";
const FAST_RECORD: &str = include_str!("../../../lua/fixed_window_fast_record.lua");
/// How a batch script ends: the loop over errors, the reply.
const BATCH_END: &str = include_str!("../../../lua/batch_end.lua");
/// Where `batch.lua` takes the decision script.
const BATCH_SPLICE: &str = "--@DECISION\n";
/// The prelude's read of Redis's clock, and what a batch reads instead: the
/// call's one reading.
const READ_TIME: &str = "  local t = redis.call('TIME')\n";
const READ_BATCH_TIME: &str =
    "  if not BATCH_TIME then BATCH_TIME = redis.call('TIME') end\n  local t = BATCH_TIME\n";
/// The penalty box's check (limiters built with blocking only).
const BLOCK: &str = include_str!("../../../lua/block.lua");
/// A denial of cost > 0 starts a block of `BLOCK_US` (one quota: before the
/// reply; its retry is at least the block).
const BLOCK_SINGLE: &str = "-- a denial starts a block (lua/block.lua)\n\
if ok == 0 and cost > 0 and BLOCK_US > 0 then\n\
  redis.call('SET', BK, fmt('%d', NOW + BLOCK_US), 'PX', fmt('%d', ceil(BLOCK_US / 1000) + GRACE))\n\
  if retry >= 0 and retry < BLOCK_US then retry = BLOCK_US end\n\
end\n";
/// The same for several quotas, before `multi.lua` formats its reply.
const BLOCK_MULTI: &str = "-- a denial starts a block (lua/block.lua)\n\
if all == 0 and cost > 0 and BLOCK_US > 0 then\n\
  redis.call('SET', BK, fmt('%d', NOW + BLOCK_US), 'PX', fmt('%d', ceil(BLOCK_US / 1000) + GRACE))\n\
  for i = 1, nq do\n\
    local r = res[i]\n\
    if r[1] == 0 and r[4] >= 0 and r[4] < BLOCK_US then r[4] = BLOCK_US end\n\
  end\n\
end\n";
const MULTI_OUT: &str = "local out = { tostring(all) }";
/// The branch of `multi.lua` a denial takes, which a recording limiter's
/// script replaces with `lua/record.lua`, and its reply's first number:
/// `all`, plus 2 when the denial recorded.
const MULTI_DENIED: &str = "elseif all == 0 then\n  -- nothing is consumed: quotas that would allow report their current state\n  for i = 1, nq do\n    if res[i][1] == 1 then\n      res[i] = { run(i, 0, false) }\n    end\n  end\nend\n";
const RECORD: &str = include_str!("../../../lua/record.lua");
const RECORD_OUT: &str = "local out = { tostring(all + RECORDED) }";
/// What a recording limiter of one quota runs after its strategy's block
/// (`lua/record_one.lua`), with the adjust block at `--@ADJUST` and the
/// strategy's block again at `--@STRATEGY`; `single.lua` then parses the four
/// numbers, and its reply starts with 2 for a recorded denial.
const RECORD_ONE: &str = include_str!("../../../lua/record_one.lua");
const ADJUST_SPLICE: &str = "--@ADJUST\n";
const SINGLE_PARSE: &str = "if READS_BURST then\n  burst, interval = struct.unpack('<dd', ARGV[3])\nelse\n  n, period = struct.unpack('<dd', ARGV[3])\nend\n";
const RECORD_ONE_PARSE: &str = "-- (a recording limiter's: all four numbers, lua/record_one.lua)\n\
n, period, burst, interval = struct.unpack('<dddd', ARGV[3])\n\
local SENT_INTERVAL = interval\n";
const RECORD_ONE_TAIL: &str =
    "if RECORDED == 2 then return fmt('2 %d %d %d %d %d', ok, rem, reset, retry, delay) end\n";
/// Shadow quotas (`Quota::shadow`), in the scripts of limiters of several
/// quotas with one at least (others are byte-identical without it): the
/// flags are part of the script, `local SHADOW = { false, true }` (no
/// argument to send or parse per call), and two lines of `multi.lua` change.
/// A shadow quota's denial does not deny...
const MULTI_DENIES: &str = "  if res[i][1] == 0 then all = 0 end\n";
const SHADOW_DENIES: &str = "  if res[i][1] == 0 and not SHADOW[i] then all = 0 end\n";
/// ...and an allowed request consumes every quota that would allow it: every
/// enforced one, and each shadow one that would allow it on its own. (A
/// lone shadow quota needs nothing in its script: its reply is its own
/// verdict, which the limiter never takes as a denial.)
const MULTI_APPLIES: &str = "  for i = 1, nq do res[i] = { run(i, cost, true) } end\n";
const SHADOW_APPLIES: &str = concat!(
    "  -- every enforced quota, and each shadow quota that would allow it\n",
    "  for i = 1, nq do\n",
    "    if res[i][1] == 1 then res[i] = { run(i, cost, true) } end\n",
    "  end\n",
);
/// A take script's reply (one quota): `single.lua`'s, then the decision's
/// `NOW` (the time the give-back needs to find what the take wrote).
const TAKE_SINGLE_TAIL: &str = "-- a take (src/limiter/local_budget.rs): the reply ends with the decision's NOW\n\
return fmt('%d %d %d %d %d %d %d', ok, ok, rem, reset, retry, delay, NOW)\n";
/// `multi.lua`'s reply, which a take script extends with `NOW`.
const MULTI_RETURN: &str = "return table.concat(out, ' ')";
const TAKE_MULTI_RETURN: &str = "-- a take (src/limiter/local_budget.rs): the reply ends with the decision's NOW\n\
out[nq + 2] = fmt('%d', NOW)\nreturn table.concat(out, ' ')";

/// A script's first lines: `local READS_TIME = <on>` and the like, which
/// `lua/prelude.lua` and what follows read.
fn flag(source: &mut String, name: &str, on: bool) {
    source.push_str(&format!("local {name} = {on}\n"));
}

/// A strategy's block, spliced in as a `do … end` block (no function per call).
fn push_block(source: &mut String, body: &[&str]) {
    source.push_str("do\n");
    for part in body {
        source.push_str(part);
    }
    source.push_str("end\n");
}

/// A strategy's block wrapped as the function `S[<id>]` (the scripts of
/// several quotas, `lua/multi.lua`, and the joint script, `lua/joint.lua`).
fn push_function(source: &mut String, s: Kind) {
    source.push_str(&format!(
        "S[{}] = function(key, n, period, burst, interval, cost, nonce, apply)\n\
         local now = NOW\nlocal ok, rem, reset, retry, delay\ndo\n",
        s.id()
    ));
    for part in s.spec().lua.body {
        source.push_str(part);
    }
    source.push_str("end\nreturn ok, rem, reset, retry, delay\nend\n");
}

/// Each of `strategies`' adjust block as a function, `A[<id>]` for a
/// strategy that adjusts either way, `C[<id>]` for one that takes a charge
/// only (the give-back script, `lua/give_back.lua`; what a denial records,
/// `lua/record.lua`, `lua/joint.lua`).
fn push_adjust_functions(source: &mut String, strategies: &[Kind]) {
    source.push_str("local A, C = {}, {}\n");
    for s in Kind::ALL {
        let (table, lua) = match s.spec().adjust {
            Adjust::Units { lua, .. } => ('A', lua),
            Adjust::Charge { lua, .. } => ('C', lua),
            Adjust::Never(_) => continue,
        };
        if !strategies.contains(&s) {
            continue;
        }
        source.push_str(&format!(
            "{table}[{}] = function(key, n, period, burst, interval, units)\n\
             local now = NOW\ndo\n",
            s.id()
        ));
        source.push_str(lua);
        source.push_str("end\nend\n");
    }
}

/// The line a fast-path script starts with: the quota's numbers, written
/// in (and a recording limiter's count cap, `top`).
fn fast_numbers(limit: u64, window_ms: u64, top: Option<u64>) -> String {
    match top {
        None => format!("local N, WINDOW_MS, WINDOW = {limit}, {window_ms}, '{window_ms}'\n"),
        Some(top) => format!(
            "local N, WINDOW_MS, WINDOW, TOP = {limit}, {window_ms}, '{window_ms}', {top}\n"
        ),
    }
}

/// The fast path's code of `strategy`, a recording limiter's (`top`: its
/// count cap) with `lua/fixed_window_fast_record.lua` for the denial.
fn fast_body(strategy: Kind, top: Option<u64>) -> Option<String> {
    let body = strategy.spec().lua.fast_path?;
    Some(match top {
        None => body.to_owned(),
        Some(_) => body.replacen(FAST_DENIED, FAST_RECORD, 1),
    })
}

impl LimiterScript {
    /// The script for a limiter whose quotas run `strategies` (their
    /// [`Kind`]s), in order.
    /// `block`: `None` without blocking, else the penalty of a denial in µs
    /// (0: blocks only come from `RateLimiter::block`); the block key is then
    /// the call's last key (`lua/block.lua`).
    /// `shadow`: each quota's `Quota::shadow` flag (empty: none shadow).
    pub(crate) fn for_quotas(strategies: &[Kind], shadow: &[bool], block: Option<u64>) -> Self {
        Self::quotas(strategies, shadow, false, block, 0)
    }

    /// The script of a limiter whose denials record their cost
    /// (`record`: [`OnDenial::script_flag`](crate::limiter::OnDenial), 1 or
    /// 2). One quota: `single.lua` with `lua/record_one.lua` after the
    /// strategy's block (if it has an adjust block), its arguments all four
    /// numbers. Several: `multi.lua` with each used strategy's adjust block
    /// as a function `A[<id>]` (or `C[<id>]`) and `lua/record.lua` in the
    /// denial's branch.
    pub(crate) fn for_recording(
        strategies: &[Kind],
        shadow: &[bool],
        block: Option<u64>,
        record: u8,
    ) -> Self {
        // (one quota: both modes record on it when it denies, one script)
        let record = if strategies.len() == 1 { 1 } else { record };
        Self::quotas(strategies, shadow, false, block, record)
    }

    /// [`for_quotas`](Self::for_quotas) or, `take`, [`for_take`](Self::for_take), shared.
    fn quotas(
        strategies: &[Kind],
        shadow: &[bool],
        take: bool,
        block: Option<u64>,
        record: u8,
    ) -> Self {
        let shape = Shape::Quotas {
            strategies: strategies.into(),
            shadow: shadow.into(),
            take,
            block,
            record,
        };
        shared(shape, || {
            Self::assemble(strategies, shadow, take, block, record)
        })
    }

    /// The take script of a limiter with local budgets
    /// (`src/limiter/local_budget.rs`): its decision script, which always reads the time
    /// and ends its reply with the decision's `NOW` (a take has no fast path).
    pub(crate) fn for_take(strategies: &[Kind], shadow: &[bool], block: Option<u64>) -> Self {
        Self::quotas(strategies, shadow, true, block, 0)
    }

    /// The script of a joint decision over several limiters
    /// (`src/limiter/joint.rs`): the prelude, every strategy's function
    /// `S[<id>]` but the lease-holding ones' (a joint decision takes no
    /// lease), then `lua/joint.lua`. One script for every joint decision
    /// whose parts record nothing, and, `records`, one with their adjust
    /// functions `A[<id>]` and `C[<id>]` too, for those that may record a
    /// denial (each function costs every call of the script its closure:
    /// measured, 24.1 against 22.7 µs of Redis's time for two parts).
    pub(crate) fn for_joint(records: bool) -> Self {
        let mut source = String::new();
        flag(&mut source, "READS_TIME", true);
        source.push_str(PRELUDE);
        source.push_str("local S = {}\n");
        let joined: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|s| !s.spec().holds_leases)
            .collect();
        for &s in &joined {
            push_function(&mut source, s);
        }
        if records {
            // (what a denial records)
            push_adjust_functions(&mut source, &joined);
        } else {
            source.push_str("local A, C = {}, {}\n");
        }
        source.push_str(JOINT);
        LimiterScript::new(source)
    }

    /// The give-back (settle) script of a limiter: each used strategy's
    /// give-back block as a function `G[<id>]` and its adjust block as
    /// `A[<id>]` (or, charge only, `C[<id>]`), then `lua/give_back.lua`.
    /// Strategies without them are skipped there.
    pub(crate) fn for_give_back(strategies: &[Kind]) -> Self {
        shared(Shape::GiveBack(strategies.into()), || {
            Self::assemble_give_back(strategies)
        })
    }

    fn assemble_give_back(strategies: &[Kind]) -> Self {
        let mut source = String::from("local READS_TIME = true\n");
        source.push_str(PRELUDE);
        source.push_str("local G = {}\n");
        for s in Kind::ALL {
            let Some(lua) = s.spec().give_back.lua() else {
                continue;
            };
            if !strategies.contains(&s) {
                continue;
            }
            source.push_str(&format!(
                "G[{}] = function(key, n, period, burst, interval, units, at, fin)\n\
                 local now = NOW\ndo\n",
                s.id()
            ));
            source.push_str(lua);
            source.push_str("end\nend\n");
        }
        push_adjust_functions(&mut source, strategies);
        source.push_str(GIVE_BACK);
        LimiterScript::new(source)
    }

    /// The script of `RateLimiter::block` and `unblock` (`lua/block_set.lua`).
    pub(crate) fn for_block() -> Self {
        let mut source = String::from("local READS_TIME = true\n");
        source.push_str(PRELUDE);
        source.push_str(include_str!("../../../lua/block_set.lua"));
        LimiterScript::new(source)
    }

    /// The fast-path script of a lone quota of `strategy` with `limit` units
    /// per window of `window_ms` milliseconds written in, if the strategy has
    /// one (a fixed window: `lua/fixed_window_fast.lua`). `top`: a recording
    /// limiter's, whose denials stay counted up to `top`
    /// (`lua/fixed_window_fast_record.lua`).
    pub(crate) fn fast_path(
        strategy: Kind,
        limit: u64,
        window_ms: u64,
        top: Option<u64>,
    ) -> Option<Self> {
        let body = fast_body(strategy, top)?;
        let shape = Shape::Fast(strategy, limit, window_ms, top);
        Some(shared(shape, || {
            LimiterScript::new(format!("{}{body}", fast_numbers(limit, window_ms, top)))
        }))
    }

    /// The batch script of a decision script (`lua/batch.lua`): several
    /// decisions in one call, each running `decision` as a call of its own
    /// would, with Redis's clock read once per call.
    pub(crate) fn batch(decision: &LimiterScript) -> Self {
        shared(Shape::Batch(decision.sha.as_str().into()), || {
            Self::assemble_batch(decision)
        })
    }

    fn assemble_batch(decision: &LimiterScript) -> Self {
        let (head, tail) = BATCH.split_once(BATCH_SPLICE).unwrap_or((BATCH, ""));
        let mut source = String::with_capacity(BATCH.len() + decision.source.len() + 64);
        // (the first line still tells whether it reads the time: `reads_time`)
        let (first, rest) = decision
            .source
            .split_once('\n')
            .unwrap_or(("", &decision.source));
        source.push_str(first);
        source.push('\n');
        source.push_str(head);
        source.push_str(&rest.replace(READ_TIME, READ_BATCH_TIME));
        if !source.ends_with('\n') {
            source.push('\n');
        }
        source.push_str(tail);
        LimiterScript::new(source)
    }

    /// The batch script of a limiter of one quota of `strategy` without
    /// blocking (`lua/batch_one.lua`): the strategy's block in a loop over
    /// the decisions, each decided as `single.lua` would.
    pub(crate) fn batch_one(strategy: Kind) -> Self {
        shared(Shape::BatchOne(strategy), || {
            Self::assemble_batch_one(strategy)
        })
    }

    fn assemble_batch_one(strategy: Kind) -> Self {
        let spec = &strategy.spec().lua;
        let mut source = String::new();
        flag(&mut source, "READS_TIME", spec.reads_time);
        flag(&mut source, "READS_BURST", spec.reads_burst);
        source.push_str(PRELUDE);
        if spec.zset_helpers {
            source.push_str(ZSET);
        }
        let (head, tail) = BATCH_ONE.split_once(SPLICE).unwrap_or((BATCH_ONE, ""));
        source.push_str(head);
        push_block(&mut source, spec.body);
        source.push_str(tail);
        source.push_str(BATCH_END);
        LimiterScript::new(source)
    }

    /// The batch script of the fast path of a lone quota of `strategy` with
    /// `limit` per `window_ms` (`lua/batch_fast.lua`), if it has one.
    pub(crate) fn batch_fast(
        strategy: Kind,
        limit: u64,
        window_ms: u64,
        top: Option<u64>,
    ) -> Option<Self> {
        let body = fast_body(strategy, top)?;
        Some(shared(
            Shape::BatchFast(strategy, limit, window_ms, top),
            || {
                let body = body.replacen(FAST_HEAD, "", 1);
                let body = body.strip_suffix(FAST_TAIL).unwrap_or(&body);
                let (head, tail) = BATCH_FAST
                    .split_once(FAST_SPLICE)
                    .unwrap_or((BATCH_FAST, ""));
                let source = format!(
                    "{}{head}{body}{tail}{BATCH_END}",
                    fast_numbers(limit, window_ms, top)
                );
                LimiterScript::new(source)
            },
        ))
    }

    fn assemble(
        strategies: &[Kind],
        shadow: &[bool],
        take: bool,
        block: Option<u64>,
        record: u8,
    ) -> Self {
        let mut source = String::new();
        // Scripts whose strategies never read `now` on Redis's clock skip TIME
        // (see prelude.lua); the penalty box reads it.
        flag(
            &mut source,
            "READS_TIME",
            take || block.is_some() || strategies.iter().any(|s| s.spec().lua.reads_time),
        );
        let single = match strategies {
            [only] => Some(*only),
            _ => None,
        };
        // (a lone quota's adjust block: what its denial records)
        let adjust = single
            .filter(|_| record > 0)
            .and_then(|s| match s.spec().adjust {
                Adjust::Units { lua, .. } | Adjust::Charge { lua, .. } => Some(lua),
                Adjust::Never(_) => None,
            });
        if let Some(only) = single {
            // what single.lua parses (see there)
            flag(&mut source, "READS_BURST", only.spec().lua.reads_burst);
        }
        source.push_str(PRELUDE);
        if strategies.iter().any(|s| s.spec().lua.zset_helpers) {
            source.push_str(ZSET);
        }
        if let Some(us) = block {
            source.push_str(&format!("local BLOCK_US, TAKE = {us}, {take}\n"));
            source.push_str(BLOCK);
        }
        if let Some(only) = single {
            let (head, tail) = SINGLE.split_once(SPLICE).unwrap_or((SINGLE, ""));
            match adjust {
                Some(_) => source.push_str(&head.replacen(SINGLE_PARSE, RECORD_ONE_PARSE, 1)),
                None => source.push_str(head),
            }
            push_block(&mut source, only.spec().lua.body);
            if let Some(adjust) = adjust {
                let (before, after) = RECORD_ONE
                    .split_once(ADJUST_SPLICE)
                    .unwrap_or((RECORD_ONE, ""));
                let (middle, end) = after.split_once(SPLICE).unwrap_or((after, ""));
                source.push_str(before);
                source.push_str(adjust);
                source.push_str(middle);
                push_block(&mut source, only.spec().lua.body);
                source.push_str(end);
            }
            if block.is_some() {
                source.push_str(BLOCK_SINGLE);
            }
            if adjust.is_some() {
                source.push_str(RECORD_ONE_TAIL);
            }
            source.push_str(if take { TAKE_SINGLE_TAIL } else { tail });
        } else {
            source.push_str("local S = {}\n");
            for s in Kind::ALL {
                if strategies.contains(&s) {
                    push_function(&mut source, s);
                }
            }
            if record > 0 {
                push_adjust_functions(&mut source, strategies);
                let flags: Vec<&str> = (0..strategies.len())
                    .map(|i| {
                        if shadow.get(i) == Some(&true) {
                            "true"
                        } else {
                            "false"
                        }
                    })
                    .collect();
                source.push_str(&format!(
                    "-- a denial records (lua/record.lua)\nlocal RECORD, RECORDED = {record}, 0\n\
                     local SHADOW = {{ {} }}\n",
                    flags.join(", ")
                ));
            }
            let multi = if shadow.contains(&true) {
                let flags: Vec<&str> = shadow
                    .iter()
                    .map(|&s| if s { "true" } else { "false" })
                    .collect();
                if record == 0 {
                    source.push_str(&format!("local SHADOW = {{ {} }}\n", flags.join(", ")));
                }
                MULTI
                    .replace(MULTI_DENIES, SHADOW_DENIES)
                    .replace(MULTI_APPLIES, SHADOW_APPLIES)
            } else {
                MULTI.to_owned()
            };
            let multi = match block {
                // the last key is the block key, not a quota's
                Some(_) => multi
                    .replace("#KEYS", "(#KEYS - 1)")
                    .replace(MULTI_OUT, &format!("{BLOCK_MULTI}{MULTI_OUT}")),
                None => multi,
            };
            let multi = if record > 0 {
                multi
                    .replace(MULTI_DENIED, RECORD)
                    .replace(MULTI_OUT, RECORD_OUT)
            } else {
                multi
            };
            match multi.rsplit_once(MULTI_RETURN) {
                Some((head, tail)) if take => {
                    source.push_str(head);
                    source.push_str(TAKE_MULTI_RETURN);
                    source.push_str(tail);
                }
                _ => source.push_str(&multi),
            }
        }
        LimiterScript::new(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Strategy;

    #[test]
    fn one_quota_scripts_define_no_function_per_call() {
        for s in Kind::ALL {
            let script = LimiterScript::for_quotas(&[s], &[], None);
            assert!(
                script
                    .source
                    .contains("local ok, rem, reset, retry, delay\ndo\n")
            );
            let functions = script.source.matches("function(").count()
                + script.source.matches("local function ").count();
            // zadd_members, zscore_at
            let helpers = if s.spec().lua.zset_helpers { 2 } else { 0 };
            assert_eq!(functions, helpers, "{s}:\n{}", script.source);
        }
        let [a, b, ..] = Kind::ALL;
        let multi = LimiterScript::for_quotas(&[b, a], &[], None);
        assert!(multi.source.contains(&format!("S[{}] = function(", a.id())));
        assert!(multi.source.contains(&format!("S[{}] = function(", b.id())));
    }

    /// A script is shared while a limiter holds it and freed with the last:
    /// limiters of ever new shapes (a penalty per customer, runtime
    /// limits) grow neither the cache nor the heap.
    #[test]
    fn scripts_are_shared_while_held_and_freed_after() {
        let fw = Strategy::FixedWindow.into();
        let a = LimiterScript::for_quotas(&[fw], &[], Some(7_777_777));
        let b = LimiterScript::for_quotas(&[fw], &[], Some(7_777_777));
        assert!(a.ptr_eq(&b));
        assert!(!a.ptr_eq(&LimiterScript::for_take(&[fw], &[], Some(7_777_777))));
        let weak = Arc::downgrade(&a.0);
        drop((a, b));
        assert_eq!(weak.strong_count(), 0);
        for us in 1..=2_000 {
            drop(LimiterScript::for_quotas(&[fw], &[], Some(us)));
        }
        // (other tests hold a few shapes meanwhile)
        assert!(cached_shapes() < 1_000, "{}", cached_shapes());
    }

    #[test]
    fn batch_scripts_splice_their_decisions_where_they_should() {
        let fast = Strategy::FixedWindow.spec().lua.fast_path.unwrap();
        assert_eq!(fast.matches(FAST_HEAD).count(), 1);
        assert!(fast.ends_with(FAST_TAIL));
        let batch =
            LimiterScript::batch_fast(Strategy::FixedWindow.into(), 10, 1000, None).unwrap();
        assert!(!batch.source.contains(FAST_HEAD) && !batch.source.contains(FAST_TAIL));
        assert!(batch.source.contains("redis.call('INCR', key)"));
        assert_eq!(fast.matches(FAST_DENIED).count(), 1);
        let record =
            LimiterScript::batch_fast(Strategy::FixedWindow.into(), 10, 1000, Some(12)).unwrap();
        assert!(record.source.contains(FAST_RECORD) && !record.source.contains(FAST_DENIED));
        assert!(
            record
                .source
                .starts_with("local N, WINDOW_MS, WINDOW, TOP = 10, 1000, '1000', 12\n")
        );
        assert_eq!(BATCH_ONE.matches(SPLICE).count(), 1);
        assert_eq!(BATCH_FAST.matches(FAST_SPLICE).count(), 1);
        assert_eq!(BATCH.matches(BATCH_SPLICE).count(), 1);
        assert_eq!(PRELUDE.matches(READ_TIME).count(), 1);
        for s in Kind::ALL {
            let one = LimiterScript::batch_one(s);
            assert!(!one.source.contains(SPLICE), "{s}");
            // no function is created per decision: only `run` (and the
            // sorted-set helpers) per call
            let functions = one.source.matches("function(").count()
                + one.source.matches("local function ").count();
            let helpers = if s.spec().lua.zset_helpers { 2 } else { 0 };
            assert_eq!(functions, 1 + helpers, "{s}");
        }
    }

    /// A recording limiter's script (one quota or several) is the form of
    /// several quotas with `lua/record.lua` in the denial's branch and the
    /// adjust blocks of its strategies; other scripts are unchanged.
    #[test]
    fn recording_scripts_replace_the_denials_branch_of_multi() {
        assert_eq!(MULTI.matches(MULTI_DENIED).count(), 1);
        assert_eq!(MULTI.matches(MULTI_OUT).count(), 1);
        assert_eq!(SINGLE.matches(SINGLE_PARSE).count(), 1);
        assert_eq!(RECORD_ONE.matches(ADJUST_SPLICE).count(), 1);
        assert_eq!(RECORD_ONE.matches(SPLICE).count(), 1);
        for strategies in [
            vec![Strategy::Gcra.into()],
            vec![Strategy::SlidingWindowLog.into()],
            vec![
                Strategy::FixedWindow.into(),
                Strategy::SlidingWindowLog.into(),
            ],
        ] {
            for shadow in [vec![], vec![true; strategies.len()]] {
                for block in [None, Some(1_000)] {
                    let plain = LimiterScript::for_quotas(&strategies, &shadow, block);
                    let record = LimiterScript::for_recording(&strategies, &shadow, block, 1);
                    assert!(!plain.source.contains("RECORD"));
                    assert!(
                        !record.source.contains(SPLICE) && !record.source.contains(ADJUST_SPLICE)
                    );
                    if let [only] = strategies.as_slice() {
                        // one quota: no function, the strategy's block twice
                        let helpers = if only.spec().lua.zset_helpers { 2 } else { 0 };
                        assert_eq!(record.source.matches("function(").count(), helpers);
                        assert!(!record.source.contains(SINGLE_PARSE));
                        assert!(record.source.contains(RECORD_ONE_PARSE));
                        assert!(record.source.contains(RECORD_ONE_TAIL));
                        let body = only.spec().lua.body[0];
                        assert_eq!(record.source.matches(body).count(), 2);
                        continue;
                    }
                    assert!(record.source.contains(RECORD) && record.source.contains(RECORD_OUT));
                    assert!(!record.source.contains(MULTI_DENIED));
                    assert!(record.source.contains("local RECORD, RECORDED = 1, 0\n"));
                    assert!(record.source.contains("local SHADOW = {"));
                    for s in &strategies {
                        let a = format!("A[{}] = function(", s.id());
                        assert!(record.source.contains(&a));
                    }
                    let two = LimiterScript::for_recording(&strategies, &shadow, block, 2);
                    assert!(two.source.contains("local RECORD, RECORDED = 2, 0\n"));
                    assert_ne!(two.sha, record.sha);
                }
            }
        }
    }

    #[test]
    fn shadow_scripts_change_exactly_the_two_lines_of_multi() {
        assert_eq!(MULTI.matches(MULTI_DENIES).count(), 1);
        assert_eq!(MULTI.matches(MULTI_APPLIES).count(), 1);
        let strategies = [Strategy::Gcra.into(), Strategy::FixedWindow.into()];
        let plain = LimiterScript::for_quotas(&strategies, &[], None);
        assert_eq!(
            plain.source,
            LimiterScript::for_quotas(&strategies, &[false, false], None).source,
            "a limiter without shadow quotas runs the same script"
        );
        let shadow = LimiterScript::for_quotas(&strategies, &[false, true], None);
        assert!(shadow.source.contains("local SHADOW = { false, true }\n"));
        assert!(shadow.source.contains(SHADOW_DENIES) && shadow.source.contains(SHADOW_APPLIES));
        assert!(!shadow.source.contains(MULTI_DENIES) && !shadow.source.contains(MULTI_APPLIES));
        let block = LimiterScript::for_quotas(&strategies, &[true, false], Some(1));
        assert!(block.source.contains(SHADOW_DENIES) && block.source.contains("(#KEYS - 1)"));
        // one quota: the script is the same (its reply is its own verdict)
        assert_eq!(
            LimiterScript::for_quotas(&[Strategy::Gcra.into()], &[true], None).source,
            LimiterScript::for_quotas(&[Strategy::Gcra.into()], &[], None).source
        );
    }

    /// The scripts written to `lua/generated/`: (file stem, what limiter, its strategies).
    fn generated() -> Vec<(String, String, Vec<Kind>)> {
        let mut out: Vec<_> = Strategy::ALL
            .iter()
            .map(|s| {
                (
                    s.as_str().to_owned(),
                    format!("one {s} quota"),
                    vec![(*s).into()],
                )
            })
            .collect();
        out.push((
            "fixed-window-aligned".to_owned(),
            "one fixed-window quota aligned to the epoch (Quota::aligned)".to_owned(),
            vec![Kind::ALIGNED_WINDOW],
        ));
        out.push((
            "fixed-window-calendar".to_owned(),
            "one fixed-window quota of a calendar (Quota::calendar)".to_owned(),
            vec![Kind::CALENDAR_WINDOW],
        ));
        out.push((
            "multi-all".to_owned(),
            "one quota of every strategy; a limiter with several quotas\n\
             -- runs this script less the S[<id>] functions of the strategies it does not\n\
             -- use (and zset.lua if none keeps a sorted set)"
                .to_owned(),
            Kind::ALL.to_vec(),
        ));
        out.push((
            "take-gcra".to_owned(),
            "one gcra quota and local budgets: the take".to_owned(),
            vec![Strategy::Gcra.into()],
        ));
        out.push((
            "take-multi".to_owned(),
            "a fixed-window and a sliding-window-log quota and local budgets: the take".to_owned(),
            vec![
                Strategy::FixedWindow.into(),
                Strategy::SlidingWindowLog.into(),
            ],
        ));
        out.push((
            "give-back-all".to_owned(),
            "one quota of every strategy that gives back and local budgets: the give-back"
                .to_owned(),
            Kind::ALL.to_vec(),
        ));
        out.push((
            "block-fixed-window".to_owned(),
            "one fixed-window quota and block_for(60 s): the penalty box".to_owned(),
            vec![Strategy::FixedWindow.into()],
        ));
        out.push((
            "block-multi".to_owned(),
            "a gcra and a sliding-window-log quota and block_for(60 s): the penalty box".to_owned(),
            vec![Strategy::Gcra.into(), Strategy::SlidingWindowLog.into()],
        ));
        out.push((
            "shadow-multi".to_owned(),
            "a gcra and a fixed-window quota, the fixed window in shadow mode".to_owned(),
            vec![Strategy::Gcra.into(), Strategy::FixedWindow.into()],
        ));
        out.push((
            "fixed-window-fast".to_owned(),
            "one fixed-window quota of 100 per minute, on Redis's clock: the fast path,\n\
             -- which every call of a cost from 1 to the limit runs instead of fixed-window.lua\n\
             -- (its first line holds the quota's numbers)"
                .to_owned(),
            vec![Strategy::FixedWindow.into()],
        ));
        out.push((
            "batch-gcra".to_owned(),
            "one gcra quota, several decisions per call: lua/batch_one.lua\n\
             -- with the strategy's block in its loop (src/store/redis/batch.rs)"
                .to_owned(),
            vec![Strategy::Gcra.into()],
        ));
        out.push((
            "batch-sliding-window-log".to_owned(),
            "one sliding-window-log quota, several decisions per call".to_owned(),
            vec![Strategy::SlidingWindowLog.into()],
        ));
        out.push((
            "batch-fixed-window-fast".to_owned(),
            "one fixed-window quota of 100 per minute, on Redis's clock, several\n\
             -- decisions per call: lua/batch_fast.lua around the fast path"
                .to_owned(),
            vec![Strategy::FixedWindow.into()],
        ));
        out.push((
            "batch-multi".to_owned(),
            "a gcra and a fixed-window quota, several decisions per call:\n\
             -- lua/batch.lua around the limiter's own script"
                .to_owned(),
            vec![Strategy::Gcra.into(), Strategy::FixedWindow.into()],
        ));
        out.push((
            "joint".to_owned(),
            "any quotas, several limiters and keys decided together, all or nothing\n\
             -- (limiter::AllOrNothing): every strategy's function but concurrency's, then\n\
             -- lua/joint.lua; one script for every joint decision"
                .to_owned(),
            Kind::ALL.to_vec(),
        ));
        out.push((
            "record-gcra".to_owned(),
            "one gcra quota whose denials record (on_denial(OnDenial::Record)):\n\
             -- single.lua, then lua/record_one.lua with its adjust block"
                .to_owned(),
            vec![Strategy::Gcra.into()],
        ));
        out.push((
            "record-multi".to_owned(),
            "a fixed-window, a sliding-window-log and a leaky-bucket quota whose\n\
             -- denials record on the quotas over (on_denial(OnDenial::RecordIfOver))"
                .to_owned(),
            vec![
                Strategy::FixedWindow.into(),
                Strategy::SlidingWindowLog.into(),
                Strategy::LeakyBucket.into(),
            ],
        ));
        out.push((
            "record-fixed-window-fast".to_owned(),
            "one fixed-window quota of 100 per minute, on Redis's clock, whose denials\n\
             -- record: the fast path with lua/fixed_window_fast_record.lua for a denial\n\
             -- (its count capped at TOP, as RateLimiter::penalize caps it)"
                .to_owned(),
            vec![Strategy::FixedWindow.into()],
        ));
        out.push((
            "joint-record".to_owned(),
            "any quotas, several limiters and keys decided together, all or nothing,\n\
             -- where a part's denial may record (AllOrNothing, OnDenial): the joint script\n\
             -- with every strategy's adjust function but concurrency's"
                .to_owned(),
            Kind::ALL.to_vec(),
        ));
        out.push((
            "multi-fixed-window".to_owned(),
            "several quotas, all fixed-window (no TIME on Redis's clock)".to_owned(),
            vec![Strategy::FixedWindow.into(); 2],
        ));
        out
    }

    /// What a file in `lua/generated/` holds: a header, then the script exactly as sent.
    fn render(what: &str, script: &LimiterScript) -> String {
        format!(
            "-- GENERATED FILE, do not edit. The script this crate sends to Redis for a\n\
             -- limiter with {what}.\n\
             -- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the\n\
             -- files in lua/; everything below this header is sent byte for byte\n\
             -- (SCRIPT LOAD, then EVALSHA {sha}).\n\
             -- Regenerate: UPDATE_GENERATED=1 cargo test --all-features --lib generated_scripts\n\
             {source}",
            sha = script.sha,
            source = script.source,
        )
    }

    /// `lua/generated/*.lua` are the scripts the crate sends (so a reviewer
    /// reads exactly what runs in Redis); `UPDATE_GENERATED=1` rewrites them.
    #[test]
    fn generated_scripts_match_what_is_sent() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/generated");
        let update = std::env::var_os("UPDATE_GENERATED").is_some_and(|v| v == "1");
        let mut expected = std::collections::BTreeSet::new();
        let mut stale = Vec::new();
        for (stem, what, strategies) in generated() {
            let script = if stem == "joint" {
                LimiterScript::for_joint(false)
            } else if stem == "joint-record" {
                LimiterScript::for_joint(true)
            } else if stem == "batch-fixed-window-fast" {
                LimiterScript::batch_fast(strategies[0], 100, 60_000, None).unwrap()
            } else if stem == "batch-multi" {
                LimiterScript::batch(&LimiterScript::for_quotas(&strategies, &[], None))
            } else if stem.starts_with("batch-") {
                LimiterScript::batch_one(strategies[0])
            } else if stem == "record-fixed-window-fast" {
                LimiterScript::fast_path(strategies[0], 100, 60_000, Some(100 + 1_876_499_844))
                    .unwrap()
            } else if stem.ends_with("-fast") {
                LimiterScript::fast_path(strategies[0], 100, 60_000, None).unwrap()
            } else if stem == "record-gcra" {
                LimiterScript::for_recording(&strategies, &[], None, 2)
            } else if stem.starts_with("record-") {
                LimiterScript::for_recording(&strategies, &[], None, 1)
            } else if stem.starts_with("take-") {
                LimiterScript::for_take(&strategies, &[], None)
            } else if stem.starts_with("give-back-") {
                LimiterScript::for_give_back(&strategies)
            } else if let Some(rest) = stem.strip_prefix("block-") {
                // block-<strategy or multi>: with a penalty of one minute
                let _ = rest;
                LimiterScript::for_quotas(&strategies, &[], Some(60_000_000))
            } else if stem.starts_with("shadow-") {
                // the last quota shadow
                let mut shadow = vec![false; strategies.len()];
                if let Some(last) = shadow.last_mut() {
                    *last = true;
                }
                LimiterScript::for_quotas(&strategies, &shadow, None)
            } else {
                LimiterScript::for_quotas(&strategies, &[], None)
            };
            let text = render(&what, &script);
            let path = dir.join(format!("{stem}.lua"));
            expected.insert(format!("{stem}.lua"));
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, text).unwrap();
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(path.display().to_string());
            }
        }
        // files no script is generated for any more
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".lua") && !expected.contains(&name) {
                if update {
                    std::fs::remove_file(&path).unwrap();
                } else {
                    stale.push(format!("{} (no longer generated)", path.display()));
                }
            }
        }
        assert!(
            stale.is_empty(),
            "lua/generated/ differs from the scripts the crate sends: {stale:#?}\n\
             regenerate with: UPDATE_GENERATED=1 cargo test --all-features --lib generated_scripts \
             (then review and commit lua/generated/)"
        );
    }

    /// Declared keys only (Redis Cluster's rule, Dragonfly's default): every
    /// key of every script the crate sends (`lua/generated/`, the block
    /// script, the document check) comes from `KEYS`, never built in Lua.
    #[test]
    fn every_script_sent_takes_its_keys_from_keys_only() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/generated");
        let mut scripts: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "lua"))
            .map(|p| {
                (
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect();
        assert!(scripts.len() >= 20, "{scripts:?}");
        scripts.push((
            "for_block".to_owned(),
            LimiterScript::for_block().source.clone(),
        ));
        scripts.push((
            "lua/document_check.lua".to_owned(),
            include_str!("../../../lua/document_check.lua").to_owned(),
        ));
        for (name, source) in &scripts {
            assert!(source.contains("redis.call("), "{name}");
            let problems = keys::undeclared_keys(source).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                problems.is_empty(),
                "{name}: keys not from KEYS: {problems:#?}"
            );
        }
    }
}
