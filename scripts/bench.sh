#!/usr/bin/env bash
# `make bench`: builds Rouse and its benchmark in release mode, installs the rival (Debian's
# kamailio and kamailio-postgres-modules) and valgrind, starts a private PostgreSQL (fsync on, so a
# durable 200 costs an honest commit) with a database for Rouse, one with synchronous_commit=off
# (Rouse's fastest setting) and one for Kamailio (its tables from /usr/share/kamailio/postgres),
# and runs rouse-bench, which measures parser, OPTIONS, REGISTERs against Rouse and Kamailio in
# interleaved runs, SIPp ladders of REGISTER with digest and of call setups against Rouse and
# Kamailio (in memory and durable), posting, push, calls (with Kamailio beside Rouse) and
# wake-then-ring, one instance holding 1,000,000 bindings (scale), and counts a REGISTER's
# instructions under callgrind. The report goes to bench/results/<YYYY-MM-DD>.md
# and .json (docs/benchmarks.md says how to read it).
#
# BENCH_QUICK=1 runs short phases with fewer extensions (for trying things, not for publishing);
# BENCH_PHASES=register,calls runs only those phases; further arguments go to rouse-bench
# (`--help` lists them). ROUSE_BENCH_SCRATCH sets SwiftPM's scratch path (default .build);
# ROUSE_BENCH_REVISION names the commit in the report when the tree is not a git checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh

if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
bench_packages=(kamailio kamailio-postgres-modules sip-tester valgrind)
missing=()
for package in "${bench_packages[@]}"; do installed "$package" || missing+=("$package"); done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "rouse: installing ${missing[*]} for the benchmark" >&2
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Debian's package enables and starts a system Kamailio on port 5060 where systemd runs; the
    # bench runs its own on loopback ports, so the system one is stopped and left disabled.
    if [[ " ${missing[*]} " == *" kamailio "* ]] && [ -d /run/systemd/system ]; then
        $SUDO systemctl disable --now kamailio >/dev/null 2>&1 || true
    fi
fi

build=(swift build -c release)
if [ -n "${ROUSE_BENCH_SCRATCH:-}" ]; then build+=(--scratch-path "$ROUSE_BENCH_SCRATCH"); fi
for product in rouse rouse-bench; do
    "${build[@]}" --product "$product" 2>&1 | grep -E 'error:|complete' >&2 || true
done
bindir="$("${build[@]}" --show-bin-path)"
for product in rouse rouse-bench; do
    [ -x "$bindir/$product" ] || { echo "rouse: release build of $product failed" >&2; exit 1; }
done

# A private cluster, as `make test` starts one, but with fsync left on.
pgdir=$(mktemp -d /tmp/rouse-bench-pg.XXXXXX)
chmod 0755 "$pgdir"
port=$((20000 + RANDOM % 20000))
cleanup() {
    bash scripts/pg.sh stop "$pgdir/cluster" || true
    rm -rf "$pgdir"
}
trap cleanup EXIT
ROUSE_PG_FSYNC=on bash scripts/pg.sh start "$pgdir/cluster" "$port"
url() { bash scripts/pg.sh url "$pgdir/cluster" "$port" "$@"; }
psql "$(url)" -q -v ON_ERROR_STOP=1 \
    -c 'CREATE DATABASE rouse_bench' \
    -c 'CREATE DATABASE rouse_bench_async' \
    -c 'ALTER DATABASE rouse_bench_async SET synchronous_commit = off' \
    -c 'CREATE DATABASE kamailio_bench' \
    -c 'CREATE DATABASE rouse_bench_scale' >/dev/null
for schema in standard auth_db usrloc htable; do
    psql "$(url kamailio_bench)" -q -v ON_ERROR_STOP=1 -f "/usr/share/kamailio/postgres/$schema-create.sql" >/dev/null
done
echo "rouse: bench PostgreSQL on socket $pgdir/cluster port $port (fsync on)"

arguments=(
    --database-url "$(url rouse_bench)"
    --memory-database-url "$(url rouse_bench_async)"
    --kamailio "$(command -v kamailio || echo /usr/sbin/kamailio)"
    --kamailio-config bench/kamailio/kamailio.cfg
    --kamailio-database-url "$(url kamailio_bench)"
    --scale-database-url "$(url rouse_bench_scale)"
    --report-dir bench/results
)
if [ -n "${BENCH_QUICK:-}" ] && [ "${BENCH_QUICK}" != 0 ]; then arguments+=(--quick); fi
if [ -n "${BENCH_PHASES:-}" ]; then arguments+=(--phases "$BENCH_PHASES"); fi
"$bindir/rouse-bench" "${arguments[@]}" "$@"
