#!/bin/sh
# Builds reviewer.wasm from a clean checkout with node (20 or later) and npm:
# installs the locked dependencies (unless this lockfile is installed
# already), compiles src/ with tsc into dist/, and componentizes
# dist/reviewer.js against ./wit (in the world componentize.mjs names).
set -eu
cd "$(dirname "$0")"

step() {
    printf '== %s\n' "$1"
}

# npm ci again only when the lockfile changed since the last install (or
# node_modules is gone): it deletes and reinstalls node_modules every time.
if ! cmp -s package-lock.json node_modules/.installed-package-lock.json; then
    step "npm ci"
    npm ci --no-audit --no-fund
    cp package-lock.json node_modules/.installed-package-lock.json
fi
step "tsc"
npm run --silent compile
step "componentize"
npm run --silent componentize
