# netns.sh - emulated hosts for the multi-host tests (sourced, not run). Each host is a network
# namespace with one veth "eth0" on a bridge that lives in a switch namespace, addresses
# 198.18.0.<i+1>/24 (the benchmarking range, RFC 2544: no real network uses it). Links can be
# rate-limited with tc tbf (netem is not in this kernel) and cut with `ip link set down`.
# Everything is named after this shell's PID and removed by net_cleanup (installed as the EXIT
# trap), after the processes this test started (by PID) are gone.

NET_TAG="chx$$"
NET_HOSTS=0
NET_PIDS=()
NET_SUBNET=198.18.0

net_skip_unless_root() {
  if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
    echo "SKIP: needs root and iproute2 for network namespaces"
    exit 77
  fi
}

# net_test_begin [LINES]: what every namespace test starts with: skip unless root, a scratch
# directory NET_TMP removed at exit together with the namespaces and ranks (net_cleanup), and
# fail(), which prints the last LINES (default 5) lines of every rank's output and exits 1.
net_test_begin() {
  net_skip_unless_root
  NET_TMP=$(mktemp -d)
  NET_FAIL_LINES=${1:-5}
  trap net_cleanup EXIT
}
fail() {
  echo "FAIL: $*"
  for f in "$NET_TMP"/*.out; do echo "--- $f"; tail -n "$NET_FAIL_LINES" "$f"; done
  exit 1
}

net_ns() { echo "${NET_TAG}h$1"; }
net_ip() { echo "$NET_SUBNET.$(($1 + 1))"; }

# net_create N: N hosts on one bridge.
net_create() {
  local n=$1 sw="${NET_TAG}sw" i
  ip netns add "$sw" || return 1
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((i = 0; i < n; i++)); do
    local ns
    ns=$(net_ns "$i")
    ip netns add "$ns" || return 1
    NET_HOSTS=$((i + 1)) # so that net_cleanup removes what a failure leaves
    ip link add "${NET_TAG}v$i" type veth peer name "${NET_TAG}p$i"
    ip link set "${NET_TAG}v$i" netns "$ns"
    ip link set "${NET_TAG}p$i" netns "$sw"
    ip -n "$ns" link set "${NET_TAG}v$i" name eth0
    ip -n "$ns" addr add "$(net_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$sw" link set "${NET_TAG}p$i" master br0
    ip -n "$sw" link set "${NET_TAG}p$i" up
  done
  NET_HOSTS=$n
}

# net_shape HOST RATE: limits what HOST sends and receives to RATE (e.g. 2gbit) with tbf.
net_shape() {
  local ns sw="${NET_TAG}sw"
  ns=$(net_ns "$1")
  tc -n "$ns" qdisc replace dev eth0 root tbf rate "$2" burst 256kb latency 50ms
  tc -n "$sw" qdisc replace dev "${NET_TAG}p$1" root tbf rate "$2" burst 256kb latency 50ms
}

# net_create_paths P: 2 hosts joined by P direct links (no switch), each its own /24
# (198.19.<p>.<i+1>), the host's address 198.18.0.<i+1> on its loopback, routed over all P
# links at once with a per-flow hash of addresses and ports (ECMP, as a fabric or a bond does):
# one TCP flow takes one link, several flows spread over them.
net_create_paths() {
  local paths=$1 i p
  for ((i = 0; i < 2; i++)); do
    ip netns add "$(net_ns "$i")" || return 1
    NET_HOSTS=$((i + 1))
    ip -n "$(net_ns "$i")" link set lo up
    ip -n "$(net_ns "$i")" addr add "$(net_ip "$i")/32" dev lo
    ip netns exec "$(net_ns "$i")" sysctl -qw net.ipv4.fib_multipath_hash_policy=1
  done
  for ((p = 0; p < paths; p++)); do
    ip link add "${NET_TAG}a$p" netns "$(net_ns 0)" type veth peer name "${NET_TAG}b$p" netns "$(net_ns 1)" || return 1
    for ((i = 0; i < 2; i++)); do
      local dev="${NET_TAG}a$p"
      ((i == 1)) && dev="${NET_TAG}b$p"
      ip -n "$(net_ns "$i")" link set "$dev" name "eth$p"
      ip -n "$(net_ns "$i")" addr add "198.19.$p.$((i + 1))/24" dev "eth$p"
      ip -n "$(net_ns "$i")" link set "eth$p" up
    done
  done
  for ((i = 0; i < 2; i++)); do
    local hops=() other=$((1 - i))
    for ((p = 0; p < paths; p++)); do hops+=(nexthop via "198.19.$p.$((other + 1))" dev "eth$p"); done
    ip -n "$(net_ns "$i")" route add "$(net_ip "$other")/32" src "$(net_ip "$i")" "${hops[@]}" || return 1
  done
}
# net_shape_paths P RATE: every link of net_create_paths limited to RATE each way.
net_shape_paths() {
  local p i
  for ((p = 0; p < $1; p++)); do
    for ((i = 0; i < 2; i++)); do
      tc -n "$(net_ns "$i")" qdisc replace dev "eth$p" root tbf rate "$2" burst 256kb latency 50ms || return 1
    done
  done
}

# net_cut HOST: takes HOST's link down (no FIN, no RST: the peers just stop hearing from it).
net_cut() { ip -n "$(net_ns "$1")" link set eth0 down; }

# net_start HOST RANK SIZE OUTFILE CMD...: starts one rank inside HOST; its PID goes to NET_PIDS.
net_start() {
  local host=$1 rank=$2 size=$3 out=$4
  shift 4
  ip netns exec "$(net_ns "$host")" env CHORUS_RANK="$rank" CHORUS_SIZE="$size" \
    CHORUS_ADDR="$(net_ip 0):29517" CHORUS_SECRET="net-test-$$" CHORUS_HOST_ID="host$host" \
    "$@" >"$out" 2>&1 &
  NET_PIDS+=($!)
}

# net_wait SECONDS: waits for every started rank; fails (returns 1) when one is still running
# after SECONDS. Sets NET_RCS to their exit statuses, in start order.
net_wait() {
  local deadline=$((SECONDS + $1)) pid
  NET_RCS=()
  for pid in "${NET_PIDS[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then return 1; fi
    wait "$pid"
    NET_RCS+=($?)
  done
  return 0
}

# net_cleanup_hosts: ends the started ranks and removes the namespaces (for a test that makes
# another cluster next); net_cleanup also removes NET_TMP.
net_cleanup_hosts() {
  local pid i
  for pid in "${NET_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${NET_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  NET_PIDS=()
  for ((i = 0; i < NET_HOSTS; i++)); do ip netns del "$(net_ns "$i")" 2>/dev/null; done
  ip netns del "${NET_TAG}sw" 2>/dev/null
  NET_HOSTS=0
}

net_cleanup() {
  net_cleanup_hosts
  rm -rf "${NET_TMP:-/nonexistent}"
}
