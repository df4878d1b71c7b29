#!/usr/bin/env bash
# A daemon on PostgreSQL as a conformance host. The suite's command
# template names a SQLite journal file, which a check may have preloaded
# (the Go fixtures, for one) before the first start; this runs
# agentsessionsd on a database of its own instead, made on the first start
# and filled from that file with `agentctl journal copy`.
#
#   pg-host.sh ADMIN_URL DIR JOURNAL AGENTCTL AGENTSESSIONSD [daemon flags]
#
# DIR is the check's directory ({dir}): the database is named after it,
# and a marker in it makes a restart reuse the database (never copying the
# file again over what the daemon wrote since).
set -euo pipefail
admin=$1 dir=$2 file=$3 agentctl=$4 daemon=$5
shift 5
name=conf_$(basename "$dir" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' '_')
url="${admin%/*}/$name"
if [ ! -e "$dir/pg-host.made" ]; then
  psql -q -v ON_ERROR_STOP=1 "$admin" -c "CREATE DATABASE $name" >/dev/null
  if [ -s "$file" ]; then
    "$agentctl" journal copy --from "$file" --to "$url" >/dev/null
  fi
  touch "$dir/pg-host.made"
fi
exec "$daemon" --journal "$url" "$@"
