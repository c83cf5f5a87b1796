#!/usr/bin/env bash
# The upstream Durable Streams clients against a three-member strata fleet
# whose shard owner is killed and whose next owner is drained: the TypeScript
# client (conformance/fleet-clients.mjs, its IdempotentProducer; from the
# conformance suite's node_modules) and, at the same time, the Python client
# (conformance/fleet-python.py: durable-streams from PyPI, pinned, in
# conformance/.venv, producing with Stream-Seq and tailing by long-poll).
#
# The upstream IdempotentProducer does not retry a 503 (it reports it and drops
# the batch), so this passes only because a forwarding member keeps small
# bodies and sends them again once a dead owner's shard has moved, instead of
# answering 503 (server/src/http/fleet.rs).
#
#   conformance/fleet-clients.sh            build (debug) and run
#   STRATA_BIN=path conformance/fleet-clients.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$here"
if [ ! -d node_modules/@durable-streams/client ]; then
    npm install --no-audit --no-fund --loglevel=error
fi
python_client="durable-streams==0.1.0"
if ! .venv/bin/python -c 'import durable_streams' 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check "$python_client"
fi
if [ -z "${STRATA_BIN:-}" ]; then
    (cd "$root" && cargo build -p strata-server --quiet)
    STRATA_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/strata"
fi
store="$(mktemp -d)"
log="$store.log"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$store"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
urls=()
for _ in 1 2 3; do
    port="$(free_port)"
    "$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$store" --fleet \
        --advertise-url "http://127.0.0.1:$port" --shards 1 --heartbeat-ms 500 --fleet-lease-ms 2000 \
        --long-poll-timeout-ms 500 --cache-bytes 0 \
        --dev-default-key "c3RyYXRhLWNvbmZvcm1hbmNlLWRldi1rZXktMzJiISE" >>"$log" 2>&1 &
    pids+=("$!")
    urls+=("http://127.0.0.1:$port")
    for _ in $(seq 1 300); do
        if curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz"; then break; fi
        sleep 0.1
    done
done
# Wait until shard 0's owner has claimed it with all three members live.
for _ in $(seq 1 100); do
    settled="$("$STRATA_BIN" fleet status --store "$store" --fleet-lease-ms 2000 --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
row = s["shards"][0]
print("yes" if sum(m["live"] for m in s["members"]) == 3 and row["computed_owner"] == row["manifest_instance"] else "")')"
    if [ -n "$settled" ]; then break; fi
    sleep 0.1
done
export MEMBER_URLS="$(IFS=,; echo "${urls[*]}")" MEMBER_PIDS="$(IFS=,; echo "${pids[*]}")"
export STRATA_BIN STORE="$store" STOP_FILE="$store.stop"
.venv/bin/python fleet-python.py &
python_pid=$!
node_ok=1
node fleet-clients.mjs || node_ok=0
touch "$STOP_FILE"
python_ok=1
wait "$python_pid" || python_ok=0
rm -f "$STOP_FILE"
if [ "$node_ok" = 0 ] || [ "$python_ok" = 0 ]; then
    echo "fleet-clients: failed (typescript ok=$node_ok, python ok=$python_ok); server log (last 40 lines):" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
