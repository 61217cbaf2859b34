//! [`RateLimiter`]: the type, public at the crate root only (re-exported
//! there); its methods, builder and state are in [`limiter`](crate::limiter).

use std::sync::Arc;

use super::Inner;

/// Decides whether requests identified by a key may proceed, under one or more [`Quota`](crate::Quota)s.
///
/// Cheap to clone (an `Arc`); clones share the store and configuration.
///
/// ```
/// use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder()
///     .store(MemoryStore::new())
///     .prefix("api")
///     .quota(Quota::gcra(Rate::per_minute(60)).burst(10).name("minute"))
///     .quota(Quota::fixed_window(Rate::per_day(10_000)).name("day"))
///     .build()?;
///
/// let d = limiter.check("user:42").await?;
/// assert!(d.allowed());
/// assert_eq!(d.quota().as_ref(), "minute");
/// assert_eq!(d.remaining(), 9);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    pub(super) inner: Arc<Inner>,
}
