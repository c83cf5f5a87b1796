#!/usr/bin/env bash
# Runs the pinned upstream Durable Streams conformance suite (unmodified)
# against `strata serve` on a fresh temporary local-directory store, and checks
# the result against conformance/expected-results.txt (every test, "passed").
#
#   conformance/run.sh            build (debug) and run
#   STRATA_BIN=path conformance/run.sh   use an existing binary
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
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# A fixed development key: the suite sends no Stream-Encryption-Key.
"$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$store" \
    --long-poll-timeout-ms 500 --allow-loopback-webhooks \
    --dev-default-key "c3RyYXRhLWNvbmZvcm1hbmNlLWRldi1rZXktMzJiISE" >"$log" 2>&1 &
server=$!
cleanup() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -rf "$store"
}
trap cleanup EXIT
for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz"; then break; fi
    if ! kill -0 "$server" 2>/dev/null; then cat "$log" >&2; exit 1; fi
    sleep 0.1
done

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
