#!/bin/bash
# test_socket_cc.sh CHORUS_RUN CHORUS_DIAG SPLIT_TEST - CHORUS_SOCKET_CC: every TCP socket between
# ranks runs the congestion control it names (read back from the kernel by chorus-diag --topo,
# both ends, several sockets per peer, split communicators too); without it (auto) cubic where
# the system's is bbr without an fq default qdisc, else the system's (both cases also inside a
# network namespace of our own, whose setting we choose, as root); with "system" the system's;
# a name the kernel refuses or cannot hold fails at creation with the variable named.
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_socket_cc.sh CHORUS_RUN CHORUS_DIAG SPLIT_TEST}
DIAG=${2:?missing CHORUS_DIAG}
SPLIT=${3:?missing SPLIT_TEST}

sys_cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control) || fail "cannot read the system's congestion control"
want=reno # built into every kernel; another one when it is already the default
[ "$sys_cc" = reno ] && want=cubic
grep -qw "$want" /proc/sys/net/ipv4/tcp_available_congestion_control || { echo "SKIP: $want is not available"; exit 77; }
# Without CAP_NET_ADMIN only the allowed ones may be picked.
[ "$(id -u)" = 0 ] || grep -qw "$want" /proc/sys/net/ipv4/tcp_allowed_congestion_control ||
  { echo "SKIP: $want is not allowed for this user"; exit 77; }

# tcp_cc_column OUT: the "tcp cc" column of every rank's row of chorus-diag --topo.
tcp_cc_column() { awk '$1 ~ /^[0-9]+$/ { print $7 }' "$1" | sort | uniq -c | awk '{ print $2 "x" $1 }'; }

# auto_cc SYSTEM_CC QDISC: what the default should pick (the library's rule, restated).
auto_cc() {
  if [[ $1 == bbr* && $2 != fq ]] && grep -qw cubic /proc/sys/net/ipv4/tcp_available_congestion_control &&
    { [ "$(id -u)" = 0 ] || grep -qw cubic /proc/sys/net/ipv4/tcp_allowed_congestion_control; }; then
    echo cubic
  else
    echo "$1"
  fi
}
qdisc=$(cat /proc/sys/net/core/default_qdisc 2>/dev/null || echo "")
expect=$(auto_cc "$sys_cc" "$qdisc")
timeout -s KILL 30 "$RUN" -n 3 -x CHORUS_SHM_DISABLE=1 -x CHORUS_LOG_LEVEL=info -x CHORUS_LOG_SUBSYS=init "$DIAG" --topo \
  >"$TMP/sys.out" 2>"$TMP/sys.err" || fail "default: exited $?: $(tail -n 3 "$TMP/sys.err")"
[ "$(tcp_cc_column "$TMP/sys.out")" = "${expect}x3" ] ||
  fail "default: tcp cc '$(tcp_cc_column "$TMP/sys.out")', system's $sys_cc, default qdisc '$qdisc', expected $expect"
if [ "$expect" != "$sys_cc" ]; then
  n=$(grep -c "CHORUS_SOCKET_CC=auto: cubic, not the system's $sys_cc" "$TMP/sys.err")
  [ "$n" = 3 ] || fail "default: $n ranks logged why they chose cubic: $(grep -i congestion "$TMP/sys.err")"
fi
ok "without the variable every rank's sockets run $expect (system's $sys_cc, default qdisc '$qdisc')"

timeout -s KILL 30 "$RUN" -n 2 -x CHORUS_SHM_DISABLE=1 -x CHORUS_SOCKET_CC=system "$DIAG" --topo >"$TMP/keep.out" \
  2>"$TMP/keep.err" || fail "system: exited $?: $(tail -n 3 "$TMP/keep.err")"
[ "$(tcp_cc_column "$TMP/keep.out")" = "${sys_cc}x2" ] || fail "system: tcp cc '$(tcp_cc_column "$TMP/keep.out")'"
ok "CHORUS_SOCKET_CC=system: the system's $sys_cc"

# Both outcomes of auto, in a namespace whose default we set (no default qdisc is readable there:
# it counts as not fq). Ours alone: named with this shell's PID, deleted at exit.
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v sysctl >/dev/null &&
  grep -qw bbr /proc/sys/net/ipv4/tcp_available_congestion_control && ip netns add "chorus-cc-$$" 2>/dev/null; then
  NS="chorus-cc-$$"
  trap 'ip netns del "$NS" 2>/dev/null; cleanup' EXIT
  trap 'exit 1' INT TERM HUP # through the EXIT trap: a test killed at its time limit leaves no namespace
  ip -n "$NS" link set lo up || fail "netns: lo up"
  for ns_cc in bbr reno; do
    ip netns exec "$NS" sysctl -qw net.ipv4.tcp_congestion_control=$ns_cc || fail "netns: cannot set $ns_cc"
    ns_expect=$(auto_cc $ns_cc "")
    timeout -s KILL 30 ip netns exec "$NS" "$RUN" -n 2 -x CHORUS_SHM_DISABLE=1 "$DIAG" --topo >"$TMP/ns.out" \
      2>"$TMP/ns.err" || fail "netns $ns_cc: exited $?: $(tail -n 3 "$TMP/ns.err")"
    [ "$(tcp_cc_column "$TMP/ns.out")" = "${ns_expect}x2" ] ||
      fail "netns $ns_cc: tcp cc '$(tcp_cc_column "$TMP/ns.out")', expected $ns_expect"
    ok "in a namespace whose default is $ns_cc: $ns_expect"
  done
else
  echo "# not root, no bbr or no namespace: auto is checked on this system's setting only"
fi

timeout -s KILL 30 "$RUN" -n 3 -x CHORUS_SHM_DISABLE=1 -x CHORUS_NSOCKS_PER_PEER=2 -x CHORUS_SOCKET_CC=$want \
  -x CHORUS_LOG_LEVEL=info -x CHORUS_LOG_SUBSYS=init "$DIAG" --topo --check >"$TMP/set.out" 2>"$TMP/set.err" ||
  fail "$want: exited $?: $(tail -n 3 "$TMP/set.err")"
[ "$(tcp_cc_column "$TMP/set.out")" = "${want}x3" ] || fail "$want: tcp cc '$(tcp_cc_column "$TMP/set.out")'"
n=$(grep -c "TCP congestion control $want on its 4 socket(s)" "$TMP/set.err")
[ "$n" = 3 ] || fail "$want: $n ranks logged their 4 sockets: $(grep -i congestion "$TMP/set.err")"
grep -q "^# every collective verified" "$TMP/set.out" || fail "$want: --check: $(tail -n 3 "$TMP/set.out")"
ok "CHORUS_SOCKET_CC=$want: 2 sockets to each of 2 peers on 3 ranks, checked on every socket, collectives correct"

# Set before the connections exist, which the read-back cannot show (a connection that started
# under bbr keeps the kernel's pacing when changed later): in a system-call trace of 2 ranks with 2
# sockets each way, the dialing rank sets it on each socket before connect(), the listening rank
# on its listener before accept() (its connections inherit it; none is set after).
if command -v strace >/dev/null; then
  # LeakSanitizer cannot run under a tracer (sanitizer builds); the trace is about the order only.
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    timeout -s KILL 60 strace -f -qq -e trace=socket,setsockopt,connect,accept,accept4,close -o "$TMP/trace" \
    "$RUN" -n 2 -x CHORUS_SHM_DISABLE=1 -x CHORUS_NSOCKS_PER_PEER=2 -x CHORUS_SOCKET_CC=$want "$DIAG" --topo \
    >"$TMP/trace.out" 2>&1 || fail "traced job exited $?: $(tail -n 3 "$TMP/trace.out")"
  # (strace shows the name as a number; nothing else sets TCP_CONGESTION. A close or socket call
  # that another thread's call interrupts prints "<unfinished ...>": matched by its start.)
  order=$(awk '
    { pid = $1; line = $0; sub(/^[0-9]+ +/, "", line) }
    line ~ /^setsockopt\([0-9]+, SOL_TCP, TCP_CONGESTION, / {
      fd = line; sub(/^setsockopt\(/, "", fd); sub(/,.*/, "", fd)
      if ((pid, fd) in used) late++
      marked[pid, fd] = 1 }
    line ~ /^connect\([0-9]+,/ { fd = line; sub(/^connect\(/, "", fd); sub(/,.*/, "", fd)
      used[pid, fd] = 1; if ((pid, fd) in marked) dialed++ }
    line ~ /^accept4?\([0-9]+,/ { fd = line; sub(/^accept4?\(/, "", fd); sub(/,.*/, "", fd)
      if ((pid, fd) in marked) accepted++ }
    (line ~ /^accept4?\(/ || line ~ /^<\.\.\. accept4? resumed>/) && match(line, /= [0-9]+$/) {
      used[pid, substr(line, RSTART + 2)] = 1 }
    line ~ /^close\([0-9]+/ { fd = line; sub(/^close\(/, "", fd); sub(/[^0-9].*/, "", fd)
      delete marked[pid, fd]; delete used[pid, fd] }
    (line ~ /^socket\(/ || line ~ /^<\.\.\. socket resumed>/) && match(line, /= [0-9]+$/) {
      fd = substr(line, RSTART + 2); delete marked[pid, fd]; delete used[pid, fd] }
    END { printf "%d %d %d", dialed, accepted, late }' "$TMP/trace")
  [ "$order" = "2 2 0" ] || fail "trace: sockets dialed with it set first, accepted on a listener with it set, set late: $order"
  ok "set before connecting: 2 sockets dialed, 2 accepted on a listener that had it, none set late"
else
  echo "# strace not installed: the order of setting and connecting is not checked"
fi

# Thread ranks over TCP: parents and their split communicators (each checks its own sockets).
CHORUS_SHM_DISABLE=1 CHORUS_SOCKET_CC=$want CHORUS_LOG_LEVEL=info CHORUS_LOG_SUBSYS=init \
  timeout -s KILL 60 "$SPLIT" n4 >"$TMP/split.out" 2>&1 || fail "split test exited $?: $(tail -n 5 "$TMP/split.out")"
n=$(grep -c "TCP congestion control $want" "$TMP/split.out")
((n > 4)) || fail "split: only $n communicators checked their sockets"
ok "split communicators: $n communicators' sockets run $want"

t0=$(now_us)
timeout -s KILL 30 "$RUN" -n 2 -x CHORUS_SOCKET_CC=nonesuch "$DIAG" --topo >"$TMP/bad.out" 2>"$TMP/bad.err" &&
  fail "CHORUS_SOCKET_CC=nonesuch: the job succeeded"
(($(now_us) - t0 < 20000000)) || fail "CHORUS_SOCKET_CC=nonesuch: took $((($(now_us) - t0) / 1000)) ms to fail"
grep -q 'CHORUS_SOCKET_CC="nonesuch": the kernel refused it' "$TMP/bad.err" || fail "nonesuch: $(cat "$TMP/bad.err")"
grep -q "available: .*$sys_cc" "$TMP/bad.err" || fail "nonesuch: the message names no available one: $(cat "$TMP/bad.err")"
grep -q CHORUS_ERR_INVALID_ARG "$TMP/bad.err" || fail "nonesuch: not ERR_INVALID_ARG: $(cat "$TMP/bad.err")"
ok "a name the kernel refuses fails at creation, naming the variable and the available ones"

timeout -s KILL 30 "$RUN" -n 1 -x CHORUS_SOCKET_CC=a_congestion_control_name_longer_than_any "$DIAG" --topo \
  >"$TMP/long.out" 2>"$TMP/long.err" && fail "a 41-character name: the job succeeded"
grep -q "is too long for a congestion control name" "$TMP/long.err" || fail "long name: $(cat "$TMP/long.err")"
ok "a name longer than the kernel holds fails at creation"
done_testing
