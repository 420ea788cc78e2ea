#!/usr/bin/env bash
# test_ifname.sh - CHORUS_SOCKET_IFNAME picks the interface listeners bind to (HCCL/NCCL syntax):
# "=eth0" binds the emulated host's veth address, "^eth" excludes it (loopback remains), and a
# name that matches nothing fails the communicator's creation with a message naming the
# variable. Usage: test_ifname.sh CHORUS_DIAG
set -u
DIAG=$1
. "$(dirname "$0")/netns.sh"
net_test_begin 5
net_create 1 || fail "cannot create the namespace"

# run_pair SPEC ADDR: two ranks in host 0 with CHORUS_SOCKET_IFNAME=SPEC and the store at ADDR.
run_pair() {
  NET_PIDS=()
  for r in 0 1; do
    ip netns exec "$(net_ns 0)" env CHORUS_RANK=$r CHORUS_SIZE=2 CHORUS_ADDR="$2:29518" \
      CHORUS_SOCKET_IFNAME="$1" CHORUS_CONNECT_TIMEOUT_SEC=3 "$DIAG" --topo >"$NET_TMP/$r.out" 2>&1 &
    NET_PIDS+=($!)
  done
  net_wait 30 || fail "ranks hung with CHORUS_SOCKET_IFNAME=$1"
}

run_pair "=eth0" "$(net_ip 0)"
[ "${NET_RCS[0]}" -eq 0 ] && [ "${NET_RCS[1]}" -eq 0 ] || fail "=eth0 failed"
grep -q "$(net_ip 0):" "$NET_TMP/0.out" || fail "=eth0 did not bind $(net_ip 0)"
echo "ok: =eth0 binds $(net_ip 0)"

run_pair "^eth" "127.0.0.1"
[ "${NET_RCS[0]}" -eq 0 ] && [ "${NET_RCS[1]}" -eq 0 ] || fail "^eth failed"
grep -q "127.0.0.1:" "$NET_TMP/0.out" || fail "^eth did not fall back to loopback"
grep -q "$(net_ip 0):" "$NET_TMP/0.out" && fail "^eth still bound eth0"
echo "ok: ^eth binds loopback only"

run_pair "=nosuchif0" "127.0.0.1"
[ "${NET_RCS[0]}" -ne 0 ] && [ "${NET_RCS[1]}" -ne 0 ] || fail "a missing interface did not fail"
# Rank 0 serves the bootstrap store: when it gives up before rank 1 connects, rank 1 fails on
# the store instead, so the variable must be named by some rank, not necessarily rank 1.
grep -q "CHORUS_SOCKET_IFNAME=nosuchif0\|CHORUS_SOCKET_IFNAME==nosuchif0" "$NET_TMP/0.out" "$NET_TMP/1.out" ||
  fail "the error does not name the variable"
echo "ok: =nosuchif0 fails, naming CHORUS_SOCKET_IFNAME"
