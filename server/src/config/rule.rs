//! What a loaded rule is: [`Rule`], the `rate_limit` of one descriptor
//! node, with its [`Unit`] and its [`Charge`].

use std::fmt;

use tower_redis_ratelimit::strategy::Strategy;

/// The unit of a limit, as envoyproxy/ratelimit's configs name it (and
/// Envoy's `RateLimitResponse.RateLimit.Unit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as the Go service counts a month.
    Month,
    /// 365 days, as the Go service counts a year.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length in seconds, as the Go service's `UnitToDivider`.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The lower-case name, as in a config file.
    pub const fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The unit named `s`, in any case (the Go service upper-cases it and
    /// looks it up in the proto enum; `UNKNOWN` is not a unit).
    pub fn parse(s: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A configured limit: the `rate_limit` of one descriptor node.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The file it was read from (as given to the loader).
    pub file: String,
    /// The Go service's key of the node: the domain and each level's
    /// `key` or `key_value`, joined with `.` (`api.remote_address`,
    /// `api.path_/v1*`); its metric names use it. Two rules of a domain
    /// may share it (a key `b` with a child `c`, and a key `b.c`): see
    /// [`id`](Self::id).
    pub full_key: String,
    /// The rule's identity in its domain: the node path of
    /// [`full_key`](Self::full_key) without the domain, each level's `key`
    /// (or `key_value`, for a node with a `value`) written as its length
    /// in bytes, `:` and itself: `14:remote_address`, `11:path_/login`,
    /// `1:b1:c` for a key `b` with a child `c` where a key `b.c` is
    /// `3:b.c`. The nodes of a domain are distinct, so no two of its rules
    /// share an id; it depends only on that path, so an unchanged rule has
    /// the same id on every load.
    pub id: String,
    /// The path of its `rate_limit` in the file
    /// (`descriptors[0].descriptors[1].rate_limit`).
    pub path: String,
    /// The line of its `rate_limit`, 1-based.
    pub line: usize,
    /// `requests_per_unit` (0 when absent, as in Go: every request is over).
    pub requests_per_unit: u32,
    /// `unit`; `None` when the period is a `duration` or the limit is
    /// unlimited.
    pub unit: Option<Unit>,
    /// `unit_multiplier` (1 when absent).
    pub unit_multiplier: u32,
    /// The period in microseconds: the unit times the multiplier, or the
    /// `duration`; 0 for an unlimited rule.
    pub period_us: u64,
    /// `unlimited: true`: every request is admitted, nothing is counted.
    pub unlimited: bool,
    /// `name` (empty when absent).
    pub name: String,
    /// The `name`s listed in `replaces`.
    pub replaces: Vec<String>,
    /// `shadow_mode` of the node.
    pub shadow_mode: bool,
    /// `quota_mode` of the node.
    pub quota_mode: bool,
    /// `detailed_metric` of the node.
    pub detailed_metric: bool,
    /// `metadata` of the node, as the Go service returns it.
    pub metadata: Option<prost_types::Struct>,
    /// Extension: the strategy; `None` is the Go service's fixed window
    /// aligned to the epoch.
    pub strategy: Option<Strategy>,
    /// Extension: `burst`.
    pub burst: Option<u64>,
    /// Extension: `calendar`, the time zone whose calendar months (or
    /// years) the limit's windows follow.
    pub calendar: Option<tower_redis_ratelimit::Calendar>,
    /// Extension: `charge`, when a call's hits are charged to the limit;
    /// `None`: the service's default.
    pub charge: Option<Charge>,
}

/// When a call's hits are charged to a limit: the extension `charge` of
/// `rate_limit`, else the service's default
/// (`ServiceOptions::charge`,
/// [`Charge::Always`] unless set, as envoyproxy/ratelimit counts).
///
/// The service cannot tell a check before a request from a usage report
/// after the response (Envoy's `apply_on_stream_done`, whose answer Envoy
/// ignores): both are the same call. A report that is denied must still be
/// counted on every descriptor it names, or a budget is overspent; a check
/// that is denied should take nothing, or a client that asks for too much
/// spends the budget of everyone on its descriptors. Which one a rule gets
/// is this setting. Admission is all or nothing under each: a call is
/// admitted only when every descriptor fits, and an admitted call is
/// charged on every descriptor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Charge {
    /// `always`, the default: every call's hits are recorded, admitted or
    /// denied, past the limit if need be (a fixed window's count runs past
    /// the limit, a bucket takes them as debt, repaid at its rate), as the
    /// Go service counts every descriptor of every call. A usage report is
    /// never lost, whichever of its descriptors denied it, and a settle
    /// (`hits_subtrahend`) gives back exactly what its reservation took. A
    /// copied envoyproxy/ratelimit configuration counts as it did there.
    #[default]
    Always,
    /// `over`: when a call is denied, its hits are recorded on the
    /// descriptors that are over their limit, past it, and the descriptors
    /// that had room are left as they were: a client over its own limit
    /// spends nothing of a shared one (a per-organisation limit beside a
    /// per-user one). For rules that see checks before the request and
    /// single-descriptor reports; a report denied by another descriptor of
    /// its call is not counted here.
    Over,
    /// `admitted`: charged only when the call is admitted; a denied call
    /// takes nothing anywhere (all or nothing), as envoyproxy/ratelimit
    /// with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`. For rules that
    /// only see checks before the request, where the hits come from the
    /// client (a `max_tokens`): a request too large for the limit is denied
    /// and spends nothing. A usage report denied here is lost.
    Admitted,
}

impl Charge {
    /// The names, as `charge` takes them.
    pub const NAMES: [&'static str; 3] = ["always", "over", "admitted"];

    /// The setting named `s` (`always`, `over`, `admitted`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "over" => Some(Charge::Over),
            "admitted" => Some(Charge::Admitted),
            "always" => Some(Charge::Always),
            _ => None,
        }
    }
}
