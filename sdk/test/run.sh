#!/usr/bin/env bash
# The SDK's tests: installs its development dependencies (the TypeScript
# compiler and puppeteer-core, pinned in package-lock.json) and Debian's
# chromium, builds the SDK, runs the unit tests (node:test, a scripted fetch),
# then the end-to-end tests against a real `strata serve` (STRATA_BIN, built
# here when unset): the routes, kill -9 and restarts, the packed tarball on
# Node, Bun and Deno, and a page in headless Chromium.
set -euo pipefail
sdk="$(cd "$(dirname "$0")/.." && pwd)"
root="$(dirname "$sdk")"
cd "$sdk"
if [ ! -x node_modules/.bin/tsc ] || [ ! -d node_modules/puppeteer-core ]; then
    npm install --no-audit --no-fund --loglevel=error
fi
# Headless Chromium for the browser test: Debian's package (puppeteer-core
# drives it; it downloads no browser of its own).
if [ -z "${CHROMIUM_BIN:-}" ] && ! command -v chromium >/dev/null; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium >/dev/null
fi
node_modules/.bin/tsc -p tsconfig.json
node --test test/unit/
if [ -z "${STRATA_BIN:-}" ]; then
    (cd "$root" && cargo build -p strata-server --quiet)
    export STRATA_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/strata"
fi
node --test --test-concurrency=1 test/e2e/
