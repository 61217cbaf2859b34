//! What one call's `EVALSHA` carries, written once for every sender: the
//! clock reading of `ARGV[1]`, and the command of one decision alone (sent
//! by `protocol::decide`, or by a batching lane for a batch of one).

use super::script::LimiterScript;

/// `ARGV[1]` of a call on Redis's clock (see `lua/prelude.lua`); any other
/// value is a manual or caller time in microseconds.
pub(super) const SERVER_CLOCK: &str = "T";

/// Writes a call's clock reading: its time in µs (any integer, 0
/// included), or [`SERVER_CLOCK`] for Redis's own.
pub(super) fn clock_arg(cmd: &mut redis::Cmd, now_us: Option<u64>) {
    match now_us {
        Some(us) => cmd.arg(us),
        None => cmd.arg(SERVER_CLOCK),
    };
}

/// The `EVALSHA` of one decision with a limiter's decision script: `KEYS`,
/// then the clock reading, the cost, the quotas' numbers (`shared`), then
/// the nonce if there is one (`lua/single.lua`, `lua/multi.lua`).
pub(super) fn decision_cmd(
    script: &LimiterScript,
    keys: &[String],
    now_us: Option<u64>,
    cost: u64,
    shared: &[Vec<u8>],
    nonce: &str,
) -> redis::Cmd {
    let bytes = 96
        + keys.iter().map(String::len).sum::<usize>()
        + shared.iter().map(Vec::len).sum::<usize>()
        + nonce.len();
    let mut cmd = redis::Cmd::with_capacity(6 + keys.len() + shared.len(), bytes);
    cmd.arg("EVALSHA")
        .arg(script.sha.as_str())
        .arg(keys.len())
        .arg(keys);
    clock_arg(&mut cmd, now_us);
    cmd.arg(cost);
    for a in shared {
        cmd.arg(a.as_slice());
    }
    if !nonce.is_empty() {
        cmd.arg(nonce);
    }
    cmd
}

/// The `EVALSHA` of one decision with a fixed window's fast path
/// (`lua/fixed_window_fast.lua`): `KEYS`, then its cost, none for a cost
/// of 1.
pub(super) fn fast_cmd(script: &LimiterScript, keys: &[String], cost: u64) -> redis::Cmd {
    let bytes = 64 + keys.iter().map(String::len).sum::<usize>();
    let mut cmd = redis::Cmd::with_capacity(4 + keys.len(), bytes);
    cmd.arg("EVALSHA")
        .arg(script.sha.as_str())
        .arg(keys.len())
        .arg(keys);
    if cost != 1 {
        cmd.arg(cost);
    }
    cmd
}
