//! The one validation step: a parsed document (a file, or another
//! source's resource) checked with the Go service's rules and our
//! extensions' and added to a [`Config`]; every source's documents go
//! through it ([`Config::add_document`]).
//!
//! [`load_document`] reads as the steps it takes, in order: the notes on
//! what yaml.v2 ignores, the Go service's key check of the whole document,
//! its top (`domain`, `failure_policy`), the domain claimed (new, merged or
//! a duplicate), its policy recorded, then its descriptors
//! ([`descriptor`]) and their limits ([`rate_limit`]). The first error
//! stops the check; its text and where it points are what the loader has
//! always given.

mod descriptor;
mod fields;
mod keys;
mod rate_limit;

use super::yaml::{self, Kind, Node as Y, Scalar};
use super::{Config, ConfigError, LoadOptions, Node, OnStoreError};
use fields::{Ctx, string};
use keys::misplaced;

/// Checks the document `doc` of `name` (a file, or another source's
/// resource) and loads it into `config`: the one validation step of every
/// source.
pub(super) fn load_document(
    config: &mut Config,
    name: &str,
    doc: &yaml::Document,
    options: LoadOptions,
) -> Result<(), ConfigError> {
    let mut ctx = Ctx::new(name);
    note_ignored(&mut ctx, doc);
    let entries = top_entries(&ctx, doc)?;
    let top = read_top(&mut ctx, entries)?;
    let mut root = claim_domain(config, &ctx, &top, options)?;
    record_policy(config, &ctx, &top)?;
    let result = match top.descriptors {
        Some(list) => descriptor::read_descriptors(
            &mut ctx,
            list,
            "descriptors",
            (&format!("{}.", top.domain), ""),
            &mut root,
        ),
        None => Ok(()),
    };
    config.domains.insert(top.domain, root);
    result?;
    config.warnings.append(&mut ctx.warnings);
    Ok(())
}

/// What yaml.v2 accepts silently, noted as warnings: a key given twice in
/// one mapping, documents after the first.
fn note_ignored(ctx: &mut Ctx<'_>, doc: &yaml::Document) {
    for (line, key) in &doc.duplicates {
        ctx.warn(
            "",
            *line,
            format!("key {key:?} is given twice in one mapping: the last one is used"),
        );
    }
    if doc.more_documents {
        ctx.warn(
            "",
            0,
            "only the file's first YAML document is read (as envoyproxy/ratelimit does)",
        );
    }
}

/// The top mapping's entries, once the whole document passes the Go
/// service's key check ([`keys::validate_keys`]); an empty document (or a
/// null) has none, anything else than a mapping is rejected.
fn top_entries<'d>(ctx: &Ctx<'_>, doc: &'d yaml::Document) -> Result<&'d [(Y, Y)], ConfigError> {
    let Some(root) = &doc.root else {
        return Ok(&[]);
    };
    keys::validate_keys(ctx, root, "")?;
    match &root.kind {
        Kind::Map(entries) => Ok(entries),
        _ if root.scalar() == Some(Scalar::Null) => Ok(&[]),
        _ => Err(ctx.err(
            "",
            root.line,
            format!(
                "a file must be a mapping with `domain` and `descriptors`, not {}",
                root.describe()
            ),
        )),
    }
}

/// The top of a document, read ([`read_top`]).
struct Top<'d> {
    /// `domain`, not empty.
    domain: String,
    /// The line of its key (1 when there is none).
    domain_line: usize,
    /// `descriptors`, not yet read.
    descriptors: Option<&'d Y>,
    /// `failure_policy`, and the line of its key.
    policy: Option<(OnStoreError, usize)>,
}

/// Reads the top entries: `domain`, `descriptors`, `failure_policy`
/// (another key is misplaced there); the domain must not be empty.
fn read_top<'d>(ctx: &mut Ctx<'_>, entries: &'d [(Y, Y)]) -> Result<Top<'d>, ConfigError> {
    let mut top = Top {
        domain: String::new(),
        domain_line: 1,
        descriptors: None,
        policy: None,
    };
    for (k, v) in entries {
        let key = k.text().unwrap_or_default();
        match key {
            "domain" => {
                top.domain = string(ctx, v, "domain")?;
                top.domain_line = k.line;
            }
            "descriptors" => top.descriptors = Some(v),
            "failure_policy" => top.policy = Some((failure_policy(ctx, v)?, k.line)),
            _ => misplaced(ctx, key, "", k.line, "at the top of a file")?,
        }
    }
    if top.domain.is_empty() {
        return Err(ctx.err(
            "domain",
            top.domain_line,
            "a file must have a non-empty `domain`",
        ));
    }
    Ok(top)
}

/// The extension `failure_policy`: one of the names of [`OnStoreError`].
fn failure_policy(ctx: &Ctx<'_>, v: &Y) -> Result<OnStoreError, ConfigError> {
    let text = string(ctx, v, "failure_policy")?;
    OnStoreError::parse(&text).ok_or_else(|| {
        ctx.err(
            "failure_policy",
            v.line,
            format!("unknown failure policy {text:?}: one of `allow`, `deny`, `unavailable`"),
        )
    })
}

/// The tree the document's descriptors are added to: its domain's, taken
/// out of `config` while they are read, when domains are merged; a new
/// one for a new domain (which `config` then lists, with its file). A
/// domain already loaded is rejected unless domains are merged.
fn claim_domain(
    config: &mut Config,
    ctx: &Ctx<'_>,
    top: &Top<'_>,
    options: LoadOptions,
) -> Result<Node, ConfigError> {
    let domain = &top.domain;
    match config.domains.remove(domain) {
        Some(existing) if options.merge_domains => Ok(existing),
        Some(existing) => {
            let first = config.files.get(domain).cloned().unwrap_or_default();
            config.domains.insert(domain.clone(), existing);
            Err(ctx.err(
                "domain",
                top.domain_line,
                format!("duplicate domain {domain:?}: {first} has it too"),
            ))
        }
        None => {
            config.order.push(domain.clone());
            config.files.insert(domain.clone(), ctx.file.to_owned());
            Ok(Node::default())
        }
    }
}

/// Records the document's `failure_policy` for its domain: files merged
/// into one domain may repeat it but not disagree.
fn record_policy(config: &mut Config, ctx: &Ctx<'_>, top: &Top<'_>) -> Result<(), ConfigError> {
    let Some((p, line)) = top.policy else {
        return Ok(());
    };
    let domain = &top.domain;
    match config.policies.get(domain) {
        Some((other, file)) if *other != p => Err(ctx.err(
            "failure_policy",
            line,
            format!(
                "failure policy {:?} for domain {domain:?}, but {file} gives it {:?}",
                p.as_str(),
                other.as_str()
            ),
        )),
        Some(_) => Ok(()),
        None => {
            config
                .policies
                .insert(domain.clone(), (p, ctx.file.to_owned()));
            Ok(())
        }
    }
}
