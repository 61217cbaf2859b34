#!/usr/bin/env bash
# ratelimit-server side by side with Kuadrant's limitador-server, both
# answering Envoy's ShouldRateLimit, driven by the same load generator
# (benches/rls_load.rs) at the same concurrency.
#
#   LIMITADOR_SERVER=/path/to/limitador-server server/benches/vs_limitador.sh
#
# What it does, in a temporary directory removed at the end:
# - starts a private redis-server on a free loopback port (never 6379; no
#   persistence), builds ratelimit-server (release) and the load generator;
# - writes one set of limits twice: envoyproxy/ratelimit YAML for ours,
#   a limits file for limitador (domain `bench`: per user_id, 10^9 a
#   minute, never reached; domain `admit`: per user_id, 1 000 a minute);
# - ROUNDS times (default 2), alternating which server goes first: for each
#   store (Redis, then memory: ours without --redis, limitador `memory`),
#   a fresh server, then the generator in each mode (`many`: 10 000 users,
#   `hot`: one user);
# - ROUNDS times, alternating the order: 4 instances on one Redis (ours;
#   limitador `redis`; limitador `redis_cached`), 1 000 callers, 3 000
#   requests on one user limited to 1 000 a minute: how many are admitted.
#
# Knobs (environment): ROUNDS, DURATION (s, default 10), WARMUP (s, 2),
# CONCURRENCY (64), CHANNELS (HTTP/2 connections per target, 2), KEYS
# (10000), STORES ("redis memory"; "" skips the throughput runs), MODES
# ("many hot"), ADMIT (1: run the
# admit test; 0: skip it), OURS_FLAGS (default "--no-headers": limitador
# sends no rate limit headers unless told, so neither does ours),
# OURS_ADMIT_FLAGS (ours in the admit test; default OURS_FLAGS: add
# "--store-timeout 1000" to count what a loaded machine's 100 ms store
# timeouts would otherwise turn into errors).
# Every result line starts with RESULT; they are printed again at the end.
set -euo pipefail

die() {
    echo "vs_limitador.sh: $*" >&2
    exit 1
}

if [[ -z "${LIMITADOR_SERVER:-}" ]]; then
    die "set LIMITADOR_SERVER to the path of a limitador-server binary
  (git clone https://github.com/Kuadrant/limitador && cd limitador &&
   cargo build --release -p limitador-server: target/release/limitador-server;
   it needs protoc and libclang: apt-get install protobuf-compiler clang libclang-dev)"
fi
[[ -x "$LIMITADOR_SERVER" ]] || die "LIMITADOR_SERVER=$LIMITADOR_SERVER is not an executable file"
command -v redis-server >/dev/null || die "redis-server is not on the PATH (apt-get install -y redis-server)"
command -v redis-cli >/dev/null || die "redis-cli is not on the PATH (apt-get install -y redis-tools)"

ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONCURRENCY=${CONCURRENCY:-64}
CHANNELS=${CHANNELS:-2}
KEYS=${KEYS:-10000}
STORES=${STORES-redis memory}
MODES=${MODES-many hot}
ADMIT=${ADMIT:-1}
OURS_FLAGS=${OURS_FLAGS:---no-headers}
OURS_ADMIT_FLAGS=${OURS_ADMIT_FLAGS:-$OURS_FLAGS}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/../.."

echo "== building ratelimit-server (release) and the load generator" >&2
cargo build --release -p tower-redis-ratelimit-server --bin ratelimit-server >&2
LOAD=$(cargo bench -p tower-redis-ratelimit-server --bench rls_load --no-run --message-format=json |
    grep '"kind":\["bench"\]' | grep '"name":"rls_load"' | grep -o '"executable":"[^"]*"' |
    tail -n 1 | cut -d'"' -f4)
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
OURS="$TARGET_DIR/release/ratelimit-server"
[[ -x "$LOAD" ]] || die "cannot find the rls_load bench executable"
[[ -x "$OURS" ]] || die "cannot find $OURS"

TMP=$(mktemp -d)
PIDS=()
RESULTS=()

cleanup() {
    local p
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_port, wait_redis
# shellcheck source=server/benches/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# stop PID...: kill and reap, and forget them
stop() {
    local p q keep
    for p in "$@"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
        keep=()
        for q in "${PIDS[@]+"${PIDS[@]}"}"; do
            [[ "$q" == "$p" ]] || keep+=("$q")
        done
        PIDS=("${keep[@]+"${keep[@]}"}")
    done
}

free_ports() {
    "$LOAD" ports "$1"
}

# ---- the limits, twice -------------------------------------------------
mkdir -p "$TMP/ours"
cat >"$TMP/ours/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user_id
    rate_limit:
      unit: minute
      requests_per_unit: 1000000000
EOF
cat >"$TMP/ours/admit.yaml" <<'EOF'
domain: admit
descriptors:
  - key: user_id
    rate_limit:
      unit: minute
      requests_per_unit: 1000
EOF
cat >"$TMP/limits.yaml" <<'EOF'
- namespace: bench
  name: per_user
  max_value: 1000000000
  seconds: 60
  conditions: []
  variables:
    - "descriptors[0]['user_id']"
- namespace: admit
  name: per_user
  max_value: 1000
  seconds: 60
  conditions: []
  variables:
    - "descriptors[0]['user_id']"
EOF

# ---- a private Redis -----------------------------------------------------
read -r REDIS_PORT < <(free_ports 1)
[[ "$REDIS_PORT" != 6379 ]] || die "refusing port 6379"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$TMP/redis-$REDIS_PORT.log" &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
wait_redis "$REDIS_PORT" "$REDIS_PID"
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"
echo "== redis-server on $REDIS_PORT (pid $REDIS_PID)" >&2

# start SERVER STORE GRPC_PORT HTTP_PORT: waits until it listens; its pid in STARTED
start() {
    local server=$1 store=$2 port=$3 http=$4 pid
    case "$server/$store" in
    ours/redis)
        # shellcheck disable=SC2086
        "$OURS" --config "$TMP/ours" --grpc "127.0.0.1:$port" --redis "$REDIS_URL" $OURS_FLAGS \
            >"$TMP/ours-$port.log" 2>&1 &
        ;;
    ours/memory)
        # shellcheck disable=SC2086
        "$OURS" --config "$TMP/ours" --grpc "127.0.0.1:$port" $OURS_FLAGS \
            >"$TMP/ours-$port.log" 2>&1 &
        ;;
    limitador/redis | limitador/redis_cached)
        "$LIMITADOR_SERVER" "$TMP/limits.yaml" -b 127.0.0.1 -p "$port" -B 127.0.0.1 -P "$http" \
            "$store" "$REDIS_URL" >"$TMP/limitador-$port.log" 2>&1 &
        ;;
    limitador/memory)
        "$LIMITADOR_SERVER" "$TMP/limits.yaml" -b 127.0.0.1 -p "$port" -B 127.0.0.1 -P "$http" \
            memory >"$TMP/limitador-$port.log" 2>&1 &
        ;;
    *) die "unknown server/store $server/$store" ;;
    esac
    pid=$!
    PIDS+=("$pid")
    wait_port "$port" "$pid"
    STARTED=$pid
}

# record COMMAND...: runs it (a failure stops the script), keeps its RESULT lines
record() {
    local out line
    out=$("$@")
    printf '%s\n' "$out"
    while IFS= read -r line; do
        [[ "$line" != RESULT* ]] || RESULTS+=("$line")
    done <<<"$out"
}

# ---- throughput and latency ----------------------------------------------
for ((round = 1; round <= ROUNDS; round++)); do
    if ((round % 2)); then order="ours limitador"; else order="limitador ours"; fi
    for store in $STORES; do
        for server in $order; do
            read -r port http < <(free_ports 2)
            start "$server" "$store" "$port" "$http"
            pid=$STARTED
            pidargs=(--pid "server=$pid")
            if [[ "$store" == redis ]]; then
                redis-cli -p "$REDIS_PORT" flushall >/dev/null
                pidargs+=(--pid "redis=$REDIS_PID")
            fi
            for mode in $MODES; do
                echo "== round $round: $server on $store, $mode" >&2
                record "$LOAD" --target "127.0.0.1:$port" --mode "$mode" --keys "$KEYS" \
                    --concurrency "$CONCURRENCY" --channels "$CHANNELS" --warmup "$WARMUP" \
                    --duration "$DURATION" --label "round$round/$server/$store" "${pidargs[@]}"
            done
            stop "$pid"
        done
    done
done

# ---- admission across 4 instances -----------------------------------------
if [[ "$ADMIT" == 1 ]]; then
    for ((round = 1; round <= ROUNDS; round++)); do
        if ((round % 2)); then
            order="ours/redis limitador/redis limitador/redis_cached"
        else
            order="limitador/redis_cached limitador/redis ours/redis"
        fi
        for pair in $order; do
            server=${pair%/*}
            store=${pair#*/}
            redis-cli -p "$REDIS_PORT" flushall >/dev/null
            read -r -a ports < <(free_ports 8)
            targets=()
            started=()
            for i in 0 1 2 3; do
                OURS_FLAGS=$OURS_ADMIT_FLAGS start "$server" "$store" "${ports[$i]}" "${ports[$((i + 4))]}"
                started+=("$STARTED")
                targets+=(--target "127.0.0.1:${ports[$i]}")
            done
            echo "== round $round: admit, 4 x $server on $store" >&2
            record "$LOAD" "${targets[@]}" --mode admit --concurrency 1000 --channels 4 \
                --requests 3000 --limit 1000 --label "round$round/$server/$store"
            stop "${started[@]}"
        done
    done
fi

echo
echo "== summary (load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'))"
printf '%s\n' "${RESULTS[@]+"${RESULTS[@]}"}"
