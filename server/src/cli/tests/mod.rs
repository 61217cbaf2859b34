//! The command line's tests, by topic: the flags ([`flags`]), the store
//! ([`store`]), envoyproxy/ratelimit's variables ([`go_env`]) and xDS
//! ([`xds`]); the helpers here parse a command line with an environment
//! of the test's own.

mod flags;
mod go_env;
mod store;
mod xds;

use super::{Args, Cli, args, invalid};

/// Parses `args` after `--config /c`, with the environment `env`.
fn p(args: &[&str], env: &[(&str, &str)]) -> Result<Args, String> {
    bare(&[&["--config", "/c"], args].concat(), env)
}

/// Parses `args` (no `--config` of the helper's), with the environment
/// `env` (the store's variables and envoyproxy/ratelimit's).
fn bare(args: &[&str], env: &[(&str, &str)]) -> Result<Args, String> {
    args_of(cli(args)?, env)
}

/// The command line `args`; an error as the binary reports it.
fn cli(args: &[&str]) -> Result<Cli, String> {
    Cli::parse_argv(std::iter::once("ratelimit-server").chain(args.iter().copied()))
        .map_err(|e| invalid(&e).map_or_else(|| e.to_string(), str::to_owned))
}

/// Resolves `cli` with the environment `env`.
fn args_of(cli: Cli, env: &[(&str, &str)]) -> Result<Args, String> {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    args(cli, |name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}
