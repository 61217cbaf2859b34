//! Accepted and rejected configs and the matching rules, written from the
//! Go service's `src/config/config_impl.go`; the Go test each group mirrors
//! (in its `test/config/config_test.go`) is named in a comment. By
//! topic: [`matching`], [`reading`] (what Go accepts and rejects),
//! [`extensions`] and [`dirs`]; the helpers they share are here.

mod dirs;
mod extensions;
mod matching;
mod reading;

use super::*;

fn load(files: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_sources(files.iter().copied(), LoadOptions::default())
}

fn one(src: &str) -> Config {
    match load(&[("t.yaml", src)]) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

fn reject(src: &str) -> ConfigError {
    match load(&[("t.yaml", src)]) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

/// Asserts that `src` is rejected at `path` with a message containing `msg`.
fn rejects(src: &str, path: &str, msg: &str) {
    let e = reject(src);
    assert_eq!(e.file, "t.yaml", "{e}");
    assert_eq!(e.path, path, "{e}");
    assert!(e.message.contains(msg), "{e}");
}

const BASIC: &str = "
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /login
    rate_limit: {unit: Minute, requests_per_unit: 5, name: login}
  - key: path
    value: /v1/*
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /v*
    rate_limit: {unit: hour, requests_per_unit: 200}
  - key: path
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: auth
    value: 'false'
    descriptors:
      - key: remote_address
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: remote_address
        value: 10.0.0.1
        rate_limit: {unlimited: true}
  - key: tenant
    rate_limit: {unit: week, requests_per_unit: 7}
    descriptors:
      - key: user
        rate_limit: {unit: month, requests_per_unit: 30}
";

fn limit(c: &Config, entries: &[(&str, &str)]) -> Option<u32> {
    c.lookup("api", entries).map(|r| r.requests_per_unit)
}
