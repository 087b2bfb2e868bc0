#!/usr/bin/env bash
# `make test`: installs what is missing, starts a throwaway PostgreSQL, runs every test suite (then
# the concurrent parts again under ThreadSanitizer), stops the cluster, and fails on any failure,
# and when the tests left anything in their temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every temporary file of the run goes in a folder of its own, removed at the end. The tools (apt,
# pip, SwiftPM and the compiler: swift-driver keeps a TemporaryDirectory.XXXXXX per run) get
# $tools_tmp. The tests run with TMPDIR=$tests_tmp, which must be empty again when they end: every
# test removes what it made there, its child processes' files included.
tools_tmp=$(mktemp -d /tmp/rouse-test-tools.XXXXXX)
tests_tmp=$(mktemp -d /tmp/rouse-test-tmp.XXXXXX)
chmod 0755 "$tests_tmp"  # the fault tests' own PostgreSQL cluster (user postgres) lives in it
pgdir=""
cleanup() {
    if [ -n "$pgdir" ]; then bash scripts/pg.sh stop "$pgdir/cluster" || true; fi
    rm -rf "$pgdir" "$tools_tmp" "$tests_tmp"
}
trap cleanup EXIT
export TMPDIR=$tools_tmp

bash scripts/deps.sh
bash scripts/standins-venv.sh >/dev/null  # Python venv of the APNs/FCM stand-ins (Tests/PushStandIns)
bash scripts/property-venv.sh >/dev/null  # Python venv of schemathesis (Tests/PropertyTests, OpenAPIPropertyTests)
bash scripts/browser-venv.sh >/dev/null   # Python venv of Selenium (Tests/BrowserTests, AdminPagesBrowserTests)

pgdir=$(mktemp -d /tmp/rouse-test-pg.XXXXXX)
chmod 0755 "$pgdir"
port=$((20000 + RANDOM % 20000))
# Test data is thrown away: skip fsync so the suite does not wait on the disk.
ROUSE_PG_FSYNC=off bash scripts/pg.sh start "$pgdir/cluster" "$port"
export ROUSE_TEST_DATABASE_URL
ROUSE_TEST_DATABASE_URL=$(bash scripts/pg.sh url "$pgdir/cluster" "$port")
echo "rouse: test PostgreSQL on socket $pgdir/cluster port $port"

# Build progress lines are noise in CI logs; everything else (failures, test counts) is shown.
quiet='^\[[0-9]+/[0-9]+\] (Compiling|Emitting|Write|Linking|Applying|Building|Planning)'
status=0
# Everything the test bundles print also goes to $results, whose failure lines are printed again
# at the very end: a CI log shows only its tail.
results="$pgdir/results.log"
: >"$results"
# Runs a test bundle with the tests' TMPDIR, its output shown and kept in $results.
run_bundle() {
    TMPDIR=$tests_tmp "$@" 2>&1 | tee -a "$results"
}

# Fails the run when the tests left anything in $tests_tmp (named, with what is inside), then
# empties it for the next pass.
check_leftovers() {
    local left
    left=$(cd "$tests_tmp" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)
    if [ -n "$left" ]; then
        echo "rouse: tests left files in the temporary directory: $(echo $left) (after $1)" | tee -a "$results" >&2
        (cd "$tests_tmp" && find . -mindepth 1 | sort | head -n 50) >&2
        status=1
        find "$tests_tmp" -mindepth 1 -delete
    fi
}

# The test bundle is run directly rather than by `swift test`, whose own TemporaryDirectory.XXXXXX
# folders would land in the tests' TMPDIR: XCTest suites, then swift-testing ones. Like `swift
# test`, no colour codes when the output is not a terminal.
if [ ! -t 1 ] || [ ! -t 2 ]; then export NO_COLOR=1; fi
echo "== layers (scripts/check-layers.py: dependencies and imports point down, architecture.md draws them)"
python3 scripts/check-layers.py || status=1
echo "== swift test (all suites)"
swift build --build-tests 2>&1 | grep -vE "$quiet" || { echo "rouse: the build FAILED" >&2; exit 1; }
bundle="$(swift build --show-bin-path)/RousePackageTests.xctest"
run_bundle "$bundle" || status=1
run_bundle "$bundle" --testing-library swift-testing || status=1
check_leftovers "swift test"

echo "== swift test --sanitize=thread (transports, transactions, registrar, storage, calls, proxy, SIP service, DNS, the log writer)"
tsan=(--sanitize=thread --scratch-path .build-tsan)
filter='SIPTransportTests|SIPTransactionTests|RegistrarTests|FlowRoutingTests|StorageTests|CallRoutingTests|SIPProxyTests|SIPServiceTests|SIPDNSTests|RouseLogTests'
swift build --build-tests "${tsan[@]}" 2>&1 | grep -vE "$quiet" || { echo "rouse: the ThreadSanitizer build FAILED" >&2; exit 1; }
bundle="$(swift build "${tsan[@]}" --show-bin-path)/RousePackageTests.xctest"
# What `swift test --filter` selects: the tests whose Module.Class/method matches, comma-separated.
selected=$("$bundle" --list-tests | grep -E '^[A-Za-z0-9_]+\.[A-Za-z0-9_]+/' | grep -E "$filter" | paste -sd, -)
run_bundle "$bundle" "$selected" || status=1
check_leftovers "swift test --sanitize=thread"

if [ "$status" -ne 0 ]; then
    echo "rouse: the failures, again:" >&2
    grep -E "error: |' failed \(|recorded an issue|rouse: tests left files" "$results" | head -n 40 >&2 || true
    echo "rouse: tests FAILED" >&2
fi
exit "$status"
