#!/usr/bin/env bash
# scripts/valgrind.sh - runs a sample of the test suite under valgrind (memcheck): the store,
# bootstrap and registered-memory unit tests, a few collective matrix cases with 2-3 ranks,
# the non-blocking and split tests, and a short soak. Fails on any memcheck error or definite
# leak (--error-exitcode=1 --errors-for-leak-kinds=definite; forked test cases exit 1 too).
#   scripts/valgrind.sh [--ctest] [BUILD_DIR]     (default BUILD_DIR: build/)
# Installs valgrind when missing, except with --ctest (then it skips with status 77).
# Reports go to BUILD_DIR/valgrind/*.log; the summary names each part and its time.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CTEST_MODE=0
[ "${1:-}" = --ctest ] && { CTEST_MODE=1; shift; }
BUILD=$(cd "${1:-$ROOT/build}" && pwd) || exit 2
T=$BUILD/tests
LOGDIR=$BUILD/valgrind
mkdir -p "$LOGDIR"

if ! command -v valgrind >/dev/null 2>&1; then
  if [ $CTEST_MODE = 1 ]; then echo "valgrind is not installed: skipped"; exit 77; fi
  sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends valgrind ||
    { echo "cannot install valgrind" >&2; exit 1; }
fi

# Valgrind runs threads one at a time, 20-50x slower: every harness time limit scales.
export CHORUS_TEST_TIMEOUT_MULTIPLIER=${CHORUS_TEST_TIMEOUT_MULTIPLIER:-30}
VG=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --fair-sched=try --num-callers=30)

# The sample: "name|binary args...". Binaries live in BUILD/tests (soak and leak in subdirs).
SAMPLE=(
  "store|unit_test_store"
  "bootstrap|unit_test_bootstrap"
  "mem|unit_test_mem"
  "allreduce n2 n3|coll_test_allreduce n2 n3"
  "broadcast n3|coll_test_broadcast n3"
  "reduce n2|coll_test_reduce n2"
  "allgather n3|coll_test_allgather n3"
  "reduce_scatter n2|coll_test_reduce_scatter n2"
  "alltoall n3|coll_test_alltoall n3"
  "gather n2|coll_test_gather n2"
  "scatter n3|coll_test_scatter n3"
  "send n2|coll_test_p2p send_n2"
  "errors|coll_test_errors"
  "multicomm|coll_test_multicomm two_groups_n2 interleaved_n3"
  "split n2 n3|coll_test_split n2 n3"
  "nonblocking|coll_test_nonblocking post_all_n2 wait_last_first_n3 free_in_flight_n2"
  "leak|leak/leak_test_leak init_destroy abort_destroy failure_destroy split_destroy mem_alloc_destroy"
  "soak 500 ops, 3 ranks|soak/chorus-soak --seed 11 --ops 500 --ranks 3 --quiet"
)

failed=0
summary=()
for item in "${SAMPLE[@]}"; do
  name=${item%%|*}
  read -r -a cmd <<<"${item#*|}"
  bin=$T/${cmd[0]}
  if [ ! -x "$bin" ]; then
    summary+=("FAIL  $name: $bin is not built")
    failed=1
    continue
  fi
  log="$LOGDIR/$(echo "$name" | tr ' ,' '__').log"
  start=$SECONDS
  # A hang is a failure too: 20 minutes at most per part.
  timeout -s KILL 1200 "${VG[@]}" "$bin" "${cmd[@]:1}" >"$log" 2>&1
  rc=$?
  took=$((SECONDS - start))
  if [ $rc = 0 ]; then
    summary+=("ok    $(printf '%4d' $took) s  $name")
  else
    summary+=("FAIL  $(printf '%4d' $took) s  $name (exit $rc): $log")
    failed=1
    grep -E "^==[0-9]+== (Invalid|Conditional|Syscall|Mismatched|Source and destination|[0-9,]+ bytes in [0-9,]+ blocks are definitely)" "$log" | head -n 5
  fi
done
printf '%s\n' "${summary[@]}"
[ $failed = 0 ] && echo "valgrind: no memcheck error and no definite leak in ${#SAMPLE[@]} parts"
exit $failed
