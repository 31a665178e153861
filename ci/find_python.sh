#!/usr/bin/env bash
# find_python.sh X.Y: print the path of a Python X.Y interpreter (the versions tiers' venvs:
# make test-min wants 3.11, make test-gpu-image 3.12), or fail with one line saying so.
# Tries $PYTHON_X_Y (e.g. PYTHON_3_12=/opt/py/bin/python3.12), pythonX.Y on PATH (a pyenv
# shim counts only if it runs), then pyenv's installed versions ($PYENV_ROOT or ~/.pyenv).
set -uo pipefail
want=${1:?usage: ci/find_python.sh X.Y}
var="PYTHON_${want//./_}"
is_it() { [ -n "$1" ] && "$1" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))" 2>/dev/null; }
for cand in "${!var:-}" "$(command -v "python$want" 2>/dev/null)" \
            "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python"$want"; do
  if is_it "$cand"; then
    echo "$cand"
    exit 0
  fi
done
echo "ci/find_python.sh: no Python $want found (set $var, put python$want on PATH or install it with pyenv)" >&2
exit 1
