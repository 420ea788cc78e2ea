#!/bin/bash
# run.sh - the one command for side-by-side figures of Chorus against Open MPI, MPICH and Gloo on
# this host (shared memory and loopback only). Installs what is missing (Debian packages), builds
# Chorus and both MPI benchmarks, runs every library in turn, repetition by repetition, so that
# noise hits all of them alike, and writes medians (CSV) and tables (markdown) to --out.
# Usage: bench/compare/run.sh [--quick] [--reps N] [--ranks "2 4"] [--colls "allreduce ..."]
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD_DIR=${CHORUS_COMPARE_BUILD_DIR:-$REPO/build-compare}
PYTHON=/usr/bin/python3
ALL_COLLS="allreduce reduce_scatter allgather broadcast alltoall reduce"
ALL_LIBS="chorus chorus_reg openmpi mpich gloo"
DEFAULT_LIBS="chorus openmpi mpich gloo"

out_dir=/tmp/chorus-compare
reps=""
ranks_list="2 4"
colls="$ALL_COLLS"
libs="$DEFAULT_LIBS"
quick=0
install=1
build=1
run_timeout_sec=""

usage() {
  cat <<EOF
usage: bench/compare/run.sh [options]
  --out DIR          where results go (raw/, runs.csv, samples.csv, medians.csv, compare.md)
                     [/tmp/chorus-compare]
  --reps N           repetitions per library, run round-robin; medians over them [3; --quick: 2]
  --ranks "2 4"      numbers of ranks
  --colls "..."      collectives, of: $ALL_COLLS
  --libs "..."       libraries, of: $ALL_LIBS [$DEFAULT_LIBS]
                     (chorus_reg: Chorus on buffers from chorus_mem_alloc, chorus-perf -R 1)
  --quick            smoke test: fewer iterations, bandwidth sizes up to 16 MiB only
  --timeout-sec S    bound on each single benchmark run [600; --quick: 240]
  --no-install       do not apt-get install missing packages (a missing library is skipped)
  --no-build         use the binaries already in the build dir
  -h, --help         this text
Environment: CHORUS_COMPARE_BUILD_DIR (build dir, default <repo>/build-compare).
Each run is: latency sweep 8 B..64 KiB (x2) and bandwidth sweep 1 MiB..256 MiB (x16), with the
check (-c 1) on; float32, sum. Tables: latency (us) at 8 B, 1 KiB, 64 KiB; busbw (GB/s) at
1 MiB, 16 MiB, 256 MiB; ratio of Chorus to the best MPI (> 1: Chorus is better).
EOF
}

die() { echo "run.sh: $*" >&2; exit 2; }

parse_options() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) out_dir=${2:?--out needs a directory}; shift ;;
      --reps) reps=${2:?--reps needs a number}; shift ;;
      --ranks) ranks_list=${2:?--ranks needs a list}; shift ;;
      --colls) colls=${2:?--colls needs a list}; shift ;;
      --libs) libs=${2:?--libs needs a list}; shift ;;
      --quick) quick=1 ;;
      --timeout-sec) run_timeout_sec=${2:?--timeout-sec needs seconds}; shift ;;
      --no-install) install=0 ;;
      --no-build) build=0 ;;
      -h|--help) usage; exit 0 ;;
      *) usage >&2; die "unknown option '$1'" ;;
    esac
    shift
  done
  [ -n "$reps" ] || reps=$([ $quick = 1 ] && echo 2 || echo 3)
  [ -n "$run_timeout_sec" ] || run_timeout_sec=$([ $quick = 1 ] && echo 240 || echo 600)
  [[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "--reps needs a positive integer, got '$reps'"
  [[ "$run_timeout_sec" =~ ^[1-9][0-9]*$ ]] || die "--timeout-sec needs seconds, got '$run_timeout_sec'"
  local n c l
  for n in $ranks_list; do
    if ! [[ "$n" =~ ^[1-9][0-9]*$ ]] || [ "$n" -lt 2 ]; then die "bad rank count '$n' (>= 2)"; fi
  done
  for c in $colls; do [[ " $ALL_COLLS " == *" $c "* ]] || die "unknown collective '$c'"; done
  for l in $libs; do [[ " $ALL_LIBS " == *" $l "* ]] || die "unknown library '$l'"; done
}

# ---- set-up: packages, builds ----

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

have_torch() { "$PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; }

install_missing() {
  local missing=()
  command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null || missing+=(openmpi-bin libopenmpi-dev)
  command -v mpicc.mpich >/dev/null && command -v mpirun.mpich >/dev/null || missing+=(mpich libmpich-dev)
  have_torch || missing+=(python3-torch)
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ $install = 0 ]; then
    echo "run.sh: missing (not installed, --no-install): ${missing[*]}" >&2
    return 0
  fi
  echo "run.sh: installing ${missing[*]}" >&2
  as_root apt-get update -q >&2 || echo "run.sh: apt-get update failed" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
    echo "run.sh: apt-get install failed; libraries that are still missing are skipped" >&2
}

build_all() {
  echo "run.sh: building Chorus in $BUILD_DIR" >&2
  if ! cmake -S "$REPO" -B "$BUILD_DIR" -DCHORUS_BUILD_TESTS=OFF >"$out_dir/build.log" 2>&1 ||
     ! cmake --build "$BUILD_DIR" -j2 --target chorus-run chorus-perf >>"$out_dir/build.log" 2>&1; then
    tail -20 "$out_dir/build.log" >&2
    die "building Chorus failed (log: $out_dir/build.log)"
  fi
  mkdir -p "$BUILD_DIR/compare"
  local mpi
  for mpi in openmpi mpich; do
    command -v "mpicc.$mpi" >/dev/null || continue
    # The project's warning flags; -O2 as the project's default build.
    "mpicc.$mpi" -O2 -std=gnu11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror \
      -o "$BUILD_DIR/compare/mpi_perf_$mpi" "$HERE/mpi_perf.c" >>"$out_dir/build.log" 2>&1 ||
      { tail -20 "$out_dir/build.log" >&2; die "building mpi_perf with mpicc.$mpi failed"; }
  done
}

# Drops libraries whose tools are missing, saying so.
available_libs() {
  local l kept=""
  for l in $libs; do
    case $l in
      chorus|chorus_reg) [ -x "$BUILD_DIR/chorus-perf" ] && [ -x "$BUILD_DIR/chorus-run" ] && kept+=" $l" || echo "run.sh: no chorus-perf in $BUILD_DIR: Chorus skipped" >&2 ;;
      openmpi|mpich)
        [ -x "$BUILD_DIR/compare/mpi_perf_$l" ] && command -v "mpirun.$l" >/dev/null && kept+=" $l" ||
          echo "run.sh: no mpi_perf_$l or mpirun.$l: $l skipped" >&2 ;;
      gloo) have_torch && [ -x "$BUILD_DIR/chorus-run" ] && kept+=" $l" || echo "run.sh: no torch with gloo: Gloo skipped" >&2 ;;
    esac
  done
  echo "${kept# }"
}

# ---- one benchmark run ----

cores=$(nproc)

# Flags of one sweep ("lat" or "bw"), the same for every library. The bandwidth sweep warms up
# 20 calls per size: on these virtual machines a fresh buffer copies slowly for its first ~20
# uses (a plain 1 MiB memcpy loop: 1000, 177, 133, ... us, down to 50 us by the 20th), so with
# 5 warm-up calls the first size measured mostly that transient, for every library.
sweep_flags() {
  case "$1.$quick" in
    lat.0) echo "-b 8 -e 64K -f 2 -n 2000 -w 200 -c 1 -d float32" ;;
    lat.1) echo "-b 8 -e 64K -f 2 -n 20 -w 3 -c 1 -d float32" ;;
    bw.0) echo "-b 1M -e 256M -f 16 -n 20 -w 20 -c 1 -d float32" ;;
    bw.1) echo "-b 1M -e 16M -f 16 -n 5 -w 2 -c 1 -d float32" ;;
  esac
}

# The command line of one run, one word per line (so that it can be logged verbatim).
run_command() {
  local lib=$1 nranks=$2 coll=$3 flags=$4
  # Chorus's broadcast runs in place, as MPI_Bcast (one buffer) and torch's broadcast do: out of
  # place, the root also copies its send buffer into its receive buffer, work they never do.
  [ "$coll" = broadcast ] && [[ $lib == chorus* ]] && flags="$flags -p 1"
  case $lib in
    chorus)
      echo "$BUILD_DIR/chorus-run --timeout $run_timeout_sec -n $nranks $BUILD_DIR/chorus-perf $coll $flags" ;;
    chorus_reg) # the buffers come from chorus_mem_alloc: the zero-copy paths
      echo "$BUILD_DIR/chorus-run --timeout $run_timeout_sec -n $nranks $BUILD_DIR/chorus-perf $coll $flags -R 1" ;;
    openmpi)
      # Shared memory (vader) only, launcher traffic on loopback; yield when oversubscribed.
      local yield=""
      [ "$nranks" -gt "$cores" ] && yield="--mca mpi_yield_when_idle 1"
      echo "mpirun.openmpi --allow-run-as-root --oversubscribe -n $nranks --mca btl self,vader --mca oob_tcp_if_include lo $yield $BUILD_DIR/compare/mpi_perf_openmpi $coll $flags" ;;
    mpich)
      # UCX restricted to shared memory (no network); MPICH has no yield knob and busy-polls.
      echo "env UCX_TLS=self,sm mpirun.mpich -n $nranks $BUILD_DIR/compare/mpi_perf_mpich $coll $flags" ;;
    gloo)
      echo "$BUILD_DIR/chorus-run --timeout $run_timeout_sec -n $nranks -x OMP_NUM_THREADS=1 -x GLOO_SOCKET_IFNAME=lo $PYTHON $HERE/gloo_perf.py $coll $flags" ;;
  esac
}

# Runs one benchmark under `timeout`; appends a line to runs.csv.
run_one() {
  local lib=$1 nranks=$2 coll=$3 sweep=$4 rep=$5
  local raw="raw/n${nranks}_${coll}_${sweep}_${lib}_r${rep}.txt"
  local cmd
  cmd=$(run_command "$lib" "$nranks" "$coll" "$(sweep_flags "$sweep")")
  local start_sec=$SECONDS
  echo "# $cmd" >"$out_dir/$raw"
  # shellcheck disable=SC2086  # cmd is split into words on purpose
  timeout -k 10 "$((run_timeout_sec + 15))" $cmd >>"$out_dir/$raw" 2>&1 </dev/null
  local rc=$?
  local elapsed_sec=$((SECONDS - start_sec))
  echo "$nranks,$coll,$lib,$sweep,$rep,$rc,$elapsed_sec,$raw" >>"$out_dir/runs.csv"
  printf 'run.sh: n=%s %-14s %-4s %-7s rep %s: exit %s, %s s\n' "$nranks" "$coll" "$sweep" "$lib" "$rep" "$rc" "$elapsed_sec" >&2
}

# Gloo lacks some collectives (torch 1.13: reduce_scatter): after one run says so, skip it.
gloo_skips() {
  local nranks=$1 coll=$2
  grep -qs '^# skipped:' "$out_dir/raw/n${nranks}_${coll}"_*_gloo_r1.txt
}

# Every library in turn, repetition by repetition; each repetition starts with the next library
# so that no library always runs first (right after the previous collective).
run_matrix() {
  local -a lib_array
  read -r -a lib_array <<<"$1"
  local nranks coll rep sweep i lib nlibs=${#lib_array[@]}
  for nranks in $ranks_list; do
    for coll in $colls; do
      for rep in $(seq 1 "$reps"); do
        for sweep in lat bw; do
          for ((i = 0; i < nlibs; i++)); do
            lib=${lib_array[$(((i + rep - 1) % nlibs))]}
            if [ "$lib" = gloo ] && { [ "$rep" -gt 1 ] || [ "$sweep" = bw ]; } && gloo_skips "$nranks" "$coll"; then
              continue
            fi
            run_one "$lib" "$nranks" "$coll" "$sweep" "$rep"
          done
        done
      done
    done
  done
}

versions() {
  echo "chorus: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  command -v mpirun.openmpi >/dev/null && echo "openmpi: $(mpirun.openmpi --version 2>/dev/null | head -1)"
  command -v mpichversion >/dev/null && echo "mpich: $(mpichversion 2>/dev/null | head -1 | tr -s ' \t' ' ')"
  have_torch && echo "torch: $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $cores cores"
}

main() {
  local command_line
  command_line=$(printf ' %q' "$@")
  parse_options "$@"
  mkdir -p "$out_dir/raw" || die "cannot create $out_dir"
  rm -f "$out_dir"/raw/*.txt "$out_dir/runs.csv"
  [ $build = 0 ] || install_missing
  [ $build = 0 ] || build_all
  local use_libs
  use_libs=$(available_libs)
  [ -n "$use_libs" ] || die "no library to run"
  local load_start
  load_start=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "run.sh: libraries: $use_libs; ranks: $ranks_list; collectives: $colls; reps: $reps; quick: $quick; load: $load_start" >&2
  awk -v l="${load_start%% *}" 'BEGIN { exit !(l > 2.5) }' &&
    echo "run.sh: WARNING: load average $load_start: the machine is busy, figures will be noisy" >&2
  local start_sec=$SECONDS
  echo "nranks,collective,library,sweep,rep,exit_code,elapsed_sec,raw_file" >"$out_dir/runs.csv"
  run_matrix "$use_libs"
  local elapsed_sec=$((SECONDS - start_sec))
  {
    echo "command: bench/compare/run.sh$command_line"
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "host: $(hostname)"
    versions
    echo "load average at start: $load_start; at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "elapsed: ${elapsed_sec} s"
    echo "CHORUS_* settings: $(env | grep '^CHORUS_' | tr '\n' ' ')"
    echo "reps: $reps; quick: $quick"
    echo "latency sweep: $(sweep_flags lat)"
    echo "bandwidth sweep: $(sweep_flags bw)"
  } >"$out_dir/context.txt"
  "$PYTHON" "$HERE/summarize.py" --out "$out_dir" --cores "$cores" ||
    die "summarize.py failed"
  echo "run.sh: done in ${elapsed_sec} s; results in $out_dir (compare.md, medians.csv, samples.csv, raw/)" >&2
}

main "$@"
