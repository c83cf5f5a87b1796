# Starts moto_server (an S3-compatible server) on a free loopback port for the
# tests, from a virtualenv in .venv (created on first use), and creates a bucket.
# Source it: it exports STRATA_TEST_S3_ENDPOINT and STRATA_TEST_S3_BUCKET and
# stops the server when the calling shell exits.

strata_start_moto() {
    local root venv port log
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    venv="$root/.venv"
    if [ ! -x "$venv/bin/moto_server" ]; then
        echo "scripts/moto.sh: installing moto[server] into $venv" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]'
    fi
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    log="$(mktemp)"
    "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
    STRATA_MOTO_PID=$!
    trap 'kill "$STRATA_MOTO_PID" 2>/dev/null || true' EXIT
    for _ in $(seq 1 200); do
        if curl -fs -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    curl -fsS -X PUT -o /dev/null "http://127.0.0.1:$port/strata-test" || {
        echo "scripts/moto.sh: moto did not start; its log:" >&2
        cat "$log" >&2
        return 1
    }
    export STRATA_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
    export STRATA_TEST_S3_BUCKET="strata-test"
}
