#!/usr/bin/env bash
# The quota service (RLQS: Envoys decide locally and report) against the
# rate limit service (RLS: one ShouldRateLimit call per request) on the
# same traffic and the same limit, both served by one release
# ratelimit-server, driven by benches/quota_load.rs.
#
#   server/benches/quota_vs_rls.sh
#   ROUNDS=1 DURATION=70 STORES=redis server/benches/quota_vs_rls.sh   # a full minute's window
#
# What it does, in a temporary directory removed at the end:
# - builds ratelimit-server (release) and the load generators (quota_load;
#   rls_load for free ports), starts a private redis-server on a free
#   loopback port (never 6379; no persistence);
# - writes one limit twice: a quota file (domain `bench`, buckets
#   `{user: "*"}`, LIMIT per UNIT, reports every INTERVAL) and a rate limit
#   configuration (domain `bench`, descriptor `user`, the same limit as a
#   token bucket whose burst is the limit, as the quota service's budget,
#   and `charge: admitted`: as in the quota service, a denied request
#   takes nothing; by default it would be charged, and a flood would keep
#   the bucket empty for as long as it lasts);
# - for each store (memory, then Redis: flushed), a fresh server serving
#   both on one gRPC port, pinned to core SERVER_CPU (default 0) with
#   taskset, Redis on that core too; then ROUNDS times (default 3),
#   alternating which goes first, each mode for DURATION s (default 20),
#   the load generator pinned to core LOAD_CPU (default 1): `rlqs`, ENVOYS
#   simulated Envoys (default 16) each with one stream; `rls`, the same
#   Envoys with CALLERS calls in flight (default 64). Every run uses a
#   fresh user, so that it starts from a full budget.
# - prints each run, then a Markdown table of the pairs: decisions per
#   second and the server's CPU per decision, their ratios (rlqs / rls),
#   the quota service's CPU per report, admissions against the limit and
#   the most admitted in any window of the unit against each bound.
#
# Knobs (environment): ROUNDS, DURATION, ENVOYS, PRIVATE (buckets of each
# Envoy's own beside the shared one, 0), CALLERS, RATE (requests per
# second offered, all Envoys together; default: as fast as they can),
# STORES ("memory redis"), LIMIT (6000), UNIT (minute), INTERVAL (1s),
# SERVER_CPU, LOAD_CPU, OURS_FLAGS (more flags for the server).
# Every result line starts with RESULT; they are printed again at the end.
set -euo pipefail

die() {
    echo "quota_vs_rls.sh: $*" >&2
    exit 1
}

command -v redis-server >/dev/null || die "redis-server is not on the PATH (apt-get install -y redis-server)"
command -v redis-cli >/dev/null || die "redis-cli is not on the PATH (apt-get install -y redis-tools)"
command -v taskset >/dev/null || die "taskset is not on the PATH (apt-get install -y util-linux)"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-20}
ENVOYS=${ENVOYS:-16}
PRIVATE=${PRIVATE:-0}
CALLERS=${CALLERS:-64}
RATE=${RATE:-}
STORES=${STORES-memory redis}
LIMIT=${LIMIT:-6000}
UNIT=${UNIT:-minute}
INTERVAL=${INTERVAL:-1s}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
OURS_FLAGS=${OURS_FLAGS:-}

[[ "$SERVER_CPU" != "$LOAD_CPU" ]] || die "SERVER_CPU and LOAD_CPU must differ"
taskset -c "$SERVER_CPU,$LOAD_CPU" true 2>/dev/null ||
    die "cannot pin to cores $SERVER_CPU and $LOAD_CPU (this machine has $(nproc))"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/../.."

echo "== building ratelimit-server (release) and the load generators" >&2
cargo build --release -p tower-redis-ratelimit-server --bin ratelimit-server >&2
BENCHES=$(cargo bench -p tower-redis-ratelimit-server --bench quota_load --bench rls_load \
    --no-run --message-format=json | grep '"kind":\["bench"\]')
executable() {
    grep "\"name\":\"$1\"" <<<"$BENCHES" | grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4
}
LOAD=$(executable quota_load)
PORTS=$(executable rls_load)
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
OURS="$TARGET_DIR/release/ratelimit-server"
[[ -x "$LOAD" ]] || die "cannot find the quota_load bench executable"
[[ -x "$PORTS" ]] || die "cannot find the rls_load bench executable"
[[ -x "$OURS" ]] || die "cannot find $OURS"

TMP=$(mktemp -d)
PIDS=()
RESULTS=()
IDLE=()

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

# stop PID: kill and reap, and forget it
stop() {
    local q keep=()
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    for q in "${PIDS[@]+"${PIDS[@]}"}"; do
        [[ "$q" == "$1" ]] || keep+=("$q")
    done
    PIDS=("${keep[@]+"${keep[@]}"}")
}

# ticks PID: the CPU time (user + system, 10 ms ticks) of PID so far
ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# ---- one limit, twice ----------------------------------------------------
mkdir -p "$TMP/rls"
cat >"$TMP/quota.yaml" <<EOF
domain: bench
reporting_interval: $INTERVAL
buckets:
  - name: per-user
    id: { user: "*" }
    requests_per_unit: $LIMIT
    unit: $UNIT
EOF
cat >"$TMP/rls/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: $UNIT
      requests_per_unit: $LIMIT
      strategy: token-bucket
      burst: $LIMIT
      charge: admitted
EOF

# ---- a private Redis, on the server's core --------------------------------
read -r REDIS_PORT < <("$PORTS" ports 1)
[[ "$REDIS_PORT" != 6379 ]] || die "refusing port 6379"
taskset -c "$SERVER_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
    --appendonly no --logfile "$TMP/redis-$REDIS_PORT.log" &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
wait_redis "$REDIS_PORT" "$REDIS_PID"
echo "== redis-server on $REDIS_PORT (pid $REDIS_PID, core $SERVER_CPU)" >&2

# record COMMAND...: runs it (a failure stops the script), keeps its RESULT lines
record() {
    local out line
    out=$("$@")
    printf '%s\n' "$out"
    while IFS= read -r line; do
        [[ "$line" != RESULT* ]] || RESULTS+=("$line")
    done <<<"$out"
}

rate=()
[[ -z "$RATE" ]] || rate=(--rate "$RATE")

for store in $STORES; do
    read -r port < <("$PORTS" ports 1)
    store_flags=()
    if [[ "$store" == redis ]]; then
        redis-cli -p "$REDIS_PORT" flushall >/dev/null
        store_flags=(--redis "redis://127.0.0.1:$REDIS_PORT/")
    fi
    # shellcheck disable=SC2086
    taskset -c "$SERVER_CPU" "$OURS" --config "$TMP/rls" --quota-config "$TMP/quota.yaml" \
        --grpc "127.0.0.1:$port" "${store_flags[@]+"${store_flags[@]}"}" $OURS_FLAGS \
        >"$TMP/ours-$port.log" 2>&1 &
    server=$!
    PIDS+=("$server")
    wait_port "$port" "$server"
    pids=(--pid "server=$server")
    [[ "$store" != redis ]] || pids+=(--pid "redis=$REDIS_PID")
    echo "== $store: ratelimit-server on $port (pid $server, core $SERVER_CPU)" >&2
    # what the server spends doing nothing (timers, the files' watch):
    # part of every run's CPU figures
    idle0=$(ticks "$server")
    sleep 5
    IDLE+=("$store: $(((($(ticks "$server") - idle0) * 10) / 5)) ms/s")
    for ((round = 1; round <= ROUNDS; round++)); do
        if ((round % 2)); then order="rls rlqs"; else order="rlqs rls"; fi
        for mode in $order; do
            echo "== round $round: $mode on $store" >&2
            record taskset -c "$LOAD_CPU" "$LOAD" --addr "127.0.0.1:$port" \
                --quota-config "$TMP/quota.yaml" --mode "$mode" --envoys "$ENVOYS" \
                --private "$PRIVATE" --callers "$CALLERS" --duration "$DURATION" \
                "${rate[@]+"${rate[@]}"}" --label "round$round/$store" "${pids[@]}"
        done
    done
    stop "$server"
done

echo
echo "== the server idle, CPU: ${IDLE[*]+"${IDLE[*]}"}"
echo "== summary (load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'))"
printf '%s\n' "${RESULTS[@]+"${RESULTS[@]}"}"

# the pairs of one round and store, side by side (ratios: rlqs / rls)
unit_secs=$(case "$UNIT" in second) echo 1 ;; minute) echo 60 ;; hour) echo 3600 ;; day) echo 86400 ;; esac)
echo
printf '%s\n' "${RESULTS[@]+"${RESULTS[@]}"}" | awk -v unit="$unit_secs" '
function field(line, key,   n, i, kv) {
    n = split(line, kv, " ")
    for (i = 1; i <= n; i++) if (index(kv[i], key "=") == 1) return substr(kv[i], length(key) + 2)
    return "?"
}
{
    label = field($0, "label"); mode = field($0, "mode")
    if (!(label in seen)) { seen[label] = 1; order[++n] = label }
    dps[label, mode] = field($0, "decided_per_s")
    cpu[label, mode] = field($0, "server_ns_per_decision")
    rep[label, mode] = field($0, "server_us_per_report")
    steady[label, mode] = field($0, "steady_per_s")
    rho[label] = field($0, "rho")
    most[label, mode] = field($0, "most_" unit "s")
    bound[label, mode] = field($0, "bound_" unit "s")
    ok[label, mode] = field($0, "within_bound")
    err[label, mode] = field($0, "errors")
}
# a / b, as "1/N" below 1
function ratio(a, b) {
    if (!(a + 0 > 0 && b + 0 > 0)) return "?"
    return a >= b ? sprintf("%.0f", a / b) : sprintf("1/%.0f", b / a)
}
function time_ns(ns) {
    if (ns == "?") return "?"
    return ns >= 1000 ? sprintf("%.1f µs", ns / 1000) : sprintf("%.2f ns", ns)
}
END {
    print "| round/store | decisions/s, RLS | decisions/s, RLQS | ratio | server CPU per decision, RLS | RLQS | ratio | RLQS server CPU per report | admitted/s over the 2nd half, RLS / RLQS (ρ) | most in any " unit " s, RLS (bound) | RLQS (bound) | errors RLS / RLQS |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"
    for (i = 1; i <= n; i++) {
        l = order[i]
        printf "| %s | %.0f | %.0f | %s | %s | %s | %s | %s µs | %s / %s (%.0f) | %s (%s)%s | %s (%s)%s | %s / %s |\n", \
            l, dps[l, "rls"], dps[l, "rlqs"], ratio(dps[l, "rlqs"], dps[l, "rls"]), \
            time_ns(cpu[l, "rls"]), time_ns(cpu[l, "rlqs"]), ratio(cpu[l, "rlqs"], cpu[l, "rls"]), rep[l, "rlqs"], \
            steady[l, "rls"], steady[l, "rlqs"], rho[l], \
            most[l, "rls"], bound[l, "rls"], (ok[l, "rls"] == "yes" ? "" : " **EXCEEDED**"), \
            most[l, "rlqs"], bound[l, "rlqs"], (ok[l, "rlqs"] == "yes" ? "" : " **EXCEEDED**"), \
            err[l, "rls"], err[l, "rlqs"]
    }
}'
