//! Limits from configuration (feature `serde`): round trips through TOML and
//! JSON, the string notation of `FromStr`, and errors that name the path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tower_redis_ratelimit::middleware::{HeaderStyle, LayerOptions, OnStoreError};
use tower_redis_ratelimit::plans::{Plan, Plans, PlansConfig};
use tower_redis_ratelimit::{MemoryStore, Quota, Rate};

const TOML: &str = r#"
default = "free"

[plans]
free = "100/minute; 10000/day"
internal = { unlimited = true }
beta = { quotas = "gcra 10/min name=minute", shadow = true }

[plans.pro]
quotas = [
    { strategy = "gcra", rate = "60/min", burst = 10, name = "minute" },
    { strategy = "fixed-window", rate = "10000/day", name = "day" },
    "concurrency 8/30s name=in-flight",
]
"#;

fn expected() -> PlansConfig {
    PlansConfig::new("free")
        .plan(
            "free",
            Plan::new([Rate::per_minute(100), Rate::per_day(10_000)]),
        )
        .plan("internal", Plan::unlimited())
        .plan(
            "beta",
            Plan::new([Quota::gcra(Rate::per_minute(10)).name("minute")]).shadow(true),
        )
        .plan(
            "pro",
            Plan::new([
                Quota::gcra(Rate::per_minute(60)).burst(10).name("minute"),
                Quota::fixed_window(Rate::per_day(10_000)).name("day"),
                Quota::concurrency(8)
                    .lease_timeout(Duration::from_secs(30))
                    .name("in-flight"),
            ]),
        )
}

fn from_toml(s: &str) -> Result<PlansConfig, tower_redis_ratelimit::error::ConfigError> {
    PlansConfig::deserialize_from(toml::Deserializer::parse(s).unwrap())
}

#[test]
fn plans_load_from_toml_in_the_from_str_notation() {
    let config = from_toml(TOML).unwrap();
    assert_eq!(config, expected());
    // and build
    Plans::builder()
        .store(MemoryStore::new())
        .config(config)
        .build()
        .unwrap();
}

#[test]
fn plans_round_trip_through_toml_json_and_the_text_notation() {
    let config = expected();
    let toml_text = toml::to_string(&config).unwrap();
    assert_eq!(from_toml(&toml_text).unwrap(), config, "{toml_text}");
    let json = serde_json::to_string(&config).unwrap();
    let mut de = serde_json::Deserializer::from_str(&json);
    assert_eq!(
        PlansConfig::deserialize_from(&mut de).unwrap(),
        config,
        "{json}"
    );
    assert_eq!(config.to_string().parse::<PlansConfig>().unwrap(), config);
    // rates and quotas on their own
    let rate: Rate = serde_json::from_str(r#""5 per 2 hours""#).unwrap();
    assert_eq!(rate, Rate::new(5, Duration::from_secs(7200)));
    assert_eq!(serde_json::to_string(&rate).unwrap(), r#""5/7200s""#);
    let q: Quota =
        serde_json::from_str(r#"{ "strategy": "gcra", "rate": "60/min", "burst": 10 }"#).unwrap();
    assert_eq!(q, Quota::gcra(Rate::per_minute(60)).burst(10));
    let back: Quota = serde_json::from_str(&serde_json::to_string(&q).unwrap()).unwrap();
    assert_eq!(back, q);
    // a quota in shadow mode keeps its flag in every notation
    let shadow = Quota::fixed_window(Rate::per_day(10))
        .name("day")
        .shadow(true);
    let text = shadow.to_string();
    assert_eq!(text, "fixed-window 10/day name=day shadow");
    assert_eq!(text.parse::<Quota>().unwrap(), shadow);
    let json = serde_json::to_string(&shadow).unwrap();
    assert!(json.contains(r#""shadow":true"#), "{json}");
    assert_eq!(serde_json::from_str::<Quota>(&json).unwrap(), shadow);
    let table: Quota = serde_json::from_str(
        r#"{ "rate": "10/day", "name": "day", "strategy": "fixed-window", "shadow": true }"#,
    )
    .unwrap();
    assert_eq!(table, shadow);
    // so does a fixed window aligned to the epoch, in TOML too
    let aligned = Quota::fixed_window(Rate::per_minute(100)).aligned();
    let text = aligned.to_string();
    assert_eq!(text, "fixed-window 100/min aligned");
    assert_eq!(text.parse::<Quota>().unwrap(), aligned);
    let json = serde_json::to_string(&aligned).unwrap();
    assert!(json.contains(r#""aligned":true"#), "{json}");
    assert_eq!(serde_json::from_str::<Quota>(&json).unwrap(), aligned);
    let quota = |text: &str| -> Quota {
        let table: toml::Table = toml::from_str(text).unwrap();
        table["quota"].clone().try_into().unwrap()
    };
    let table = r#"quota = { strategy = "fixed-window", rate = "100/min", aligned = true }"#;
    assert_eq!(quota(table), aligned);
    assert_eq!(quota(r#"quota = "fixed-window 100/min aligned""#), aligned);
}

#[test]
fn errors_name_the_path_of_the_bad_field() {
    let cases = [
        (
            r#"default = "free"
               plans.free = { quotas = ["60/min", { rate = "10/eon" }] }"#,
            "plans.free.quotas[1].rate",
            "eon",
        ),
        (
            r#"default = "free"
               [plans.pro]
               quotas = [{ strategy = "gcra", rate = "60/min" }, { strategy = "gcrx", rate = "1/s" }]"#,
            "plans.pro.quotas[1].strategy",
            "gcrx",
        ),
        (
            r#"default = "free"
               plans.free = { quotas = [{ rate = "1/s", brust = 3 }] }"#,
            "plans.free.quotas[0].brust",
            "brust",
        ),
        (
            r#"default = "free"
               plans.free = { quotas = [{ rate = "1/s", burst = "ten" }] }"#,
            "plans.free.quotas[0].burst",
            "ten",
        ),
        (r#"plans = {}"#, "", "default"),
    ];
    for (text, path, says) in cases {
        let e = from_toml(text).unwrap_err();
        assert_eq!(e.field(), path, "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
    // what parses but is invalid is rejected at build, naming the field
    let config = from_toml(
        r#"default = "free"
           plans.free = { quotas = ["60/min", "fixed-window 10/min burst=3"] }"#,
    )
    .unwrap();
    let e = Plans::builder()
        .store(MemoryStore::new())
        .config(config)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "plans.free.quotas[1].burst", "{e}");
}

#[test]
fn layer_options_load_from_toml() {
    let options: LayerOptions = toml::from_str(
        r#"
        headers = "both"
        on_store_error = "fallback"
        shadow = true
        near_limit = 0.8
        "#,
    )
    .unwrap();
    assert_eq!(options.headers, Some(HeaderStyle::Both));
    assert_eq!(options.on_store_error, Some(OnStoreError::Fallback));
    assert_eq!(options.shadow, Some(true));
    assert_eq!(options.near_limit, Some(0.8));
    assert_eq!(options.deny_cache, None);
    let e = toml::from_str::<LayerOptions>(r#"headers = "fancy""#).unwrap_err();
    assert!(e.to_string().contains("fancy"), "{e}");
    // the refusal policy: absent keeps the default (closed); a bad value is an error
    assert_eq!(options.on_refusal, None);
    let options: LayerOptions = toml::from_str(r#"on_refusal = "open""#).unwrap();
    assert_eq!(options.on_refusal, Some(OnStoreError::Open));
    for bad in [
        r#"on_refusal = "ignore""#,
        "on_refusal = 0",
        r#"on_refusal = """#,
    ] {
        assert!(toml::from_str::<LayerOptions>(bad).is_err(), "{bad}");
    }
}
