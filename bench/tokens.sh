#!/usr/bin/env bash
# Token lookup cost: request rate of an authenticated read with TOKENS
# configured against one, in the same run.
#
# For each token count (1, then TOKENS) starts the release binary on a fresh
# local-directory store with a tokens file of that many `PROJECT TOKEN` lines,
# creates one stream with the file's last token, and drives
# `GET /v1/stream/t?offset=-1` with that token through wrk (-t1 -c64) for
# DURATION seconds. Prints one JSON line per count: tokens, requests/s, p50
# and p99 latency.
#
#   bench/tokens.sh
#
# Environment (all optional):
#   TOKENS        the large token count (default 100000, the server's limit)
#   DURATION      seconds per wrk run (default 8)
#   STRATA_BIN    use this binary instead of building target/release/strata
#
# Needs wrk (apt-get install wrk), curl and python3.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
TOKENS="${TOKENS:-100000}"
DURATION="${DURATION:-8}"
DEV_KEY="dG9rZW5zLWJlbmNoLWRldmVsb3BtZW50LWtleS0zMiE"

log() { printf '[tokens] %s\n' "$*" >&2; }
command -v wrk >/dev/null || { log "wrk is not installed"; exit 1; }

if [ -z "${STRATA_BIN:-}" ]; then
    (cd "$root" && cargo build --release -q -p strata-server)
    STRATA_BIN="$root/target/release/strata"
fi

run="$(mktemp -d "${TMPDIR:-/tmp}/strata-tokens.XXXXXX")"
server_pid=""
stop_server() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
    fi
}
trap 'stop_server; rm -rf "$run"' EXIT

for count in 1 "$TOKENS"; do
    python3 - "$count" >"$run/tokens" <<'PY'
import sys
n = int(sys.argv[1])
for i in range(n):
    print(f"p{i % 1000} bench-token-{i:012d}")
PY
    token="bench-token-$(printf '%012d' $((count - 1)))"
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    rm -rf "$run/store"
    "$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$run/store" \
        --dev-default-key "$DEV_KEY" --tokens-file "$run/tokens" \
        >"$run/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 400); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
        kill -0 "$server_pid" 2>/dev/null || { log "the server did not start"; cat "$run/server.log"; exit 1; }
        sleep 0.05
    done
    curl -sf -X PUT -H "Authorization: Bearer $token" -H 'content-type: text/plain' \
        "http://127.0.0.1:$port/v1/stream/t" >/dev/null
    wrk -t1 -c64 -d"${DURATION}s" --latency -H "Authorization: Bearer $token" \
        "http://127.0.0.1:$port/v1/stream/t?offset=-1" >"$run/wrk.txt"
    python3 - "$count" "$run/wrk.txt" <<'PY'
import json, re, sys
count, path = int(sys.argv[1]), sys.argv[2]
text = open(path).read()
def ms(label):
    m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\b", text, re.M)
    if not m:
        return None
    v, unit = float(m.group(1)), m.group(2)
    return round(v / 1000 if unit == "us" else v * 1000 if unit == "s" else v, 3)
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
print(json.dumps({"tokens": count, "requests_per_sec": rps, "p50_ms": ms("50"),
                  "p99_ms": ms("99"), "non_2xx": int(non2xx.group(1)) if non2xx else 0}))
PY
    stop_server
done
