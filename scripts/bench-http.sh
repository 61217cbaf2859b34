#!/usr/bin/env bash
# Three-way HTTP comparison with wrk, in one run: bare axum, a hand-written
# handler doing one EVALSHA on a shared multiplexed connection, and
# RateLimitLayer (RedisStore, one quota, PeerIp, IETF headers); then the Redis
# commands per denied request under a flood. Starts its own redis-server on a
# free loopback port. Arguments go to the benchmark, e.g. --rounds 3.
#
#   scripts/bench-http.sh
#   scripts/bench-http.sh --rounds 3 --duration 10
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for bin in wrk redis-server; do
    if ! command -v "$bin" >/dev/null 2>&1; then
        echo "$bin not found: apt-get install -y ${bin/redis-server/redis-server}" >&2
        exit 1
    fi
done

cargo build --release --quiet --example http_bench --features axum
exec target/release/examples/http_bench "$@"
