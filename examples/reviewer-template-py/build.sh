#!/usr/bin/env bash
# Builds the Python reviewer template into reviewer.wasm, from a clean
# checkout, with python3.11 (or $PYTHON) and pip:
#
#   1. a venv in .venv/ with componentize-py installed from requirements.txt
#      (pinned, --require-hashes, wheels only);
#   2. the native tests of the policy and of strict_json.py (python -m
#      unittest);
#   3. bindings/: the Python bindings of the `reviewer` world, for editors and
#      type checkers (componentize-py generates its own while it builds);
#   4. componentize-py componentize app -o reviewer.wasm.
#
# ./build.sh --stub-wasi builds reviewer-stub-wasi.wasm instead: every WASI
# import replaced by a trap inside the component (see README.md: it has no
# WASI imports, but 38 core instances: it needs `core_instances = 38`).
set -euo pipefail
cd "$(dirname "$0")"

output=reviewer.wasm
extra=()
case "${1:-}" in
    "") ;;
    --stub-wasi)
        output=reviewer-stub-wasi.wasm
        extra=(--stub-wasi)
        ;;
    *)
        echo "usage: $0 [--stub-wasi]" >&2
        exit 64
        ;;
esac

wit=wit
python=${PYTHON:-python3.11}
if ! command -v "$python" >/dev/null; then
    echo "$python not found: install Python 3.11 (or set PYTHON to a python3 >= 3.9)" >&2
    exit 1
fi

if [[ ! -x .venv/bin/componentize-py ]] || ! cmp -s requirements.txt .venv/requirements.txt; then
    rm -rf .venv
    "$python" -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check \
        --require-hashes --only-binary :all: --no-deps -r requirements.txt
    cp requirements.txt .venv/requirements.txt
fi
echo "componentize-py: $(.venv/bin/componentize-py --version)"

.venv/bin/python -m unittest --quiet test_allowlist test_strict_json

rm -rf bindings
.venv/bin/componentize-py --quiet -d "$wit" -w reviewer bindings bindings

# Only this directory is on the component's Python path (`-p .`, the
# default); .venv/ and bindings/ are not packages and are not bundled.
.venv/bin/componentize-py -d "$wit" -w reviewer componentize app "${extra[@]}" -o "$output"
ls -l "$output"
