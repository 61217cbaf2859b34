//! xDS: its flags and their defaults, envoyproxy/ratelimit's variables
//! as Envoy Gateway sets them, and `--xds-node-metadata`'s pairs.

use std::path::PathBuf;
use std::time::Duration;

use super::{bare, p};
use crate::cli::xds::{XdsTlsArgs, node_metadata};

#[test]
fn xds_flags_and_their_defaults() {
    let a = bare(&["--config-type", "grpc-xds-sotw"], &[]).expect("xds");
    let x = a.xds.expect("xds args");
    assert_eq!(
        (x.url.as_str(), x.node_id.as_str(), x.tls.is_none()),
        ("localhost:18000", "default", true)
    );
    assert_eq!(x.backoff, (Duration::from_secs(1), Duration::from_secs(60)));
    assert_eq!(x.max_message_size, 16 << 20);
    assert!(!x.start_without_config && !x.files);
    assert_eq!(a.dir, PathBuf::new(), "no directory read");
    let a = bare(
        &[
            "--config-type=grpc-xds-sotw",
            "--xds-server-url=https://eg:18001",
            "--xds-node-id=rl",
            "--xds-node-metadata=a=1, b = 2",
            "--xds-tls-ca=/ca.pem",
            "--xds-tls-cert=/c.pem",
            "--xds-tls-key=/k.pem",
            "--xds-tls-server-name=eg.svc",
            "--xds-backoff-initial=100ms",
            "--xds-backoff-max=5s",
            "--xds-max-message-size=1048576",
            "--xds-start-without-config",
            "--config=/initial",
        ],
        &[],
    )
    .expect("every xds flag");
    let x = a.xds.expect("xds args");
    assert_eq!(x.url, "https://eg:18001");
    assert_eq!(x.node_id, "rl");
    assert_eq!(
        x.node_metadata,
        [
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "2".to_owned())
        ]
    );
    assert_eq!(
        x.tls,
        Some(XdsTlsArgs {
            ca: Some("/ca.pem".into()),
            identity: Some(("/c.pem".into(), "/k.pem".into())),
            server_name: Some("eg.svc".into()),
        })
    );
    assert_eq!(
        x.backoff,
        (Duration::from_millis(100), Duration::from_secs(5))
    );
    assert_eq!(x.max_message_size, 1 << 20);
    assert!(x.start_without_config && x.files);
    assert_eq!(a.dir, PathBuf::from("/initial"));
    // files by default: no xDS
    assert!(p(&[], &[]).expect("files").xds.is_none());
    for (args, needle) in [
        (
            &["--config-type=grpc"][..],
            "--config-type \"grpc\": files or grpc-xds-sotw",
        ),
        (
            &["--config-type=grpc-xds-sotw", "--xds-tls-cert=/c"],
            "go together",
        ),
        (
            &["--config-type=grpc-xds-sotw", "--xds-tls-ca=/c"],
            "need --xds-tls",
        ),
        (
            &[
                "--config-type=grpc-xds-sotw",
                "--xds-backoff-initial=10s",
                "--xds-backoff-max=1s",
            ],
            "shorter than",
        ),
        (
            &["--config-type=grpc-xds-sotw", "--xds-max-message-size=10"],
            "at least 1024",
        ),
    ] {
        let e = bare(args, &[]).expect_err(needle);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    let e = bare(&["--xds-backoff-max=soon"], &[]).expect_err("a duration");
    assert!(e.contains("--xds-backoff-max \"soon\""), "{e}");
}

#[test]
fn envoyproxy_ratelimit_s_xds_variables_are_translated() {
    // as Envoy Gateway sets them (its RUNTIME_* are not read with xDS)
    let env = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s"),
        ("XDS_CLIENT_BACKOFF_JITTER", "true"),
        ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "4194304"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ];
    let a = bare(&[], &env).expect("Envoy Gateway's environment");
    let x = a.xds.expect("xds");
    assert_eq!(
        (x.url.as_str(), x.node_id.as_str()),
        ("envoy-gateway:18001", "envoy-ratelimit")
    );
    assert_eq!(x.node_metadata, [("zone".to_owned(), "a".to_owned())]);
    assert_eq!(
        x.tls,
        Some(XdsTlsArgs {
            ca: Some("/certs/ca.crt".into()),
            identity: Some(("/certs/tls.crt".into(), "/certs/tls.key".into())),
            server_name: Some("envoy-gateway".into()),
        })
    );
    assert_eq!(
        x.backoff,
        (Duration::from_secs(10), Duration::from_secs(60))
    );
    assert_eq!(x.max_message_size, 4 << 20);
    assert!(x.start_without_config && !x.files);
    assert_eq!(a.dir, PathBuf::new());
    assert!(
        a.notes
            .iter()
            .any(|n| n.starts_with("XDS_CLIENT_BACKOFF_JITTER=true ignored"))
    );
    // a flag wins over the variable, for the type and each setting
    let a = bare(
        &["--xds-node-id=mine", "--config-type=files", "--config=/c"],
        &env,
    )
    .expect("files");
    assert!(a.xds.is_none());
    let a = bare(&["--xds-node-id=mine"], &env).expect("xds");
    assert_eq!(a.xds.map(|x| x.node_id), Some("mine".to_owned()));
    // FILE is files; a bad switch is named
    assert!(
        p(&[], &[("CONFIG_TYPE", "FILE")])
            .expect("file")
            .xds
            .is_none()
    );
    let e = bare(
        &[],
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "sure"),
        ],
    )
    .expect_err("bool");
    assert!(e.contains("CONFIG_GRPC_XDS_SERVER_USE_TLS=\"sure\""), "{e}");
    let e = bare(
        &[],
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            (
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                "authorization:secret",
            ),
        ],
    )
    .expect_err("headers");
    assert!(
        e.contains("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") && !e.contains("secret"),
        "{e}"
    );
}

#[test]
fn node_metadata_takes_key_value_pairs_and_refuses_anything_else() {
    let m = node_metadata("--xds-node-metadata", "a=1, b = two,,c=").expect("pairs");
    assert_eq!(
        m.0,
        [("a", "1"), ("b", "two"), ("c", "")].map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    for bad in ["a", "a=1,b", "=1"] {
        let e = node_metadata("--xds-node-metadata", bad).expect_err(bad);
        assert!(e.contains("KEY=VALUE"), "{e}");
    }
}
