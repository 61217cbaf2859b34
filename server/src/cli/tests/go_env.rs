//! envoyproxy/ratelimit's variables: those honoured, those translated
//! (its addresses, its directory, its `REDIS_*` forms), those refused by
//! name and those noted as ignored.

use std::net::SocketAddr;
use std::path::PathBuf;

use tower_redis_ratelimit_server::config::Charge;
use tower_redis_ratelimit_server::service::{GoHeaders, NearLimitRatio};

use super::{bare, p};
use crate::cli::StoreChoice;

#[test]
fn go_switches_are_honoured() {
    let a = p(
        &[],
        &[
            ("SHADOW_MODE", "true"),
            ("QUOTA_MODE", "true"),
            ("MERGE_DOMAIN_CONFIG", "1"),
            ("NEAR_LIMIT_RATIO", "0.5"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "True"),
            ("LIMIT_REMAINING_HEADER", "X-Left"),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ],
    )
    .unwrap();
    assert!(a.options.shadow_mode);
    assert!(a.options.quota_mode);
    assert!(a.load.merge_domains);
    assert_eq!(
        a.options.near_limit_ratio,
        NearLimitRatio::new(0.5).unwrap()
    );
    assert_eq!(
        a.options.go_headers,
        Some(GoHeaders {
            limit: "RateLimit-Limit".into(),
            remaining: "X-Left".into(),
            reset: "RateLimit-Reset".into(),
        })
    );
    assert!(a.notes.iter().any(|n| n.contains("never counted")));
    assert_eq!(a.options.charge, Charge::Admitted);
    let a = p(
        &["--charge", "always"],
        &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
    )
    .unwrap();
    assert_eq!(a.options.charge, Charge::Always, "the flag wins");
    assert_eq!(p(&[], &[]).unwrap().options.charge, Charge::Always);
    // off, and the IETF headers stay off
    let a = p(
        &[],
        &[
            ("SHADOW_MODE", "false"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "0"),
        ],
    )
    .unwrap();
    assert!(!a.options.shadow_mode);
    assert!(!a.options.quota_mode);
    assert_eq!(a.options.go_headers, None);
    assert!(!a.options.headers);
    assert!(p(&["--quota-mode"], &[]).unwrap().options.quota_mode);
}

#[test]
fn go_addresses_and_directory() {
    let a = bare(
        &[],
        &[
            ("RUNTIME_ROOT", "/srv/rt"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("GRPC_PORT", "9081"),
            ("USE_PROMETHEUS", "true"),
        ],
    )
    .unwrap();
    assert_eq!(a.dir, PathBuf::from("/srv/rt/ratelimit/config"));
    assert_eq!(a.grpc, SocketAddr::from(([0, 0, 0, 0], 9081)));
    assert_eq!(a.metrics, Some(SocketAddr::from(([0, 0, 0, 0], 9090))));
    let a = bare(
        &["--config", "/c", "--grpc", "127.0.0.1:1"],
        &[
            ("RUNTIME_ROOT", "/srv/rt"),
            ("GRPC_HOST", "127.0.0.2"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", "127.0.0.1:9102"),
        ],
    )
    .unwrap();
    assert_eq!(a.dir, PathBuf::from("/c"));
    assert_eq!(a.grpc, SocketAddr::from(([127, 0, 0, 1], 1)));
    assert_eq!(a.metrics, Some(SocketAddr::from(([127, 0, 0, 1], 9102))));
    let a = bare(&[], &[("RUNTIME_APPDIRECTORY", "limits")]).unwrap();
    assert_eq!(a.dir, PathBuf::from("/srv/runtime_data/current/limits"));
    // without a flag
    let a = p(&[], &[("GRPC_HOST", "127.0.0.3")]).unwrap();
    assert_eq!(a.grpc, SocketAddr::from(([127, 0, 0, 3], 8081)));
    assert_eq!(
        p(&[], &[]).unwrap().grpc,
        SocketAddr::from(([127, 0, 0, 1], 8081))
    );
    let e = bare(&[], &[]).expect_err("no directory");
    assert!(
        e.contains("--config is required") && e.contains("RUNTIME_ROOT"),
        "{e}"
    );
}

#[test]
fn go_redis_settings_are_translated() {
    let redis = |url: &str| StoreChoice::Redis {
        url: url.into(),
        ca: None,
    };
    for (env, store) in [
        (
            &[("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "redis:6379")][..],
            redis("redis://redis:6379/"),
        ),
        (
            &[("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")],
            redis("unix:///var/run/nutcracker/ratelimit.sock"),
        ),
        (
            &[
                ("REDIS_SOCKET_TYPE", "TCP"),
                ("REDIS_URL", "h:6380"),
                ("REDIS_TLS", "true"),
                ("REDIS_AUTH", "user:p@ss"),
            ],
            redis("rediss://user:p%40ss@h:6380/"),
        ),
        (
            &[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "h:1"),
                ("REDIS_AUTH", "secret"),
            ],
            redis("redis://:secret@h:1/"),
        ),
        (
            &[("REDIS_TYPE", "cluster"), ("REDIS_URL", "a:7000, b:7001")],
            StoreChoice::Cluster {
                urls: vec!["redis://a:7000/".into(), "redis://b:7001/".into()],
            },
        ),
        (
            &[
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
                ("REDIS_SENTINEL_AUTH", "pw"),
            ],
            StoreChoice::Sentinel {
                urls: vec![
                    "redis://:pw@s1:26379/".into(),
                    "redis://:pw@s2:26379/".into(),
                ],
                master: "mymaster".into(),
            },
        ),
        (
            &[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "h:6379"),
                ("REDIS_TLS", "true"),
                ("REDIS_TLS_CACERT", "/ca.pem"),
            ],
            StoreChoice::Redis {
                url: "rediss://h:6379/".into(),
                ca: Some("/ca.pem".into()),
            },
        ),
        // ours, with its scheme
        (
            &[("REDIS_URL", "redis://x:1/"), ("REDIS_TYPE", "single")],
            redis("redis://x:1/"),
        ),
        (&[("BACKEND_TYPE", "redis")], StoreChoice::Memory),
    ] {
        assert_eq!(p(&[], env).map(|a| a.store), Ok(store), "{env:?}");
    }
    // a flag wins
    let a = p(
        &["--redis", "redis://flag/"],
        &[
            ("REDIS_TYPE", "cluster"),
            ("REDIS_URL", "a:1,b:2"),
            ("BACKEND_TYPE", "memcache"),
        ],
    )
    .unwrap();
    assert_eq!(a.store, redis("redis://flag/"));
}

#[test]
fn go_settings_without_an_equivalent_refuse_the_start_by_name() {
    for (env, needle) in [
        (
            &[("BACKEND_TYPE", "memcache")][..],
            "BACKEND_TYPE=\"memcache\"",
        ),
        (&[("REDIS_PERSECOND", "true")], "REDIS_PERSECOND=true"),
        (&[("CACHE_KEY_PREFIX", "a:")], "CACHE_KEY_PREFIX=\"a:\""),
        (
            &[("RESPONSE_DYNAMIC_METADATA", "t")],
            "RESPONSE_DYNAMIC_METADATA=t",
        ),
        (
            &[("GRPC_SERVER_USE_TLS", "true")],
            "GRPC_SERVER_USE_TLS=true",
        ),
        (&[("GRPC_UDS", "/tmp/rl.sock")], "GRPC_UDS=\"/tmp/rl.sock\""),
        (
            &[("REDIS_TLS_CLIENT_CERT", "/c.pem")],
            "REDIS_TLS_CLIENT_CERT",
        ),
        (
            &[("SHADOW_MODE", "yes")],
            "SHADOW_MODE=\"yes\": true or false",
        ),
        (&[("NEAR_LIMIT_RATIO", "1.5")], "NEAR_LIMIT_RATIO=\"1.5\""),
        (
            &[
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
                ("LIMIT_RESET_HEADER", "a b"),
            ],
            "LIMIT_RESET_HEADER=\"a b\"",
        ),
        (
            &[("USE_PROMETHEUS", "true"), ("PROMETHEUS_PATH", "/stats")],
            "PROMETHEUS_PATH=\"/stats\"",
        ),
        (
            &[("GRPC_PORT", "http")],
            "GRPC_HOST/GRPC_PORT: port \"http\"",
        ),
        (
            &[("REDIS_TYPE", "ring"), ("REDIS_URL", "a:1")],
            "REDIS_TYPE=\"ring\"",
        ),
        (
            &[("REDIS_SOCKET_TYPE", "udp"), ("REDIS_URL", "a:1")],
            "REDIS_SOCKET_TYPE=\"udp\"",
        ),
        (
            &[("REDIS_URL", "/run/r.sock"), ("REDIS_AUTH", "pw")],
            "is a Unix socket",
        ),
        (
            &[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "s1:26379")],
            "<master name>,<host:port>",
        ),
        (
            &[
                ("REDIS_TYPE", "sentinel"),
                ("REDIS_URL", "m,s1:1"),
                ("REDIS_AUTH", "pw"),
            ],
            "plain TCP without credentials",
        ),
        (
            &[("REDIS_URL", "redis://h/"), ("REDIS_AUTH", "pw")],
            "put the credentials in the URL",
        ),
        (
            &[("REDIS_URL", "redis://h/"), ("REDIS_TYPE", "cluster")],
            "with REDIS_TYPE",
        ),
        (
            &[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "h:1"),
                ("REDIS_TLS_CACERT", "/ca"),
            ],
            "should be rediss://",
        ),
    ] {
        let e = p(&[], env).expect_err(needle);
        assert!(e.contains(needle), "{env:?}: {e}");
    }
    let e = bare(
        &[],
        &[("CONFIG_TYPE", "GRPC_XDS_DELTA"), ("RUNTIME_ROOT", "/r")],
    )
    .expect_err("delta xDS");
    assert!(
        e.contains("CONFIG_TYPE=\"GRPC_XDS_DELTA\": FILE (--config-type files) or GRPC_XDS_SOTW"),
        "{e}"
    );
    let e = p(&[], &[("REDIS_URL", "localhost:6379")]).expect_err("not a path");
    assert!(e.contains("REDIS_SOCKET_TYPE=tcp"), "{e}");
    // set to what they are by default, they change nothing
    for env in [
        &[("QUOTA_MODE", "false")][..],
        &[("REDIS_PERSECOND", "0")],
        &[("CONFIG_TYPE", "file")],
    ] {
        assert!(p(&[], env).is_ok(), "{env:?}");
    }
}

#[test]
fn go_settings_that_only_tune_go_are_noted() {
    let a = p(
        &[],
        &[
            ("REDIS_POOL_SIZE", "20"),
            ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ],
    )
    .unwrap();
    assert_eq!(a.notes.len(), 2, "{:?}", a.notes);
    assert!(
        a.notes
            .iter()
            .any(|n| n.starts_with("REDIS_POOL_SIZE=20 ignored"))
    );
}

/// `PORT` (and `HOST`, Go's `0.0.0.0` without it) serves `/healthcheck`;
/// what they cannot give is a note, never a refusal: `HOST` alone, the
/// gRPC port, a host that does not resolve. `--http` on the gRPC port is
/// refused, naming both.
#[test]
fn host_and_port_serve_the_healthcheck_and_never_refuse_the_start() {
    let a = p(&[], &[("PORT", "8080")]).unwrap();
    assert_eq!(a.http, Some(SocketAddr::from(([0, 0, 0, 0], 8080))));
    let a = p(&[], &[("HOST", "127.0.0.1"), ("PORT", "8080")]).unwrap();
    assert_eq!(a.http, Some(SocketAddr::from(([127, 0, 0, 1], 8080))));
    let a = p(&[], &[("HOST", "buildbox-42")]).unwrap();
    assert_eq!(a.http, None);
    let a = p(&["--grpc", "0.0.0.0:9000"], &[("PORT", "9000")]).unwrap();
    assert_eq!(a.http, None);
    assert!(
        a.notes
            .iter()
            .any(|n| n.contains("PORT=9000 is the gRPC port")),
        "{:?}",
        a.notes
    );
    let a = p(&[], &[("HOST", "no-such-host.invalid"), ("PORT", "8080")]).unwrap();
    assert_eq!(a.http, None);
    assert!(
        a.notes.iter().any(|n| n.contains("does not resolve")),
        "{:?}",
        a.notes
    );
    let a = p(&["--http", "127.0.0.1:7000"], &[("PORT", "8080")]).unwrap();
    assert_eq!(a.http, Some(SocketAddr::from(([127, 0, 0, 1], 7000))));
    let e = p(&["--grpc", "127.0.0.1:9000", "--http", "0.0.0.0:9000"], &[]).unwrap_err();
    assert!(
        e.contains("--http 0.0.0.0:9000") && e.contains("--grpc"),
        "{e}"
    );
    assert!(
        p(
            &["--grpc", "127.0.0.1:9000", "--http", "127.0.0.2:9000"],
            &[]
        )
        .is_ok()
    );
}
