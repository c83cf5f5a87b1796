#!/usr/bin/env bash
# Checks docs/openapi.yaml against `strata serve` with schemathesis (PyPI):
# every check (status codes, content types, headers and bodies as documented,
# schema-valid requests accepted and schema-violating ones refused, required
# headers, undeclared methods answered 405 with `Allow`, authentication, no
# 5xx), over the coverage, fuzzing and stateful phases, with a fixed seed and
# a bounded number of examples per operation. Fails on any failure or error.
#
#   conformance/schemathesis.sh                 build (debug) and run
#   STRATA_BIN=path conformance/schemathesis.sh use an existing binary
#   STRATA_SCHEMATHESIS_SEED=n, STRATA_SCHEMATHESIS_EXAMPLES=n
#                                               another seed, more examples
#
# schemathesis is installed, at the pinned version (a seed replays the same
# cases only under one version), into the virtualenv scripts/moto.sh uses
# (.venv). conformance/schemathesis_hooks.py bounds live-read waits and says
# which refusals of schema-valid requests no schema can predict; the settings
# are in conformance/schemathesis.toml.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
version="4.32.5"
seed="${STRATA_SCHEMATHESIS_SEED:-20261204}"
examples="${STRATA_SCHEMATHESIS_EXAMPLES:-80}"

venv="$root/.venv"
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -qx "schemathesis, version $version"; then
    echo "conformance/schemathesis.sh: installing schemathesis $version into $venv" >&2
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi
if [ -z "${STRATA_BIN:-}" ]; then
    (cd "$root" && cargo build -p strata-server --quiet)
    STRATA_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/strata"
fi

work="$(mktemp -d)"
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="schemathesis-token-of-alpha"
key="$("$STRATA_BIN" keys generate)"
"$STRATA_BIN" serve --listen "127.0.0.1:$port" --store "$work/store" \
    --project-token "alpha:$token" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; then break; fi
    if ! kill -0 "$server" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
    sleep 0.1
done

# Run from the scratch directory: schemathesis and Hypothesis keep files in
# the working directory.
cd "$work"
status=0
SCHEMATHESIS_HOOKS="$here/schemathesis_hooks.py" "$venv/bin/schemathesis" \
    --config-file "$here/schemathesis.toml" --no-color run "$root/docs/openapi.yaml" \
    --url "http://127.0.0.1:$port" \
    -H "Authorization: Bearer $token" -H "Prisma-Encryption-Key: $key" \
    --checks all \
    --seed "$seed" --max-examples "$examples" --generation-database none \
    --workers 2 --request-timeout 10 || status=$?
if [ "$status" -ne 0 ]; then
    echo "conformance/schemathesis.sh: failed (seed $seed); the server's log:" >&2
    tail -n 50 "$work/server.log" >&2
fi
exit "$status"
