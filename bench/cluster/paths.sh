#!/usr/bin/env bash
# paths.sh - sockets per peer where one flow cannot fill the link: 2 emulated hosts, one rank
# each, joined by P links with a per-flow hash over them (ECMP, as a fabric or a bond does: one
# TCP flow takes one link), every link shaped to RATE each way with tc tbf. Alternates, in a
# rotating order, iperf3 with 1 and with N streams and chorus-perf allreduce of SIZE with 1 and
# with N sockets per peer (the link probe choosing how many carry parts), and with N sockets all
# carrying parts (CHORUS_TUNE=0, no probe). Prints a table of medians and same-repetition ratios
# and how often the probe kept the N sockets. Needs root, iproute2, iperf3.
#
# Usage: bench/cluster/paths.sh [--paths P] [--rate RATE] [--socks N] [--size S] [--reps R]
#                               [--out DIR] [--build DIR]
#   defaults: --paths 4 --rate 2gbit --socks 4 --size 256M --reps 5 --out /tmp/chorus-paths
#             --build build
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
paths=4 rate=2gbit socks=4 size=256M reps=5 out=/tmp/chorus-paths build=$ROOT/build
while [ $# -gt 0 ]; do
  case $1 in
    --paths) paths=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --socks) socks=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h | --help) sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" | sed '/^$/,$d'; exit 0 ;;
    *) echo "paths.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
command -v iperf3 >/dev/null || { echo "paths.sh: needs iperf3 (apt-get install iperf3)" >&2; exit 1; }
[ -x "$build/chorus-perf" ] || { echo "paths.sh: no $build/chorus-perf" >&2; exit 1; }
. "$ROOT/tests/net/netns.sh"
net_skip_unless_root
NET_TMP=$(mktemp -d)
trap net_cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$out/raw"
csv=$out/samples.csv
echo "rep,row,gbps" >"$csv"
net_create_paths "$paths" || { echo "paths.sh: cannot create the hosts" >&2; exit 1; }
net_shape_paths "$paths" "$rate" || { echo "paths.sh: tc tbf failed" >&2; exit 1; }
bytes=$(numfmt --from=iec "$size")

run_chorus() { # LOG ENV...: one chorus-perf per host; prints busbw in Gbit/s
  local log=$1 r
  shift
  NET_PIDS=()
  for r in 0 1; do
    net_start $r $r 2 "$log.host$r" env CHORUS_LOG_LEVEL=info CHORUS_LOG_SUBSYS=TUNE "$@" timeout -k 5 300 \
      "$build/chorus-perf" allreduce -b "$bytes" -e "$bytes" -n 10 -w 3 -c 1 -d float32
  done
  net_wait 320 || return 1
  awk -v b="$bytes" '$1 == b && $NF == 0 { print $8 * 8 }' "$log.host0"
}

run_iperf() { # LOG STREAMS: receiver's rate in Gbit/s
  local log=$1 spid
  ip netns exec "$(net_ns 0)" timeout -k 2 60 iperf3 -s -1 -B "$(net_ip 0)" -p 5201 >"$log.server" 2>&1 &
  spid=$!
  sleep 0.5
  ip netns exec "$(net_ns 1)" timeout -k 2 60 iperf3 -c "$(net_ip 0)" -B "$(net_ip 1)" -p 5201 -t 5 -P "$2" -J \
    >"$log" 2>&1
  wait $spid
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e9)' \
    "$log"
}

rows="iperf3_1 iperf3_$socks chorus_1 chorus_$socks chorus_${socks}_all"
read -r -a list <<<"$rows"
for ((rep = 1; rep <= reps; rep++)); do
  start=$(((rep - 1) % ${#list[@]}))
  for c in "${list[@]:start}" "${list[@]:0:start}"; do
    log=$out/raw/$c.rep$rep.log
    case $c in
      iperf3_*) v=$(run_iperf "$log" "${c#iperf3_}") ;;
      chorus_*_all) v=$(run_chorus "$log" CHORUS_NSOCKS_PER_PEER="$socks" CHORUS_TUNE=0) ;;
      chorus_*) v=$(run_chorus "$log" CHORUS_NSOCKS_PER_PEER="${c#chorus_}") ;;
    esac
    [ -n "$v" ] && echo "$rep,$c,$v" >>"$csv"
    echo "rep $rep $c: ${v:-failed} Gbit/s" >&2
  done
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
ratio() { # C REF: median over repetitions of C / REF
  awk -F, -v c="$1" -v ref="$2" '$2 == ref { d[$1] = $3 } $2 == c { v[$1] = $3 }
    END { for (k in v) if (k in d) printf "%.2fx\n", v[k] / d[k] }' "$csv" | tr -d x | median
}
{
  echo "2 hosts x 1 rank, $paths links of $rate each way hashed per flow; allreduce of $size (busbw); $reps repetitions"
  echo
  echo "| contender | Gbit/s (median) | / iperf3 1 stream | / Chorus, 1 socket |"
  echo "|---|---|---|---|"
  for c in $rows; do
    m=$(awk -F, -v c="$c" '$2 == c { print $3 }' "$csv" | median | awk '{ printf "%.2f", $1 }')
    name=$c
    case $c in
      iperf3_*) name="iperf3, ${c#iperf3_} stream(s)" ;;
      chorus_*_all) name="chorus-perf, NSOCKS_PER_PEER=$socks, CHORUS_TUNE=0 (every socket carries parts)" ;;
      chorus_*) name="chorus-perf, NSOCKS_PER_PEER=${c#chorus_} (the probe chooses)" ;;
    esac
    r1=$(ratio "$c" iperf3_1) rc=""
    [[ $c == chorus_* ]] && rc=$(ratio "$c" chorus_1)
    printf "| %s | %s | %s | %s |\n" "$name" "${m:-failed}" "${r1:+${r1}x}" "${rc:+${rc}x}"
  done
  kept=$(grep -l "cut over $socks of $socks sockets" "$out"/raw/chorus_"$socks".rep*.log.host0 2>/dev/null | wc -l)
  echo
  echo "chorus_$socks: the link probe kept all $socks sockets in $kept of $reps runs (one socket in the others)"
} | tee "$out/table.md"
