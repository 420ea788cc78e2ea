#!/usr/bin/env bash
# test_multihost.sh - 2 emulated hosts x 2 ranks, links shaped to 2 Gbit/s: every collective,
# float32 and int32, checked bitwise by chorus-perf; the topology shows shared memory inside a
# host and TCP between hosts. Usage: test_multihost.sh CHORUS_PERF CHORUS_DIAG
set -u
PERF=$1
DIAG=$2
. "$(dirname "$0")/netns.sh"
net_test_begin 20

net_create 2 || fail "cannot create the namespaces"
net_shape 0 2gbit
net_shape 1 2gbit

# Ranks 0,1 on host 0 and ranks 2,3 on host 1.
for r in 0 1 2 3; do net_start $((r / 2)) $r 4 "$NET_TMP/topo$r.out" "$DIAG" --topo; done
net_wait 60 || fail "chorus-diag --topo hung"
for rc in "${NET_RCS[@]}"; do [ "$rc" -eq 0 ] || fail "chorus-diag --topo failed"; done
grep -q "2 host(s)" "$NET_TMP/topo0.out" || fail "topology does not show 2 hosts"
grep -Eq "^ +0 .* \.stt$" "$NET_TMP/topo0.out" || fail "rank 0 should reach rank 1 by shm and ranks 2, 3 by tcp"
echo "ok: topology: shm inside each host, tcp between hosts"

for dtype in float32 int32; do
  NET_PIDS=()
  for r in 0 1 2 3; do
    net_start $((r / 2)) $r 4 "$NET_TMP/perf-$dtype-$r.out" "$PERF" all -d $dtype -o sum -b 8 -e 4M -f 8 -c 1 -n 2 -w 1
  done
  net_wait 240 || fail "chorus-perf $dtype did not finish in 240 s"
  for rc in "${NET_RCS[@]}"; do [ "$rc" -eq 0 ] || fail "chorus-perf $dtype exited $rc"; done
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$NET_TMP/perf-$dtype-0.out")
  bad=$(awk '/^ +[0-9]+ +[0-9]+ / && $NF != 0' "$NET_TMP/perf-$dtype-0.out" | wc -l)
  [ "$rows" -gt 30 ] || fail "only $rows result rows for $dtype"
  [ "$bad" -eq 0 ] || fail "$bad rows with wrong elements for $dtype"
  echo "ok: every collective, $dtype, 8 B .. 4 MiB, 2 hosts x 2 ranks: $rows rows, #wrong 0"
done
