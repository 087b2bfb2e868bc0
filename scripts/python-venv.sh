#!/usr/bin/env bash
# `python-venv.sh NAME REQUIREMENTS`: makes the Python virtual environment .build/NAME-venv from a
# requirements file (PyPI) with python3 (or $ROUSE_PYTHON), and prints its python's path. Rebuilds it
# only when it is missing, broken, or the requirements or the interpreter changed (a stamp of both);
# quiet unless pip fails. Concurrent callers (parallel tests) wait for one another on a lock file.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
name=${1:?usage: python-venv.sh NAME REQUIREMENTS}
requirements=${2:?usage: python-venv.sh NAME REQUIREMENTS}
venv=.build/$name-venv
stamp=$venv/.rouse-requirements-stamp
python=${ROUSE_PYTHON:-python3}

mkdir -p .build
exec 9>".build/$name-venv.lock"
flock 9

want="$(sha256sum "$requirements" | cut -d' ' -f1) $("$python" -c 'import sys; print(sys.version.split()[0], sys.base_prefix)')"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    if ! { "$python" -m venv "$venv" && "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            --no-input --requirement "$requirements"; } >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        rm -rf "$venv"
        echo "rouse: could not make the Python venv $venv (python3 -m venv needs python3-venv on Debian; pip needs PyPI)" >&2
        exit 1
    fi
    rm -f "$log"
    echo "$want" >"$stamp"
fi
echo "$root/$venv/bin/python"
