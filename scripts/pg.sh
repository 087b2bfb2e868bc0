#!/usr/bin/env bash
# A private PostgreSQL cluster: `pg.sh start DIR PORT` creates it on first use (as the postgres
# user, since initdb refuses root) and starts it listening only on a Unix socket inside DIR;
# `pg.sh stop DIR` stops it; `pg.sh url DIR PORT [DB]` prints its libpq conninfo.
# DIR must be reachable by the postgres user (not under a 0700 home folder).
set -euo pipefail

command=${1:?usage: pg.sh start|stop|url DIR [PORT] [DB]}
dir=${2:?usage: pg.sh start|stop|url DIR [PORT] [DB]}
port=${3:-54329}
bindir=$(pg_config --bindir 2>/dev/null || true)
if [ ! -x "$bindir/initdb" ]; then
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi

as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then
        su postgres -s /bin/sh -c "$*"
    else
        sh -c "$*"
    fi
}

case "$command" in
start)
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$dir"; fi
    chmod 0700 "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_postgres "'$bindir/initdb' -D '$dir/data' -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >'$dir/initdb.log' 2>&1" || {
            cat "$dir/initdb.log" >&2
            exit 1
        }
    fi
    as_postgres "'$bindir/pg_ctl' -D '$dir/data' -l '$dir/postgres.log' -w -t 60 \
        -o \"-p $port -k '$dir' -c listen_addresses='' -c fsync=${ROUSE_PG_FSYNC:-on} -c max_connections=200\" start >/dev/null" || {
        tail -n 20 "$dir/postgres.log" >&2
        exit 1
    }
    ;;
stop)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_postgres "'$bindir/pg_ctl' -D '$dir/data' -m fast -w stop >/dev/null" || true
    fi
    ;;
url)
    echo "host=$dir port=$port user=postgres dbname=${4:-postgres}"
    ;;
*)
    echo "usage: pg.sh start|stop|url DIR [PORT] [DB]" >&2
    exit 2
    ;;
esac
