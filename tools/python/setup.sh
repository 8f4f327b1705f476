#!/usr/bin/env bash
# A Python virtual environment with tools/python/requirements.txt, or the
# requirements file given (PyPI only), made once per machine and reused
# while the requirements are the same; prints the path of its python on
# stdout (progress on stderr):
#
#   PY=$(tools/python/setup.sh)
#   PY=$(tools/python/setup.sh tools/python/langgraph/requirements.txt)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
req="${1:-$here/requirements.txt}"
sum=$(sha256sum "$req" | cut -c1-16)
venv="${AGENTLEDGER_TOOLS_CACHE:-$HOME/.cache/agentledger}/pyenv-$sum"
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.complete" ]]; then
  echo "tools/python/setup.sh: making $venv" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  touch "$venv/.complete"
fi
echo "$venv/bin/python"
