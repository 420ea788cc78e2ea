#!/usr/bin/env bash
# cluster.sh - an emulated cluster on this machine: H hosts, each a network namespace with one
# link "eth0" (198.18.0.<i+1>/24) to a bridge in a switch namespace, and one
# `chorus-run --nnodes H --node-rank i --master-addr 198.18.0.1` per host. Needs root and
# iproute2 (tc for --rate).
#
# Usage: scripts/cluster.sh [options] [--] CMD [ARGS...]
#        scripts/cluster.sh [options] --switch-cmd [--] CMD [ARGS...]
#   -H, --hosts H        number of hosts, 1..253 (default 2)
#   -n, --ranks L        ranks per host (chorus-run -n; default 1); L0,L1,...: one count per
#                        host, for hosts of unequal rank counts (host numbering only)
#   --numbering host|rr  host (default): host i has ranks i*L .. i*L+L-1 (with a list, the
#                        L_i ranks after those of hosts 0..i-1); rr: round robin, local rank
#                        l of host i is rank l*H+i (chorus-run --numbering)
#   --rate RATE          shape every host link in both directions with tc tbf (e.g. 2gbit);
#                        this kernel has no netem, so there is no added delay
#   --port P             the bootstrap store's port on 198.18.0.1 (default 29500; PyTorch's
#                        MASTER_PORT is P+1)
#   --timeout SEC        end everything after SEC seconds, exit 124 (default 600)
#   --out DIR            write host i's output to DIR/host<i>.out instead of printing it with
#                        the prefix "[host<i>] "
#   --run-opt OPT        pass OPT to every chorus-run (repeatable), e.g. --run-opt --prefix
#                        --run-opt -x --run-opt CHORUS_LOG_LEVEL=info
#   --chorus-run PATH    the launcher (default: $CHORUS_RUN, else build/chorus-run of this
#                        repository, else chorus-run on PATH)
#   --switch-cmd         make the hosts, give the bridge 198.18.0.254/24 and run CMD inside the
#                        switch namespace instead of starting chorus-run (e.g. for Open MPI's
#                        mpirun, which must reach every host); the hosts' namespaces are named
#                        in CLUSTER_HOST_NS (space-separated) in CMD's environment
#   -h, --help           show this text
# Every host's processes get CHORUS_HOST_ID=host<i>: the namespaces share the hostname and boot
# id, so the library could not tell them apart otherwise; and CHORUS_SECRET (one random value
# for the job, unless already set). Exit status: the first non-zero status of a host's
# chorus-run (or of CMD), 124 on --timeout, 2 on bad usage, 1 when the cluster cannot be made.
# Everything it made (processes, by PID; namespaces) is removed on exit, failure, SIGINT and
# SIGTERM.
set -u

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" | sed '/^$/,$d'; }
die_usage() { echo "cluster.sh: $*" >&2; echo "Try 'scripts/cluster.sh --help'." >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
hosts=2 ranks=1 numbering=host rate="" port=29500 timeout=600 out="" switch_cmd=0
run_opts=()
launcher=${CHORUS_RUN:-}
while [ $# -gt 0 ]; do
  case $1 in
    -H | --hosts) hosts=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    -n | --ranks) ranks=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    --numbering) numbering=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    --rate) rate=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    --port) port=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    --timeout) timeout=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    --out) out=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    --run-opt) [ $# -ge 2 ] || die_usage "$1 needs a value"; run_opts+=("$2"); shift 2 ;;
    --chorus-run) launcher=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    --switch-cmd) switch_cmd=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die_usage "unknown option '$1'" ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || die_usage "no command given"
[[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 253)) || die_usage "--hosts needs 1..253, got '$hosts'"
[[ $ranks =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  die_usage "--ranks needs a number >= 1, or one per host separated by commas, got '$ranks'"
if [[ $ranks == *,* ]]; then
  IFS=, read -r -a counts <<<"$ranks"
  ((${#counts[@]} == hosts)) || die_usage "--ranks $ranks has ${#counts[@]} counts for $hosts hosts"
  [ "$numbering" = host ] || die_usage "--ranks $ranks: hosts of unequal rank counts take --numbering host"
fi
[[ $port =~ ^[0-9]+$ ]] && ((port >= 1 && port <= 65534)) || die_usage "--port needs 1..65534, got '$port'"
[[ $timeout =~ ^[0-9]+$ ]] && ((timeout >= 1)) || die_usage "--timeout needs whole seconds >= 1, got '$timeout'"
case $numbering in host | rr) ;; *) die_usage "--numbering needs host or rr, got '$numbering'" ;; esac
if [ -z "$launcher" ]; then
  if [ -x "$here/../build/chorus-run" ]; then launcher=$here/../build/chorus-run
  else launcher=$(command -v chorus-run || true); fi
fi
if [ $switch_cmd = 0 ]; then
  [ -n "$launcher" ] && [ -x "$launcher" ] || die_usage "cannot find chorus-run (use --chorus-run PATH)"
  launcher=$(cd "$(dirname "$launcher")" && pwd)/$(basename "$launcher")
fi
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
  echo "cluster.sh: needs root and iproute2 (network namespaces)" >&2
  exit 1
fi
[ -z "$out" ] || mkdir -p "$out" || exit 1

# The namespaces and links come from the tests' helpers (names carry this shell's PID).
. "$here/../tests/net/netns.sh"
STOPPING=0
cluster_stop() { # TERM, then KILL after 3 s, every process this script started; by PID
  local pid deadline=$((SECONDS + 3)) alive
  for pid in "${NET_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  while :; do
    alive=0
    for pid in "${NET_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive && SECONDS < deadline)) || break
    sleep 0.1
  done
}
cluster_exit() {
  trap - INT TERM
  cluster_stop
  net_cleanup # SIGKILL to what is left, wait, delete the namespaces
  local pid deadline=$((SECONDS + 2)) # the relays end once the last writer is gone
  for pid in "${RELAY_PIDS[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
    kill -TERM "$pid" 2>/dev/null
  done
}
RELAY_PIDS=()
trap cluster_exit EXIT
trap 'echo "cluster.sh: interrupted; tearing down" >&2; exit 130' INT
trap 'echo "cluster.sh: terminated; tearing down" >&2; exit 143' TERM

net_create "$hosts" || { echo "cluster.sh: cannot create the namespaces" >&2; exit 1; }
if [ -n "$rate" ]; then
  for ((i = 0; i < hosts; i++)); do
    net_shape "$i" "$rate" || { echo "cluster.sh: tc tbf rate '$rate' failed" >&2; exit 1; }
  done
fi
export CHORUS_SECRET=${CHORUS_SECRET:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}

RELAY_PIDS=()
# start_one TAG CMD...: runs CMD in the background, its output to --out DIR/TAG.out or relayed
# with the prefix "[TAG] "; its PID goes to NET_PIDS, the relay's to RELAY_PIDS.
start_one() {
  local tag=$1 fd
  shift
  if [ -n "$out" ]; then
    "$@" >"$out/$tag.out" 2>&1 </dev/null &
  else
    exec {fd}> >(exec sed -u "s/^/[$tag] /")
    RELAY_PIDS+=($!)
    "$@" >&$fd 2>&1 </dev/null &
    exec {fd}>&-
  fi
  NET_PIDS+=($!)
}

if [ $switch_cmd = 1 ]; then
  sw="${NET_TAG}sw"
  ip -n "$sw" addr add "$NET_SUBNET.254/24" dev br0
  ns_list=""
  for ((i = 0; i < hosts; i++)); do ns_list="$ns_list $(net_ns "$i")"; done
  start_one switch ip netns exec "$sw" env CLUSTER_HOST_NS="${ns_list# }" "$@"
else
  for ((i = 0; i < hosts; i++)); do
    start_one "host$i" ip netns exec "$(net_ns "$i")" env CHORUS_HOST_ID="host$i" \
      "$launcher" --nnodes "$hosts" --node-rank "$i" --master-addr "$(net_ip 0)" \
      --master-port "$port" --numbering "$numbering" -n "$ranks" "${run_opts[@]}" "$@"
  done
fi

# Wait for every host; the first non-zero status (in the order they end) is ours.
deadline=$((SECONDS + timeout))
status=0
declare -A done_pid=()
while ((${#done_pid[@]} < ${#NET_PIDS[@]})); do
  for pid in "${NET_PIDS[@]}"; do
    [ -z "${done_pid[$pid]:-}" ] || continue
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    rc=$?
    done_pid[$pid]=$rc
    ((status == 0 && rc != 0)) && status=$rc
  done
  if ((${#done_pid[@]} < ${#NET_PIDS[@]} && SECONDS >= deadline)); then
    echo "cluster.sh: timeout: still running after $timeout s; tearing down" >&2
    exit 124
  fi
  sleep 0.1
done
exit $status
