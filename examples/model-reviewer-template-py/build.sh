#!/usr/bin/env bash
# Builds the Python model-reviewer template into reviewer.wasm, from a clean
# checkout, with python3.11 (or $PYTHON) and pip:
#
#   1. a venv in .venv/ with componentize-py installed from requirements.txt
#      (pinned, --require-hashes, wheels only; the file is shared with
#      ../reviewer-template-py);
#   2. the native tests of the rule, with a fake model (python -m unittest);
#   3. bindings/: the Python bindings of the `model-reviewer` world, for
#      editors and type checkers (componentize-py generates its own while it
#      builds);
#   4. componentize-py -w model-reviewer componentize app -o reviewer.wasm.
set -euo pipefail
cd "$(dirname "$0")"

if [[ $# -ne 0 ]]; then
    echo "usage: $0" >&2
    exit 64
fi

wit=wit
world=model-reviewer
output=reviewer.wasm
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

.venv/bin/python -m unittest --quiet test_model_rule

rm -rf bindings
.venv/bin/componentize-py --quiet -d "$wit" -w "$world" bindings bindings

# Only this directory is on the component's Python path (`-p .`, the
# default); .venv/ and bindings/ are not packages and are not bundled.
.venv/bin/componentize-py -d "$wit" -w "$world" componentize app -o "$output"
ls -l "$output"
