//! The flags: each with its `--help` text and its variable, the defaults
//! (the library's), a flag and its opposite, and what each flag sets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::CommandFactory;
use clap::error::ErrorKind;
use tower_redis_ratelimit_server::config::OnStoreError;
use tower_redis_ratelimit_server::net::ListenerOptions;
use tower_redis_ratelimit_server::service::ServiceOptions;

use super::{args_of, bare, cli, p};
use crate::cli::parse::duration;
use crate::cli::{Cli, Given, STORE_VARIABLES, StoreChoice};

#[test]
fn every_flag_has_its_help_and_its_variable() {
    Cli::command().debug_assert();
    let mut seen = Vec::new();
    for a in Cli::command().get_arguments() {
        let id = a.get_id().as_str();
        if matches!(id, "help" | "version") {
            continue;
        }
        let long = a.get_long().unwrap_or_else(|| panic!("{id}: no long name"));
        let help = a.get_help().map(ToString::to_string).unwrap_or_default();
        assert!(help.len() > 20, "--{long}: help {help:?}");
        let var = a
            .get_env()
            .unwrap_or_else(|| panic!("--{long}: no variable"))
            .to_string_lossy()
            .into_owned();
        let own = format!("RATELIMIT_{}", long.to_ascii_uppercase().replace('-', "_"));
        assert!(
            var == own || STORE_VARIABLES.contains(&var.as_str()),
            "--{long}: {var}"
        );
        assert!(!seen.contains(&var), "{var} twice");
        seen.push(var);
        if a.get_action().takes_values() {
            assert!(a.get_value_names().is_some(), "--{long}: no value name");
        }
    }
    for v in STORE_VARIABLES {
        assert!(seen.iter().any(|s| s == v), "{v} is no flag's");
    }
    assert!(seen.len() >= 30, "{seen:?}");
}

#[test]
fn help_lists_every_flag_its_variable_and_its_default() {
    let e = Cli::parse_argv(["ratelimit-server", "--help"]).expect_err("help");
    // (the command that parses reads no store variable: the help names them)
    assert_eq!((e.kind(), e.exit_code()), (ErrorKind::DisplayHelp, 0));
    // (as one line: --help wraps its text to the terminal's width)
    let help = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for a in Cli::command().get_arguments() {
        if let (Some(long), Some(var)) = (a.get_long(), a.get_env()) {
            assert!(help.contains(&format!("--{long}")), "--{long}: {help}");
            let var = format!("[env: {}]", var.to_string_lossy());
            assert!(help.contains(&var), "{var}: {help}");
        }
    }
    for default in [
        "[default: 250]",
        "[default: 127.0.0.1:8081]",
        "[default: 10s]",
        "[default: always]",
        "[possible values: allow, deny, unavailable]",
    ] {
        assert!(help.contains(default), "{default}: {help}");
    }
    assert!(
        help.contains("SHADOW_MODE") && help.contains("500ms"),
        "{help}"
    );
}

#[test]
fn version_is_the_package_s() {
    let e = Cli::parse_argv(["ratelimit-server", "--version"]).expect_err("version");
    assert_eq!((e.kind(), e.exit_code()), (ErrorKind::DisplayVersion, 0));
    assert_eq!(
        e.to_string().trim(),
        format!("ratelimit-server {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn the_defaults_are_the_library_s() {
    let a = p(&[], &[]).unwrap();
    let d = ServiceOptions::default();
    assert_eq!(
        (
            a.options.max_metric_keys,
            a.options.max_descriptors,
            a.options.max_entries,
            a.options.on_store_error,
            a.options.charge,
            a.options.headers,
        ),
        (
            d.max_metric_keys,
            d.max_descriptors,
            d.max_entries,
            d.on_store_error,
            d.charge,
            d.headers,
        )
    );
    assert_eq!(a.listener, ListenerOptions::default());
    assert!(!a.validate);
}

#[test]
fn a_flag_and_its_opposite() {
    // on the command line, the last one given
    assert_eq!(
        p(&["--watch-interval", "100", "--no-watch"], &[])
            .unwrap()
            .watch,
        None
    );
    assert_eq!(
        p(&["--no-watch", "--watch-interval", "100"], &[])
            .unwrap()
            .watch,
        Some(Duration::from_millis(100))
    );
    assert!(
        p(&["--no-headers", "--headers"], &[])
            .unwrap()
            .options
            .headers
    );
    // a flag given twice: the last value
    assert_eq!(
        p(&["--redis", "redis://a/", "--redis", "redis://b/"], &[])
            .unwrap()
            .store,
        StoreChoice::Redis {
            url: "redis://b/".into(),
            ca: None
        }
    );
    assert!(
        p(&["--shadow-mode", "--shadow-mode"], &[])
            .unwrap()
            .options
            .shadow_mode
    );
    // the command line wins over the other one's variable
    let with_env = |args: &[&str], ids: &[&str]| {
        let mut c = cli(&[&["--config", "/c"], args].concat()).unwrap();
        for id in ids {
            match *id {
                "headers" => c.answers.headers = true,
                "no_headers" => c.answers.no_headers = true,
                "no_watch" => c.configuration.no_watch = true,
                _ => unreachable!("{id}"),
            }
            c.given.insert((*id).into(), Given::Variable);
        }
        args_of(c, &[])
    };
    assert!(
        with_env(&["--headers"], &["no_headers"])
            .unwrap()
            .options
            .headers
    );
    assert!(
        !with_env(&["--no-headers"], &["headers"])
            .unwrap()
            .options
            .headers
    );
    assert!(with_env(&[], &["headers"]).unwrap().options.headers);
    assert_eq!(
        with_env(&["--watch-interval", "100"], &["no_watch"])
            .unwrap()
            .watch,
        Some(Duration::from_millis(100))
    );
    assert_eq!(with_env(&[], &["no_watch"]).unwrap().watch, None);
    let e = with_env(&[], &["headers", "no_headers"]).expect_err("both");
    assert!(
        e.contains("RATELIMIT_HEADERS and RATELIMIT_NO_HEADERS are both set"),
        "{e}"
    );
}

#[test]
fn validate_takes_the_directory_in_place_of_config() {
    let a = bare(&["--validate", "/v", "--merge-domains"], &[]).unwrap();
    assert!(a.validate && a.load.merge_domains);
    assert_eq!(a.dir, PathBuf::from("/v"));
    let a = bare(&["--config", "/c", "--validate", "/v"], &[]).unwrap();
    assert_eq!(a.dir, PathBuf::from("/v"));
}

#[test]
fn policy_watch_and_metrics_flags() {
    let a = p(
        &[
            "--on-store-error",
            "DENY",
            "--no-watch",
            "--metrics",
            "127.0.0.1:9090",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(a.options.on_store_error, OnStoreError::Deny);
    assert_eq!(a.watch, None);
    assert_eq!(a.metrics, Some(SocketAddr::from(([127, 0, 0, 1], 9090))));
    let a = p(&["--watch-interval", "100"], &[]).unwrap();
    assert_eq!(a.watch, Some(Duration::from_millis(100)));
    assert_eq!(a.options.on_store_error, OnStoreError::Unavailable);
    assert_eq!(a.metrics, None);
    assert_eq!(a.options.max_metric_keys, 10_000);
    let a = p(&["--max-metric-keys", "0"], &[]).unwrap();
    assert_eq!(a.options.max_metric_keys, 0);
}

#[test]
fn connection_flags_and_their_defaults() {
    let a = p(&[], &[]).unwrap();
    assert_eq!(a.max_connections, None);
    assert_eq!(a.listener, ListenerOptions::default());
    assert_eq!(a.listener.handshake_timeout, Duration::from_secs(10));
    assert_eq!(a.listener.idle_timeout, Duration::from_secs(300));
    assert_eq!(a.max_concurrent_streams, 1_024);
    assert_eq!(a.max_message_size, 1 << 20);
    assert_eq!(a.shutdown_timeout, Duration::from_secs(10));
    assert!(a.store_check);
    assert!(!a.allow_empty_config);
    let a = p(
        &[
            "--max-connections",
            "50",
            "--handshake-timeout",
            "1500ms",
            "--idle-timeout",
            "2m",
            "--shutdown-timeout",
            "1h",
            "--max-concurrent-streams",
            "8",
            "--max-message-size",
            "4096",
            "--no-store-check",
            "--allow-empty-config",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(a.max_connections, Some(50));
    assert_eq!(a.listener.handshake_timeout, Duration::from_millis(1500));
    assert_eq!(a.listener.idle_timeout, Duration::from_secs(120));
    assert_eq!(a.shutdown_timeout, Duration::from_secs(3600));
    assert_eq!(a.max_concurrent_streams, 8);
    assert_eq!(a.max_message_size, 4096);
    assert!(!a.store_check);
    assert!(a.allow_empty_config);
}

#[test]
fn answer_flags() {
    let a = p(&[], &[]).unwrap();
    assert!(!a.options.headers);
    assert!(!a.options.shadow_mode);
    assert_eq!(a.options.go_headers, None);
    let a = p(
        &[
            "--headers",
            "--shadow-mode",
            "--max-descriptors",
            "8",
            "--max-entries",
            "4",
        ],
        &[],
    )
    .unwrap();
    assert!(a.options.headers);
    assert!(a.options.shadow_mode);
    assert_eq!((a.options.max_descriptors, a.options.max_entries), (8, 4));
    assert!(
        !p(&["--headers", "--no-headers"], &[])
            .unwrap()
            .options
            .headers
    );
}

#[test]
fn durations_take_a_unit() {
    assert_eq!(duration("f", "250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(duration("f", " 10s "), Ok(Duration::from_secs(10)));
    assert_eq!(duration("f", "5m"), Ok(Duration::from_secs(300)));
    assert_eq!(duration("f", "2h"), Ok(Duration::from_secs(7200)));
    for bad in ["10", "0s", "-1s", "1.5s", "s", "", "10 s", "3d"] {
        let e = duration("--idle-timeout", bad).expect_err(bad);
        assert!(e.starts_with(&format!("--idle-timeout {bad:?}")), "{e}");
    }
}
