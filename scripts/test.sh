#!/usr/bin/env bash
# `make test`: installs what is missing, starts a throwaway PostgreSQL, runs every test suite (then
# the concurrent parts again under ThreadSanitizer), stops the cluster, and fails on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/standins-venv.sh >/dev/null  # Python venv of the APNs/FCM stand-ins (Tests/PushStandIns)
bash scripts/property-venv.sh >/dev/null  # Python venv of schemathesis (Tests/PropertyTests, OpenAPIPropertyTests)
bash scripts/browser-venv.sh >/dev/null   # Python venv of Selenium (Tests/BrowserTests, AdminPagesBrowserTests)

pgdir=$(mktemp -d /tmp/rouse-test-pg.XXXXXX)
chmod 0755 "$pgdir"
port=$((20000 + RANDOM % 20000))
cleanup() {
    bash scripts/pg.sh stop "$pgdir/cluster" || true
    rm -rf "$pgdir"
}
trap cleanup EXIT
# Test data is thrown away: skip fsync so the suite does not wait on the disk.
ROUSE_PG_FSYNC=off bash scripts/pg.sh start "$pgdir/cluster" "$port"
export ROUSE_TEST_DATABASE_URL
ROUSE_TEST_DATABASE_URL=$(bash scripts/pg.sh url "$pgdir/cluster" "$port")
echo "rouse: test PostgreSQL on socket $pgdir/cluster port $port"

# Build progress lines are noise in CI logs; everything else (failures, test counts) is shown.
quiet='^\[[0-9]+/[0-9]+\] (Compiling|Emitting|Write|Linking|Applying|Building|Planning)'
status=0
echo "== swift test (all suites)"
swift test 2>&1 | grep -vE "$quiet" || status=1

echo "== swift test --sanitize=thread (transports, transactions, registrar, storage, calls)"
swift test --sanitize=thread --scratch-path .build-tsan \
    --filter 'SIPTransportTests|SIPTransactionTests|RegistrarTests|FlowRoutingTests|StorageTests|CallRoutingTests' 2>&1 | grep -vE "$quiet" || status=1

if [ "$status" -ne 0 ]; then
    echo "rouse: tests FAILED" >&2
fi
exit "$status"
