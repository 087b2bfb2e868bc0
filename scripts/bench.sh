#!/usr/bin/env bash
# `make bench`: builds the benchmark in release mode and prints its figures (parser throughput on
# one core; OPTIONS round trips over UDP on loopback through Rouse's own SIP stack).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
swift build -c release --product rouse-bench 2>&1 | grep -E 'error|Build complete' >&2 || true
bin="$(swift build -c release --show-bin-path)/rouse-bench"
[ -x "$bin" ] || { echo "rouse: benchmark build failed" >&2; exit 1; }
"$bin" "$@"
