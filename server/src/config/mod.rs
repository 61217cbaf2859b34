//! envoyproxy/ratelimit's YAML configuration files, read unchanged.
//!
//! A file has a `domain` and a tree of `descriptors`; each descriptor has a
//! `key`, an optional `value` (a `*` in it is a wildcard), an optional
//! `rate_limit` and nested `descriptors`. The files are read, checked and
//! matched as the Go service (`src/config/config_impl.go`) does them:
//!
//! * the same files are rejected: an empty or duplicate `domain` (unless
//!   [`LoadOptions::merge_domains`], the Go service's
//!   `MERGE_DOMAIN_CONFIG`), an empty `key`, a duplicate key/value under one
//!   parent, an unknown key anywhere (`ratelimit:` for `rate_limit:`), a
//!   mapping key that is not a string, a list of something else than
//!   mappings, a number with a fraction where Go's YAML library would give
//!   a float, a `unit` that is not `second`, `minute`, `hour`, `day`,
//!   `week`, `month` or `year` (any case), a `unit` beside
//!   `unlimited: true`, an empty `replaces` name or one naming its own
//!   limit, `share_threshold` on a value without `*`; each error names the
//!   file, the path inside it and the line ([`ConfigError`]);
//! * scalars are read with YAML 1.1's rules, as Go's `yaml.v2` does
//!   (`shadow_mode: yes` is true; `value: 200` is the string `200`);
//! * what Go accepts and ignores is accepted and ignored, with a
//!   [`warning`](Config::warnings): a known key in the wrong place (say
//!   `shadow_mode` inside `rate_limit`), a key given twice in one mapping
//!   (the last wins), documents after the first in a file;
//! * [`Config::lookup`] matches a request's descriptor as Go's `GetLimit`
//!   does (see there).
//!
//! Accepted and kept for the steps that use them, with Go's meaning:
//! `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`,
//! `share_threshold`, `metadata` (as a protobuf `Struct`, as Go returns it
//! in dynamic metadata), `name` and `replaces`. `unlimited` with a
//! `requests_per_unit` is accepted, as in Go (the count is ignored).
//!
//! # Extensions
//!
//! Optional fields of `rate_limit` that the Go service does not have (it
//! rejects a file that uses them, as unknown keys):
//!
//! * `strategy`: one of the library's rate strategies by its name
//!   ([`Strategy`]: `fixed-window`, `sliding-window-log`,
//!   `sliding-window-counter`, `token-bucket`, `leaky-bucket`, `gcra`;
//!   `concurrency` is rejected: it holds a lease per request until a
//!   release that Envoy's protocol does not have). Without it a limit is
//!   the Go service's fixed window aligned to the epoch ([`crate::window`]).
//!   A `sliding-window-log` keeps a time per request: at most
//!   [`Quota::MAX_SORTED_SET_LIMIT`](tower_redis_ratelimit::Quota::MAX_SORTED_SET_LIMIT)
//!   (10,000) `requests_per_unit`.
//! * `burst`: a positive integer, for the strategies that take one
//!   ([`Strategy::takes_burst`]); at most 2^40, and at most 4 × 366 days
//!   to refill (`burst` × period / `requests_per_unit`).
//! * `unit_multiplier`: a positive integer `n`, the period is `n` units
//!   (`unit: minute` with `unit_multiplier: 5` is five minutes).
//! * `duration`: a period written as the library's rates write theirs
//!   (`90s`, `500ms`, `2 hours`, `7d`), instead of `unit`.
//! * `calendar`: an IANA time zone (`Europe/Paris`, `UTC`), beside
//!   `unit: month` or `unit: year`: the windows are then that zone's
//!   calendar months (or years), from local midnight on the 1st to the
//!   next, 28 to 31 days and DST changes included
//!   ([`Quota::calendar`](tower_redis_ratelimit::Quota::calendar)), where
//!   the Go service's `month` is 30 days from the epoch (still the meaning
//!   of `unit: month` without `calendar`, so copied files count as in Go).
//!   The `requests_per_unit` is the month's (or year's) budget; the
//!   response's `duration_until_reset` runs to the local midnight. Rejected:
//!   an unknown zone, another unit, a `unit_multiplier`, a `strategy` other
//!   than `fixed-window`.
//! * `charge`: `always`, `over` or `admitted`, when a call's hits are
//!   charged to the limit ([`Charge`]; without it the service's default,
//!   `always`): by default every call's hits are recorded, past the limit
//!   if need be, as the Go service counts them (a usage report is never
//!   lost); `over` records a denied call's hits only on the descriptors it
//!   is over (a client over its own limit spends nothing of a shared one);
//!   `admitted` records nothing of a denied call (checks whose hits a
//!   client chooses).
//!
//! A period is at most 366 days, the library's longest (`unit: day` takes a
//! `unit_multiplier` up to 366, `unit: year` none above 1). What the
//! library would reject of a rule is rejected here, with the path and line
//! of the field, so a service never fails to build from a loaded file.
//!
//! And one at the top of a file, beside `domain`:
//!
//! * `failure_policy`: what the domain answers when the store fails or
//!   does not answer within its timeout ([`OnStoreError`]: `allow`,
//!   `deny` or `unavailable`); without it the service's default. Files
//!   merged into one domain may repeat it but not disagree.
//!
//! # Bounds
//!
//! Whatever a file holds, reading it takes memory and time in proportion
//! to its size: a file (or a directory of them) past one of these bounds is
//! rejected, naming it and the bound, before it is read further (a reload
//! keeps the running configuration):
//!
//! * at most [`Config::MAX_FILE_BYTES`] (16 MiB) a file,
//!   [`Config::MAX_TOTAL_BYTES`] (64 MiB) the files of a directory
//!   together, [`Config::MAX_FILES`] (4,096) files and
//!   [`Config::MAX_DIR_ENTRIES`] (65,536) entries looked at;
//! * lists and mappings nested at most [`Config::MAX_DEPTH`] (128) deep;
//! * anchors and aliases that copy at most the file's size in bytes plus
//!   [`Config::ALIAS_ALLOWANCE`] (262,144) nodes and bytes of text, where
//!   a few hundred bytes of nested aliases would otherwise expand to
//!   billions of nodes (yaml.v2, the Go service's, refuses such files as
//!   "excessive aliasing").

#[cfg(test)]
mod example_tests;
mod load;
#[cfg(test)]
mod tests;
mod yaml;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

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

/// What a domain answers when the store fails (an error, or no answer
/// within the store's timeout) for a descriptor it had to decide: the
/// `failure_policy` extension of a file, or the service's default
/// ([`ServiceOptions::on_store_error`](crate::service::ServiceOptions::on_store_error)).
///
/// Whatever the policy, a descriptor the service could decide (a
/// `requests_per_unit: 0` limit, or one decided before the failure) keeps
/// its answer, and a request that consumed units before the failure gets
/// them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnStoreError {
    /// The undecided descriptors are allowed (`OK`, no current limit): the
    /// request is denied only by a descriptor decided as over its limit.
    /// The library middleware's `FailurePolicy::Open`.
    Allow,
    /// The undecided descriptors are over their limit (`OVER_LIMIT`, so
    /// the request is), except those in shadow mode.
    Deny,
    /// The call fails with gRPC `UNAVAILABLE`, and Envoy's own
    /// `failure_mode_deny` decides (the default, as the Go service, whose
    /// call fails too). The library middleware's `FailurePolicy::Closed`.
    #[default]
    Unavailable,
}

impl OnStoreError {
    /// The policy named `s` (`allow`, `deny`, `unavailable`, any case).
    pub fn parse(s: &str) -> Option<OnStoreError> {
        [
            OnStoreError::Allow,
            OnStoreError::Deny,
            OnStoreError::Unavailable,
        ]
        .into_iter()
        .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// The policy's name, as a file writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnStoreError::Allow => "allow",
            OnStoreError::Deny => "deny",
            OnStoreError::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for OnStoreError {
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
/// ([`ServiceOptions::charge`](crate::service::ServiceOptions::charge),
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

/// One node of a domain's descriptor tree.
#[derive(Debug, Default)]
struct Node {
    /// Children by `key` or `key_value`.
    children: HashMap<String, Node>,
    /// The children whose `key_value` has a `*`, in file order, each with
    /// its `key_value` split at the `*`s.
    wildcards: Vec<(String, Vec<String>)>,
    rule: Option<Rule>,
    value_to_metric: bool,
    share_threshold: bool,
}

/// A warning about something a file holds that the Go service ignores too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The file.
    pub file: String,
    /// The path inside it (`descriptors[0].rate_limit.shadow_mode`).
    pub path: String,
    /// The line, 1-based.
    pub line: usize,
    /// What is ignored.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, &self.file, &self.path, self.line, &self.message)
    }
}

/// Why a configuration was rejected: the file, the path inside it, the
/// line and what is wrong, displayed as
/// `limits/api.yaml: descriptors[1].rate_limit.unit: unknown unit "fortnight" … (line 7)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (as given to the loader, or relative to the directory).
    pub file: String,
    /// The path inside the file; empty for the whole file.
    pub path: String,
    /// The line, 1-based; 0 when it is not known (an unreadable file).
    pub line: usize,
    /// What is wrong.
    pub message: String,
    /// The file or the directory could not be read for a reason of the
    /// machine, not of the configuration: too many open files, out of
    /// memory, interrupted, or a file listed a moment before and gone
    /// when read (as while a ConfigMap's files are swapped). Reading
    /// again later may succeed; [`ConfigWatcher`](crate::reload::ConfigWatcher)
    /// does, without counting a failed load.
    pub transient: bool,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, &self.file, &self.path, self.line, &self.message)
    }
}

impl std::error::Error for ConfigError {}

fn write_located(
    f: &mut fmt::Formatter<'_>,
    file: &str,
    path: &str,
    line: usize,
    message: &str,
) -> fmt::Result {
    write!(f, "{file}: ")?;
    if !path.is_empty() {
        write!(f, "{path}: ")?;
    }
    f.write_str(message)?;
    if line > 0 {
        write!(f, " (line {line})")?;
    }
    Ok(())
}

/// How files are combined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Files with the same `domain` add to it instead of being rejected
    /// (the Go service's `MERGE_DOMAIN_CONFIG=true`); a key/value defined
    /// twice under one parent is still an error.
    pub merge_domains: bool,
}

impl LoadOptions {
    /// Sets [`merge_domains`](Self::merge_domains).
    pub fn merge_domains(mut self, merge: bool) -> Self {
        self.merge_domains = merge;
        self
    }
}

/// A loaded configuration: every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Node>,
    /// Domains in the order their first file was loaded.
    order: Vec<String>,
    /// The file that defined each domain first.
    files: HashMap<String, String>,
    /// Each domain's `failure_policy`, and the file that gave it first.
    policies: HashMap<String, (OnStoreError, String)>,
    warnings: Vec<ConfigWarning>,
}

/// One configuration document, parsed and not yet checked, with the name
/// of where it came from (a file's path, or an xDS resource): what every
/// configuration source gives [`Config::from_documents`].
#[derive(Debug, Clone)]
pub struct Document {
    name: String,
    doc: yaml::Document,
}

impl Document {
    /// Parses a YAML file's `text` (its first document), `name` being its
    /// path: a file past [`Config::MAX_FILE_BYTES`], nested past
    /// [`Config::MAX_DEPTH`], whose aliases copy past
    /// [`Config::ALIAS_ALLOWANCE`] or that is not YAML is rejected, naming
    /// it and the line.
    pub fn parse(name: impl Into<String>, text: &str) -> Result<Document, ConfigError> {
        let name = name.into();
        let doc = load::parse_file(&name, text)?;
        Ok(Document { name, doc })
    }

    /// The document of a [`Tree`], as a source that is not a file gives
    /// it, `name` being where it came from (an xDS resource's name); its
    /// errors have no line. A tree nested past [`Config::MAX_DEPTH`] is
    /// rejected.
    pub fn from_tree(name: impl Into<String>, tree: &Tree) -> Result<Document, ConfigError> {
        let name = name.into();
        let root = tree.to_node(0).ok_or_else(|| ConfigError {
            file: name.clone(),
            path: String::new(),
            line: 0,
            message: format!(
                "nested more than {} lists and mappings deep",
                Config::MAX_DEPTH
            ),
            transient: false,
        })?;
        Ok(Document {
            name,
            doc: yaml::Document {
                root: Some(root),
                duplicates: Vec::new(),
                more_documents: false,
            },
        })
    }

    /// Where the document came from, as its errors and warnings name it.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A document's values with their types, as a source that is not a YAML
/// file gives them (an xDS resource, translated): a file's mapping with
/// `domain` and `descriptors`, and so on down, with the same keys.
#[derive(Debug, Clone, PartialEq)]
pub enum Tree {
    /// No value (an absent field).
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// A number with a fraction (only meaningful in `metadata`: rejected
    /// elsewhere, as in a file).
    Float(f64),
    /// A string, whatever it holds (`"yes"` is no boolean, `"10"` no
    /// number).
    Str(String),
    /// A list.
    List(Vec<Tree>),
    /// A mapping, its entries in order.
    Map(Vec<(String, Tree)>),
}

impl Tree {
    /// The YAML node this tree reads as, `depth` lists and mappings deep;
    /// `None` past [`Config::MAX_DEPTH`].
    fn to_node(&self, depth: usize) -> Option<yaml::Node> {
        let plain = |text: String| yaml::Kind::Scalar {
            text,
            plain: true,
            str_tag: false,
        };
        let kind = match self {
            Tree::Null => plain("null".to_owned()),
            Tree::Bool(b) => plain(b.to_string()),
            Tree::Int(n) => plain(n.to_string()),
            Tree::Float(f) if f.is_nan() => plain(".nan".to_owned()),
            Tree::Float(f) if f.is_infinite() => {
                plain(if *f > 0.0 { ".inf" } else { "-.inf" }.to_owned())
            }
            // (with a fraction or an exponent, so that it reads as a float)
            Tree::Float(f) => plain(format!("{f:e}")),
            Tree::Str(s) => yaml::Kind::Scalar {
                text: s.clone(),
                plain: false,
                str_tag: false,
            },
            Tree::List(_) | Tree::Map(_) if depth >= Config::MAX_DEPTH => return None,
            Tree::List(items) => yaml::Kind::Seq(
                items
                    .iter()
                    .map(|t| t.to_node(depth + 1))
                    .collect::<Option<_>>()?,
            ),
            Tree::Map(entries) => yaml::Kind::Map(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let key = yaml::Node {
                            line: 0,
                            kind: yaml::Kind::Scalar {
                                text: k.clone(),
                                plain: false,
                                str_tag: false,
                            },
                        };
                        Some((key, v.to_node(depth + 1)?))
                    })
                    .collect::<Option<_>>()?,
            ),
        };
        Some(yaml::Node { line: 0, kind })
    }
}

/// What [`Config::lookup_match`] found for a request's descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct Match<'a> {
    /// The configured limit.
    pub rule: &'a Rule,
    /// The name the Go service gives this descriptor's statistics:
    /// with `detailed_metric`, the request's own key and values
    /// (`api.remote_address_10.0.0.1`); with `value_to_metric`, the values
    /// at the levels that ask for it; otherwise [`Rule::full_key`].
    pub metric_key: String,
    /// For each entry of the descriptor, the wildcard value (with its `*`)
    /// that stands for the request's value in the counter's key when it
    /// was matched by a wildcard with `share_threshold: true` (all values
    /// that match share one counter); `None` where the request's own value
    /// is used.
    pub shared_values: Vec<Option<String>>,
}

impl Config {
    /// The largest configuration file read: 16 MiB. A larger one is
    /// rejected unread (by [`read_dir`](Self::read_dir)) or unparsed (by
    /// [`from_sources`](Self::from_sources)).
    pub const MAX_FILE_BYTES: usize = 16 << 20;

    /// The most bytes the files of a directory may hold together: 64 MiB.
    pub const MAX_TOTAL_BYTES: usize = 64 << 20;

    /// The most configuration files (`.yaml`, `.yml`) of a directory:
    /// 4,096.
    pub const MAX_FILES: usize = 4_096;

    /// The most entries (files, directories and links, of any name) that
    /// [`read_dir`](Self::read_dir) looks at: 65,536.
    pub const MAX_DIR_ENTRIES: usize = 65_536;

    /// The deepest nesting of lists and mappings in a file: 128, a
    /// descriptor tree of 62 levels (a request's descriptor has at most
    /// [`ServiceOptions::max_entries`](crate::service::ServiceOptions::max_entries)
    /// entries, 32 by default).
    pub const MAX_DEPTH: usize = 128;

    /// What a file's anchors and aliases may copy, over the file's own
    /// size: 262,144. A copy costs a node for each list, mapping and
    /// scalar it holds, plus the bytes of its scalars' text; a file whose
    /// anchors and aliases copy more than its size in bytes plus this is
    /// rejected before the copy is made (as yaml.v2 refuses "excessive
    /// aliasing": nested aliases that would expand a file of a few hundred
    /// bytes to billions of nodes).
    pub const ALIAS_ALLOWANCE: usize = 1 << 18;

    /// Loads the files of `dir` and its subdirectories whose names end in
    /// `.yaml` or `.yml`, in the order of their paths; errors and warnings
    /// name a file by its path relative to `dir`. Names starting with `.`
    /// are skipped (so a Kubernetes ConfigMap's `..data` links are read
    /// once); symbolic links are followed.
    pub fn load_dir(dir: &Path, options: LoadOptions) -> Result<Config, ConfigError> {
        let sources = Config::read_dir(dir)?;
        Config::from_sources(
            sources.iter().map(|(n, t)| (n.as_str(), t.as_str())),
            options,
        )
    }

    /// The files [`load_dir`](Self::load_dir) reads, as `(name, contents)`
    /// in the order it loads them, unparsed (give them to
    /// [`from_sources`](Self::from_sources)); a watcher compares them to
    /// see whether anything changed.
    ///
    /// Rejected, naming the file or the directory: more than
    /// [`MAX_FILES`](Self::MAX_FILES) files or
    /// [`MAX_DIR_ENTRIES`](Self::MAX_DIR_ENTRIES) entries, a file larger
    /// than [`MAX_FILE_BYTES`](Self::MAX_FILE_BYTES) or files larger than
    /// [`MAX_TOTAL_BYTES`](Self::MAX_TOTAL_BYTES) together (before they are
    /// read), a name that is not a regular file (a FIFO, a device, a link
    /// to nothing), a file that is not UTF-8, and whatever cannot be read
    /// (an error of the machine is [`transient`](ConfigError::transient)).
    /// An empty directory gives no files.
    pub fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, ConfigError> {
        let mut files = Vec::new();
        let mut entries = 0;
        collect(dir, dir, &mut files, &mut entries)?;
        files.sort();
        let mut sources = Vec::with_capacity(files.len());
        let mut total = 0usize;
        for path in files {
            let name = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            let text = read_file(&path, &name, Config::MAX_TOTAL_BYTES - total)?;
            total += text.len();
            sources.push((name, text));
        }
        Ok(sources)
    }

    /// Loads files given as `(name, contents)`, in that order: each is
    /// parsed ([`Document::parse`]) then checked and loaded as
    /// [`from_documents`](Self::from_documents) does.
    pub fn from_sources<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
        options: LoadOptions,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (name, text) in files {
            let doc = load::parse_file(name, text)?;
            load::load_document(&mut config, name, &doc, options)?;
        }
        Ok(config)
    }

    /// Loads parsed documents (files, or the resources of an xDS
    /// snapshot), in that order, with the same checks whatever their
    /// source: the first error names the document ([`Document::name`]),
    /// the path inside it and, for a file, the line.
    pub fn from_documents<'a>(
        documents: impl IntoIterator<Item = &'a Document>,
        options: LoadOptions,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for doc in documents {
            config.add_document(doc, options)?;
        }
        Ok(config)
    }

    /// Checks `doc` and adds it to this configuration, as
    /// [`from_documents`](Self::from_documents) does each document. On an
    /// error the configuration may hold part of `doc`: drop it.
    pub fn add_document(
        &mut self,
        doc: &Document,
        options: LoadOptions,
    ) -> Result<(), ConfigError> {
        load::load_document(self, &doc.name, &doc.doc, options)
    }

    /// The number of rules (`rate_limit`s) of every domain.
    pub fn rule_count(&self) -> usize {
        fn count(node: &Node) -> usize {
            usize::from(node.rule.is_some()) + node.children.values().map(count).sum::<usize>()
        }
        self.domains.values().map(count).sum()
    }

    /// Whether there is no rule at all: no files, or files whose
    /// descriptors have no `rate_limit` (every request is allowed).
    pub fn is_empty(&self) -> bool {
        self.rule_count() == 0
    }

    /// The domains, in the order they were first loaded.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    /// Every rule of `domain`, in no particular order.
    pub fn rules(&self, domain: &str) -> Vec<&Rule> {
        fn walk<'a>(node: &'a Node, out: &mut Vec<&'a Rule>) {
            out.extend(node.rule.as_ref());
            for child in node.children.values() {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        if let Some(root) = self.domains.get(domain) {
            walk(root, &mut out);
        }
        out
    }

    /// The `failure_policy` of `domain`, if its files give one.
    pub fn failure_policy(&self, domain: &str) -> Option<OnStoreError> {
        self.policies.get(domain).map(|(p, _)| *p)
    }

    /// What the files hold that is ignored, as the Go service ignores it.
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// The rule for a request's descriptor (its `(key, value)` entries) in
    /// `domain`, as the Go service's `GetLimit` finds it: at each level the
    /// entry's `key_value` if configured, else the first wildcard
    /// (`key: path, value: "/v1/*"`) that matches it, in file order, else
    /// its `key` alone (a node without `value`, a limit per distinct
    /// value); the limit applies only if the node that the last entry
    /// reaches has one (a descriptor longer or shorter than the configured
    /// path gets none). An unknown domain or no match is no limit.
    ///
    /// As in Go, an entry's key and value are joined with `_` before they
    /// are looked up, so entries that join alike reach one node: `(a, b_c)`
    /// and `(a_b, c)` both match `key: a, value: b_c` (a `key: a_b, value:
    /// c` beside it would be the same node, rejected as a duplicate), and
    /// `(a, b)` matches a node `key: a_b` without a value, as its exact
    /// value, before any wildcard or key-only sibling.
    pub fn lookup(&self, domain: &str, entries: &[(&str, &str)]) -> Option<&Rule> {
        self.lookup_match(domain, entries).map(|m| m.rule)
    }

    /// [`lookup`](Self::lookup), with the names the Go service derives
    /// from the path the entries took ([`Match`]).
    pub fn lookup_match(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Match<'_>> {
        let mut node = self.domains.get(domain)?;
        let mut detailed = String::from(domain);
        let mut enhanced = String::from(domain);
        let mut shared: Vec<Option<String>> = vec![None; entries.len()];
        let mut found = None;
        for (i, &(key, value)) in entries.iter().enumerate() {
            let key_value = format!("{key}_{value}");
            detailed.push('.');
            detailed.push_str(&key_value);
            let mut next = node.children.get(&key_value);
            let mut wildcard: Option<&str> = None;
            if next.is_none() {
                for (pattern, parts) in &node.wildcards {
                    if wildcard_match(parts, &key_value) {
                        next = node.children.get(pattern);
                        wildcard = Some(pattern);
                        break;
                    }
                }
            }
            let by_value = next.is_some();
            if next.is_none() {
                next = node.children.get(key);
            }
            let prefix = format!("{key}_");
            enhanced.push('.');
            enhanced.push_str(key);
            let Some(next) = next else {
                break;
            };
            let shown = match wildcard {
                Some(pattern) => {
                    let wildcard_value = pattern.strip_prefix(&prefix).unwrap_or(pattern);
                    if next.share_threshold {
                        shared[i] = Some(wildcard_value.to_owned());
                        wildcard_value
                    } else if next.value_to_metric {
                        value
                    } else {
                        wildcard_value
                    }
                }
                None if by_value => value,
                None if next.value_to_metric => value,
                None => "",
            };
            if !shown.is_empty() {
                enhanced.push('_');
                enhanced.push_str(shown);
            }
            if i + 1 == entries.len() {
                found = next.rule.as_ref();
            }
            if next.children.is_empty() {
                break;
            }
            node = next;
        }
        let rule = found?;
        let metric_key = if rule.detailed_metric {
            if shared.iter().any(Option::is_some) {
                let mut k = String::from(domain);
                for ((key, value), s) in entries.iter().zip(&shared) {
                    k.push('.');
                    k.push_str(key);
                    match s {
                        Some(p) => {
                            k.push('_');
                            k.push_str(p);
                        }
                        None if !value.is_empty() => {
                            k.push('_');
                            k.push_str(value);
                        }
                        None => {}
                    }
                }
                k
            } else {
                detailed
            }
        } else {
            enhanced
        };
        Some(Match {
            rule,
            metric_key,
            shared_values: shared,
        })
    }
}

/// Whether `value` matches a pattern split at its `*`s (each `*` matches
/// any run of characters, the empty one too), as the Go service's
/// `wildcardMatch`.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in middle {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Adds the configuration files under `dir` to `out`; `entries` counts
/// the entries looked at.
fn collect(
    root: &Path,
    dir: &Path,
    out: &mut Vec<PathBuf>,
    entries: &mut usize,
) -> Result<(), ConfigError> {
    let name = |path: &Path| {
        if path == root {
            root.display().to_string()
        } else {
            path.strip_prefix(root)
                .unwrap_or(path)
                .display()
                .to_string()
        }
    };
    let unreadable = |path: &Path, e: std::io::Error| ConfigError {
        file: name(path),
        path: String::new(),
        line: 0,
        message: format!("cannot read: {e}"),
        // (a directory that is not there is a mistake, not a race)
        transient: is_transient(path, &e)
            && !(path == root && e.kind() == std::io::ErrorKind::NotFound),
    };
    let listing = std::fs::read_dir(dir).map_err(|e| unreadable(dir, e))?;
    for entry in listing {
        let entry = entry.map_err(|e| unreadable(dir, e))?;
        *entries += 1;
        if *entries > Config::MAX_DIR_ENTRIES {
            return Err(too_many(
                root,
                format!(
                    "more than {} entries (files, directories, links): refused",
                    Config::MAX_DIR_ENTRIES
                ),
            ));
        }
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type().map_err(|e| unreadable(&path, e))?;
        // follows a symbolic link (Kubernetes mounts a ConfigMap's files
        // as links into a `..data` directory)
        let is_dir = kind.is_dir() || (kind.is_symlink() && path.is_dir());
        if is_dir {
            collect(root, &path, out, entries)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            if out.len() == Config::MAX_FILES {
                return Err(too_many(
                    root,
                    format!(
                        "more than {} configuration files (.yaml, .yml): refused",
                        Config::MAX_FILES
                    ),
                ));
            }
            out.push(path);
        }
    }
    Ok(())
}

fn too_many(root: &Path, message: String) -> ConfigError {
    ConfigError {
        file: root.display().to_string(),
        path: String::new(),
        line: 0,
        message,
        transient: false,
    }
}

/// Reads the configuration file `path` (named `name`), of at most
/// [`Config::MAX_FILE_BYTES`] and `room` bytes, checking its size before
/// reading it.
fn read_file(path: &Path, name: &str, room: usize) -> Result<String, ConfigError> {
    use std::io::Read;
    let err = |message: String, transient: bool| ConfigError {
        file: name.to_owned(),
        path: String::new(),
        line: 0,
        message,
        transient,
    };
    let io = |e: std::io::Error| {
        let transient = is_transient(path, &e);
        err(format!("cannot read: {e}"), transient)
    };
    let too_large = |size: u64| {
        if size > Config::MAX_FILE_BYTES as u64 {
            Some(err(
                format!(
                    "{size} bytes: a configuration file may hold at most {} MiB",
                    Config::MAX_FILE_BYTES >> 20
                ),
                false,
            ))
        } else if size > room as u64 {
            Some(err(
                format!(
                    "the configuration files hold more than {} MiB together (this one {size} bytes)",
                    Config::MAX_TOTAL_BYTES >> 20
                ),
                false,
            ))
        } else {
            None
        }
    };
    // (follows a link; a FIFO would block the read, a device never end it)
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(err(
            "not a regular file (a configuration file must be one)".to_owned(),
            false,
        ));
    }
    if let Some(e) = too_large(meta.len()) {
        return Err(e);
    }
    let limit = Config::MAX_FILE_BYTES.min(room);
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).min(limit));
    std::fs::File::open(path)
        .and_then(|f| f.take(limit as u64 + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    // (grown since its size was read)
    if let Some(e) = too_large(bytes.len() as u64) {
        return Err(e);
    }
    String::from_utf8(bytes).map_err(|e| {
        err(
            format!(
                "cannot read: not UTF-8 text (an invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            false,
        )
    })
}

/// Whether `e`, met reading `path`, is of the machine rather than of the
/// configuration: out of file descriptors or memory, interrupted, busy,
/// timed out, or `path` gone (listed, then removed before it was read; a
/// link to nothing is the configuration's).
fn is_transient(path: &Path, e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    // EMFILE and ENFILE (the same on Linux, macOS and the BSDs), which
    // std maps to no kind of their own
    #[cfg(unix)]
    if matches!(e.raw_os_error(), Some(23 | 24)) {
        return true;
    }
    match e.kind() {
        ErrorKind::Interrupted
        | ErrorKind::WouldBlock
        | ErrorKind::OutOfMemory
        | ErrorKind::TimedOut
        | ErrorKind::ResourceBusy => true,
        ErrorKind::NotFound => path
            .symlink_metadata()
            .is_err_and(|m| m.kind() == ErrorKind::NotFound),
        _ => false,
    }
}
