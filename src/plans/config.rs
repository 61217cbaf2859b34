//! [`Plan`] and [`PlansConfig`]: what plans there are, as data (built in
//! code, parsed from the text notation, or deserialized with the `serde`
//! feature), before [`Plans`](super::Plans) builds a limiter for each.

use std::collections::BTreeMap;

use crate::quota::Quota;

/// One plan's limits: its quotas (checked together, all or nothing, as in
/// one [`RateLimiter`](crate::RateLimiter)), or no limit at all.
///
/// ```
/// use tower_redis_ratelimit::plans::Plan;
/// use tower_redis_ratelimit::{Quota, Rate};
///
/// let free = Plan::new([
///     Quota::gcra(Rate::per_minute(60)).name("minute"),
///     Quota::fixed_window(Rate::per_day(1_000)).name("day"),
/// ]);
/// let internal = Plan::unlimited();
/// let trial: Plan = "gcra 10/min name=minute".parse()?; // the text notation
/// # let _ = (free, internal, trial);
/// # Ok::<(), tower_redis_ratelimit::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Plan {
    pub(crate) quotas: Vec<Quota>,
    pub(crate) unlimited: bool,
    pub(crate) shadow: bool,
}

impl Plan {
    /// A plan of these quotas (a bare [`Rate`](crate::Rate) is a
    /// [`Quota::gcra`]). At least one, checked at build.
    pub fn new<Q: Into<Quota>>(quotas: impl IntoIterator<Item = Q>) -> Self {
        Self {
            quotas: quotas.into_iter().map(Into::into).collect(),
            unlimited: false,
            shadow: false,
        }
    }

    /// A plan without limits: its requests make no store call and carry no
    /// rate-limit headers.
    pub fn unlimited() -> Self {
        Self {
            quotas: Vec::new(),
            unlimited: true,
            shadow: false,
        }
    }

    /// Shadow mode for this plan: its requests are decided and counted as
    /// usual, but never denied nor delayed; a denial becomes
    /// [`RateLimitOutcome::ShadowDenied`](crate::middleware::RateLimitOutcome::ShadowDenied),
    /// a delay [`RateLimitOutcome::ShadowDelayed`](crate::middleware::RateLimitOutcome::ShadowDelayed)
    /// (as under [`RateLimitLayer::shadow`](crate::RateLimitLayer::shadow)).
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// The plan's quotas (empty for an unlimited plan).
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// Whether the plan has no limits.
    pub fn is_unlimited(&self) -> bool {
        self.unlimited
    }

    /// Whether the plan is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }
}

/// Every plan by name, and the one a request without a known plan gets.
///
/// The configuration of [`Plans`](super::Plans): built in code, parsed from
/// the text notation ([`FromStr`](std::str::FromStr), what
/// [`Display`](std::fmt::Display) writes and what a shared store keeps), or,
/// with the `serde` feature, deserialized from TOML, YAML or JSON
/// ([`PlansConfig::deserialize_from`]).
///
/// ```
/// use tower_redis_ratelimit::plans::{Plan, PlansConfig};
/// use tower_redis_ratelimit::{Quota, Rate};
///
/// let config = PlansConfig::new("free")
///     .plan("free", Plan::new([Quota::gcra(Rate::per_minute(60)).name("minute")]))
///     .plan("pro", Plan::new([Quota::gcra(Rate::per_minute(600)).name("minute")]))
///     .plan("internal", Plan::unlimited());
/// let text = config.to_string();
/// assert_eq!(text.parse::<PlansConfig>()?, config);
/// # Ok::<(), tower_redis_ratelimit::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct PlansConfig {
    pub(crate) default: String,
    pub(crate) plans: BTreeMap<String, Plan>,
}

impl PlansConfig {
    /// No plans yet; requests whose plan is unknown get `default_plan`
    /// (which must be one of the plans, checked at build).
    pub fn new(default_plan: impl Into<String>) -> Self {
        Self {
            default: default_plan.into(),
            plans: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) the plan `name`.
    pub fn plan(mut self, name: impl Into<String>, plan: Plan) -> Self {
        self.plans.insert(name.into(), plan);
        self
    }

    /// Sets the default plan.
    pub fn default_plan(mut self, name: impl Into<String>) -> Self {
        self.default = name.into();
        self
    }

    /// The default plan's name.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// The plan `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Plan> {
        self.plans.get(name)
    }

    /// Every plan, by name.
    pub fn plans(&self) -> impl Iterator<Item = (&str, &Plan)> {
        self.plans.iter().map(|(n, p)| (n.as_str(), p))
    }
}
