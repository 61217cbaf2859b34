//! The store: from its flags or its variables, and what is refused of
//! them, by name.

use super::p;
use crate::cli::StoreChoice;

#[test]
fn stores_from_flags_and_environment() {
    assert_eq!(p(&[], &[]).unwrap().store, StoreChoice::Memory);
    assert_eq!(
        p(&["--redis", "rediss://h:6380/"], &[]).unwrap().store,
        StoreChoice::Redis {
            url: "rediss://h:6380/".into(),
            ca: None
        }
    );
    assert_eq!(
        p(&["--redis-cluster", "redis://a:1, redis://b:2"], &[])
            .unwrap()
            .store,
        StoreChoice::Cluster {
            urls: vec!["redis://a:1".into(), "redis://b:2".into()]
        }
    );
    assert_eq!(
        p(
            &["--redis-sentinel", "redis://s:26379"],
            &[("REDIS_SENTINEL_MASTER", "mymaster")]
        )
        .unwrap()
        .store,
        StoreChoice::Sentinel {
            urls: vec!["redis://s:26379".into()],
            master: "mymaster".into()
        }
    );
    // the environment, and a flag winning over it
    assert_eq!(
        p(&[], &[("REDIS_CLUSTER_URLS", "redis://a:1,redis://b:2")])
            .unwrap()
            .store,
        StoreChoice::Cluster {
            urls: vec!["redis://a:1".into(), "redis://b:2".into()]
        }
    );
    assert_eq!(
        p(
            &["--redis", "redis://x/"],
            &[("REDIS_CLUSTER_URLS", "redis://a:1")]
        )
        .unwrap()
        .store,
        StoreChoice::Redis {
            url: "redis://x/".into(),
            ca: None
        }
    );
    assert_eq!(
        p(&[], &[("REDIS_URL", " ")]).unwrap().store,
        StoreChoice::Memory
    );
}

#[test]
fn malformed_store_values_are_rejected_by_name() {
    for (args, env, needle) in [
        (
            &["--redis", "localhost:6379"][..],
            &[][..],
            "--redis \"localhost:6379\"",
        ),
        (
            &["--redis-cluster", "redis://a:1,,redis://b:2"],
            &[],
            "URL 2 is empty",
        ),
        (&["--redis-cluster", ""], &[], "URL 1 is empty"),
        (
            &["--redis-cluster", "http://a:1"],
            &[],
            "--redis-cluster \"http://a:1\"",
        ),
        (
            &["--redis-sentinel", "redis://s:1"],
            &[],
            "needs --sentinel-master",
        ),
        (
            &["--redis-sentinel", "redis://s:1", "--sentinel-master", " "],
            &[],
            "--sentinel-master: empty",
        ),
        (
            &["--redis", "redis://a/", "--redis-cluster", "redis://b/"],
            &[],
            "give one of",
        ),
        (
            &[],
            &[
                ("REDIS_URL", "redis://a/"),
                ("REDIS_SENTINEL_URLS", "redis://b/"),
            ],
            "set one of",
        ),
        (&[], &[("REDIS_URL", "nope")], "REDIS_URL \"nope\""),
        (
            &["--redis", "redis://a/", "--redis-ca", "/ca.pem"],
            &[],
            "should be rediss://",
        ),
        (&["--redis-ca", "/ca.pem"], &[], "--redis-ca needs"),
        (&["--store-timeout", "0"], &[], "--store-timeout \"0\""),
        (&["--store-timeout", "-5"], &[], "--store-timeout \"-5\""),
        (&["--watch-interval", "0"], &[], "--watch-interval \"0\""),
        (
            &["--on-store-error", "open"],
            &[],
            "--on-store-error \"open\"",
        ),
        (&["--metrics", "9090"], &[], "--metrics \"9090\""),
        (
            &["--max-metric-keys", "-1"],
            &[],
            "--max-metric-keys \"-1\"",
        ),
        (
            &["--max-metric-keys", "many"],
            &[],
            "--max-metric-keys \"many\"",
        ),
        (&["--redis"], &[], "a value is required for '--redis <URL>'"),
        (
            &["--no-such-flag"],
            &[],
            "unexpected argument '--no-such-flag'",
        ),
        (
            &["--max-descriptors", "257"],
            &[],
            "--max-descriptors \"257\": at most 256",
        ),
    ] {
        let e = p(args, env).expect_err(needle);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
}
