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
//!   ([`Strategy`](tower_redis_ratelimit::strategy::Strategy):
//!   `fixed-window`, `sliding-window-log`,
//!   `sliding-window-counter`, `token-bucket`, `leaky-bucket`, `gcra`;
//!   `concurrency` is rejected: it holds a lease per request until a
//!   release that Envoy's protocol does not have). Without it a limit is
//!   the Go service's fixed window aligned to the epoch ([`crate::window`]).
//!   A `sliding-window-log` keeps a time per request: at most
//!   [`Quota::MAX_SORTED_SET_LIMIT`](tower_redis_ratelimit::Quota::MAX_SORTED_SET_LIMIT)
//!   (10,000) `requests_per_unit`.
//! * `burst`: a positive integer, for the strategies that take one
//!   ([`Strategy::takes_burst`](tower_redis_ratelimit::strategy::Strategy::takes_burst));
//!   at most 2^40, and at most 4 × 366 days to refill (`burst` × period /
//!   `requests_per_unit`).
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

// One job a file: the types a configuration is made of (`rule`, `policy`,
// `error`, `document`), reading YAML (`yaml`) and directories (`dir`), the
// one validation step every source's documents go through (`validate`),
// and matching a request's descriptor to a rule (`lookup`).
mod dir;
mod document;
mod error;
mod lookup;
mod policy;
mod rule;
mod validate;
pub(crate) mod yaml;

#[cfg(test)]
#[path = "tests/examples/mod.rs"]
mod example_tests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

pub use document::{Document, Tree};
pub use error::{ConfigError, ConfigWarning};
pub use lookup::Match;
pub use policy::OnStoreError;
pub use rule::{Charge, Rule, Unit};

/// A loaded configuration: every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Config {
    /// Each domain's descriptor tree.
    domains: HashMap<String, Node>,
    /// Domains in the order their first file was loaded.
    order: Vec<String>,
    /// The file that defined each domain first.
    files: HashMap<String, String>,
    /// Each domain's `failure_policy`, and the file that gave it first.
    policies: HashMap<String, (OnStoreError, String)>,
    /// What the documents hold that is ignored.
    warnings: Vec<ConfigWarning>,
}

/// One node of a domain's descriptor tree.
#[derive(Debug, Default)]
struct Node {
    /// Children by `key` or `key_value`.
    children: HashMap<String, Node>,
    /// The children whose `key_value` has a `*`, in file order, each with
    /// its `key_value` split at the `*`s.
    wildcards: Vec<(String, Vec<String>)>,
    /// The node's `rate_limit`, if it has one.
    rule: Option<Rule>,
    /// `value_to_metric` of the node.
    value_to_metric: bool,
    /// `share_threshold` of the node.
    share_threshold: bool,
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
    /// `ServiceOptions::max_entries`
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

    /// Loads files given as `(name, contents)`, in that order: each is
    /// parsed ([`Document::parse`]) then checked and loaded as
    /// [`from_documents`](Self::from_documents) does.
    pub fn from_sources<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
        options: LoadOptions,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (name, text) in files {
            let doc = Document::parse(name, text)?;
            config.add_document(&doc, options)?;
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
        validate::load_document(self, &doc.name, &doc.doc, options)
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
}
