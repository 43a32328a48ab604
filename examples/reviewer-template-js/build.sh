#!/bin/sh
# Builds reviewer.wasm from a clean checkout with node (20 or later) and npm:
# installs the locked dependencies, compiles src/ with tsc into dist/, and
# componentizes dist/reviewer.js against ../../wit (world `reviewer`).
set -eu
cd "$(dirname "$0")"

step() {
    printf '== %s\n' "$1"
}

step "npm ci"
npm ci --no-audit --no-fund
step "tsc"
npm run --silent compile
step "componentize"
npm run --silent componentize
