#!/usr/bin/env bash
# Runs the pinned upstream Durable Streams conformance suite (unmodified)
# against `strata serve` on a fresh temporary local-directory store, and checks
# the result against conformance/expected-results.txt (every test, "passed").
#
#   conformance/run.sh            build (debug) and run
#   STRATA_BIN=path conformance/run.sh   use an existing binary
#   STRATA_FLEET=1 conformance/run.sh    two fleet members on one store; the
#                                        suite talks to the one that does not
#                                        own the shard (every request forwarded)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$here"

if [ ! -d node_modules/@durable-streams/server-conformance-tests ]; then
    # `npm install` follows package-lock.json (versions pinned exactly); `npm ci`
    # refuses it because npm 11 leaves vite's Windows-only optional dependency
    # out of the lock it writes.
    npm install --no-audit --no-fund --loglevel=error
fi
if [ -z "${STRATA_BIN:-}" ]; then
    (cd "$root" && cargo build -p strata-server --quiet)
    STRATA_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/strata"
fi

store="$(mktemp -d)"
log="$store.log"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# A fixed development key: the suite sends no Stream-Encryption-Key.
serve() { # PORT [FLAGS…]
    local port="$1"; shift
    "$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$store" \
        --long-poll-timeout-ms 500 --allow-loopback-webhooks \
        --dev-default-key "c3RyYXRhLWNvbmZvcm1hbmNlLWRldi1rZXktMzJiISE" "$@" >>"$log" 2>&1 &
    servers+=("$!")
}
servers=()
cleanup() {
    for s in "${servers[@]}"; do kill "$s" 2>/dev/null || true; wait "$s" 2>/dev/null || true; done
    rm -rf "$store"
}
trap cleanup EXIT
wait_healthy() { # PORT
    for _ in $(seq 1 300); do
        if curl -fsS -o /dev/null "http://127.0.0.1:$1/healthz"; then return 0; fi
        for s in "${servers[@]}"; do
            if ! kill -0 "$s" 2>/dev/null; then cat "$log" >&2; exit 1; fi
        done
        sleep 0.1
    done
    echo "conformance: the server on port $1 did not start" >&2; exit 1
}
port="$(free_port)"
if [ -n "${STRATA_FLEET:-}" ]; then
    other="$(free_port)"
    for p in "$port" "$other"; do
        serve "$p" --fleet --advertise-url "http://127.0.0.1:$p" --shards 1 \
            --heartbeat-ms 500 --fleet-lease-ms 2000
    done
    wait_healthy "$port"; wait_healthy "$other"
    # Wait until shard 0's computed owner has claimed it, then point the
    # suite at the other member.
    owner=""
    for _ in $(seq 1 100); do
        owner="$("$STRATA_BIN" fleet status --store "$store" --fleet-lease-ms 2000 --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
live = [m for m in s["members"] if m["live"]]
row = s["shards"][0]
if len(live) == 2 and row["computed_owner"] and row["computed_owner"] == row["manifest_instance"]:
    print(row["computed_owner_url"])')"
        if [ -n "$owner" ]; then break; fi
        sleep 0.1
    done
    if [ -z "$owner" ]; then echo "conformance: the fleet did not settle" >&2; cat "$log" >&2; exit 1; fi
    if [ "$owner" = "http://127.0.0.1:$port" ]; then port="$other"; fi
    echo "conformance: fleet of two; shard owner $owner; the suite talks to http://127.0.0.1:$port"
else
    serve "$port"
    wait_healthy "$port"
fi

results="$(mktemp)"
set +e
STRATA_URL="http://127.0.0.1:$port" npx vitest run --reporter=default --reporter=json \
    --outputFile.json="$results" >"$store.vitest.log" 2>&1
set -e
tail -n 15 "$store.vitest.log"

# One line per test: "<status> <full name>", sorted.
actual="$(mktemp)"
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const lines = [];
for (const f of r.testResults) for (const t of f.assertionResults) lines.push(`${t.status} ${t.fullName}`);
lines.sort();
process.stdout.write(lines.join("\n") + "\n");
' "$results" >"$actual"
passed=$(grep -c '^passed ' "$actual" || true)
total=$(wc -l <"$actual")
echo "conformance: $passed of $total passed"
if ! diff -u "$here/expected-results.txt" "$actual" >"$store.diff"; then
    echo "conformance: results differ from conformance/expected-results.txt:" >&2
    grep '^[-+][a-z]' "$store.diff" | head -50 >&2
    echo "server log (last 40 lines):" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
echo "conformance: results match conformance/expected-results.txt"
