#!/usr/bin/env bash
# run.sh - is the automatic choice as good as the best algorithm one could force? For one
# collective, times a sweep of sizes once automatically and once forced to each algorithm (and
# inner choice) the registry offers for it, and prints per size the median time of each, the
# best forced one, and auto / best. By default all contenders run in one job per size band
# (chorus-perf -a auto,A,B,... -k REPS: a communicator each, taking turns call batch by call
# batch, so that every contender sees the same processes, placement and moment of the machine);
# --launches gives each contender and repetition a job of its own instead, alternating the
# contenders within each repetition. On one host (chorus-run -n L) or on an emulated cluster
# (scripts/cluster.sh: H hosts of L ranks, host links shaped with tc tbf; needs root).
#
# Usage: bench/sweep/run.sh [options]
#   --coll C        collective [allreduce]
#   --ranks L       ranks (per host with --hosts) [2]
#   --hosts H       emulated hosts (0: one host, no namespaces) [0]
#   --rate RATE     tc tbf rate of every host link, with --hosts [2gbit]
#   --numbering N   host or rr, with --hosts [host]
#   --reps N        repetitions (rounds of turns, or launches per contender) [3]
#   --small-reps N  rounds for the bands up to 256 KiB, in one-job mode [4 x --reps]: their
#                   rounds last milliseconds, and on 4 emulated hosts single rounds of one
#                   schedule spread 130-260 us at 16 KiB (9 rounds: medians of auto and its own
#                   path 14% apart; 41 rounds: 4%)
#   --launches      a job per contender and repetition instead of one per size band
#   --isolated      a barrier after every timed call, outside its time (chorus-perf -B 1): each
#                   call alone. For broadcast and reduce back to back, ranks that finished
#                   their part run ahead into the next call, which favours schedules that let
#                   them (on one host, 4 ranks: a 16 B broadcast's chain 1.0 us a call back to
#                   back, 3.6 alone; the shared-memory one 2.9 and 1.5)
#   --synced        each call alone and entered by every rank at one moment (chorus-perf -B 2),
#                   timed to the last rank's exit: a barrier's ranks leave it tens of
#                   microseconds apart on shared cores, and --isolated counts an early rank's
#                   wait in its time (4 emulated hosts x 2 ranks, 1 KiB broadcasts: binomial
#                   105 us and hier 91 alone, 84 and 110 started together). Across emulated
#                   hosts only for latency-bound sizes: the 500 us margin before each start
#                   refills the links' tbf buckets (256 KB), so calls of up to about 128 KiB
#                   cross at the veths' speed instead of the shaped rate
#   --min BYTES     smallest size [8]
#   --max BYTES     largest size [64M]
#   --factor F      size step [8]
#   --algos "..."   contenders (names as CHORUS_ALGO takes them) [every one chorus-diag
#                   --algos lists for the collective]
#   --out DIR       raw outputs, samples.csv, table.md [/tmp/chorus-sweep]
#   --timeout-sec S bound on each run [600]
#   -h, --help      this text
# Iterations per size (chorus-perf -n / -w): 1000/100 up to 4 KiB, 200/20 up to 256 KiB, 20/3 up
# to 4 MiB, 5/1 above on one host; a quarter of that (at least 3/1) across hosts (with a tenth,
# 20 calls of 64 KiB read auto at 1.20x the same schedule forced; 300 calls: 1.05x). Contenders that
# cannot serve a call (e.g. shm across hosts) are left out of that size (chorus-perf prints "not
# supported"; with --launches their run fails). The automatic row's choices come from one extra
# untimed run with the tune log on.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${CHORUS_SWEEP_BUILD_DIR:-$REPO/build}

coll=allreduce ranks=2 hosts=0 rate=2gbit numbering=host reps=3 min=8 max=64M factor=8 algos=""
out=/tmp/chorus-sweep run_timeout=600 launches=0 small_reps="" isolated=0

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" | sed '/^$/,$d'; }
die() { echo "run.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --coll) coll=${2:?}; shift ;;
    --ranks) ranks=${2:?}; shift ;;
    --hosts) hosts=${2:?}; shift ;;
    --rate) rate=${2:?}; shift ;;
    --numbering) numbering=${2:?}; shift ;;
    --reps) reps=${2:?}; shift ;;
    --launches) launches=1 ;;
    --isolated) isolated=1 ;;
    --synced) isolated=2 ;;
    --small-reps) small_reps=${2:?}; shift ;;
    --min) min=${2:?}; shift ;;
    --max) max=${2:?}; shift ;;
    --factor) factor=${2:?}; shift ;;
    --algos) algos=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --timeout-sec) run_timeout=${2:?}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
  shift
done
[ -x "$BUILD/chorus-perf" ] && [ -x "$BUILD/chorus-run" ] && [ -x "$BUILD/chorus-diag" ] ||
  die "build Chorus first (cmake --build $BUILD): chorus-perf, chorus-run and chorus-diag are needed"
if [ -z "$algos" ]; then
  algos=$("$BUILD/chorus-diag" --algos | awk -v c="$coll" '$1 == c { print $2 }' | tr '\n' ' ')
fi
[ -n "$algos" ] || die "no algorithm for '$coll'"
mkdir -p "$out" || die "cannot create $out"
rm -f "$out"/*.out "$out/samples.csv"

to_bytes() {
  local v=$1
  case $v in
    *K) echo $((${v%K} * 1024)) ;;
    *M) echo $((${v%M} * 1024 * 1024)) ;;
    *G) echo $((${v%G} * 1024 * 1024 * 1024)) ;;
    *) echo "$v" ;;
  esac
}
lo=$(to_bytes "$min") hi=$(to_bytes "$max")

# The sizes of each iteration band, [lo, hi] split at 4 KiB, 256 KiB and 4 MiB.
bands() {
  local a b n w edges=(4096 262144 4194304) iters=(1000 200 20 5) warm=(100 20 3 1) i start=$lo
  for i in 0 1 2 3; do
    local end=$hi
    [ $i -lt 3 ] && [ "${edges[$i]}" -lt "$hi" ] && end=${edges[$i]}
    if [ "$start" -le "$end" ] && [ "$start" -le "$hi" ]; then
      n=${iters[$i]} w=${warm[$i]}
      if [ "$hosts" -gt 0 ]; then n=$((n / 4 > 3 ? n / 4 : 3)) w=$((w / 4 > 1 ? w / 4 : 1)); fi
      echo "$start $end $n $w"
      a=$start
      while [ "$a" -le "$end" ]; do a=$((a * factor)); done
      start=$a
    fi
  done
}

# run_perf LOG ALGO B E N W [-k ROUNDS] [VAR=VAL...]: one chorus-perf run (ALGO "auto": no -a;
# a list A,B,...: interleaved); rank 0's rows in LOG.
run_perf() {
  local log=$1 algo=$2 b=$3 e=$4 n=$5 w=$6
  shift 6
  local aopt=()
  [ "$algo" = auto ] || aopt=(-a "$algo")
  if [ "${1:-}" = -k ]; then aopt+=(-k "$2"); shift 2; fi
  local perf=("$BUILD/chorus-perf" "$coll" -b "$b" -e "$e" -f "$factor" -n "$n" -w "$w" -c 0 -B "$isolated" "${aopt[@]}")
  if [ "$hosts" -gt 0 ]; then
    local xs=()
    for kv in "$@"; do xs+=(--run-opt -x --run-opt "$kv"); done
    timeout -k 5 "$run_timeout" "$REPO/scripts/cluster.sh" -H "$hosts" -n "$ranks" --rate "$rate" \
      --numbering "$numbering" --timeout "$run_timeout" "${xs[@]}" -- "${perf[@]}" >"$log.all" 2>&1
    local rc=$?
    sed -n 's/^\[host0\] //p' "$log.all" >"$log"
    return $rc
  fi
  local xs=()
  for kv in "$@"; do xs+=(-x "$kv"); done
  timeout -k 5 "$run_timeout" "$BUILD/chorus-run" -n "$ranks" "${xs[@]}" "${perf[@]}" >"$log" 2>&1
}

echo "# sweep of $coll$([ $isolated = 1 ] && echo " (each call alone: a barrier after each)")$([ $isolated = 2 ] &&
  echo " (each call alone, entered by every rank at one moment)"), $([ "$hosts" -gt 0 ] && echo "$hosts hosts x $ranks ranks, links $rate, numbering $numbering" ||
  echo "$ranks ranks on one host"), $reps repetitions ($([ $launches = 1 ] && echo "a launch each" ||
  echo "rounds in one job per size band, ${small_reps:-$((4 * reps))} up to 256 KiB")); contenders: auto $algos"
echo "# start $(date -u '+%Y-%m-%d %H:%M:%S UTC'); uptime: $(uptime)"
echo "rep,algo,bytes,us" >"$out/samples.csv"
read -r -a band_list <<<"$(bands | tr '\n' ' ')"
read -r -a contenders <<<"auto $algos"
# One job per band: chorus-perf's "# rounds SIZE ALGO t1 t2 ..." lines are the samples.
if [ $launches = 0 ]; then
  list=$(echo "${contenders[@]}" | tr ' ' ',')
  for ((i = 0; i < ${#band_list[@]}; i += 4)); do
    b=${band_list[$i]} e=${band_list[$((i + 1))]} n=${band_list[$((i + 2))]} w=${band_list[$((i + 3))]}
    log="$out/band.$b.out" rounds=$reps
    [ "$e" -le 262144 ] && rounds=${small_reps:-$((4 * reps))}
    if ! run_perf "$log" "$list" "$b" "$e" "$n" "$w" -k "$rounds"; then
      echo "# $b-$e: failed ($(grep -m1 -iE 'error|failed' "$log" "$log.all" 2>/dev/null | head -c 200))"
    fi
    grep -h ': not supported' "$log" | sed 's/^# [0-9]* //; s/: not supported.*//' | sort -u |
      sed "s/^/# $b-$e not supported: /"
    awk '$1 == "#" && $2 == "rounds" { for (i = 5; i <= NF; i++) print (i - 4) "," $4 "," $3 "," $i }' \
      "$log" >>"$out/samples.csv"
    echo "# band $b-$e done $(date -u '+%H:%M:%S'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
fi
for ((rep = 1; rep <= reps && launches; rep++)); do
  # Each repetition starts one contender further along the list, so that no contender always
  # runs in the same place: at 256 B on 4 emulated hosts, auto, hier and hier/leader (one
  # schedule) in that fixed order read 217, 211 and 181 us (medians of 5); started from
  # hier/leader instead, 180-187 us each.
  for ((k = 0; k < ${#contenders[@]}; k++)); do
    algo=${contenders[$(((k + rep - 1) % ${#contenders[@]}))]}
    for ((i = 0; i < ${#band_list[@]}; i += 4)); do
      b=${band_list[$i]} e=${band_list[$((i + 1))]} n=${band_list[$((i + 2))]} w=${band_list[$((i + 3))]}
      log="$out/rep$rep.${algo//\//_}.$b.out"
      if ! run_perf "$log" "$algo" "$b" "$e" "$n" "$w"; then
        echo "# rep $rep $algo $b-$e: failed ($(grep -m1 -iE 'error|not supported|failed' "$log" "$log.all" 2>/dev/null | head -c 160))"
      fi
      awk -v rep="$rep" -v algo="$algo" '$1 ~ /^[0-9]+$/ && NF >= 9 && $9 == 0 { print rep "," algo "," $1 "," $6 }' \
        "$log" >>"$out/samples.csv"
    done
  done
  echo "# rep $rep done $(date -u '+%H:%M:%S'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
done

# What the automatic choice picked: one untimed run with the tune log.
choice_log="$out/auto_choice.out"
for ((i = 0; i < ${#band_list[@]}; i += 4)); do
  run_perf "$choice_log.$i" auto "${band_list[$i]}" "${band_list[$((i + 1))]}" 1 0 CHORUS_LOG_LEVEL=debug \
    CHORUS_LOG_SUBSYS=tune >/dev/null 2>&1
  cat "$choice_log.$i" "$choice_log.$i.all" 2>/dev/null
done | grep -E "\\[0\\] CHORUS DEBUG tune $coll of" | sed 's/.*tune //' | sort -u >"$out/auto_choices.txt"

/usr/bin/python3 "$HERE/summarize.py" "$out/samples.csv" "$out/auto_choices.txt" "$coll" \
  "$([ $launches = 1 ] && echo launches || echo rounds)" "$((ranks * (hosts > 0 ? hosts : 1)))" | tee "$out/table.md"
echo "# end $(date -u '+%Y-%m-%d %H:%M:%S UTC'); uptime: $(uptime)"
