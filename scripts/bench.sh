#!/usr/bin/env bash
# `make bench`: builds the benchmark and the server in release mode and prints their figures:
# parser throughput on one core; OPTIONS round trips over UDP on loopback through Rouse's own SIP
# stack; authenticated REGISTERs against a real `rouse serve` and a private PostgreSQL (fsync on,
# so a 200 costs an honest durable commit); VoIP pushes over HTTP/2 to the APNs stand-in (its Python
# venv, scripts/standins-venv.sh, and curl); calls through the proxy to awake phones, INVITE → push and
# woken REGISTER → INVITE against a real `rouse serve`. Arguments go to rouse-bench (`--help` lists them).
# ROUSE_BENCH_SCRATCH sets SwiftPM's scratch path (default .build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh

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
psql "$(bash scripts/pg.sh url "$pgdir/cluster" "$port")" -q -v ON_ERROR_STOP=1 -c 'CREATE DATABASE rouse_bench' >/dev/null
echo "rouse: bench PostgreSQL on socket $pgdir/cluster port $port (fsync on)"

"$bindir/rouse-bench" --database-url "$(bash scripts/pg.sh url "$pgdir/cluster" "$port" rouse_bench)" "$@"
