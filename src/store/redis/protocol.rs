//! What a Redis store sends and how it reads the answers: the `KEYS`/`ARGV`
//! layout of a decision (the other side of `lua/single.lua` and
//! `lua/multi.lua`), the commands of `release` and `reset`, and the parsing of
//! the script's reply straight into the store's [`QuotaOutcome`]s.
//!
//! Everything a limiter's calls have in common is prepared once, at build, in
//! a [`Prepared`]: the script and the encoded quota arguments. A decision then
//! only writes the keys, the clock reading, the cost and the nonce into one
//! `EVALSHA`, with no script building or number formatting of the quotas.

use std::sync::Arc;
use std::time::Duration;

use super::conn::{Connections, Owned, Pooled, Request, Undo};
use super::script::LimiterScript;
use crate::decision::Lease;
use crate::error::StoreError;
use crate::quota::QuotaSpec;
use crate::store::{Call, Outcome, QuotaOutcome};
use crate::strategy::Strategy;

/// `ARGV[1]` of a decision on Redis's clock; any other value is a manual time
/// in microseconds (see `lua/prelude.lua`).
const SERVER_CLOCK: &str = "T";

/// What a Redis store prepares once per limiter: the decision script and the
/// quotas' script arguments, encoded. Shared by every connection kind.
///
/// A second script (e.g. settling a reservation after the response) would
/// be a field beside [`decide`](Self::decide), prepared here as well.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The script every decision of the limiter runs.
    pub(crate) decide: LimiterScript,
    /// `ARGV[3..]` (after the clock reading and the cost), one entry per argument.
    quota_args: Box<[Vec<u8>]>,
}

impl Prepared {
    /// The script and arguments for a limiter with `quotas`, in order.
    pub(crate) fn new(quotas: &[QuotaSpec]) -> Self {
        // Script arguments after `now` and `cost` (see lua/single.lua, lua/multi.lua).
        let quota_args: Box<[Vec<u8>]> = match quotas {
            [q] if !q.spec().lua.reads_burst => vec![q.limit, q.period_us],
            [q] => vec![q.burst, q.interval_us],
            many => many
                .iter()
                .flat_map(|q| {
                    [
                        u64::from(q.strategy.id()),
                        q.limit,
                        q.period_us,
                        q.burst,
                        q.interval_us,
                    ]
                })
                .collect(),
        }
        .into_iter()
        .map(|v| v.to_string().into_bytes())
        .collect();
        let strategies: Vec<Strategy> = quotas.iter().map(|q| q.strategy).collect();
        Prepared {
            decide: LimiterScript::for_quotas(&strategies),
            quota_args,
        }
    }
}

/// One decision: one `EVALSHA` of the limiter's script.
///
/// `KEYS`: one per quota, all in one hash slot (a key checked in the same
/// script, such as a penalty box, would follow them). `ARGV`: the clock
/// reading (the manual time, or `T` for Redis's clock), the cost, the
/// prepared quota arguments, then the nonce when the call has one.
///
/// A call that may take a concurrency lease (a lease-holding quota, a cost
/// above 0) and does not return its outcome to the caller (its future
/// dropped mid-call, a timeout, an error) gives the lease back: an [`Undo`]
/// sends the lease's `ZREM` after the `EVALSHA`, on the same connection, so
/// no slot stays taken until the lease timeout by a lease nobody holds.
pub(crate) async fn decide<P: Pooled>(
    conns: &Arc<Connections<P>>,
    prepared: &Prepared,
    call: Call<'_>,
) -> Result<Outcome, StoreError> {
    let args = 6 + call.keys.len() + prepared.quota_args.len();
    let bytes = 96
        + call.keys.iter().map(String::len).sum::<usize>()
        + prepared.quota_args.iter().map(Vec::len).sum::<usize>()
        + call.nonce.len();
    let mut cmd = redis::Cmd::with_capacity(args, bytes);
    cmd.arg("EVALSHA")
        .arg(prepared.decide.sha.as_str())
        .arg(call.keys.len())
        .arg(call.keys);
    // ARGV[1]: the manual time (any integer, 0 included), or `T` for
    // Redis's own clock (lua/prelude.lua)
    match call.now_us {
        Some(us) => cmd.arg(us),
        None => cmd.arg(SERVER_CLOCK),
    };
    cmd.arg(call.cost);
    for a in prepared.quota_args.iter() {
        cmd.arg(a.as_slice());
    }
    if !call.nonce.is_empty() {
        cmd.arg(call.nonce);
    }
    let takes_lease = call.cost > 0
        && !call.nonce.is_empty()
        && call.quotas.iter().any(|q| q.spec().holds_leases);
    if !takes_lease {
        let reply: Vec<u8> = conns
            .query(Request::Cmd(&cmd), Some(&prepared.decide), None)
            .await?;
        return parse_reply(&reply, call.keys.len());
    }
    let mut undo = Undo::new(conns, || give_back(&call));
    let reply: Vec<u8> = conns
        .query(
            Request::Cmd(&cmd),
            Some(&prepared.decide),
            Some(undo.sent_on()),
        )
        .await?;
    let outcome = parse_reply(&reply, call.keys.len())?;
    undo.disarm();
    Ok(outcome)
}

/// The release of the lease `call` may have taken, which its caller never saw.
fn give_back(call: &Call<'_>) -> Owned {
    let lease = Lease {
        base: call.base.to_owned(),
        keys: call
            .quotas
            .iter()
            .zip(call.keys)
            .filter(|(q, _)| q.spec().holds_leases)
            .map(|(_, k)| k.clone())
            .collect(),
        member: call.nonce.to_owned(),
        cost: call.cost,
    };
    release_request(&lease)
}

/// `ZREM` of a lease's members from each of its concurrency keys.
fn release_request(lease: &Lease) -> Owned {
    let members: Vec<String> = lease.members().collect();
    if let [key] = lease.keys.as_slice() {
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(key).arg(&members);
        return Owned::Cmd(cmd);
    }
    // several concurrency quotas: their keys share one slot (hash tag)
    let mut pipe = redis::pipe();
    for key in &lease.keys {
        pipe.cmd("ZREM").arg(key).arg(&members).ignore();
    }
    Owned::Pipe(pipe)
}

/// Gives back a lease: `ZREM` of its members from each concurrency key.
pub(crate) async fn release<P: Pooled>(
    conns: &Connections<P>,
    lease: &Lease,
) -> Result<(), StoreError> {
    conns
        .query(release_request(lease).request(), None, None)
        .await
}

/// Forgets a user key's state: one `DEL` of its keys (one slot).
pub(crate) async fn reset<P: Pooled>(
    conns: &Connections<P>,
    keys: &[String],
) -> Result<(), StoreError> {
    let mut cmd = redis::cmd("DEL");
    cmd.arg(keys);
    conns.query(Request::Cmd(&cmd), None, None).await
}

/// Turns the script's reply, a string of space-separated integers (all
/// allowed, then per quota: allowed, remaining, reset after, retry after
/// with -1 for never, delay; times in microseconds), into an [`Outcome`].
pub(super) fn parse_reply(reply: &[u8], quotas: usize) -> Result<Outcome, StoreError> {
    let bad = || {
        StoreError::Protocol(format!(
            "expected {} integers from the limiter script, got {:?}",
            1 + 5 * quotas,
            String::from_utf8_lossy(reply)
        ))
    };
    let mut numbers = reply.split(|b| *b == b' ').map(|part| {
        std::str::from_utf8(part)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
    });
    let mut next = || numbers.next().flatten().ok_or_else(bad);
    let us = |v: i64| Duration::from_micros(v.max(0) as u64);
    let allowed = next()? == 1;
    let mut out = Vec::with_capacity(quotas);
    for _ in 0..quotas {
        let ok = next()? == 1;
        let remaining = next()?;
        let reset = next()?;
        let retry = next()?;
        let delay = next()?;
        out.push(QuotaOutcome {
            allowed: ok,
            remaining: remaining.max(0) as u64,
            reset_after: us(reset),
            retry_after: (retry >= 0 && !ok).then(|| us(retry)),
            delay: us(delay),
        });
    }
    if numbers.next().is_some() {
        return Err(bad());
    }
    Ok(Outcome {
        allowed,
        quotas: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_into_outcomes_and_malformed_ones_are_protocol_errors() {
        let ms = Duration::from_millis;
        let o = parse_reply(b"0 1 4 1000 -1 2000 0 0 3000 5000 0", 2).unwrap();
        assert!(!o.allowed);
        assert_eq!(
            o.quotas,
            [
                QuotaOutcome {
                    allowed: true,
                    remaining: 4,
                    reset_after: ms(1),
                    retry_after: None,
                    delay: ms(2),
                },
                QuotaOutcome {
                    allowed: false,
                    remaining: 0,
                    reset_after: ms(3),
                    retry_after: Some(ms(5)),
                    delay: Duration::ZERO,
                },
            ]
        );
        // never fits: retry -1
        let o = parse_reply(b"0 0 0 0 -1 0", 1).unwrap();
        assert_eq!(o.quotas[0].retry_after, None);
        for bad in [
            &b""[..],
            b"1 1 2 3 4",
            b"1 1 2 3 4 5 6",
            b"1 1 x 3 4 5",
            b"1  1 2 3 4 5",
        ] {
            let e = parse_reply(bad, 1).unwrap_err();
            assert!(matches!(e, StoreError::Protocol(_)), "{e}");
        }
    }
}
