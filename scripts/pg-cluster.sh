#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests, from Debian's postgresql
# package.
#
#   pg-cluster.sh start DIR PORT [WATCH_PID]   prints the cluster's URL
#   pg-cluster.sh stop DIR
#   pg-cluster.sh halt DIR          stops the server, keeps its data
#   pg-cluster.sh resume DIR PORT   starts a halted server again
#   pg-cluster.sh standby PRIMARY_DIR PRIMARY_PORT DIR PORT [WATCH_PID]
#                                   a streaming standby of the primary
#                                   (pg_basebackup -R), prints its URL
#   pg-cluster.sh sync PRIMARY_DIR PRIMARY_PORT
#                                   waits until a standby streams, then makes
#                                   replication synchronous (a commit returns
#                                   once the standby has it)
#   pg-cluster.sh crash DIR         stops the server at once (-m immediate),
#                                   as a power cut would
#   pg-cluster.sh promote DIR       makes a standby the primary
#
# The cluster lives in DIR (created), listens on 127.0.0.1:PORT with trust
# authentication for the role `agentsessions`, and keeps fsync on. As root,
# it runs as the `postgres` user (initdb refuses root). With PG_TLS_DIR
# (holding server.crt and server.key), `start` makes a TLS-only server. With WATCH_PID, a
# watcher stops the cluster and removes DIR once that process is gone, so a
# test binary that exits (or is killed) leaves no server behind.
set -euo pipefail

cmd=${1:?start or stop}
dir=${2:?cluster directory}

bindir=""
if command -v initdb >/dev/null 2>&1; then
  # Through a link to the real directory, which has pg_basebackup and psql
  # beside initdb even where only initdb and pg_ctl are linked into PATH.
  bindir=$(dirname "$(readlink -f "$(command -v initdb)")")
else
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do bindir=$d; done
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  echo "pg-cluster: initdb not found (install Debian's postgresql package)" >&2
  exit 3
fi

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

psql_on() {
  # psql over the cluster's unix socket in DIR, as the test role.
  local d=$1 port=$2; shift 2
  as_owner "$bindir/psql" -h "$d" -p "$port" -U agentsessions -d postgres -XAtq "$@"
}

watch_and_remove() {
  local watch=$1 d=$2
  nohup bash -c '
    while kill -0 "$1" 2>/dev/null; do sleep 1; done
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$2/pg_ctl" -D "$3/data" -m immediate stop
    else "$2/pg_ctl" -D "$3/data" -m immediate stop; fi
    rm -rf "$3"' _ "$watch" "$bindir" "$d" >/dev/null 2>&1 &
}

launch() {
  as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-p $1 -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" \
    start >/dev/null
}

case "$cmd" in
start)
  port=${3:?port}
  watch=${4:-}
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  as_owner "$bindir/initdb" -D "$dir/data" -A trust -U agentsessions -E UTF8 \
    --locale=C --no-sync >"$dir/initdb.log" 2>&1
  if [ -n "${PG_TLS_DIR:-}" ]; then
    # TLS only: the server presents $PG_TLS_DIR/server.{crt,key}, and TCP
    # connections without TLS are rejected.
    cp "$PG_TLS_DIR/server.crt" "$PG_TLS_DIR/server.key" "$dir/data/"
    chmod 600 "$dir/data/server.key"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir/data/server.crt" "$dir/data/server.key"; fi
    printf "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n" \
      >>"$dir/data/postgresql.conf"
    printf 'local all all trust\nhostssl all all 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 reject\n' \
      >"$dir/data/pg_hba.conf"
  fi
  launch "$port"
  if [ -n "$watch" ]; then watch_and_remove "$watch" "$dir"; fi
  echo "postgres://agentsessions@127.0.0.1:$port/postgres"
  ;;
standby)
  # A hot standby streaming from the primary at PRIMARY_PORT (initdb's
  # trust rules admit replication from 127.0.0.1; the test role is a
  # superuser, so it may replicate).
  primary_port=${3:?primary port}
  sdir=${4:?standby directory}
  port=${5:?port}
  watch=${6:-}
  mkdir -p "$sdir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$sdir"; fi
  as_owner "$bindir/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U agentsessions \
    -D "$sdir/data" -R -X stream --no-sync -c fast >"$sdir/basebackup.log" 2>&1
  # The standby names itself, so the primary can require it by name.
  printf "primary_conninfo = 'host=127.0.0.1 port=%s user=agentsessions application_name=standby'\n" \
    "$primary_port" >>"$sdir/data/postgresql.auto.conf"
  dir=$sdir
  launch "$port"
  if [ -n "$watch" ]; then watch_and_remove "$watch" "$sdir"; fi
  echo "postgres://agentsessions@127.0.0.1:$port/postgres"
  ;;
sync)
  port=${3:?primary port}
  for _ in $(seq 1 300); do
    if [ "$(psql_on "$dir" "$port" -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" -ge 1 ]; then
      break
    fi
    sleep 0.1
  done
  psql_on "$dir" "$port" -c "ALTER SYSTEM SET synchronous_standby_names = 'standby'" >/dev/null
  psql_on "$dir" "$port" -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 1 300); do
    if [ "$(psql_on "$dir" "$port" -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")" -ge 1 ]; then
      exit 0
    fi
    sleep 0.1
  done
  echo "pg-cluster: the standby never became synchronous" >&2
  exit 1
  ;;
crash)
  as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null
  ;;
promote)
  as_owner "$bindir/pg_ctl" -D "$dir/data" -w -t 30 promote >/dev/null
  ;;
stop)
  as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast stop >/dev/null || true
  rm -rf "$dir"
  ;;
halt)
  as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast stop >/dev/null
  ;;
resume)
  launch "${3:?port}"
  ;;
*)
  echo "pg-cluster: unknown command $cmd" >&2
  exit 2
  ;;
esac
