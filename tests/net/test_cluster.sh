#!/usr/bin/env bash
# test_cluster.sh - scripts/cluster.sh end to end: 2 emulated hosts x 2 ranks (numbered by host),
# 3 hosts x 2 ranks numbered round robin, and hosts of 1+2+3 and 3+1 ranks; links shaped to 2
# Gbit/s, each host started by its own `chorus-run --nnodes`: chorus-perf allreduce, barrier and
# `all` at small sizes, checked bitwise (#wrong 0), and chorus-diag --topo showing the hosts and
# where each rank lives.
# Usage: test_cluster.sh CLUSTER_SH CHORUS_RUN CHORUS_PERF CHORUS_DIAG
set -u
CLUSTER=$1
RUN=$2
PERF=$3
DIAG=$4
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
  echo "SKIP: needs root and iproute2 for network namespaces"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() {
  echo "FAIL: $*"
  for f in "$TMP"/*/*.out; do echo "--- $f"; tail -n 15 "$f"; done
  exit 1
}
# cluster NAME CLUSTER_OPTIONS... -- CMD...: runs the cluster, output in $TMP/NAME/host<i>.out.
cluster() {
  local name=$1
  shift
  "$CLUSTER" --chorus-run "$RUN" --out "$TMP/$name" --timeout 120 --rate 2gbit "$@" ||
    fail "$name: cluster.sh exited $?"
}
# check_perf NAME MIN_ROWS: host0 (rank 0) printed MIN_ROWS result rows or more, all #wrong 0.
check_perf() {
  local f="$TMP/$1/host0.out" rows bad
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$f")
  bad=$(awk '/^ +[0-9]+ +[0-9]+ / && $NF != 0' "$f" | wc -l)
  [ "$rows" -ge "$2" ] || fail "$1: only $rows result rows"
  [ "$bad" -eq 0 ] || fail "$1: $bad rows with wrong elements"
  grep -q "Wrong elements : 0 OK" "$f" || fail "$1: no '#wrong 0' summary"
  echo "ok: $1: $rows rows, #wrong 0"
}

start=$SECONDS
cluster topo2x2 -H 2 -n 2 -- "$DIAG" --topo
f=$TMP/topo2x2/host0.out
grep -q "4 ranks on 2 host(s)" "$f" || fail "topo2x2: not 4 ranks on 2 hosts"
for r in 0 1 2 3; do # rank r on host r/2, local rank r%2
  grep -Eq "^ +$r host$((r / 2)) +$((r % 2)) +2 " "$f" || fail "topo2x2: rank $r not on host$((r / 2))"
done
echo "ok: 2 hosts x 2 ranks by host: ranks 0,1 on host0, 2,3 on host1"

cluster topo3x2rr -H 3 -n 2 --numbering rr -- "$DIAG" --topo
f=$TMP/topo3x2rr/host0.out
grep -q "6 ranks on 3 host(s)" "$f" || fail "topo3x2rr: not 6 ranks on 3 hosts"
for r in 0 1 2 3 4 5; do # round robin: rank r on host r%3, local rank r/3
  grep -Eq "^ +$r host$((r % 3)) +$((r / 3)) +2 " "$f" || fail "topo3x2rr: rank $r not on host$((r % 3))"
done
echo "ok: 3 hosts x 2 ranks round robin: rank r on host r mod 3"

cluster ar2x2 -H 2 -n 2 -- "$PERF" allreduce -b 8 -e 256K -f 4 -c 1 -n 2 -w 1
check_perf ar2x2 8
cluster ar3x2rr -H 3 -n 2 --numbering rr -- "$PERF" allreduce -b 8 -e 256K -f 4 -c 1 -n 2 -w 1
check_perf ar3x2rr 8
cluster all2x2 -H 2 -n 2 -- "$PERF" all -b 8 -e 64K -f 8 -c 1 -n 1 -w 1
check_perf all2x2 30
cluster all3x2rr -H 3 -n 2 --numbering rr -- "$PERF" all -b 8 -e 64K -f 8 -c 1 -n 1 -w 1
check_perf all3x2rr 20

# Hosts of unequal rank counts (-n 1,2,3: chorus-run -n with one count per host): ranks numbered
# host by host, and the two-level leader mode (hier, forced and automatic) checked bitwise.
cluster topo123 -H 3 -n 1,2,3 -- "$DIAG" --topo
f=$TMP/topo123/host0.out
grep -q "6 ranks on 3 host(s)" "$f" || fail "topo123: not 6 ranks on 3 hosts"
for rl in 0:0:0 1:1:0 2:1:1 3:2:0 4:2:1 5:2:2; do # rank:host:local
  IFS=: read -r r h l <<<"$rl"
  grep -Eq "^ +$r host$h +$l +$((h + 1)) " "$f" || fail "topo123: rank $r not local rank $l of host$h"
done
echo "ok: 3 hosts of 1, 2 and 3 ranks: numbered host by host"
# The two-level schedules must really run there (a fallback to a flat algorithm would give the
# same results): every rank logs its hier allreduce's mode, and no fallback line appears.
debug=(--run-opt -x --run-opt CHORUS_LOG_LEVEL=debug --run-opt -x --run-opt CHORUS_LOG_SUBSYS=algo)
cluster ar123 -H 3 -n 1,2,3 "${debug[@]}" -- "$PERF" allreduce -b 8 -e 1M -f 16 -c 1 -n 2 -w 1 -a auto,hier,hier/ring
check_perf ar123 15
for h in 0 1 2; do
  grep -q "allreduce hier: leader" "$TMP/ar123/host$h.out" || fail "ar123: host$h ran no hier leader mode"
  grep -q "flat .* instead" "$TMP/ar123/host$h.out" && fail "ar123: host$h fell back to a flat algorithm"
done
grep -q "allreduce hier: leader (one rank per host carries all), ring across hosts" "$TMP/ar123/host0.out" ||
  fail "ar123: hier/ring did not run the ring among the leaders"
cluster bc31 -H 2 -n 3,1 "${debug[@]}" -- "$PERF" broadcast -b 8 -e 1M -f 32 -c 1 -n 2 -w 1 -a hier
check_perf bc31 4
cluster rd31 -H 2 -n 3,1 "${debug[@]}" -- "$PERF" reduce -b 8 -e 1M -f 32 -c 1 -n 2 -w 1 -a hier
check_perf rd31 4
cluster bar31 -H 2 -n 3,1 "${debug[@]}" -- "$PERF" barrier -c 1 -n 20 -w 2 -a auto,hier
check_perf bar31 2
for name in bc31 rd31 bar31; do
  grep -q "flat .* instead" "$TMP/$name/host0.out" "$TMP/$name/host1.out" && fail "$name: fell back to a flat algorithm"
done
echo "ok: hosts of unequal size run the two-level schedules (no fallback)"

# A failing rank: cluster.sh exits with its status and leaves no namespace behind.
before=$(ip netns list | wc -l)
"$CLUSTER" --chorus-run "$RUN" --out "$TMP/fail" --timeout 60 -H 2 -- sh -c 'exit $((3 + CHORUS_RANK))'
rc=$?
[ $rc -eq 3 ] || [ $rc -eq 4 ] || fail "failing job: cluster.sh exited $rc, expected 3 or 4"
[ "$(ip netns list | wc -l)" -eq "$before" ] || fail "namespaces left behind"
echo "ok: a failing rank's status comes back; nothing left behind ($((SECONDS - start)) s in all)"
