#!/usr/bin/env bash
# Keyed reads of the product API: loads one collection with RECORDS records of
# RECORD_BYTES bytes spread over ROUTING_KEYS routing keys (wrk, bench/append.lua),
# lets the server seal them into segments, then reads whole keys from the
# beginning with wrk (bench/keyread.lua): each request answers one key's
# records (about RECORDS / ROUTING_KEYS of them). Prints the load rate, the
# read rate, latency percentiles, and the server's store requests.
#
#   bench/keyread.sh                       defaults below
#   CONNS=16 DURATION=20 bench/keyread.sh
#
# Environment: LOAD_SECONDS (default 8), ROUTING_KEYS (1000), RECORD_BYTES (100),
# CONNS (read connections, default 16), DURATION (read seconds, default 10),
# WORKER_THREADS (the server's `--worker-threads`; default: its own),
# STRATA_BIN (default target/release/strata, built unless SKIP_BUILD=1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
LOAD_SECONDS="${LOAD_SECONDS:-8}"
ROUTING_KEYS="${ROUTING_KEYS:-1000}"
RECORD_BYTES="${RECORD_BYTES:-100}"
CONNS="${CONNS:-16}"
DURATION="${DURATION:-10}"
STRATA_BIN="${STRATA_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/strata}"
if [ "${SKIP_BUILD:-}" != 1 ]; then
    (cd "$root" && cargo build --release -p strata-server --quiet)
fi
command -v wrk >/dev/null || { echo "wrk is not installed" >&2; exit 1; }

run="$(mktemp -d "${TMPDIR:-/tmp}/strata-keyread.XXXXXX")"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
# Seal quickly, so the reads come from segments (through the chunk cache).
workers=()
if [ -n "${WORKER_THREADS:-}" ]; then workers=(--worker-threads "$WORKER_THREADS"); fi
"$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$run/store" --seal-age-ms 1000 \
    --cache-dir "$run/cache" "${workers[@]}" >"$run/server.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$run"' EXIT
for _ in $(seq 1 100); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.1; done
KEY="$("$STRATA_BIN" keys generate)"
# bench/append.lua names its streams bench-<i>; with STREAMS=1, bench-0.
curl -sf -o /dev/null -X PUT "$base/v1/streams/bench-0" -H "Prisma-Encryption-Key: $KEY" \
    --data '{"format":{"kind":"json"}}'
JSON_RECORDS=1 STREAMS=1 PREFIX=/v1/streams/ STREAM_KEY="$KEY" ROUTING_KEYS="$ROUTING_KEYS" RECORD_BYTES="$RECORD_BYTES" \
    wrk -t1 -c64 -d"${LOAD_SECONDS}s" -s "$here/append.lua" "$base" >"$run/load.wrk" 2>&1 || true
loaded="$(awk '/ requests in / {print $1; exit}' "$run/load.wrk")"
echo "load: $loaded appends (non-2xx: $(awk '/Non-2xx/ {print $NF}' "$run/load.wrk")) in ${LOAD_SECONDS} s over $ROUTING_KEYS keys ($(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$run/load.wrk") req/s)"
sleep 3 # the 1 s seal age passes; the seal lands
segments="$(find "$run/store/shards" -path '*/seg/*' -type f | wc -l)"
echo "segments in the store after the load: $segments"
COLLECTION=bench-0 STREAM_KEY="$KEY" ROUTING_KEYS="$ROUTING_KEYS" \
    wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency -s "$here/keyread.lua" "$base" >"$run/read.wrk" 2>&1 || true
grep -E "Requests/sec|Non-2xx|^ +(50|90|99)%" "$run/read.wrk"
one="$(curl -s "$base/v1/streams/bench-0/records?routingKey=k1&maxBytes=8388608" -H "Prisma-Encryption-Key: $KEY")"
echo "one key's page: $(printf '%s' "$one" | wc -c) bytes, $(printf '%s' "$one" | tr -cd ',' | wc -c) commas + 1 records"
if [ -n "${PERF_SECONDS:-}" ]; then # profile the reads: PERF_SECONDS=8 bench/keyread.sh
    COLLECTION=bench-0 STREAM_KEY="$KEY" ROUTING_KEYS="$ROUTING_KEYS" \
        wrk -t1 -c"$CONNS" -d"$((PERF_SECONDS + 2))s" -s "$here/keyread.lua" "$base" >/dev/null 2>&1 &
    sleep 1
    perf record -F 999 -g -p "$pid" -o "$run/perf.data" -- sleep "$PERF_SECONDS" >/dev/null 2>&1
    perf report -i "$run/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
        | grep -E '^ +[0-9.]+%' | head -15
    wait
fi
echo "server CPU: $(awk '{print ($14 + $15) / 100 " s"}' "/proc/$pid/stat")"
