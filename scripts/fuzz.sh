#!/usr/bin/env bash
# Builds the libFuzzer harnesses (ROUSE_FUZZ=1 adds them to the package) and runs each for
# ${FUZZ_SECONDS:-60} seconds on its seed corpus. Crash inputs land in fuzz-artifacts/ (gitignored).
# Exits non-zero when a harness crashes. Usage: scripts/fuzz.sh   (FUZZ_SECONDS=600 for longer runs)
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
scratch="${FUZZ_SCRATCH_PATH:-/tmp/rouse-fuzz}"
artifacts="fuzz-artifacts"
mkdir -p "$artifacts"

# harness product : seed corpus
harnesses=(
  "SIPParserFuzz:Tests/Fuzz/sip-corpus"
  "SIPDifferentialFuzz:Tests/Fuzz/sip-differential-corpus"
  "DigestFuzz:Tests/Fuzz/digest-corpus"
  "PushParametersFuzz:Tests/Fuzz/push-parameters-corpus"
  "HTTPBodyFuzz:Tests/Fuzz/http-body-corpus"
)

status=0
for entry in "${harnesses[@]}"; do
  product="${entry%%:*}"
  seeds="${entry#*:}"
  ROUSE_FUZZ=1 swift build --scratch-path "$scratch" -c release --product "$product" \
    --sanitize=fuzzer -Xswiftc -parse-as-library
  # New inputs go to a working corpus outside the checkout; the seeds stay as committed.
  work="$scratch/corpus/$product"
  mkdir -p "$work"
  echo "fuzzing $product for ${seconds}s"
  if ! SWIFT_BACKTRACE=enable=no "$scratch/release/$product" \
      -max_total_time="$seconds" -artifact_prefix="$artifacts/$product-" -print_final_stats=1 \
      "$work" "$seeds"; then
    echo "$product crashed: see $artifacts/" >&2
    status=1
  fi
done
exit "$status"
