#!/bin/bash
# test_single_copy.sh CHORUS_RUN CHORUS_PERF - same-host single-copy reads (process_vm_readv):
# with a CPU per rank and CHORUS_SHM_SINGLE_COPY=2 (reads whatever the kernel's speed, so that the
# test does not depend on the day's), every rank of the host turns them on, and broadcasts at the
# sizes that take them (more than 4 KiB up to 1 MiB) and around them give bitwise-checked
# results, out of place and in place, from either root, with default and 64 KiB slots, and so do
# allgather and alltoall from 8 KiB blocks; by default every rank times the kernel's copy,
# logs it, and the ranks agree; CHORUS_SHM_SINGLE_COPY=0 on one rank only turns them off on all
# (the ranks agree, so they still choose alike and the job runs); a rank killed while the other
# reads its buffers ends the other's call with an error naming it; with more ranks than CPUs, or
# the job confined to fewer CPUs than ranks, only alltoall blocks of 16 KiB and more read, even
# forced.
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_single_copy.sh CHORUS_RUN CHORUS_PERF}
PERF=${2:?missing CHORUS_PERF}

WRAP="$TMP/wrap.sh"
cat >"$WRAP" <<'EOS'
#!/bin/sh
[ "$CHORUS_RANK" = 1 ] && [ -n "$ONE_RANK_SETS" ] && export "$ONE_RANK_SETS"
exec "$@"
EOS
chmod +x "$WRAP"

# run NAME NRANKS ONE_RANK_SETS PERF_ARGS...: a checked chorus-perf job that must succeed
# (JOB_SETS="VAR=VAL ...": settings of every rank).
run() {
  local name=$1 n=$2 one=$3 sets=() set
  shift 3
  for set in ${JOB_SETS:-CHORUS_TEST_UNUSED=1}; do sets+=(-x "$set"); done
  timeout -s KILL 120 "$RUN" --timeout 110 -n "$n" -x CHORUS_LOG_LEVEL=info -x ONE_RANK_SETS="$one" \
    "${sets[@]}" "$WRAP" \
    "$PERF" "$@" -n 2 -w 1 -c 1 >"$TMP/$name.out" 2>&1 || fail "$name: the job failed ($?): $(tail -n 5 "$TMP/$name.out")"
  grep -q "^# Wrong elements : 0 OK" "$TMP/$name.out" || fail "$name: wrong results: $(tail -n 5 "$TMP/$name.out")"
}

# reads NAME ON|OFF NRANKS: every rank logged single-copy reads ON (or OFF).
reads() {
  local n
  n=$(grep -c "single-copy reads $2\$" "$TMP/$1.out")
  [ "$n" = "$3" ] || fail "$1: $n of $3 ranks logged single-copy reads $2: $(grep 'single-copy' "$TMP/$1.out" | head -n 4)"
}

cpus=$(nproc)
FORCE=CHORUS_SHM_SINGLE_COPY=2
SHARED="for large alltoall blocks only (ranks share CPUs)"
if ((cpus >= 2)); then
  SLOTS=CHORUS_SHM_SLOT_SIZE=65536
  JOB_SETS="$SLOTS $FORCE" run bc 2 "" broadcast -b 4K -e 2M -f 2
  reads bc on 2
  JOB_SETS="$SLOTS $FORCE" run bc_root1_inplace 2 "" broadcast -b 6K -e 1M -f 2 -r 1 -p 1
  # Either side of the 4 KiB and 1 MiB bounds, of the slot (64 KiB) and of the staged calls (512 KiB).
  JOB_SETS=$FORCE run bc_bounds_4k 2 "" broadcast -b 4092 -e 4100 -i 4 -d int8 -r 1
  JOB_SETS="$SLOTS $FORCE" run bc_bounds_int8 2 "" broadcast -b 60K -e 68K -i 1K -d int8
  JOB_SETS="$SLOTS $FORCE" run bc_bounds 2 "" broadcast -b 508K -e 516K -i 4K -r 1
  JOB_SETS=$FORCE run bc_bounds_1m 2 "" broadcast -b 1048572 -e 1048580 -i 4 -d int8 -r 1
  JOB_SETS=$FORCE run bc_bounds_1m_inplace 2 "" broadcast -b 1048572 -e 1048580 -i 4 -d int8 -p 1
  JOB_SETS=$FORCE run bc_default_slots 2 "" broadcast -b 4K -e 2M -f 2 -p 1
  JOB_SETS=$FORCE run ag 2 "" allgather -b 8K -e 64M -f 4
  JOB_SETS=$FORCE run a2a 2 "" alltoall -b 8K -e 64M -f 4 -p 1
  # Either side of the 8 KiB blocks from which allgather and alltoall read (2 blocks a call).
  JOB_SETS=$FORCE run ag_bounds 2 "" allgather -b 16376 -e 16392 -i 8 -d int8
  JOB_SETS=$FORCE run a2a_bounds 2 "" alltoall -b 16376 -e 16392 -i 8 -d int8
  JOB_SETS=$FORCE run a2a_bounds_inplace 2 "" alltoall -b 16376 -e 16392 -i 8 -d int8 -p 1
  ok "2 ranks, CHORUS_SHM_SINGLE_COPY=2: single-copy reads on; broadcast 4 KiB - 2 MiB (64 KiB and default slots) checked in and out of place, from either root and either side of every bound; allgather (out of place) and alltoall (in place) 8 KiB - 64 MiB, both either side of 8 KiB blocks"
  # By default each rank times the kernel's copy against memcpy; the ranks agree on the verdict.
  run bc_measured 2 "" broadcast -b 8K -e 1M -f 4
  n=$(grep -cE "kernel copy [0-9.]+ GB/s, memcpy [0-9.]+ GB/s \(1024 KiB\): single-copy reads (pay|do not pay)\$" "$TMP/bc_measured.out")
  [ "$n" = 2 ] || fail "bc_measured: $n of 2 ranks logged their kernel copy's speed: $(grep 'kernel copy' "$TMP/bc_measured.out")"
  verdict=$(grep -oE "single-copy reads (on|off)\$" "$TMP/bc_measured.out" | sort -u)
  [ "$(echo "$verdict" | wc -l)" = 1 ] || fail "bc_measured: the ranks disagree: $verdict"
  ok "by default: both ranks timed the kernel's copy ($(grep -oE 'kernel copy [0-9.]+ GB/s, memcpy [0-9.]+ GB/s' "$TMP/bc_measured.out" | head -n 1)) and agreed (${verdict#single-copy }), results checked"
  JOB_SETS="$SLOTS $FORCE" run bc_one_off 2 CHORUS_SHM_SINGLE_COPY=0 broadcast -b 64K -e 1M -f 2
  reads bc_one_off off 2
  ok "CHORUS_SHM_SINGLE_COPY=0 on one rank: off on both, results checked"
  # Both ranks confined to one CPU (the job under taskset): they would share it, so off, forced.
  timeout -s KILL 120 taskset -c 0 "$RUN" --timeout 110 -n 2 -x CHORUS_LOG_LEVEL=info -x "$FORCE" \
    "$PERF" allgather -b 8K -e 1M -f 8 -n 2 -w 1 -c 1 >"$TMP/one_cpu.out" 2>&1 ||
    fail "one_cpu: the job failed: $(tail -n 5 "$TMP/one_cpu.out")"
  grep -q "^# Wrong elements : 0 OK" "$TMP/one_cpu.out" || fail "one_cpu: wrong results: $(tail -n 5 "$TMP/one_cpu.out")"
  reads one_cpu "$SHARED" 2
  ok "2 ranks confined to one CPU (taskset -c 0), CHORUS_SHM_SINGLE_COPY=2: single-copy reads for large alltoall blocks only, results checked"
  # A root killed while the other reads its buffer: the survivor fails with an error status
  # within seconds (a read of a process that is gone, or its flags that stop), never hangs.
  "$RUN" --prefix --term-delay 8 --grace 2 --timeout 60 -n 2 -x CHORUS_TIMEOUT_SEC=20 -x "$FORCE" \
    "$PERF" broadcast -b 256K -e 256K -r 1 -n 100000000 -w 1 -c 0 >"$TMP/kill.out" 2>&1 &
  job=$!
  CLEANUP_PIDS+=($job)
  victim=""
  for ((i = 0; i < 100; i++)); do
    [ -n "$victim" ] && break
    sleep 0.1
    for pid in $(pgrep -P $job); do
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx CHORUS_RANK=1 && victim=$pid
    done
  done
  [ -n "$victim" ] || fail "kill: rank 1 not found under chorus-run (pid $job)"
  CLEANUP_PIDS+=($victim)
  sleep 1
  pid_alive "$victim" || fail "kill: rank 1 ended before the kill: $(tail -n 5 "$TMP/kill.out")"
  t0=$(now_us)
  kill -KILL "$victim"
  wait_exit 15 $job
  wait $job
  ms=$((($(now_us) - t0) / 1000))
  grep -qE "^\[0\] .*failed: CHORUS_ERR_[A-Z_]+: .*rank 1" "$TMP/kill.out" ||
    fail "kill: rank 0 printed no error status naming rank 1: $(tail -n 8 "$TMP/kill.out")"
  ok "rank 1 killed in a loop of 256 KiB broadcasts from it: rank 0 failed with $(grep -oE 'CHORUS_ERR_[A-Z_]+' "$TMP/kill.out" | head -n 1), the job ended in $ms ms"
else
  ok "1 CPU: the 2-rank cases need 2 (skipped)"
fi
n=$((cpus + 1))
JOB_SETS=$FORCE run over $n "" allgather -b 8K -e 1M -f 8
reads over "$SHARED" $n
JOB_SETS="CHORUS_SHM_SLOT_SIZE=65536 $FORCE" run over_bc $n "" broadcast -b 8K -e 1M -f 8 -p 1
# Alltoall reads blocks of 16 KiB and more there: calls either side of it, out of place and in place.
JOB_SETS=$FORCE run over_a2a $n "" alltoall -b 8K -e 16M -f 4
JOB_SETS=$FORCE run over_a2a_inplace $n "" alltoall -b $((n * 16384 - 4 * n)) -e $((n * 16384 + 4 * n)) -i $((4 * n)) -p 1
ok "$n ranks on $cpus CPUs, CHORUS_SHM_SINGLE_COPY=2: single-copy reads for alltoall blocks of 16 KiB and more only; allgather, broadcast and alltoall (either side of 16 KiB blocks, in place) checked"
done_testing
