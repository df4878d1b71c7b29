#!/usr/bin/env bash
# Installs the third-party MCP servers the MCP client tests run against
# (shells/tests/mcp_client.rs) into target/mcp-peers/ (or $MCP_PEERS_DIR),
# pinned, with npm. Idempotent: does nothing when the pinned versions are
# already there. Prints one line per server: NAME=ABSOLUTE_PATH_OF_ITS_BIN
# (a node script), then node_modules=THE_NODE_MODULES_DIR.
# Exits 3 when node or npm is missing, so callers can tell "no toolchain"
# from "install failed".
set -euo pipefail
cd "$(dirname "$0")/.."

FILESYSTEM_VERSION=2026.8.31
EVERYTHING_VERSION=2026.8.31

dir="${MCP_PEERS_DIR:-$PWD/target/mcp-peers}"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "mcp-peers: node and npm are needed" >&2
  exit 3
fi

installed_version() {
  # The version field of an installed package's package.json, or nothing.
  local pj="$dir/node_modules/$1/package.json"
  if [ -f "$pj" ]; then
    node -e 'process.stdout.write(require(process.argv[1]).version)' "$pj" 2>/dev/null || true
  fi
}

wanted() {
  [ "$(installed_version @modelcontextprotocol/server-filesystem)" != "$FILESYSTEM_VERSION" ] ||
    [ "$(installed_version @modelcontextprotocol/server-everything)" != "$EVERYTHING_VERSION" ]
}

if wanted; then
  mkdir -p "$dir"
  # Test binaries may run this at once: one installs, the others wait for
  # it, then find it done (flock is in util-linux, on every Linux here).
  exec 9>"$dir/.lock"
  flock 9
  if wanted; then
    # A package.json of our own so npm installs here, not in a parent project.
    printf '%s\n' \
      '{' \
      '  "name": "agentsessions-mcp-peers",' \
      '  "private": true,' \
      '  "dependencies": {' \
      "    \"@modelcontextprotocol/server-filesystem\": \"$FILESYSTEM_VERSION\"," \
      "    \"@modelcontextprotocol/server-everything\": \"$EVERYTHING_VERSION\"" \
      '  }' \
      '}' >"$dir/package.json"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error >&2)
  fi
  flock -u 9
fi

bin_of() {
  # The package's own bin entry (a JS file), resolved from its package.json.
  node -e '
    const path = require("path");
    const pj = path.join(process.argv[1], "node_modules", process.argv[2], "package.json");
    const p = require(pj);
    const bin = typeof p.bin === "string" ? p.bin : Object.values(p.bin)[0];
    process.stdout.write(path.resolve(path.dirname(pj), bin));
  ' "$dir" "$1"
}

echo "filesystem=$(bin_of @modelcontextprotocol/server-filesystem)"
echo "everything=$(bin_of @modelcontextprotocol/server-everything)"
echo "node_modules=$dir/node_modules"
