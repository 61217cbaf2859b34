//! Limiter scripts, assembled from the files in `lua/`.
//!
//! A limiter's script holds only what it uses: the prelude, the strategies of
//! its quotas, and the single- or multi-quota entry point. Redis compiles each
//! distinct script once; every decision is one `EVALSHA`.

use crate::strategy::Strategy;

/// A script's text and SHA1.
#[derive(Debug)]
pub(crate) struct LimiterScript {
    pub(crate) source: String,
    pub(crate) sha: String,
}

const FIXED_WINDOW_FAST: &str = include_str!("../../lua/fixed_window_fast.lua");
const PRELUDE: &str = include_str!("../../lua/prelude.lua");
const ZSET: &str = include_str!("../../lua/zset.lua");
const TAT: &str = include_str!("../../lua/tat.lua");
const SINGLE: &str = include_str!("../../lua/single.lua");
const MULTI: &str = include_str!("../../lua/multi.lua");

fn strategy_source(s: Strategy) -> &'static str {
    match s {
        Strategy::FixedWindow => include_str!("../../lua/fixed_window.lua"),
        Strategy::SlidingWindowLog => include_str!("../../lua/sliding_window_log.lua"),
        Strategy::SlidingWindowCounter => include_str!("../../lua/sliding_window_counter.lua"),
        Strategy::TokenBucket => include_str!("../../lua/token_bucket.lua"),
        Strategy::LeakyBucket => include_str!("../../lua/leaky_bucket.lua"),
        Strategy::Gcra => include_str!("../../lua/gcra.lua"),
        Strategy::Concurrency => include_str!("../../lua/concurrency.lua"),
    }
}

impl LimiterScript {
    /// The script for a limiter whose quotas use `strategies`, in order.
    pub(crate) fn for_quotas(strategies: &[Strategy]) -> Self {
        let mut parts = Vec::new();
        if strategies == [Strategy::FixedWindow] {
            parts.push(FIXED_WINDOW_FAST);
        }
        // Only fixed-window scripts can decide without Redis's TIME (see prelude.lua).
        parts.push(if strategies.iter().all(|s| *s == Strategy::FixedWindow) {
            "local READS_TIME = false"
        } else {
            "local READS_TIME = true"
        });
        parts.push(PRELUDE);
        if strategies
            .iter()
            .any(|s| matches!(s, Strategy::Gcra | Strategy::LeakyBucket))
        {
            parts.push(TAT);
        }
        if strategies
            .iter()
            .any(|s| matches!(s, Strategy::SlidingWindowLog | Strategy::Concurrency))
        {
            parts.push(ZSET);
        }
        for s in Strategy::ALL {
            if strategies.contains(&s) {
                parts.push(strategy_source(s));
            }
        }
        parts.push(if strategies.len() == 1 { SINGLE } else { MULTI });
        let source = parts.join("\n");
        let sha = redis::Script::new(&source).get_hash().to_owned();
        LimiterScript { source, sha }
    }
}
