//! A joint decision over several limiters on Redis (`src/limiter/joint.rs`):
//! one `EVALSHA` of the joint script (`lua/joint.lua`), whose parts' keys
//! must share one hash slot on a Cluster (the limiter groups them).
//! Never batched; `NOSCRIPT` reloads the script as for any call.

use std::sync::OnceLock;

use super::args::clock_arg;
use super::conn::{Connections, Pooled, Request};
use super::protocol::{bounds_time, quota_outcome, script_numbers_at};
use super::script::LimiterScript;
use crate::error::StoreError;
use crate::store::call::{JointCall, JointMode, JointOutcome, Outcome};

/// The joint script, built once; `records`: the one whose parts' denials
/// may record (with the adjust functions).
pub(crate) fn script(records: bool) -> &'static LimiterScript {
    static PLAIN: OnceLock<LimiterScript> = OnceLock::new();
    static RECORDS: OnceLock<LimiterScript> = OnceLock::new();
    let (cell, records) = if records {
        (&RECORDS, true)
    } else {
        (&PLAIN, false)
    };
    cell.get_or_init(|| LimiterScript::for_joint(records))
}

/// The hash slot of `key` on a store whose calls may only touch one slot
/// (Cluster); `None` on any other.
pub(crate) fn slot_of<P: Pooled>(_: &Connections<P>, key: &str) -> Option<u16> {
    P::SLOTTED.then(|| P::slot_of(key))
}

/// The joint decision of `parts` (all in one slot), consuming if `mode`
/// decides and every part is admitted (else recording, but when `mode`
/// checks only, each part's denial as it says): whether all were
/// admitted, and each part's outcome.
pub(crate) async fn decide<P: Pooled>(
    conns: &Connections<P>,
    parts: &[JointCall<'_>],
    mode: JointMode,
) -> Result<(bool, Vec<JointOutcome>), StoreError> {
    // (a check records nothing: the plain script)
    let records = mode != JointMode::Check && parts.iter().any(|p| p.on_denial.records());
    let script = script(records);
    let cmd = joint_cmd(script, parts, mode);
    let reply: Vec<u8> = conns.query(Request::Cmd(&cmd), Some(script), None).await?;
    parse_joint(&reply, parts)
}

/// The `EVALSHA` of a joint decision (see `lua/joint.lua` for the layout).
fn joint_cmd(script: &LimiterScript, parts: &[JointCall<'_>], mode: JointMode) -> redis::Cmd {
    let keys: usize = parts.iter().map(|p| p.quotas.len()).sum();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha.as_str()).arg(keys);
    for p in parts {
        cmd.arg(&p.keys[..p.quotas.len().min(p.keys.len())]);
    }
    // Redis's TIME is read when a part is on it
    let store_clock = parts.iter().any(|p| p.now_us.is_none());
    let first = parts.first().and_then(|p| p.now_us);
    clock_arg(&mut cmd, if store_clock { None } else { first });
    let mode = match mode {
        JointMode::Check => "0",
        JointMode::Decide => "1",
        JointMode::Denied => "R",
    };
    cmd.arg(mode).arg(parts.len());
    for p in parts {
        clock_arg(&mut cmd, p.now_us);
        cmd.arg(p.cost)
            .arg(p.quotas.len())
            .arg(p.on_denial.script_flag());
        let at = bounds_time(p.now_us);
        for q in p.quotas {
            for v in script_numbers_at(q, at) {
                cmd.arg(v);
            }
            cmd.arg(q.capacity()).arg(u8::from(q.shadow));
        }
    }
    cmd
}

/// The joint script's reply: whether all were admitted, then per part its
/// verdict, its time and its quotas' five numbers.
fn parse_joint(
    reply: &[u8],
    parts: &[JointCall<'_>],
) -> Result<(bool, Vec<JointOutcome>), StoreError> {
    let bad = || {
        StoreError::Protocol(format!(
            "expected a joint decision of {} parts from the joint script, got {:?}",
            parts.len(),
            String::from_utf8_lossy(reply)
        ))
    };
    let mut numbers = reply.split(|b| *b == b' ').map(|part| {
        std::str::from_utf8(part)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
    });
    let mut next = || numbers.next().flatten().ok_or_else(bad);
    let all = next()? == 1;
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        // (the verdict, plus 2 if its denial recorded)
        let verdict = next()?;
        let (allowed, recorded) = (verdict & 1 == 1, verdict & 2 == 2);
        let now = next()?;
        let mut quotas = Vec::with_capacity(p.quotas.len());
        for _ in p.quotas {
            quotas.push(quota_outcome(&mut next)?);
        }
        out.push(JointOutcome {
            outcome: Outcome {
                allowed,
                recorded,
                quotas,
            },
            now,
        });
    }
    if numbers.next().is_some() {
        return Err(bad());
    }
    Ok((all, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Quota, Rate};
    use std::time::Duration;

    #[test]
    fn joint_replies_parse_per_part_and_malformed_ones_are_protocol_errors() {
        let q = Quota::fixed_window(Rate::per_second(5)).compile(0).unwrap();
        let quotas = [q.clone(), q];
        let keys = ["{a:k}:f".to_owned(), "{a:k}:g".to_owned()];
        let part = |n: usize| JointCall {
            user: b"k",
            keys: &keys[..n],
            quotas: &quotas[..n],
            scopes: &[],
            cost: 1,
            now_us: None,
            on_denial: crate::store::on_denial::OnDenial::Nothing,
        };
        let parts = [part(1), part(2)];
        const GOOD: &[u8] = b"0 1 7 1 4 10 -1 0 0 9 1 3 10 -1 0 0 0 0 5 0";
        let (all, out) = parse_joint(GOOD, &parts).unwrap();
        assert!(!all);
        assert_eq!(out.len(), 2);
        assert!(out[0].outcome.allowed && !out[1].outcome.allowed);
        assert_eq!((out[0].now, out[1].now), (7, 9));
        assert_eq!(out[0].outcome.quotas[0].remaining, 4);
        assert_eq!(
            out[1].outcome.quotas[1].retry_after,
            Some(Duration::from_micros(5))
        );
        for bad in [
            &b""[..],
            b"1 1 7 1 4 10 -1 0",
            b"0 1 7 1 4 10 -1 0 0 9 1 3 10 -1 0 0 0 0 5 0 1",
        ] {
            let e = parse_joint(bad, &parts).unwrap_err();
            assert!(matches!(e, StoreError::Protocol(_)), "{e}");
        }
    }

    #[test]
    fn the_joint_command_sends_every_parts_clock_cost_and_numbers() {
        let q = Quota::gcra(Rate::per_second(5))
            .shadow(true)
            .compile(0)
            .unwrap();
        let quotas = [q];
        let keys = ["{a:k}:r".to_owned()];
        let part = |now_us| JointCall {
            user: b"k",
            keys: &keys,
            quotas: &quotas,
            scopes: &[],
            cost: 2,
            now_us,
            on_denial: crate::store::on_denial::OnDenial::Record,
        };
        let args = |parts: &[JointCall<'_>]| -> Vec<String> {
            joint_cmd(script(true), parts, JointMode::Decide)
                .args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                })
                .collect()
        };
        let manual = args(&[part(Some(42)), part(Some(43))]);
        // EVALSHA sha 2 key key 42 1 2, then per part: clock cost 1, what
        // its denial records (2) and 7 numbers
        assert_eq!(manual[2], "2");
        assert_eq!(&manual[5..8], ["42", "1", "2"]);
        assert_eq!(&manual[8..12], ["42", "2", "1", "2"]);
        assert_eq!(
            manual[17..19],
            ["5", "1"],
            "capacity (burst), shadow: {manual:?}"
        );
        assert_eq!(&manual[19..23], ["43", "2", "1", "2"]);
        // a part on Redis's clock: TIME is read (ARGV[1] = T)
        let mixed = args(&[part(Some(42)), part(None)]);
        assert_eq!(mixed[5], "T");
        assert_eq!(mixed[19], "T");
    }
}
