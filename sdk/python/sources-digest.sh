#!/usr/bin/env bash
# Prints a digest of what an install of this package is built from (its
# sources, its build files and the protos its stubs are generated from), so
# a venv that installed it can tell when it must reinstall (venv.sh,
# conformance/python/venv.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
find sdk/python/src sdk/python/setup.py sdk/python/pyproject.toml proto/proto \
  -type f \( -name '*.py' -o -name '*.proto' -o -name '*.toml' -o -name 'py.typed' \) \
  -not -path '*/v1/*' -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum | sha256sum
