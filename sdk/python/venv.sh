#!/usr/bin/env bash
# Creates target/sdkvenv (under the repository root) with this package
# installed as a user would (`pip install ./sdk/python`, stubs generated
# from proto/ at build time) plus pytest, for tests/python_sdk.rs and CI.
# Idempotent: a stamp holding a digest of the package's sources and the
# protos makes a second run a no-op; a change reinstalls. Prints the venv's
# python on success.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/sdkvenv"
stamp="$venv/.sources"
python="${PYTHON:-python3}"

mkdir -p "$root/target"
# Test binaries may run this concurrently; one installs, the others wait.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$root/target/sdkvenv.lock"
  flock 9
fi

digest="$(bash "$root/sdk/python/sources-digest.sh")"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$digest" ]; then
  echo "$venv/bin/python"
  exit 0
fi

command -v "$python" >/dev/null 2>&1 || { echo "venv.sh: $python not found" >&2; exit 1; }
rm -f "$stamp"
# --clear: a half-made venv from an interrupted run is rebuilt, not trusted.
"$python" -m venv --clear "$venv" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q "$here" "pytest>=7,<10" >&2
echo "$digest" > "$stamp"
echo "$venv/bin/python"
