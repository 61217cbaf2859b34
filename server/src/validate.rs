//! `--validate` (a module of the binary): a configuration directory and
//! the quota files loaded as the service would load them at the start,
//! their warnings, domains and rules, without a store or a port.

use std::io::Write;
use std::path::Path;

use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit_server::config::Config;
use tower_redis_ratelimit_server::rlqs::{self, DomainConfig, QuotaOptions, QuotaService};
use tower_redis_ratelimit_server::service::RlsService;

use crate::cli::Args;

/// Why a directory with no rule refuses the start.
pub(crate) fn no_rule(args: &Args, files: usize) -> String {
    format!(
        "no rate limit rule in {} ({files} files read): every request would be \
         allowed; check the directory (--config), or start anyway with \
         --allow-empty-config",
        args.dir.display()
    )
}

/// `--validate`: loads `args.dir` as the service would at the start (its
/// files, with `args.load`; a directory with no rule refused unless
/// `--allow-empty-config`) and builds the service on a [`MemoryStore`] (so
/// what the library rejects of a rule is caught too), then the quota files
/// of `--quota-config` likewise (alone when no directory is given); writes
/// each warning and the error to `err`, one line per domain with its number
/// of rules to `out` (a quota domain's prefixed `quota `). Whether the
/// service would start with them; no store is touched.
pub(crate) fn validate(args: &Args, out: &mut dyn Write, err: &mut dyn Write) -> bool {
    let quota_alone = args.quota.is_some() && args.dir.as_os_str().is_empty();
    let checked = (|| -> Result<Vec<(String, usize)>, String> {
        let mut domains = Vec::new();
        if !quota_alone {
            domains.extend(rate_limit_domains(args, err)?);
        }
        if let Some(path) = &args.quota {
            domains.extend(quota_domains(path, err)?);
        }
        Ok(domains)
    })();
    match checked {
        Ok(domains) => {
            for (domain, n) in domains {
                let s = if n == 1 { "" } else { "s" };
                let _ = writeln!(out, "{domain}: {n} rule{s}");
            }
            true
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            false
        }
    }
}

/// The rate limit directory's domains and their numbers of rules.
fn rate_limit_domains(args: &Args, err: &mut dyn Write) -> Result<Vec<(String, usize)>, String> {
    let files = Config::read_dir(&args.dir).map_err(|e| e.to_string())?;
    let config = Config::from_sources(
        files.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        args.load,
    )
    .map_err(|e| e.to_string())?;
    for w in config.warnings() {
        let _ = writeln!(err, "warning: {w}");
    }
    let domains: Vec<(String, usize)> = config
        .domains()
        .map(|d| (d.to_owned(), config.rules(d).len()))
        .collect();
    // (as at the start: beside the quota service, no rate limit rule is
    // no mistake)
    if domains.iter().all(|(_, n)| *n == 0) && args.quota.is_none() {
        if !args.allow_empty_config {
            return Err(no_rule(args, files.len()));
        }
        let _ = writeln!(
            err,
            "warning: no rate limit rule in {} ({} files read, --allow-empty-config): \
             every request would be allowed",
            args.dir.display(),
            files.len()
        );
    }
    RlsService::new(config, MemoryStore::new(), args.options.clone()).map_err(|e| e.to_string())?;
    Ok(domains)
}

/// The quota files' domains (`quota <domain>`) and their numbers of rules,
/// built into the quota service as the start would build them.
fn quota_domains(path: &Path, err: &mut dyn Write) -> Result<Vec<(String, usize)>, String> {
    let configs = rlqs::load(path).map_err(|e| e.to_string())?;
    for w in configs.iter().flat_map(DomainConfig::warnings) {
        let _ = writeln!(err, "warning: {w}");
    }
    let domains = configs
        .iter()
        .map(|c| (format!("quota {}", c.domain), c.rules.len()))
        .collect();
    QuotaService::new(configs, MemoryStore::new(), QuotaOptions::default())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(domains)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{self, Cli};

    /// A directory of its own, removed on drop.
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new(tag: &str, files: &[(&str, &str)]) -> TempDir {
            let dir = std::env::temp_dir().join(format!("rls-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("temp dir");
            for (name, text) in files {
                std::fs::write(dir.join(name), text).expect("write");
            }
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// `--validate DIR` and more flags: whether it passed, what it wrote
    /// to standard output and to standard error.
    fn validated(dir: &std::path::Path, flags: &[&str]) -> (bool, String, String) {
        let dir = dir.to_str().expect("a UTF-8 path");
        let argv: Vec<&str> = ["--validate", dir]
            .into_iter()
            .chain(flags.iter().copied())
            .collect();
        validated_argv(&argv)
    }

    #[test]
    fn validate_lists_the_domains_of_a_valid_directory() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config");
        let (ok, out, err) = validated(&examples, &[]);
        assert!(ok, "{err}");
        assert!(
            out.starts_with("api: ") && out.ends_with(" rules\n"),
            "{out:?}"
        );
        let dir = TempDir::new(
            "validate-ok",
            &[
                (
                    "a.yaml",
                    "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\nignored: 1\n",
                ),
                (
                    "b.yaml",
                    "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
                ),
            ],
        );
        let (ok, out, err) = validated(&dir.0, &[]);
        assert!(ok, "{err}");
        assert_eq!(out, "a: 1 rule\nb: 2 rules\n");
        assert!(
            err.starts_with("warning: ") && err.contains("a.yaml"),
            "{err:?}"
        );
    }

    #[test]
    fn validate_names_the_file_of_an_invalid_directory() {
        let bad = TempDir::new(
            "validate-bad",
            &[
                (
                    "good.yaml",
                    "domain: g\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                ),
                (
                    "bad.yaml",
                    "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                ),
            ],
        );
        let (ok, out, err) = validated(&bad.0, &[]);
        assert!(!ok);
        assert_eq!(out, "");
        assert!(
            err.starts_with("error: ") && err.contains("bad.yaml"),
            "{err}"
        );
        // two files of one domain: merged with --merge-domains only
        let twice = TempDir::new(
            "validate-twice",
            &[
                (
                    "a.yaml",
                    "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                ),
                (
                    "b.yaml",
                    "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                ),
            ],
        );
        let (ok, _, err) = validated(&twice.0, &[]);
        assert!(!ok && err.contains("b.yaml"), "{err}");
        let (ok, out, err) = validated(&twice.0, &["--merge-domains"]);
        assert!(ok, "{err}");
        assert_eq!(out, "d: 2 rules\n");
        // no rule
        let empty = TempDir::new("validate-empty", &[]);
        let (ok, _, err) = validated(&empty.0, &[]);
        assert!(!ok && err.contains("no rate limit rule"), "{err}");
        let (ok, out, err) = validated(&empty.0, &["--allow-empty-config"]);
        assert!(
            ok && out.is_empty() && err.contains("no rate limit rule"),
            "{err}"
        );
    }

    /// `--validate` as the command line gives it: whether it passed, and
    /// what it wrote to standard output and to standard error.
    fn validated_argv(flags: &[&str]) -> (bool, String, String) {
        let mut argv = vec![std::ffi::OsString::from("ratelimit-server")];
        argv.extend(flags.iter().map(std::ffi::OsString::from));
        let cli = Cli::parse_argv(argv).expect("flags");
        let args = cli::args(cli, |_| None).expect("args");
        assert!(args.validate);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ok = validate(&args, &mut out, &mut err);
        let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8");
        (ok, text(out), text(err))
    }

    #[test]
    fn validate_checks_the_quota_files_too_or_alone() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let (config, quota) = (examples.join("config"), examples.join("quota/quota.yaml"));
        let (config, quota) = (config.to_str().unwrap(), quota.to_str().unwrap());
        // alone: without a directory
        let (ok, out, err) = validated_argv(&["--validate", "--quota-config", quota]);
        assert!(ok, "{err}");
        assert_eq!(out, "quota edge: 3 rules\n");
        // beside a directory, given to --validate or to --config
        for flags in [
            vec!["--validate", config, "--quota-config", quota],
            vec!["--validate", "--config", config, "--quota-config", quota],
        ] {
            let (ok, out, err) = validated_argv(&flags);
            assert!(ok, "{flags:?}: {err}");
            assert!(
                out.starts_with("api: ") && out.ends_with("\nquota edge: 3 rules\n"),
                "{out:?}"
            );
        }
        // a bad quota file fails the check, named, whatever the directory
        let bad = TempDir::new(
            "validate-quota-bad",
            &[
                (
                    "a.yaml",
                    "domain: q\nreporting_interval: 5s\nbuckets:\n  - name: x\n    id: {k: \"*\"}\n    blanket: allow_all\n",
                ),
                (
                    "b.yaml",
                    "domain: q\nreporting_interval: 5s\nbuckets:\n  - name: y\n    id: {k: v}\n    requests_per_unit: 10\n    unit: fortnight\n",
                ),
            ],
        );
        let dir = bad.0.to_str().unwrap();
        let (ok, out, err) = validated_argv(&["--validate", config, "--quota-config", dir]);
        assert!(!ok);
        assert_eq!(out, "", "nothing is listed when a part fails");
        assert!(
            err.starts_with("error: ") && err.contains("b.yaml"),
            "{err}"
        );
        // the warnings of a valid one (a reporting interval under 5 s)
        let warned = TempDir::new(
            "validate-quota-warn",
            &[(
                "q.yaml",
                "domain: q\nreporting_interval: 1s\nbuckets:\n  - name: x\n    id: {k: \"*\"}\n    requests_per_unit: 10\n    unit: second\n",
            )],
        );
        let (ok, out, err) =
            validated_argv(&["--validate", "--quota-config", warned.0.to_str().unwrap()]);
        assert!(ok, "{err}");
        assert_eq!(out, "quota q: 1 rule\n");
        assert!(err.starts_with("warning: "), "{err:?}");
        // beside the quota files, a directory with no rule starts (and passes)
        let empty = TempDir::new("validate-quota-empty", &[]);
        let (ok, out, err) = validated_argv(&[
            "--validate",
            empty.0.to_str().unwrap(),
            "--quota-config",
            quota,
        ]);
        assert!(ok && out == "quota edge: 3 rules\n", "{out:?} {err}");
        // nothing to check: refused, as a start without a directory is
        let cli = Cli::parse_argv(["ratelimit-server", "--validate"]).expect("flags");
        assert!(cli::args(cli, |_| None).is_err());
    }
}
