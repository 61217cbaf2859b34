//! The limiter script, assembled once from the files in `lua/`.

use std::sync::LazyLock;

/// The script text and its SHA1, computed once per process.
pub(crate) struct LimiterScript {
    pub(crate) source: String,
    pub(crate) sha: String,
}

pub(crate) static LIMITER: LazyLock<LimiterScript> = LazyLock::new(|| {
    let source = [
        include_str!("../../lua/prelude.lua"),
        include_str!("../../lua/fixed_window.lua"),
        include_str!("../../lua/sliding_window_log.lua"),
        include_str!("../../lua/sliding_window_counter.lua"),
        include_str!("../../lua/token_bucket.lua"),
        include_str!("../../lua/gcra.lua"),
        include_str!("../../lua/leaky_bucket.lua"),
        include_str!("../../lua/concurrency.lua"),
        include_str!("../../lua/limiter.lua"),
    ]
    .join("\n");
    let sha = redis::Script::new(&source).get_hash().to_owned();
    LimiterScript { source, sha }
});
