#!/usr/bin/env bash
# HTTP append benchmark: Strata and two peer servers of the Durable Streams
# protocol, measured in one run on this machine with wrk, printed as one
# markdown table. See bench/README.md.
#
#   bench/http.sh                 all configurations (a..l)
#   ONLY="a c e" bench/http.sh    a subset
#
# Configurations (bench/README.md has the details):
#   strata:               h c=1, a c=64 (local dir store); l c=1, b c=1024 (+25 ms PUT latency)
#   strata, product API:  m c=64 (local dir store), n c=1024 (+25 ms PUT latency):
#                         POST /v1/streams/bench-<i>/records over ROUTING_KEYS keys
#                         o c=64 (local dir store): JSON collections, POST
#                         /v1/streams/bench-<i>/records:batch, BATCH_RECORDS a request
#   durable-streams Rust: i c=1, c c=64, d c=1024
#   Node, in memory:      j c=1, e c=64, f c=1024
#   Node, file-backed:    k c=1, g c=64
#
# Environment (all optional):
#   ONLY          configurations to run, space separated, in table order
#                 (default "h a l b i c d j e f k g")
#   DURATION      seconds per wrk run (default 10)
#   WARMUP        seconds of unmeasured wrk warm-up before each run (default 2, 0 = none)
#   THREADS       wrk threads (default 1)
#   RECORD_BYTES  append body size (default 100)
#   ROUTING_KEYS  routing keys per stream in configurations m, n and o (default 1000)
#   BATCH_RECORDS records per request in configuration o (default 1000)
#   BENCH_TMP     parent of the run's data directories (default ${TMPDIR:-/tmp})
#   KEEP_DATA=1   keep the run directory (data, server logs, wrk output) at exit
#   RESULTS_DIR   if set, copy the table and every wrk/server log there
#   STRATA_BIN    use this strata binary instead of building target/release/strata
#   STRATA_ARGS   extra `strata serve` flags (e.g. "--gc-grace-ms 1000": garbage
#                 collection during the run, as in a server's steady state)
#   SKIP_BUILD=1  build nothing (binaries / node_modules must already exist)
#   PEERS_DIR     where peer servers are installed (default bench/.peers)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"

ONLY="${ONLY:-h a l b i c d j e f k g}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-2}"
THREADS="${THREADS:-1}"
RECORD_BYTES="${RECORD_BYTES:-100}"
BENCH_TMP="${BENCH_TMP:-${TMPDIR:-/tmp}}"
PEERS_DIR="${PEERS_DIR:-$here/.peers}"

DS_VERSION=0.1.5
NODE_PKG_VERSION=0.3.7
DS_ROOT="$PEERS_DIR/durable-streams-$DS_VERSION"
DS_BIN="$DS_ROOT/bin/durable-streams-server"

log() { printf '[bench] %s\n' "$*" >&2; }
err() { printf '[bench] ERROR: %s\n' "$*" >&2; }

for cfg in $ONLY; do
    case "$cfg" in
        a | b | c | d | e | f | g | h | i | j | k | l | m | n | o) ;;
        *) err "unknown configuration '$cfg' in ONLY (expected a..o)"; exit 2 ;;
    esac
done
wants() { # wants a b ...: is any of these configurations selected?
    local c w
    for c in "$@"; do for w in $ONLY; do [ "$c" = "$w" ] && return 0; done; done
    return 1
}

for tool in wrk curl awk; do
    command -v "$tool" >/dev/null || { err "$tool is not installed"; exit 1; }
done

# ---------------------------------------------------------------- build ----
if wants a b h l m n o; then
    if [ -n "${STRATA_BIN:-}" ]; then
        :
    else
        STRATA_BIN="${CARGO_TARGET_DIR:-$root/target}/release/strata"
        if [ "${SKIP_BUILD:-}" != 1 ]; then
            log "building strata (cargo build --release -p strata-server)"
            (cd "$root" && cargo build --release -p strata-server --quiet)
        fi
    fi
    [ -x "$STRATA_BIN" ] || { err "no strata binary at $STRATA_BIN"; exit 1; }
fi

if wants c d i; then
    if [ ! -x "$DS_BIN" ]; then
        [ "${SKIP_BUILD:-}" = 1 ] && { err "no durable-streams-server at $DS_BIN"; exit 1; }
        log "installing durable-streams $DS_VERSION from crates.io into $DS_ROOT (one-time build)"
        mkdir -p "$DS_ROOT"
        CARGO_TARGET_DIR="$DS_ROOT/target" cargo install durable-streams \
            --version "$DS_VERSION" --locked --root "$DS_ROOT" --quiet
    fi
    [ -x "$DS_BIN" ] || { err "no durable-streams-server at $DS_BIN"; exit 1; }
fi

if wants e f g j k; then
    command -v node >/dev/null || { err "node is not installed"; exit 1; }
    installed="$(node -p "require('$here/node_modules/@durable-streams/server/package.json').version" 2>/dev/null || true)"
    if [ "$installed" != "$NODE_PKG_VERSION" ]; then
        [ "${SKIP_BUILD:-}" = 1 ] && { err "bench/node_modules lacks @durable-streams/server@$NODE_PKG_VERSION"; exit 1; }
        log "installing @durable-streams/server@$NODE_PKG_VERSION (npm)"
        # `npm install` follows package-lock.json; `npm ci` can refuse locks
        # npm 11 writes (optional platform packages left out).
        (cd "$here" && npm install --no-audit --no-fund --loglevel=error)
    fi
fi

# ------------------------------------------------------------- run state ----
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
mkdir -p "$BENCH_TMP"
RUN_DIR="$(mktemp -d "$BENCH_TMP/strata-http-bench.XXXXXX")"
CLK_TCK="$(getconf CLK_TCK)"
SERVER_PID=""

stop_server() {
    local pid="$SERVER_PID" i
    [ -n "$pid" ] || return 0
    SERVER_PID=""
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "server $pid did not stop within 10 s, killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    stop_server
    if [ -n "${RESULTS_DIR:-}" ]; then
        mkdir -p "$RESULTS_DIR"
        cp "$RUN_DIR"/*.log "$RUN_DIR"/*.wrk "$RUN_DIR"/table.md "$RESULTS_DIR"/ 2>/dev/null || true
    fi
    if [ "${KEEP_DATA:-}" = 1 ]; then
        log "kept run directory $RUN_DIR"
    else
        rm -rf "$RUN_DIR"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    else
        local p
        while :; do
            p=$((20000 + RANDOM % 30000))
            (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
        done
    fi
}

cpu_ticks() { # utime+stime of a process (all threads), in clock ticks
    local stat rest
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }
    rest="${stat##*) }" # drop "pid (comm) "; comm may contain spaces
    # shellcheck disable=SC2086
    set -- $rest
    echo $((${12} + ${13}))
}

child_ticks() { # cutime+cstime of this shell: CPU of its waited-for children (wrk)
    local stat rest
    stat="$(cat "/proc/$$/stat")"
    rest="${stat##*) }"
    # shellcheck disable=SC2086
    set -- $rest
    echo $((${14} + ${15}))
}

now() { date +%s.%N; }

to_ms() { # wrk latency ("812.00us", "3.21ms", "1.02s", "1.50m") -> milliseconds
    awk -v v="$1" 'BEGIN {
        if (v == "") { print "-"; exit }
        if (v ~ /us$/)      { sub(/us$/, "", v); printf "%.2f ms", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.2f ms", v }
        else if (v ~ /m$/)  { sub(/m$/, "", v);  printf "%.0f ms", v * 60000 }
        else if (v ~ /s$/)  { sub(/s$/, "", v);  printf "%.2f ms", v * 1000 }
        else print v
    }'
}

wait_ready() { # wait_ready URL LOG: poll until the server answers any HTTP status
    local url="$1" logf="$2" i code
    for i in $(seq 1 600); do # at most ~60 s
        code="$(curl -s -o /dev/null -m 1 -w '%{http_code}' "$url" 2>/dev/null || true)"
        if [ -n "$code" ] && [ "$code" != 000 ]; then return 0; fi
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            err "server exited before becoming ready; its log:"
            tail -n 30 "$logf" >&2
            return 1
        fi
        sleep 0.1
    done
    err "server not ready after 60 s ($url); its log:"
    tail -n 30 "$logf" >&2
    return 1
}

create_streams() { # create_streams BASE PREFIX N KEY [BATCH] -> prints how many got 2xx
    local base="$1" prefix="$2" n="$3" key="$4" batch="${5:-0}" i kind=bytes
    local -a hdr=(-H "Content-Type: application/octet-stream")
    [ -n "$key" ] && hdr+=(-H "Stream-Encryption-Key: $key")
    [ "$batch" -gt 0 ] && kind=json
    if [ "$prefix" = /v1/streams/ ]; then # the product API: a typed document
        hdr=(-H "Prisma-Encryption-Key: $key" --data "{\"format\":{\"kind\":\"$kind\"}}")
    fi
    for i in $(seq 0 $((n - 1))); do
        printf 'url = "%s%sbench-%d"\noutput = "/dev/null"\n' "$base" "$prefix" "$i"
    done | curl -s -K - --parallel --parallel-max 32 -X PUT "${hdr[@]}" \
        -w '%{http_code}\n' 2>/dev/null | grep -c '^2' || true
}

probe_append() { # probe_append BASE PREFIX KEY [BATCH] -> HTTP status of one append
    local base="$1" prefix="$2" key="$3" batch="${4:-0}" suffix=""
    local body
    body="$(head -c "$RECORD_BYTES" /dev/zero | tr '\0' x)"
    local -a hdr=(-H "Content-Type: application/octet-stream")
    [ -n "$key" ] && hdr+=(-H "Stream-Encryption-Key: $key")
    if [ "$prefix" = /v1/streams/ ]; then
        hdr=(-H "Content-Type: application/octet-stream" -H "Prisma-Encryption-Key: $key"
            -H "Prisma-Routing-Key: k0")
        suffix=/records
    fi
    if [ "$batch" -gt 0 ]; then
        hdr=(-H "Content-Type: application/json" -H "Prisma-Encryption-Key: $key"
            -H "Prisma-Routing-Key: k0")
        suffix=/records:batch body='["probe"]'
    fi
    curl -s -o /dev/null -m 10 -w '%{http_code}' -X POST "${hdr[@]}" \
        --data-binary "$body" "${base}${prefix}bench-0${suffix}" || true
}

STRATA_KEY=""
if wants a b h l m n o; then
    STRATA_KEY="$("$STRATA_BIN" keys generate)"
fi

ROWS=()
WRK_CPU=()
FAILED=0

run_config() {
    local cfg="$1"
    local server config conns streams prefix key health batch=0
    local -a cmd env_vars=()
    local data
    data="$(mktemp -d "$RUN_DIR/$cfg.XXXXXX")" # fresh, unique; removed only at exit
    local port
    port="$(free_port)"
    case "$cfg" in
        a | b | h | l | m | n | o)
            server="strata"
            prefix="/v1/stream/" key="$STRATA_KEY" health="/healthz"
            cmd=("$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$data/store")
            if [ -n "${STRATA_ARGS:-}" ]; then
                read -ra extra <<<"$STRATA_ARGS"
                cmd+=("${extra[@]}")
            fi
            case "$cfg" in
                a | h | m | o) config="local dir store (fdatasync)" ;;
                b | l | n) config="local dir store + 25 ms emulated PUT latency"
                       cmd+=(--emulate-put-latency-ms 25) ;;
            esac
            case "$cfg" in
                a | m | o) conns=64 ;;
                b | n) conns=1024 ;;
                h | l) conns=1 ;;
            esac
            if [ "$cfg" = m ] || [ "$cfg" = n ] || [ "$cfg" = o ]; then
                server="strata, product API"
                config="$config, ${ROUTING_KEYS:-1000} routing keys per stream"
                prefix="/v1/streams/"
            fi
            if [ "$cfg" = o ]; then
                server="strata, product API, JSON batches"
                config="$config, ${BATCH_RECORDS:-1000} records a request"
                batch="${BATCH_RECORDS:-1000}"
            fi
            ;;
        c | d | i)
            server="durable-streams $DS_VERSION (Rust)"
            config="--durability wal (group-commit fdatasync)"
            prefix="/" key="" health="/health"
            cmd=("$DS_BIN" --host 127.0.0.1 --port "$port" --data-dir "$data/data" --durability wal)
            case "$cfg" in
                c) conns=64 ;;
                d) conns=1024 ;;
                i) conns=1 ;;
            esac
            ;;
        e | f | g | j | k)
            server="@durable-streams/server $NODE_PKG_VERSION (Node)"
            prefix="/v1/stream/" key="" health="/"
            cmd=(node "$here/node-server.mjs")
            env_vars=(PORT="$port" HOST=127.0.0.1)
            case "$cfg" in
                e) config="in-memory"; conns=64 ;;
                f) config="in-memory"; conns=1024 ;;
                j) config="in-memory"; conns=1 ;;
                g | k) config="file-backed (fdatasync per append)"
                   env_vars+=(DATA_DIR="$data/data")
                   if [ "$cfg" = g ]; then conns=64; else conns=1; fi ;;
            esac
            ;;
    esac
    streams="$conns"
    local base="http://127.0.0.1:$port"
    local logf="$RUN_DIR/$cfg.server.log" wrkf="$RUN_DIR/$cfg.wrk"
    local mark=""
    local keep="see $logf (kept with KEEP_DATA=1)"

    log "($cfg) $server, $config, c=$conns over $streams streams, port $port, data $data"
    env ${env_vars[@]+"${env_vars[@]}"} "${cmd[@]}" >"$logf" 2>&1 &
    SERVER_PID=$!
    if ! wait_ready "$base$health" "$logf"; then
        stop_server
        ROWS+=("| $cfg | $server | $config | $conns | - | - | - | FAILED: not ready | - |")
        FAILED=1
        return
    fi

    local created
    created="$(create_streams "$base" "$prefix" "$streams" "$key" "$batch")"
    if [ "$created" -ne "$streams" ]; then
        err "($cfg) only $created of $streams stream creations (PUT ${prefix}bench-<i>) returned 2xx"
        mark="create: $created/$streams 2xx"
    fi
    local probe
    probe="$(probe_append "$base" "$prefix" "$key" "$batch")"
    if [ "${probe:0:1}" != 2 ]; then
        err "($cfg) a probe append (POST ${prefix}bench-0) returned HTTP $probe, not 2xx; $keep"
        mark="${mark:+$mark; }probe append HTTP $probe"
    fi

    local -a wrk_env=(STREAMS="$streams" RECORD_BYTES="$RECORD_BYTES" PREFIX="$prefix" STREAM_KEY="$key"
        ROUTING_KEYS="${ROUTING_KEYS:-1000}" BATCH_RECORDS="$batch")
    local -a wrk_args=(-t"$THREADS" -c"$conns" -s "$here/append.lua" "$base")
    if [ "$WARMUP" != 0 ]; then
        env "${wrk_env[@]}" wrk "${wrk_args[@]}" -d"${WARMUP}s" >"$RUN_DIR/$cfg.warmup.wrk" 2>&1 || true
    fi
    local c0 c1 t0 t1 w0 w1
    c0="$(cpu_ticks "$SERVER_PID")"
    w0="$(child_ticks)"
    t0="$(now)"
    env "${wrk_env[@]}" wrk "${wrk_args[@]}" -d"${DURATION}s" --latency >"$wrkf" 2>&1 || true
    t1="$(now)"
    c1="$(cpu_ticks "$SERVER_PID")"
    w1="$(child_ticks)"
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        err "($cfg) the server died during the run; its log:"
        tail -n 30 "$logf" >&2
        mark="${mark:+$mark; }server died"
    fi
    stop_server

    local rps p50 p99 total non2xx sock cpu wcpu errors
    rps="$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$wrkf")"
    p50="$(to_ms "$(awk '/Latency Distribution/ {f = 1; next} f && $1 == "50%" {print $2; exit}' "$wrkf")")"
    p99="$(to_ms "$(awk '/Latency Distribution/ {f = 1; next} f && $1 == "99%" {print $2; exit}' "$wrkf")")"
    total="$(awk '/ requests in / {print $1; exit}' "$wrkf")"
    non2xx="$(awk '/Non-2xx or 3xx responses:/ {print $NF; exit}' "$wrkf")"
    sock="$(awk '/Socket errors:/ {sub(/^ *Socket errors: */, ""); print; exit}' "$wrkf")"
    total="${total:-0}" non2xx="${non2xx:-0}"
    cpu="$(awk -v a="$c0" -v b="$c1" -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.2f", (b - a) / hz / (t1 - t0) }')"
    wcpu="$(awk -v a="$w0" -v b="$w1" -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.2f", (b - a) / hz / (t1 - t0) }')"
    WRK_CPU+=("$cfg $wcpu")
    errors="$non2xx"
    [ -n "$sock" ] && errors="$errors (socket: $sock)"
    if [ -z "$rps" ] || [ "$total" = 0 ]; then
        err "($cfg) wrk produced no result; its output:"
        cat "$wrkf" >&2
        mark="${mark:+$mark; }no wrk result"
    elif [ $((non2xx * 2)) -gt "$total" ]; then
        err "($cfg) $non2xx of $total appends were not 2xx/3xx: the measurement is of error responses; $keep"
        mark="${mark:+$mark; }MOSTLY NON-2XX"
    fi
    if [ -n "$mark" ]; then
        errors="$errors **FAILED: $mark**"
        FAILED=1
    fi
    log "($cfg) $rps req/s, p50 $p50, p99 $p99, non-2xx $non2xx of $total, server CPU $cpu cores, wrk CPU $wcpu cores"
    ROWS+=("| $cfg | $server | $config | $conns | ${rps:--} | $p50 | $p99 | $errors | $cpu |")
}

log "run directory $RUN_DIR ($(df -PT "$RUN_DIR" | awk 'NR == 2 {print $2}') on $(df -P "$RUN_DIR" | awk 'NR == 2 {print $1}'))"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for cfg in $ONLY; do
    run_config "$cfg"
done

{
    echo "HTTP append benchmark: wrk -t$THREADS -d${DURATION}s --latency (warm-up ${WARMUP}s), ${RECORD_BYTES}-byte POSTs spread over as many streams as connections"
    echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); data on $(df -PT "$RUN_DIR" | awk 'NR == 2 {print $2}'); loadavg before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "strata: $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$root" && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (work tree modified)'); $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "| id | server | config | conns | req/s | p50 | p99 | errors | server CPU (cores) |"
    echo "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "wrk (load generator) CPU during each run, cores: $(IFS=,; echo "${WRK_CPU[*]}" | sed 's/,/, /g')"
} | tee "$RUN_DIR/table.md"

exit "$FAILED"
