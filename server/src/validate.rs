//! `--validate` (a module of the binary): a configuration directory
//! loaded as the service would load it at the start, its warnings, its
//! domains and their rules, without a store or a port.

use std::io::Write;

use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit_server::config::Config;
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
/// what the library rejects of a rule is caught too); writes each warning
/// and the error to `err`, one line per domain with its number of rules to
/// `out`. Whether the service would start with it; no store is touched.
pub(crate) fn validate(args: &Args, out: &mut dyn Write, err: &mut dyn Write) -> bool {
    let checked = (|| -> Result<Vec<(String, usize)>, String> {
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
        if domains.iter().all(|(_, n)| *n == 0) {
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
        RlsService::new(config, MemoryStore::new(), args.options.clone())
            .map_err(|e| e.to_string())?;
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
        let mut argv = vec!["ratelimit-server".into(), "--validate".into(), dir.into()];
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
}
