#!/usr/bin/env bash
# Creates target/pyvenv (under the repository root) with the pinned packages
# of requirements.txt and the repository's own Python SDK (sdk/python, whose
# harness kit some peers are written on), for the Python harness peers of the
# conformance suite. Idempotent: a stamp holding the requirements and a digest
# of the SDK's sources makes a second run a no-op; a change reinstalls.
# Prints the venv's python on success.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/pyvenv"
req="$here/requirements.txt"
stamp="$venv/.requirements"
python="${PYTHON:-python3}"

mkdir -p "$root/target"
# Test binaries may run this concurrently; one installs, the others wait.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$root/target/pyvenv.lock"
  flock 9
fi

sdk_digest="$(bash "$root/sdk/python/sources-digest.sh")"
want="$(cat "$req"; echo "# sdk $sdk_digest")"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"
  exit 0
fi

command -v "$python" >/dev/null 2>&1 || { echo "venv.sh: $python not found" >&2; exit 1; }
rm -f "$stamp"
# --clear: a half-made venv from an interrupted run is rebuilt, not trusted.
"$python" -m venv --clear "$venv" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$req" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q "$root/sdk/python" >&2
echo "$want" > "$stamp"
echo "$venv/bin/python"
