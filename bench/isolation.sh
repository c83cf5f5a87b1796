#!/usr/bin/env bash
# Per-project admission: does one project's flood slow another project's
# appends? Measured on one server, in one run, three ways:
#
#   alone      the quiet project appends by itself;
#   unlimited  the noisy project floods at the same time, no limits file;
#   limited    the same flood, the noisy project limited by --limits-file to
#              NOISY_RATE appends/s (its excess answers 429 rate_limited).
#
# The quiet project runs `wrk -c QUIET_CONNECTIONS` and the noisy one
# `wrk -c NOISY_CONNECTIONS`, both posting RECORD_BYTES-byte records over
# STREAMS streams of their own (bench/append.lua) for DURATION seconds, on the
# local-directory store with --emulate-put-latency-ms PUT_LATENCY_MS. Prints one
# JSON line per case: the quiet project's requests/s, p50 and p99, and the noisy
# project's 2xx and non-2xx per second.
#
#   bench/isolation.sh
#
# Environment (all optional):
#   DURATION            seconds per case (default 10)
#   QUIET_CONNECTIONS   default 8
#   NOISY_CONNECTIONS   default 512
#   NOISY_RATE          the noisy project's appendRequestsPerSecond (default 2000)
#   NOISY_BYTES_RATE    and its appendBytesPerSecond (default: none)
#   NOISY_RECORD_BYTES  the noisy project's record size (default RECORD_BYTES)
#   PUT_LATENCY_MS      emulated PUT latency (default 25)
#   STREAMS             streams per project (default 8)
#   RECORD_BYTES        default 100
#   STRATA_BIN          use this binary instead of building target/release/strata
#
# Needs wrk (apt-get install wrk), curl and python3.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
DURATION="${DURATION:-10}"
QUIET_CONNECTIONS="${QUIET_CONNECTIONS:-8}"
NOISY_CONNECTIONS="${NOISY_CONNECTIONS:-512}"
NOISY_RATE="${NOISY_RATE:-2000}"
NOISY_BYTES_RATE="${NOISY_BYTES_RATE:-}"
PUT_LATENCY_MS="${PUT_LATENCY_MS:-25}"
export STREAMS="${STREAMS:-8}"
export RECORD_BYTES="${RECORD_BYTES:-100}"
NOISY_RECORD_BYTES="${NOISY_RECORD_BYTES:-$RECORD_BYTES}"
DEV_KEY="aXNvbGF0aW9uLWJlbmNoLWRldmVsb3BtZW50LWtleTI"
QUIET_TOKEN="quiet-token-000000000001"
NOISY_TOKEN="noisy-token-000000000001"

log() { printf '[isolation] %s\n' "$*" >&2; }
command -v wrk >/dev/null || { log "wrk is not installed"; exit 1; }

if [ -z "${STRATA_BIN:-}" ]; then
    (cd "$root" && cargo build --release -q -p strata-server)
    STRATA_BIN="$root/target/release/strata"
fi

run="$(mktemp -d "${TMPDIR:-/tmp}/strata-isolation.XXXXXX")"
server_pid=""
stop_server() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
    fi
}
trap 'stop_server; rm -rf "$run"' EXIT

printf 'quiet %s\nnoisy %s\n' "$QUIET_TOKEN" "$NOISY_TOKEN" >"$run/tokens"
bytes_limit=""
[ -n "$NOISY_BYTES_RATE" ] && bytes_limit=", \"appendBytesPerSecond\": $NOISY_BYTES_RATE"
printf '{"projects": {"noisy": {"appendRequestsPerSecond": %s%s}}}\n' "$NOISY_RATE" "$bytes_limit" >"$run/limits"

# start_server [extra flags...]: a fresh store, both projects' streams made.
start_server() {
    stop_server
    rm -rf "$run/store"
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    "$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$run/store" \
        --dev-default-key "$DEV_KEY" --tokens-file "$run/tokens" \
        --emulate-put-latency-ms "$PUT_LATENCY_MS" "$@" \
        >"$run/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 400); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
        kill -0 "$server_pid" 2>/dev/null || { log "the server did not start"; cat "$run/server.log"; exit 1; }
        sleep 0.05
    done
    for token in "$QUIET_TOKEN" "$NOISY_TOKEN"; do
        for i in $(seq 0 $((STREAMS - 1))); do
            curl -sf -X PUT -H "Authorization: Bearer $token" \
                -H 'content-type: application/octet-stream' \
                "http://127.0.0.1:$port/v1/stream/bench-$i" >/dev/null
        done
    done
}

quiet() {
    BEARER_TOKEN="$QUIET_TOKEN" wrk -t1 -c"$QUIET_CONNECTIONS" -d"${DURATION}s" --latency \
        -s "$here/append.lua" "http://127.0.0.1:$port" >"$run/quiet.txt"
}

noisy() {
    # Starts a second before the quiet run and ends a second after it.
    RECORD_BYTES="$NOISY_RECORD_BYTES" BEARER_TOKEN="$NOISY_TOKEN" wrk -t1 -c"$NOISY_CONNECTIONS" -d"$((DURATION + 2))s" \
        -s "$here/append.lua" "http://127.0.0.1:$port" >"$run/noisy.txt"
}

report() { # report CASE
    python3 - "$1" "$run/quiet.txt" "$run/noisy.txt" "$DURATION" <<'PY'
import json, os, re, sys
case, quiet_path, noisy_path, duration = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def parse(path):
    text = open(path).read()
    def ms(label):
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\b", text, re.M)
        if not m:
            return None
        v, unit = float(m.group(1)), m.group(2)
        return round(v / 1000 if unit == "us" else v * 1000 if unit == "s" else v, 2)
    total = int(re.search(r"(\d+) requests in", text).group(1))
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    refused = int(m.group(1)) if m else 0
    seconds = float(re.search(r"requests in ([\d.]+)s", text).group(1))
    return {"rps": round((total - refused) / seconds), "refused_per_s": round(refused / seconds),
            "p50_ms": ms("50"), "p99_ms": ms("99")}
out = {"case": case, "quiet": parse(quiet_path)}
if case != "alone" and os.path.exists(noisy_path):
    n = parse(noisy_path)
    out["noisy"] = {"ok_per_s": n["rps"], "refused_per_s": n["refused_per_s"]}
print(json.dumps(out))
PY
}

log "alone"
start_server
rm -f "$run/noisy.txt"
quiet
report alone

log "unlimited"
start_server
noisy &
noisy_pid=$!
sleep 1
quiet
wait "$noisy_pid"
report unlimited

log "limited (noisy: $(cat "$run/limits"))"
start_server --limits-file "$run/limits"
noisy &
noisy_pid=$!
sleep 1
quiet
wait "$noisy_pid"
report limited
