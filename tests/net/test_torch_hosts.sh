#!/usr/bin/env bash
# test_torch_hosts.sh - the torch backend across 2 emulated hosts x 2 ranks with no Chorus
# setting but CHORUS_HOST_ID (the namespaces share the hostname): rank 0's bootstrap store must
# listen on the interface that reaches the rendezvous host (tcp://198.18.0.1, and env:// with
# MASTER_ADDR), not on loopback; the allreduce sum is checked and the job ends well within
# 60 s. Then a store forced onto loopback (CHORUS_SOCKET_IFNAME=lo on rank 0) must make the
# ranks of the other host fail within seconds, saying why. CHORUS_LIBRARY only locates the
# library. Usage: test_torch_hosts.sh PYTHON LIBCHORUS PYTHON_PACKAGE_DIR
set -u
PY=$1
LIB=$2
PKG=$3
HELPER=$(dirname "$0")/torch_hosts.py
"$PY" -c 'import torch' 2>/dev/null || { echo "SKIP: no torch for $PY"; exit 77; }
. "$(dirname "$0")/netns.sh"
net_test_begin 20
for v in $(compgen -e CHORUS_); do unset "$v"; done

net_create 2 || fail "cannot create the namespaces"

# rank HOST RANK OUT VAR=VAL... -- ARGS: starts one torch rank in HOST.
rank() {
  local host=$1 r=$2 out=$3
  shift 3
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  ip netns exec "$(net_ns "$host")" env CHORUS_HOST_ID="host$host" CHORUS_LIBRARY="$LIB" \
    PYTHONPATH="$PKG" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 RANK="$r" WORLD_SIZE=4 \
    "${vars[@]}" "$PY" "$HELPER" "$@" >"$out" 2>&1 &
  NET_PIDS+=($!)
}

for init in tcp env; do
  NET_PIDS=()
  start=$SECONDS
  for r in 0 1 2 3; do
    if [ $init = tcp ]; then
      rank $((r / 2)) $r "$NET_TMP/$init$r.out" -- tcp://198.18.0.1:29611 50
    else
      rank $((r / 2)) $r "$NET_TMP/$init$r.out" MASTER_ADDR=198.18.0.1 MASTER_PORT=29612 -- env:// 50
    fi
  done
  net_wait 55 || fail "$init://: the torch job still runs after 55 s"
  for i in 0 1 2 3; do
    [ "${NET_RCS[$i]}" -eq 0 ] || fail "$init://: rank $i exited ${NET_RCS[$i]}"
    grep -q "^ok rank $i sum 10 " "$NET_TMP/$init$i.out" || fail "$init://: rank $i did not check the sum"
  done
  echo "ok: torch $init:// across 2 hosts x 2 ranks, allreduce sum 10, $((SECONDS - start)) s"
done

# A bootstrap store on loopback: the other host's ranks fail at once, naming the cause.
NET_PIDS=()
start=$SECONDS
rank 0 0 "$NET_TMP/lo0.out" CHORUS_SOCKET_IFNAME=lo -- tcp://198.18.0.1:29613 30
rank 0 1 "$NET_TMP/lo1.out" -- tcp://198.18.0.1:29613 30
rank 1 2 "$NET_TMP/lo2.out" -- tcp://198.18.0.1:29613 30
rank 1 3 "$NET_TMP/lo3.out" -- tcp://198.18.0.1:29613 30
remote=("${NET_PIDS[2]}" "${NET_PIDS[3]}")
NET_PIDS=("${remote[@]}" "${NET_PIDS[0]}" "${NET_PIDS[1]}") # net_wait the remote ones first
deadline=$((SECONDS + 50)) # importing torch takes seconds on a busy machine
while { kill -0 "${remote[0]}" || kill -0 "${remote[1]}"; } 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
for i in 2 3; do
  pid=${remote[$((i - 2))]}
  kill -0 "$pid" 2>/dev/null && fail "loopback store: rank $i still waits after $((SECONDS - start)) s"
  wait "$pid" && fail "loopback store: rank $i succeeded"
  grep -q "listens on loopback" "$NET_TMP/lo$i.out" || fail "loopback store: rank $i does not say why"
  t=$(sed -n 's/^init failed in \([0-9.]*\) s.*/\1/p' "$NET_TMP/lo$i.out")
  [ -n "$t" ] && awk -v t="$t" 'BEGIN { exit !(t <= 10) }' || fail "loopback store: rank $i failed after '$t' s"
  echo "ok: a loopback bootstrap store fails rank $i on the other host in $t s, saying why"
done
