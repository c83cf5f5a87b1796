#!/usr/bin/env bash
# The SDK's tests: installs its one development dependency (the TypeScript
# compiler, pinned in package-lock.json), builds it, runs the unit tests
# (node:test, a scripted fetch), then the end-to-end tests against a real
# `strata serve` (STRATA_BIN, built here when unset).
set -euo pipefail
sdk="$(cd "$(dirname "$0")/.." && pwd)"
root="$(dirname "$sdk")"
cd "$sdk"
if [ ! -x node_modules/.bin/tsc ]; then
    npm install --no-audit --no-fund --loglevel=error
fi
node_modules/.bin/tsc -p tsconfig.json
node --test test/unit/
if [ -z "${STRATA_BIN:-}" ]; then
    (cd "$root" && cargo build -p strata-server --quiet)
    export STRATA_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/strata"
fi
node --test --test-concurrency=1 test/e2e/
