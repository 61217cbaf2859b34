//! `ratelimit-server`: for now, loads and checks a directory of
//! envoyproxy/ratelimit configuration files and prints its domains (or the
//! first error, with its file and path). Serving comes in a later step.
//!
//! ```text
//! ratelimit-server --config <dir> [--merge-domains]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use tower_redis_ratelimit_server::config::{Config, LoadOptions};

const USAGE: &str = "usage: ratelimit-server --config <dir> [--merge-domains]";

fn main() -> ExitCode {
    let mut dir: Option<PathBuf> = None;
    let mut options = LoadOptions::default();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--config") => match args.next() {
                Some(d) => dir = Some(PathBuf::from(d)),
                None => return usage("--config needs a directory"),
            },
            Some("--merge-domains") => options = options.merge_domains(true),
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => return usage(&format!("unknown argument {arg:?}")),
        }
    }
    let Some(dir) = dir else {
        return usage("--config is required");
    };
    match Config::load_dir(&dir, options) {
        Ok(config) => {
            for w in config.warnings() {
                eprintln!("warning: {w}");
            }
            for domain in config.domains() {
                println!("{domain}: {} limits", config.rules(domain).len());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("{problem}\n{USAGE}");
    ExitCode::from(2)
}
