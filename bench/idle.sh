#!/usr/bin/env bash
# Idle-cost benchmark: does an idle `strata serve` touch its object store?
#
# Starts the release binary on a fresh local-directory store, creates STREAMS
# streams (one append each), waits until the work that idle time itself
# triggers is done (the age seal after --seal-age-ms, then garbage collection
# after --gc-grace-ms), and then traces the process for WINDOW seconds with
# strace, counting every file-system call (the local store's requests are file
# calls). A store request during the window shows up as at least one call.
#
#   bench/idle.sh
#
# Environment (all optional):
#   STREAMS       streams to create (default 10000)
#   WINDOW        seconds traced (default 60)
#   SEAL_AGE_MS   --seal-age-ms (default 45000, the server's default)
#   GC_GRACE_MS   --gc-grace-ms (default 600000, the server's default)
#   SETTLE        seconds to wait after the load before tracing
#                 (default: seal age + GC grace + 5 s)
#   STRATA_BIN    use this binary instead of building target/release/strata
#
# Needs strace (apt-get install strace) and python3.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
STREAMS="${STREAMS:-10000}"
WINDOW="${WINDOW:-60}"
SEAL_AGE_MS="${SEAL_AGE_MS:-45000}"
GC_GRACE_MS="${GC_GRACE_MS:-600000}"
SETTLE="${SETTLE:-$(((SEAL_AGE_MS + GC_GRACE_MS) / 1000 + 5))}"
DEV_KEY="aWRsZS1iZW5jaC1kZXZlbG9wbWVudC1rZXktMzJiISE"

log() { printf '[idle] %s\n' "$*" >&2; }
command -v strace >/dev/null || { log "strace is not installed"; exit 1; }

if [ -z "${STRATA_BIN:-}" ]; then
    (cd "$root" && cargo build --release -q -p strata-server)
    STRATA_BIN="$root/target/release/strata"
fi

run="$(mktemp -d "${TMPDIR:-/tmp}/strata-idle.XXXXXX")"
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$run"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$run/store" \
    --cache-dir "$run/cache" --dev-default-key "$DEV_KEY" \
    --seal-age-ms "$SEAL_AGE_MS" --gc-grace-ms "$GC_GRACE_MS" \
    >"$run/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 200); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { log "the server did not start"; cat "$run/server.log"; exit 1; }
    sleep 0.05
done

log "creating $STREAMS streams with one append each"
python3 - "$port" "$STREAMS" <<'EOF'
import http.client, sys
port, streams = int(sys.argv[1]), int(sys.argv[2])
conn = http.client.HTTPConnection("127.0.0.1", port)
def call(method, path, body=None):
    conn.request(method, path, body=body, headers={"content-type": "text/plain"})
    r = conn.getresponse()
    r.read()
    if r.status >= 300:
        sys.exit(f"{method} {path}: {r.status}")
for i in range(streams):
    call("PUT", f"/v1/stream/idle-{i}")
    call("POST", f"/v1/stream/idle-{i}", b"one record")
EOF

log "waiting ${SETTLE} s for the age seal and garbage collection to run"
sleep "$SETTLE"
files_before="$(find "$run/store" -type f | wc -l)"
log "tracing file-system calls for ${WINDOW} s"
timeout -s INT "$WINDOW" strace -f -qq -p "$server_pid" -e trace=%file,fsync,fdatasync \
    -o "$run/strace.log" || true
calls="$(grep -cv -e '^$' -e 'exited with' -e '+++' "$run/strace.log" || true)"
files_after="$(find "$run/store" -type f | wc -l)"
kill -0 "$server_pid" || { log "the server died"; cat "$run/server.log"; exit 1; }
echo "idle bench: $STREAMS streams, settle ${SETTLE} s, window ${WINDOW} s (seal age ${SEAL_AGE_MS} ms, GC grace ${GC_GRACE_MS} ms)"
echo "  file-system calls in the window: $calls"
echo "  store files before/after the window: $files_before/$files_after"
if [ "$calls" != "0" ]; then
    head -20 "$run/strace.log"
    exit 1
fi
