//! `ratelimit-server`: placeholder.

fn main() {}
