//! `serde` support (feature `serde`): [`Rate`], [`Quota`], [`Plan`] and
//! [`PlansConfig`] in the same notation as their `FromStr`, from any format
//! (TOML, YAML, JSON).
//!
//! - a rate: `"100/minute"`;
//! - a quota: `"gcra 60/min burst=10 name=minute"`, a bare rate, or a table
//!   `{ strategy = "gcra", rate = "60/min", burst = 10, name = "minute" }`
//!   (`shadow = true`, or ` shadow` in the text, for a quota in shadow mode;
//!   `aligned = true`, or ` aligned`, for a fixed window aligned to the epoch)
//!   (strategy default `gcra`);
//! - a plan: `"100/minute; 10000/day"` (the text notation), or a table
//!   `{ quotas = [ ... ] }` (quotas: a list, or one string), with
//!   `unlimited = true` and `shadow = true`;
//! - plans: `{ default = "free", plans = { free = ..., pro = ... } }`.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::config::{Plan, PlansConfig};
use crate::error::ConfigError;
use crate::quota::Quota;
use crate::rate::Rate;
use crate::strategy::Strategy;

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate such as \"100/minute\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Rate, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

impl Serialize for Strategy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Strategy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Strategy;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a strategy name such as \"gcra\" or \"fixed-window\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Strategy, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A quota's table form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaTable {
    #[serde(default = "gcra")]
    strategy: Strategy,
    rate: Rate,
    burst: Option<u64>,
    name: Option<String>,
    #[serde(default)]
    shadow: bool,
    #[serde(default)]
    aligned: bool,
    /// `month@Europe/Paris` (feature `calendar`).
    #[cfg(feature = "calendar")]
    calendar: Option<String>,
}

fn gcra() -> Strategy {
    Strategy::Gcra
}

impl Serialize for Quota {
    /// The table form (`strategy`, `rate`, and `burst`, `name`, `aligned` and `shadow` if set).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("strategy", &self.strategy())?;
        m.serialize_entry("rate", &self.rate())?;
        if let Some(burst) = self.explicit_burst() {
            m.serialize_entry("burst", &burst)?;
        }
        if let Some(name) = self.explicit_name() {
            m.serialize_entry("name", name)?;
        }
        if self.is_aligned() {
            m.serialize_entry("aligned", &true)?;
        }
        #[cfg(feature = "calendar")]
        if let Some(c) = self.calendar_window() {
            m.serialize_entry("calendar", &c.to_string())?;
        }
        if self.is_shadow() {
            m.serialize_entry("shadow", &true)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Quota {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Quota;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quota: \"gcra 60/min burst=10\" or { strategy, rate, burst, name, aligned, shadow }")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Quota, E> {
                s.parse::<Quota>().map_err(nested)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Quota, A::Error> {
                let t = QuotaTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let mut q = Quota::new(t.strategy, t.rate);
                if let Some(b) = t.burst {
                    q = q.burst(b);
                }
                if let Some(n) = t.name {
                    q = q.name(n);
                }
                if t.aligned {
                    q = q.aligned();
                }
                #[cfg(feature = "calendar")]
                if let Some(c) = t.calendar {
                    q = q.calendar(super::text::parse_calendar(&c).map_err(nested)?);
                }
                Ok(q.shadow(t.shadow))
            }
        }
        d.deserialize_any(V)
    }
}

/// A plan's quotas: a list, or one string in the text notation.
struct Quotas(Vec<Quota>);

impl<'de> Deserialize<'de> for Quotas {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Quotas;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of quotas, or \"100/minute; 10000/day\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Quotas, E> {
                // (the plan's `quotas[1].rate` is `[1].rate` of this list)
                let plan: Plan = s.parse().map_err(|e: ConfigError| {
                    let field = e.field().strip_prefix("quotas").map(str::to_owned);
                    nested(match field {
                        Some(field) => e.with_field(field),
                        None => e,
                    })
                })?;
                Ok(Quotas(plan.quotas))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Quotas, A::Error> {
                let mut v = Vec::new();
                while let Some(q) = seq.next_element::<Quota>()? {
                    v.push(q);
                }
                Ok(Quotas(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A plan's table form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanTable {
    #[serde(default)]
    quotas: Option<Quotas>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    shadow: bool,
}

impl Serialize for Plan {
    /// The table form.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if self.unlimited {
            m.serialize_entry("unlimited", &true)?;
        } else {
            m.serialize_entry("quotas", &self.quotas)?;
        }
        if self.shadow {
            m.serialize_entry("shadow", &true)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Plan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Plan;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a plan: \"100/minute; 10000/day\" or { quotas, unlimited, shadow }")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Plan, E> {
                s.parse().map_err(nested)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Plan, A::Error> {
                let t = PlanTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let quotas = t.quotas.map(|q| q.0).unwrap_or_default();
                if t.unlimited && !quotas.is_empty() {
                    return Err(de::Error::custom("an unlimited plan has no quotas"));
                }
                let plan = if t.unlimited {
                    Plan::unlimited()
                } else {
                    Plan::new(quotas)
                };
                Ok(plan.shadow(t.shadow))
            }
        }
        d.deserialize_any(V)
    }
}

/// The plans' table form.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlansTable {
    default: String,
    plans: std::collections::BTreeMap<String, Plan>,
}

impl Serialize for PlansConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("default", &self.default)?;
        m.serialize_entry("plans", &self.plans)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for PlansConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t = PlansTable::deserialize(d)?;
        Ok(PlansConfig {
            default: t.default,
            plans: t.plans,
        })
    }
}

thread_local! {
    /// The [`ConfigError`] of the quota or plan whose text failed to parse
    /// during this thread's deserialization (the deserializer keeps only
    /// its message): [`PlansConfig::deserialize_from`] puts it at its path.
    static NESTED: RefCell<Option<ConfigError>> = const { RefCell::new(None) };
}

/// The deserializer's error for `e`, which is kept for
/// [`PlansConfig::deserialize_from`].
fn nested<E: de::Error>(e: ConfigError) -> E {
    let error = E::custom(&e);
    NESTED.with(|n| *n.borrow_mut() = Some(e));
    error
}

impl PlansConfig {
    /// Deserializes plans from any `serde` format, with an error that names
    /// the path of the field at fault:
    /// `plans.pro.quotas[1].rate: invalid rate "10/eon" ...`.
    ///
    /// ```
    /// use tower_redis_ratelimit::plans::PlansConfig;
    ///
    /// let json = r#"{
    ///     "default": "free",
    ///     "plans": {
    ///         "free": "60/min; 1000/day",
    ///         "pro": { "quotas": [{ "strategy": "gcra", "rate": "600/min", "burst": 100, "name": "minute" }] },
    ///         "internal": { "unlimited": true }
    ///     }
    /// }"#;
    /// let config = PlansConfig::deserialize_from(&mut serde_json::Deserializer::from_str(json))?;
    /// assert_eq!(config.default_name(), "free");
    ///
    /// let bad = r#"{
    ///     "default": "free",
    ///     "plans": { "free": { "quotas": ["60/min", { "rate": "10/eon" }] } }
    /// }"#;
    /// let e = PlansConfig::deserialize_from(&mut serde_json::Deserializer::from_str(bad)).unwrap_err();
    /// assert_eq!(e.field(), "plans.free.quotas[1].rate");
    /// # Ok::<(), tower_redis_ratelimit::error::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] whose [`field`](ConfigError::field) is the path.
    pub fn deserialize_from<'de, D: Deserializer<'de>>(d: D) -> Result<Self, ConfigError> {
        NESTED.with(|n| n.borrow_mut().take());
        serde_path_to_error::deserialize(d).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            // a quota's or plan's own error, at its place in the document
            // (its message once, not inside the deserializer's)
            match NESTED.with(|n| n.borrow_mut().take()) {
                Some(inner) => inner.within(&path),
                None => ConfigError::new(path, e.into_inner().to_string()),
            }
        })
    }
}
