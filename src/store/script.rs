//! Limiter scripts, assembled from the files in `lua/`.
//!
//! A limiter's script holds only what it uses. One quota: the prelude, then
//! `single.lua` with the strategy's block spliced in, so that a call creates
//! no Lua function (Lua builds a closure for every function definition on
//! every run, which measurably costs Redis time). Several quotas: each used
//! strategy's block wrapped as a function `S[<id>]`, then `multi.lua`. Redis
//! compiles each distinct script once; every decision is one `EVALSHA`.

use crate::strategy::Strategy;

/// A script's text and SHA1.
#[derive(Debug)]
pub(crate) struct LimiterScript {
    pub(crate) source: String,
    pub(crate) sha: String,
}

const PRELUDE: &str = include_str!("../../lua/prelude.lua");
const ZSET: &str = include_str!("../../lua/zset.lua");
const SINGLE: &str = include_str!("../../lua/single.lua");
const MULTI: &str = include_str!("../../lua/multi.lua");
/// Where `single.lua` takes its strategy's block.
const SPLICE: &str = "--@STRATEGY\n";

impl LimiterScript {
    /// The script for a limiter whose quotas use `strategies`, in order.
    pub(crate) fn for_quotas(strategies: &[Strategy]) -> Self {
        let mut source = String::new();
        if let [only] = strategies
            && let Some(fast) = only.spec().lua.fast_path
        {
            source.push_str(fast);
        }
        // Scripts whose strategies never read `now` on Redis's clock skip TIME
        // (see prelude.lua).
        source.push_str(if strategies.iter().any(|s| s.spec().lua.reads_time) {
            "local READS_TIME = true\n"
        } else {
            "local READS_TIME = false\n"
        });
        source.push_str(PRELUDE);
        if strategies.iter().any(|s| s.spec().lua.zset_helpers) {
            source.push_str(ZSET);
        }
        if let [only] = strategies {
            let (head, tail) = SINGLE.split_once(SPLICE).unwrap_or((SINGLE, ""));
            source.push_str(head);
            source.push_str("do\n");
            for part in only.spec().lua.body {
                source.push_str(part);
            }
            source.push_str("end\n");
            source.push_str(tail);
        } else {
            source.push_str("local S = {}\n");
            for s in Strategy::ALL {
                if !strategies.contains(&s) {
                    continue;
                }
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
            source.push_str(MULTI);
        }
        let sha = redis::Script::new(&source).get_hash().to_owned();
        LimiterScript { source, sha }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_quota_scripts_define_no_function_per_call() {
        for s in Strategy::ALL {
            let script = LimiterScript::for_quotas(&[s]);
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
        let [a, b, ..] = Strategy::ALL;
        let multi = LimiterScript::for_quotas(&[b, a]);
        assert!(multi.source.contains(&format!("S[{}] = function(", a.id())));
        assert!(multi.source.contains(&format!("S[{}] = function(", b.id())));
    }
}
