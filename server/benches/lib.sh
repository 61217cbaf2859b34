# Helpers shared by the service's benchmark scripts (quota_vs_rls.sh,
# vs_limitador.sh), sourced after they define `die` and `TMP` (where each
# process's log is, as "$TMP/*<port>.log").

# wait_port PORT PID: until PORT accepts connections (30 s), or PID died
wait_port() {
    local port=$1 pid=$2 i
    for ((i = 0; i < 300; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || die "the process on port $port (pid $pid) exited; its log: $(tail -n 20 "$TMP"/*"$port".log 2>/dev/null)"
        sleep 0.1
    done
    die "nothing listens on port $port after 30 s"
}

# wait_redis PORT PID: until the redis-server PID on PORT answers PING (a
# port that accepted once is not yet a Redis that answers: 30 s, then 10 s)
wait_redis() {
    local port=$1 pid=$2 i
    wait_port "$port" "$pid"
    for ((i = 0; i < 100; i++)); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || die "redis-server on $port exited: $(tail -n 20 "$TMP/redis-$port.log" 2>/dev/null)"
        sleep 0.1
    done
    die "redis-server on $port does not answer PING: $(tail -n 20 "$TMP/redis-$port.log" 2>/dev/null)"
}
