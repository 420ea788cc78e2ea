#!/bin/bash
# demo.sh - Chorus at work: builds the project if needed (installing cmake, gcc and make on a
# fresh Debian 12 when cmake is missing), then runs a 4-rank job on this host that checks every
# result bitwise and reports the speed, nccl-tests style.
#   scripts/demo.sh            (BUILD_DIR=dir to use another build directory than build/)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

if ! command -v cmake >/dev/null 2>&1; then
  echo "== installing build tools (cmake gcc make)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q cmake gcc make
fi

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  echo "== configuring $BUILD_DIR"
  cmake -B "$BUILD_DIR" -S .
fi
echo "== building"
cmake --build "$BUILD_DIR" -j2

RUN=("$BUILD_DIR/chorus-run" --timeout 600 -n 4)
PERF=$BUILD_DIR/chorus-perf

echo "== allreduce, 4 ranks, float32 sum, 8 B .. 64 MiB, every result checked"
"${RUN[@]}" "$PERF" allreduce -b 8 -e 64M -f 4 -c 1
for coll in allgather broadcast alltoall; do
  echo "== $coll, 4 ranks, 1 KiB .. 16 MiB"
  "${RUN[@]}" "$PERF" "$coll" -b 1K -e 16M -f 16 -c 1 -n 10 -w 2
done
echo "== done: every row above has #wrong 0 (chorus-perf exits non-zero otherwise)"
