#!/usr/bin/env bash
# scripts/fuzz.sh - builds the libFuzzer targets of tests/fuzz (frame header check, connection
# hello check, status frames, bootstrap store requests, the zeros form) with clang into build-fuzz/ and runs each for SECONDS
# (default 20) over the committed seed corpus. Exits non-zero on any crash, sanitizer report,
# leak or timeout; crash inputs are kept in build-fuzz/artifacts/. Installs clang if missing.
#   scripts/fuzz.sh [SECONDS]        CHORUS_FUZZ_TARGETS="frame store" selects targets
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECONDS_PER_TARGET=${1:-20}
TARGETS=${CHORUS_FUZZ_TARGETS:-"frame hello status store zeros"}
BUILD=${CHORUS_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}

case $SECONDS_PER_TARGET in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2 ;;
esac

if ! command -v clang >/dev/null 2>&1; then
  echo "installing clang"
  sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang ||
    { echo "cannot install clang" >&2; exit 1; }
fi

# tests/fuzz is also a standalone CMake project: only the instrumented library and the targets.
cmake -S "$ROOT/tests/fuzz" -B "$BUILD" -DCMAKE_C_COMPILER=clang >/dev/null || exit 1
cmake --build "$BUILD" -j "$(nproc 2>/dev/null || echo 2)" >"$BUILD/build.log" 2>&1 ||
  { tail -n 40 "$BUILD/build.log" >&2; echo "FAIL: build" >&2; exit 1; }

failed=0
for t in $TARGETS; do
  bash "$ROOT/tests/fuzz/run_fuzz.sh" "$BUILD/fuzz_$t" "$ROOT/tests/fuzz/corpus/$t" \
    "$SECONDS_PER_TARGET" "$BUILD/artifacts" || failed=1
done
[ $failed = 0 ] && echo "fuzz: every target ran $SECONDS_PER_TARGET s without a finding"
exit $failed
