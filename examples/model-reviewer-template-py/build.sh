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
#   4. componentize-py -w model-reviewer componentize app -o reviewer.wasm,
#      from a copy of the .py files with strict_json.py's link resolved.
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

# componentize-py runs app.py in a WASI sandbox rooted at each `-p`
# directory, where a symbolic link out of it does not resolve: strict_json.py
# (a link to ../reviewer-template-py/strict_json.py) would not be found. So the
# component is built from a copy of this directory's Python files, links
# resolved; they alone are on its Python path (.venv/ and bindings/ are not
# bundled). A package directory of your own would have to be copied too.
sources=$(mktemp -d)
trap 'rm -rf "$sources"' EXIT
cp -L ./*.py "$sources"/
.venv/bin/componentize-py -d "$wit" -w "$world" componentize app -p "$sources" -o "$output"
ls -l "$output"
