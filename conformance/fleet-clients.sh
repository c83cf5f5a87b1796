#!/usr/bin/env bash
# The upstream Durable Streams client against a three-member strata fleet
# whose shard owner is killed and whose next owner is drained (see
# conformance/fleet-clients.mjs). Uses the conformance suite's node_modules
# (@durable-streams/client comes with it).
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
if ! MEMBER_URLS="$(IFS=,; echo "${urls[*]}")" MEMBER_PIDS="$(IFS=,; echo "${pids[*]}")" \
    STRATA_BIN="$STRATA_BIN" STORE="$store" node fleet-clients.mjs; then
    echo "fleet-clients: failed; server log (last 40 lines):" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
