#!/usr/bin/env bash
# run.sh - the emulated-cluster headline table: a float32 sum allreduce (or another collective,
# --coll) on H hosts x L ranks
# (network namespaces on a bridge, every host link shaped with tc tbf, scripts/cluster.sh) for
# Chorus's algorithms and numberings and for Open MPI and Gloo over TCP, alternating the contenders
# within each repetition (A, B, C, ..., A, B, C, ...), with medians and the bytes that crossed
# the host links per call. Needs root and iproute2; installs openmpi-bin/libopenmpi-dev (and
# iperf3 for --line-rate) with apt-get unless --no-install; Gloo is Debian's python3-torch, run
# by bench/compare/gloo_perf.py. (MPICH is not a row: bench/cluster/README.md says why.)
#
# Usage: bench/cluster/run.sh [options]
#   --reps N          repetitions (each runs every row at every size once) [3]
#   --sizes "..."     message sizes, bytes with K/M suffixes [4K 1M 64M]
#   --coll NAME       allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall, gather
#                     or scatter [allreduce]
#   --rows "..."      rows, of: auto and auto_rr (the automatic choice, ranks numbered by host and
#                     round robin), ompi and ompi_best (Open MPI's default and its fastest forced
#                     algorithm), gloo (torch.distributed's
#                     gloo backend; allreduce, broadcast, allgather, alltoall and reduce only:
#                     torch 1.13's gloo has no reduce_scatter), a Chorus algorithm forced by name (hier, ring, binomial, ...;
#                     NAME_rr: numbered round robin), and for allreduce the compressed rows
#                     (automatic selection with CHORUS_COMPRESSION set, not checked: lossy):
#                     zip_fp16 zip_bf16 zip_int8 zip_int4 zip_topk (top-k 1%), and auto_plain
#                     (the automatic choice with CHORUS_ZEROS=off: no lossless zero-skipping form)
#                     [allreduce: naive rankring_rr ring_rr ring dbtree rhd hier auto auto_rr ompi
#                     ompi_best gloo; gather, scatter: auto auto_rr ompi ompi_best; alltoall: those
#                     and gloo; reduce, reduce_scatter: hier too; broadcast, allgather: hier and
#                     gloo too]
#   --hosts H         [4]
#   --ranks L         ranks per host [2]
#   --rate RATE       tc tbf rate of every host link, each way [2gbit]
#   --out DIR         raw outputs, samples.csv, table.md [/tmp/chorus-cluster]
#   --timeout-sec S   bound on each single run [300]
#   --zeros N         Chorus's inputs have N per mille of 0 elements (chorus-perf -Z), as sparse
#                     gradients do; the peers' times do not depend on their data [0]
#   --line-rate       instead of the table: 2 hosts x 1 rank, links unshaped; iperf3 with 1 and
#                     4 streams one way, and with 1 and 4 streams each way at once (--bidir: what
#                     an allreduce of 2 ranks asks of the link, where every rank sends and
#                     receives at once), against chorus-perf allreduce 256 MiB with
#                     CHORUS_NSOCKS_PER_PEER 1 and 4, alternating (--reps, --timeout-sec apply),
#                     with Chorus's defaults (rows chorus_*) and with CHORUS_SOCKET_CC=system, the
#                     hosts' own congestion control (rows chorussys_*); each repetition starts
#                     one contender further on in that list
#   --cc NAME         with --line-rate: the hosts' default TCP congestion control (the
#                     namespaces' net.ipv4.tcp_congestion_control) for every contender
#   --no-install      do not apt-get install missing packages (missing contenders are skipped)
#   -h, --help        this text
# ompi_best: before the repetitions, each of Open MPI's algorithms for the collective
# (coll_tuned_allreduce_algorithm 1..6, bcast 1..9, reduce 1..7, allgather 1..6,
# reduce_scatter 1..4, alltoall 1..5, gather 1..3, scatter 1..3) runs once at the largest size; the fastest is the row (its number is printed
# in the table).
# Bytes per call: the sum over hosts of eth0's tx_bytes (read in each host's namespace before
# and after a run) divided by the run's calls (warm-up + timed + the one checked call); it
# includes the run's bootstrap and connection set-up and the link-level headers.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${CHORUS_CLUSTER_BUILD_DIR:-$REPO/build}
ALL_ROWS="naive rankring_rr ring_rr ring dbtree rhd hier auto auto_rr ompi ompi_best gloo"
OTHER_COLL_ROWS="hier auto auto_rr ompi ompi_best" # alltoall, gather and scatter have no hier
ZIP_ROWS="zip_fp16 zip_bf16 zip_int8 zip_int4 zip_topk"
SUBNET=198.18.0

reps=3 sizes="4K 1M 64M" rows="" coll=allreduce hosts=4 ranks=2 rate=2gbit out=/tmp/chorus-cluster
run_timeout=300 line_rate=0 install=1 inner=0 cc="" zeros=0

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" | sed '/^$/,$d'; }
die() { echo "run.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=${2:?}; shift ;;
    --sizes) sizes=${2:?}; shift ;;
    --rows) rows=${2:?}; shift ;;
    --coll) coll=${2:?}; shift ;;
    --hosts) hosts=${2:?}; shift ;;
    --ranks) ranks=${2:?}; shift ;;
    --rate) rate=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --timeout-sec) run_timeout=${2:?}; shift ;;
    --zeros) zeros=${2:?}; shift ;;
    --line-rate) line_rate=1 ;;
    --cc) cc=${2:?}; shift ;;
    --no-install) install=0 ;;
    --inner) inner=1 ;; # internal: we run inside the switch namespace of scripts/cluster.sh
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
  shift
done
[[ $reps =~ ^[1-9][0-9]*$ ]] || die "--reps needs a positive integer"
[[ $run_timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout-sec needs seconds"
[[ $zeros =~ ^[0-9]+$ ]] && ((zeros <= 1000)) || die "--zeros needs 0..1000 (per mille)"
[ -z "$cc" ] || [ $line_rate = 1 ] || die "--cc goes with --line-rate"
# Open MPI's name of the collective and how many algorithms coll_tuned has for it (4.1)
case $coll in
  allreduce) mpi_coll=allreduce mpi_algs=6 ;;
  broadcast) mpi_coll=bcast mpi_algs=9 ;;
  reduce) mpi_coll=reduce mpi_algs=7 ;;
  allgather) mpi_coll=allgather mpi_algs=6 ;;
  reduce_scatter) mpi_coll=reduce_scatter mpi_algs=4 ;;
  alltoall) mpi_coll=alltoall mpi_algs=5 ;;
  gather) mpi_coll=gather mpi_algs=3 ;;
  scatter) mpi_coll=scatter mpi_algs=3 ;;
  *) die "--coll takes allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall, gather or scatter" ;;
esac
if [ -z "$rows" ]; then
  case $coll in
    allreduce) rows=$ALL_ROWS ;;
    alltoall) rows="${OTHER_COLL_ROWS/hier /} gloo" ;;
    gather | scatter) rows=${OTHER_COLL_ROWS/hier /} ;;
    broadcast | allgather) rows="$OTHER_COLL_ROWS gloo" ;;
    *) rows=$OTHER_COLL_ROWS ;;
  esac
fi
[ $line_rate = 1 ] || for r in $rows; do
  [[ $r =~ ^[a-z0-9_]+$ ]] || die "unknown row '$r'"
  [[ $r != zip_* || ( $coll = allreduce && " $ZIP_ROWS " == *" $r "* ) ]] || die "row '$r': only allreduce is compressed"
done

bytes_of() { # 4K -> 4096
  local v=${1%[KkMmGg]} s=${1: -1}
  case $s in K | k) echo $((v << 10)) ;; M | m) echo $((v << 20)) ;; G | g) echo $((v << 30)) ;; *) echo "$1" ;; esac
}

# ---- outer: set-up, then the same script inside the cluster's switch namespace ----
if [ $inner = 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
  mkdir -p "$out/raw" || exit 1
  if [ $install = 1 ]; then
    missing=()
    command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null || missing+=(openmpi-bin libopenmpi-dev)
    [ $line_rate = 1 ] && ! command -v iperf3 >/dev/null && missing+=(iperf3)
    if [ ${#missing[@]} -gt 0 ]; then
      timeout 300 apt-get update -q >&2 || echo "run.sh: apt-get update failed" >&2
      DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q "${missing[@]}" >&2 ||
        echo "run.sh: apt-get install failed; contenders that are still missing are skipped" >&2
    fi
  fi
  if [ ! -x "$BUILD/chorus-perf" ] || [ ! -x "$BUILD/chorus-run" ]; then
    { cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
      nice cmake --build "$BUILD" -j2 --target chorus-run chorus-perf >/dev/null; } || die "building Chorus failed"
  fi
  mkdir -p "$BUILD/cluster"
  if command -v mpicc.openmpi >/dev/null; then
    mpicc.openmpi -O2 -std=gnu11 -Wall -Wextra -Werror -o "$BUILD/cluster/mpi_perf_openmpi" \
      "$REPO/bench/compare/mpi_perf.c" || die "building mpi_perf failed"
  fi
  shape=(--rate "$rate")
  [ $line_rate = 1 ] && hosts=2 ranks=1 shape=() rows="iperf3_1 iperf3_4 chorus_1 chorus_4" sizes=256M
  args=(--inner --reps "$reps" --sizes "$sizes" --rows "$rows" --coll "$coll" --hosts "$hosts" --ranks "$ranks"
    --rate "$rate" --out "$out" --timeout-sec "$run_timeout" --zeros "$zeros")
  [ $line_rate = 1 ] && args+=(--line-rate)
  [ -n "$cc" ] && args+=(--cc "$cc")
  echo "# $(date -u '+%F %T') UTC; uptime: $(uptime)" | tee "$out/uptime.txt"
  # The whole run, bounded: every run's bound times the runs, plus set-up.
  nsz=$(wc -w <<<"$sizes"); nrows=$(wc -w <<<"$rows")
  total=$(((reps * nsz * nrows + 12) * run_timeout + 120))
  "$REPO/scripts/cluster.sh" -H "$hosts" -n "$ranks" "${shape[@]}" --timeout "$total" \
    --switch-cmd -- "$HERE/run.sh" "${args[@]}"
  rc=$?
  echo "# done $(date -u '+%F %T') UTC; uptime: $(uptime)" | tee -a "$out/uptime.txt"
  [ -f "$out/table.md" ] && cat "$out/table.md"
  exit $rc
fi

# ---- inner: in the switch namespace; CLUSTER_HOST_NS names the hosts' namespaces ----
read -r -a NS <<<"${CLUSTER_HOST_NS:?not inside scripts/cluster.sh --switch-cmd}"
nranks=$((hosts * ranks))
port=29600
SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

tx_sum() { # bytes sent on eth0 by every host so far
  local s=0 n v
  for n in "${NS[@]}"; do
    v=$(ip netns exec "$n" cat /sys/class/net/eth0/statistics/tx_bytes) || return 1
    s=$((s + v))
  done
  echo $s
}

iters_for() { # "-n N -w W" by size: enough calls for a stable time, bounded run length
  local b=$1
  if ((b <= 65536)); then echo "1000 100"
  elif ((b <= 4194304)); then echo "50 5"
  else echo "5 1"; fi
}

# host_run LOG NUMBERING ENVVAR=VAL... -- PROG ARGS: one chorus-run of PROG per host, all bounded.
host_run() {
  local log=$1 numbering=$2 i pids=() rc=0 envs=()
  shift 2
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  port=$((port + 2))
  for ((i = 0; i < hosts; i++)); do
    ip netns exec "${NS[$i]}" env CHORUS_HOST_ID="host$i" CHORUS_SECRET="$SECRET" "${envs[@]}" \
      timeout -k 5 "$run_timeout" "$BUILD/chorus-run" --timeout "$run_timeout" --nnodes "$hosts" \
      --node-rank "$i" --master-addr "$SUBNET.1" --master-port "$port" --numbering "$numbering" \
      -n "$ranks" "$@" >"$log.host$i" 2>&1 </dev/null &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=$?; done
  cp "$log.host0" "$log"
  return $rc
}

# chorus_run LOG NUMBERING ENVVAR=VAL... -- perf args
chorus_run() {
  local log=$1 numbering=$2 envs=()
  shift 2
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local z=()
  [ "$zeros" = 0 ] || z=(-Z "$zeros")
  host_run "$log" "$numbering" "${envs[@]}" -- "$BUILD/chorus-perf" "$@" "${z[@]}"
}

# gloo_run LOG -- perf args: gloo_perf.py, ranks numbered by host, sockets on the host links
gloo_run() {
  local log=$1
  shift 2
  host_run "$log" host GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 -- /usr/bin/python3 \
    "$REPO/bench/compare/gloo_perf.py" "$@"
}

WRAP=$out/netns-wrap.sh
{ echo '#!/bin/bash'
  echo "# rank r runs in host r / $ranks's namespace (ranks numbered by host)"
  echo "ns=(${NS[*]})"
  echo "exec ip netns exec \"\${ns[\$((OMPI_COMM_WORLD_RANK / $ranks))]}\" \"\$@\""
} >"$WRAP"
chmod +x "$WRAP"

mpi_run() { # LOG ALG(0: default) -- perf args
  local log=$1 alg=$2 dyn=()
  shift 3
  [ "$alg" = 0 ] || dyn=(--mca coll_tuned_use_dynamic_rules 1 --mca "coll_tuned_${mpi_coll}_algorithm" "$alg")
  PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$SUBNET.0/24 \
    timeout -k 5 "$run_timeout" mpirun.openmpi --allow-run-as-root --oversubscribe -n "$nranks" \
    --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24" \
    --mca mpi_yield_when_idle 1 "${dyn[@]}" "$WRAP" "$BUILD/cluster/mpi_perf_openmpi" "$@" \
    >"$log" 2>&1 </dev/null
}

# time_of LOG BYTES: the time(us) column of the row of that size
time_of() { awk -v b="$2" '$1 == b && $NF == 0 { print $6; f = 1 } END { exit !f }' "$1"; }

have_mpi=0
[ -x "$BUILD/cluster/mpi_perf_openmpi" ] && command -v mpirun.openmpi >/dev/null && have_mpi=1

# calls_of ROW BYTES: the calls a run makes: warm-up, timed and the checked one (the compressed
# rows are lossy, so they are not checked)
calls_of() {
  local it wu
  read -r it wu < <(iters_for "$2")
  if [[ $1 == zip_* ]]; then echo $((it + wu)); else echo $((it + wu + 1)); fi
}

# one_run ROW BYTES LOG: runs it; prints "time_us bytes_per_call" or fails
ompi_best_alg=""
one_run() {
  local row=$1 b=$2 log=$3 it wu t0 t1 t calls
  read -r it wu < <(iters_for "$b")
  local perf=("$coll" -b "$b" -e "$b" -n "$it" -w "$wu" -c 1 -d float32)
  # Broadcast in place, as MPI_Bcast (one buffer) and torch's broadcast: out of place, Chorus's
  # root would also copy its buffer (mpi_perf ignores -p, gloo_perf has none)
  [[ $coll = broadcast && $row != ompi* && $row != gloo ]] && perf+=(-p 1)
  calls=$(calls_of "$row" "$b")
  [[ $row == setup_* ]] && b=4 calls=1
  t0=$(tx_sum) || return 1
  case $row in
    auto) chorus_run "$log" host -- "${perf[@]}" ;;
    auto_rr) chorus_run "$log" rr -- "${perf[@]}" ;;
    auto_plain) chorus_run "$log" host CHORUS_ZEROS=off -- "${perf[@]}" ;;
    zip_topk) chorus_run "$log" host CHORUS_COMPRESSION=topk:0.01 -- "${perf[@]:0:9}" -c 0 -d float32 ;;
    zip_*) chorus_run "$log" host CHORUS_COMPRESSION="${row#zip_}" -- "${perf[@]:0:9}" -c 0 -d float32 ;;
    ompi) mpi_run "$log" 0 -- "${perf[@]}" ;;
    ompi_best) mpi_run "$log" "$ompi_best_alg" -- "${perf[@]}" ;;
    ompi_alg*) mpi_run "$log" "${row#ompi_alg}" -- "${perf[@]}" ;;
    gloo) gloo_run "$log" -- "${perf[@]}" ;;
    setup_gloo) gloo_run "$log" -- allreduce -b 4 -e 4 -n 1 -w 0 -c 0 ;;
    setup_chorus) chorus_run "$log" host -- allreduce -b 4 -e 4 -n 1 -w 0 -c 0 -a ring ;;
    setup_chorus_rr) chorus_run "$log" rr -- allreduce -b 4 -e 4 -n 1 -w 0 -c 0 -a ring ;;
    setup_ompi) mpi_run "$log" 0 -- allreduce -b 4 -e 4 -n 1 -w 0 -c 0 ;;
    *_rr) chorus_run "$log" rr -- "${perf[@]}" -a "${row%_rr}" ;;
    *) chorus_run "$log" host -- "${perf[@]}" -a "$row" ;;
  esac || { echo "run.sh: $row at $b B failed (log $log)" >&2; return 1; }
  t1=$(tx_sum) || return 1
  t=$(time_of "$log" "$b") || { echo "run.sh: no row for $b B in $log" >&2; return 1; }
  local algo
  algo=$(awk -v b="$2" '$1 == b { print $5 }' "$log")
  echo "$t $(((t1 - t0) / calls)) $algo"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ---- --line-rate: 2 hosts x 1 rank, unshaped: iperf3 against chorus-perf at 256 MiB ----
if [ $line_rate = 1 ]; then
  csv=$out/line-rate.csv
  line_rows="iperf3_1 iperf3_4 iperf3bidir_1 iperf3bidir_4 chorus_1 chorus_4 chorussys_1 chorussys_4"
  if [ -n "$cc" ]; then
    for ns in "${NS[@]}"; do ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc" || die "cannot set $cc"; done
  fi
  echo "# TCP congestion control of the hosts: $(ip netns exec "${NS[0]}" cat /proc/sys/net/ipv4/tcp_congestion_control)" |
    tee "$out/cc.txt" >&2
  echo "rep,contender,gbit_per_s" >"$csv"
  b=$((256 << 20))
  read -r -a line_list <<<"$line_rows"
  for ((rep = 1; rep <= reps; rep++)); do
    # Each repetition starts one contender further on, so that none always follows the same one.
    start=$(((rep - 1) % ${#line_list[@]}))
    for c in "${line_list[@]:start}" "${line_list[@]:0:start}"; do
      log=$out/raw/line.$c.rep$rep.log
      case $c in
        iperf3_* | iperf3bidir_*)
          if ! command -v iperf3 >/dev/null; then
            echo "rep $rep $c: skipped (iperf3 is not installed)" >&2
            continue
          fi
          ip netns exec "${NS[0]}" timeout -k 2 60 iperf3 -s -1 -p 5201 >"$log.server" 2>&1 &
          spid=$!
          sleep 0.5
          bidir=()
          [[ $c == iperf3bidir_* ]] && bidir=(--bidir)
          ip netns exec "${NS[1]}" timeout -k 2 60 iperf3 -c "$SUBNET.1" -p 5201 -t 5 -P "${c#*_}" "${bidir[@]}" -J >"$log" 2>&1
          wait $spid
          # receiver's rate, bits/s; both directions at once: the mean of the two directions
          v=$(/usr/bin/python3 -c 'import json,sys
e = json.load(open(sys.argv[1]))["end"]
r = [e["sum_received"]["bits_per_second"]] + ([e["sum_received_bidir_reverse"]["bits_per_second"]] if "sum_received_bidir_reverse" in e else [])
print(sum(r) / len(r) / 1e9)' "$log") || v=""
          ;;
        chorus_* | chorussys_*)
          cc_env=(); [[ $c == chorussys_* ]] && cc_env=(CHORUS_SOCKET_CC=system)
          # The link probe's line says over how many sockets messages are cut (tune.c).
          chorus_run "$log" host CHORUS_NSOCKS_PER_PEER="${c#*_}" "${cc_env[@]}" CHORUS_LOG_LEVEL=info \
            CHORUS_LOG_SUBSYS=TUNE -- allreduce -b "$b" -e "$b" -n 10 -w 3 -c 1 -d float32
          # busbw (GB/s) as Gbit/s: comparable with iperf3's per-direction rate
          v=$(awk -v b="$b" '$1 == b && $NF == 0 { print $8 * 8 }' "$log")
          ;;
      esac
      [ -n "$v" ] && echo "$rep,$c,$v" >>"$csv"
      echo "rep $rep $c: ${v:-failed} Gbit/s" >&2
    done
  done
  # same_run_ratio C REF: C over REF in each repetition that has both, median over them.
  same_run_ratio() {
    awk -F, -v c="$1" -v ref="$2" '$2 == ref { d[$1] = $3 } $2 == c { v[$1] = $3 }
      END { for (k in v) if (k in d) print v[k] / d[k] }' "$csv" | median
  }
  {
    echo "| contender (2 hosts x 1 rank, unshaped veth) | Gbit/s (median of $reps) | / iperf3 1 stream (same-run, median) | / iperf3 4 streams | / iperf3 both directions | / iperf3 both directions, 4 streams | / Chorus, 1 socket (same congestion control) |"
    echo "|---|---|---|---|---|---|---|"
    for c in $line_rows; do
      m=$(awk -F, -v c=$c '$2 == c { print $3 }' "$csv" | median) || m=""
      [ -n "$m" ] || { echo "| $c | failed | | | | | |"; continue; }
      r1=$(same_run_ratio "$c" iperf3_1) r4=$(same_run_ratio "$c" iperf3_4)
      rb=$(same_run_ratio "$c" iperf3bidir_1) rb4=$(same_run_ratio "$c" iperf3bidir_4)
      rc1=""; [[ $c == chorus_* ]] && rc1=$(same_run_ratio "$c" chorus_1)
      [[ $c == chorussys_* ]] && rc1=$(same_run_ratio "$c" chorussys_1)
      awk -v c="$c" -v m="$m" -v a="$r1" -v d="$r4" -v e="$rb" -v f="$rb4" -v g="$rc1" 'BEGIN {
        name = c; sub("iperf3bidir_", "iperf3 --bidir (each direction), streams ", name); sub("iperf3_", "iperf3, streams ", name)
        sub("chorus_", "chorus-perf allreduce 256 MiB busbw, NSOCKS_PER_PEER=", name)
        sub("chorussys_", "chorus-perf allreduce 256 MiB busbw, CHORUS_SOCKET_CC=system, NSOCKS_PER_PEER=", name)
        printf "| %s | %.2f | %s | %s | %s | %s | %s |\n", name, m, ratio(a), ratio(d), ratio(e), ratio(f), ratio(g) }
        function ratio(r) { return r == "" ? "-" : sprintf("%.2fx", r) }'
    done
    for c in $line_rows; do
      [[ $c == chorus*_[2-9]* ]] || continue
      kept=$(grep -l "cut over ${c#*_} of ${c#*_} sockets" "$out"/raw/line."$c".rep*.log 2>/dev/null | wc -l)
      echo
      echo "$c: the link probe kept all ${c#*_} sockets in $kept of $reps runs (one socket in the others)"
    done
  } >"$out/table.md"
  exit 0
fi

# ---- the table ----
csv=$out/samples.csv
echo "rep,row,bytes,time_us,bytes_per_call,algo,net_bytes_per_call" >"$csv"
declare -A setup_bytes=()
maxb=0
for s in $sizes; do b=$(bytes_of "$s"); ((b > maxb)) && maxb=$b; done

if [[ " $rows " == *" ompi_best "* ]]; then
  if [ $have_mpi = 1 ]; then
    best="" bestt=""
    for ((alg = 1; alg <= mpi_algs; alg++)); do
      log=$out/raw/ompi_alg$alg.$maxb.log
      if r=$(one_run "ompi_alg$alg" "$maxb" "$log"); then
        t=${r%% *}
        echo "coll_tuned_${mpi_coll}_algorithm $alg at $maxb B: $t us" | tee -a "$out/ompi_algs.txt" >&2
        if [ -z "$bestt" ] || awk -v a="$t" -v b="$bestt" 'BEGIN { exit !(a < b) }'; then best=$alg bestt=$t; fi
      else
        echo "coll_tuned_${mpi_coll}_algorithm $alg at $maxb B: failed" | tee -a "$out/ompi_algs.txt" >&2
      fi
    done
    ompi_best_alg=$best
    echo "ompi_best: algorithm ${best:-none}" >&2
    [ -n "$best" ] || rows=${rows/ompi_best/}
  else
    rows=${rows/ompi_best/}
  fi
fi
[ $have_mpi = 1 ] || { rows=${rows/ompi/}; echo "run.sh: no Open MPI: its rows skipped" >&2; }
if [[ " $rows " == *" gloo "* ]]; then
  case $coll in
    allreduce | broadcast | allgather | alltoall | reduce)
      /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
        { rows=${rows/gloo/}; echo "run.sh: no torch with gloo: its row skipped" >&2; } ;;
    *) rows=${rows/gloo/}; echo "run.sh: gloo_perf has no $coll: its row skipped" >&2 ;;
  esac
fi

setups="setup_chorus"
[[ " $rows " == *"ring_rr "* || " $rows " == *" auto_rr "* ]] && setups+=" setup_chorus_rr"
[[ " $rows " == *" ompi"* ]] && setups+=" setup_ompi"
[[ " $rows " == *" gloo "* ]] && setups+=" setup_gloo"
setup_of() {
  case $1 in ompi*) echo setup_ompi ;; gloo) echo setup_gloo ;; *_rr) echo setup_chorus_rr ;; *) echo setup_chorus ;; esac
}
for ((rep = 1; rep <= reps; rep++)); do
  for row in $setups; do # a 4-byte run of one call: what set-up alone sends
    log=$out/raw/$row.rep$rep.log
    if r=$(one_run "$row" 4 "$log"); then
      read -r t bpc algo <<<"$r"
      echo "$rep,$row,0,$t,$bpc,$algo,$bpc" >>"$csv"
      setup_bytes[$row]=$bpc
      echo "rep $rep $row: $bpc B sent on host links" >&2
    fi
  done
  for s in $sizes; do
    b=$(bytes_of "$s")
    for row in $rows; do
      log=$out/raw/$row.$b.rep$rep.log
      if r=$(one_run "$row" "$b" "$log"); then
        read -r t bpc algo <<<"$r"
        calls=$(calls_of "$row" "$b")
        su=${setup_bytes[$(setup_of "$row")]:-0}
        net=$(((bpc * calls - su) / calls))
        echo "$rep,$row,$b,$t,$bpc,$algo,$net" >>"$csv"
        echo "rep $rep $s $row: $t us, $bpc B/call sent on host links ($algo)" >&2
      fi
    done
  done
done

# ---- what the automatic rows chose: one untimed call per size with the tune log on ----
choices=$out/auto-choices.txt
: >"$choices"
for row in auto auto_rr; do
  [[ " $rows " == *" $row "* ]] || continue
  numbering=host; [ $row = auto_rr ] && numbering=rr
  for s in $sizes; do
    b=$(bytes_of "$s")
    log=$out/raw/$row.$b.choice.log
    chorus_run "$log" $numbering CHORUS_LOG_LEVEL=debug CHORUS_LOG_SUBSYS=tune -- \
      "$coll" -b "$b" -e "$b" -n 1 -w 0 -c 0 -d float32 >/dev/null 2>&1
    # the call's own line (allgather, reduce_scatter and alltoall name their blocks' bytes)
    c=$(grep -h "$coll of [0-9]* bytes on" "$log".host* | head -1 | sed "s/.*$coll of/$coll of/")
    l=$(grep -h "links (" "$log".host* | head -1 | sed 's/.*links (/links (/')
    echo "- $row at $s: ${c:-not logged}; ${l:-}" >>"$choices"
  done
done

# ---- table.md: medians; busbw = algbw x nccl-tests' factor; limits at rate B ----
rate_bps=$(awk -v r="$rate" 'BEGIN { v = r + 0; if (r ~ /[gG]bit$/) v *= 1e9; else if (r ~ /[mM]bit$/) v *= 1e6; else if (r ~ /[kK]bit$/) v *= 1e3; print v / 8 }')
# bus: nccl-tests' busbw factor; link: the least a host link carries each way per call, in S
# (S the size as chorus-perf gives it), however the ranks are scheduled; crossed: the least
# all the host links carry together, in S
read -r bus link crossed < <(awk -v c="$coll" -v h="$hosts" -v l="$ranks" -v n="$nranks" 'BEGIN {
  if (c == "allreduce") print 2 * (n - 1) / n, 2 * (h - 1) / h, 2 * (h - 1)
  else if (c == "broadcast" || c == "reduce") print 1, 1, h - 1
  else if (c == "alltoall") print (n - 1) / n, l * (h - 1) / h, l * (h - 1)
  else if (c == "gather" || c == "scatter") print (n - 1) / n, (h - 1) / h, (h - 1) / h
  else print (n - 1) / n, (h - 1) / h, h - 1 }')
{
  echo "$hosts hosts x $ranks ranks, host links tc tbf $rate each way, float32 $coll (sum where it reduces);"
  echo "medians of $reps repetitions, rows alternated within each repetition; B = $rate_bps B/s."
  [ "$zeros" = 0 ] || echo "Chorus's inputs: $zeros per mille of each rank's elements are 0 (chorus-perf -Z $zeros)."
  [ -n "$ompi_best_alg" ] && echo "ompi_best = coll_tuned_${mpi_coll}_algorithm $ompi_best_alg (fastest of 1..$mpi_algs at $maxb B, one run each: $out/ompi_algs.txt)."
  echo
  printf '| row |'
  for s in $sizes; do printf ' %s time (ms) | algbw | busbw (GB/s) | sent/call, B (x S) |' "$s"; done
  echo
  printf '|---|'; for s in $sizes; do printf -- '---|---|---|---|'; done; echo
  for row in $rows; do
    printf '| %s |' "$row"
    for s in $sizes; do
      b=$(bytes_of "$s")
      t=$(awk -F, -v r="$row" -v b="$b" '$2 == r && $3 == b { print $4 }' "$csv" | median) || t=""
      x=$(awk -F, -v r="$row" -v b="$b" '$2 == r && $3 == b { print $7 }' "$csv" | median) || x=""
      if [ -z "$t" ]; then printf ' - | - | - | - |'; continue; fi
      awk -v t="$t" -v b="$b" -v bus="$bus" -v x="$x" 'BEGIN {
        a = b / (t * 1e-6) / 1e9
        printf " %.3f | %.4f | %.4f | %.0f (%.2f) |", t / 1e3, a, a * bus, x, x / b }'
    done
    echo
  done
  printf '| limit: any algorithm, %s S/B |' "$(awk -v c="$coll" 'BEGIN { print c == "allreduce" ? "2(H-1)/H" : c == "broadcast" || c == "reduce" ? "1" : c == "alltoall" ? "L(H-1)/H" : "(H-1)/H" }')"
  for s in $sizes; do
    b=$(bytes_of "$s")
    awk -v b="$b" -v link="$link" -v bus="$bus" -v crossed="$crossed" -v B="$rate_bps" 'BEGIN {
      t = link * b / B; a = b / t / 1e9
      printf " %.3f | %.4f | %.4f | %.0f (%.2f) |", t * 1e3, a, a * bus, crossed * b, crossed }'
  done
  echo
  if [ "$coll" = allreduce ]; then
    printf '| limit: flat ring over n ranks, 2(n-1)/n S/B |'
    for s in $sizes; do
      b=$(bytes_of "$s")
      awk -v b="$b" -v h="$hosts" -v n="$nranks" -v B="$rate_bps" 'BEGIN {
        t = 2 * (n - 1) / n * b / B; a = b / t / 1e9
        printf " %.3f | %.4f | %.4f | %.0f (%.2f) |", t * 1e3, a, a * 2 * (n - 1) / n, h * 2 * (n - 1) / n * b, h * 2 * (n - 1) / n }'
    done
    echo
  fi
  echo
  echo "What the automatic rows chose (rank 0's tune log, one extra untimed call per size):"
  cat "$choices"
  echo "Set-up alone (a run of one 4-byte call; subtracted above), bytes sent on host links, median:"
  for row in $setups; do
    echo "- $row: $(awk -F, -v r="$row" '$2 == r { print $5 }' "$csv" | median)"
  done
  if [[ " $rows " == *" hier "* ]]; then
    echo
    echo "Same-run ratios (median over repetitions of time(row) / time(hier) in the same repetition):"
    printf '| row |'; for s in $sizes; do printf ' %s |' "$s"; done; echo
    printf '|---|'; for s in $sizes; do printf -- '---|'; done; echo
    for row in $rows; do
      printf '| %s |' "$row"
      for s in $sizes; do
        b=$(bytes_of "$s")
        v=$(awk -F, -v r="$row" -v b="$b" '$3 == b && $2 == "hier" { h[$1] = $4 } $3 == b && $2 == r { t[$1] = $4 }
          END { for (k in t) if (k in h) print t[k] / h[k] }' "$csv" | median) || v=""
        [ -n "$v" ] && printf ' %.2f |' "$v" || printf ' - |'
      done
      echo
    done
  fi
  # How far a 1.5x-style target against Open MPI can go at all: no exact call beats the link
  # limit, which on the wire is 1514/1448 of the payload's (full TCP segments with timestamps,
  # MTU 1500, tbf counting the Ethernet frame).
  if [[ " $rows " == *" auto "* ]]; then
    echo
    echo "Against auto: time(row) / time(auto) in the same repetition (median), and the ceiling, time(row) /"
    echo "the link limit with TCP/IP and Ethernet headers (x 1514/1448): what a $coll at that limit would show."
    printf '| row |'; for s in $sizes; do printf ' %s / auto | %s ceiling |' "$s" "$s"; done; echo
    printf '|---|'; for s in $sizes; do printf -- '---|---|'; done; echo
    for row in ompi ompi_best gloo; do
      [[ " $rows " == *" $row "* ]] || continue
      printf '| %s |' "$row"
      for s in $sizes; do
        b=$(bytes_of "$s")
        v=$(awk -F, -v r="$row" -v b="$b" '$3 == b && $2 == "auto" { a[$1] = $4 } $3 == b && $2 == r { t[$1] = $4 }
          END { for (k in t) if (k in a) print t[k] / a[k] }' "$csv" | median) || v=""
        c=$(awk -F, -v r="$row" -v b="$b" -v link="$link" -v B="$rate_bps" '$3 == b && $2 == r {
          print $4 * 1e-6 / (link * b / B * 1514 / 1448) }' "$csv" | median) || c=""
        [ -n "$v" ] && printf ' %.2f |' "$v" || printf ' - |'
        [ -n "$c" ] && printf ' %.2f |' "$c" || printf ' - |'
      done
      echo
    done
  fi
} >"$out/table.md"
exit 0
