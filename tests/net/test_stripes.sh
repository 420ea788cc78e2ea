#!/usr/bin/env bash
# test_stripes.sh - several sockets per peer are kept where they carry more, and only there.
# 2 emulated hosts, one rank each, CHORUS_NSOCKS_PER_PEER=8, the link probe on (the default):
#  - joined by 8 links of 400 Mbit/s each way with a per-flow hash over them (ECMP): one flow
#    gets one link, 8 get several (the probe measured 2.0-4.1x faster), so every rank must log
#    messages cut over 8 of 8 sockets;
#  - joined by 1 such link: 8 flows share what one gets, so every rank must log 1 of 8.
# Either way the two ranks agree, and checked allreduce and broadcast calls of 16 MiB (cut
# into parts when striped) give the reference result. Usage: test_stripes.sh CHORUS_PERF
set -u
PERF=$1
. "$(dirname "$0")/netns.sh"
net_test_begin 20

run_case() { # PATHS WANT_SOCKETS
  local paths=$1 want=$2 r coll
  net_create_paths "$paths" || fail "cannot create 2 hosts joined by $paths link(s)"
  net_shape_paths "$paths" 400mbit || fail "tc tbf on the links"
  for coll in allreduce broadcast; do
    NET_PIDS=()
    for r in 0 1; do
      net_start $r $r 2 "$NET_TMP/$paths-$coll-$r.out" env CHORUS_NSOCKS_PER_PEER=8 CHORUS_LOG_LEVEL=debug \
        CHORUS_LOG_SUBSYS=TUNE "$PERF" "$coll" -b 16M -e 16M -n 2 -w 1 -c 1
    done
    net_wait 120 || fail "$coll over $paths link(s) did not finish in 120 s"
    for rc in "${NET_RCS[@]}"; do [ "$rc" -eq 0 ] || fail "$coll over $paths link(s): a rank exited $rc"; done
    for r in 0 1; do
      local out="$NET_TMP/$paths-$coll-$r.out"
      grep -q "TCP messages cut over $want of 8 sockets per peer" "$out" ||
        fail "$coll over $paths link(s), rank $r: expected messages cut over $want of 8 sockets; it logged: $(grep -o 'cut over [0-9]* of [0-9]*' "$out")"
    done
    # chorus-perf's last column: elements wrong on any rank (-c 1 checks a call against the
    # reference), printed by rank 0.
    awk '$1 == 16777216 { found = 1; if ($NF != 0) exit 1 } END { exit !found }' "$NET_TMP/$paths-$coll-0.out" ||
      fail "$coll over $paths link(s): wrong results or no result line"

  done
  net_cleanup_hosts
}

run_case 8 8
run_case 1 1
echo "ok: 8 sockets kept over 8 hashed links, 1 used over one link; results checked"
