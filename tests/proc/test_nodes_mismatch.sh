#!/bin/bash
# test_nodes_mismatch.sh CHORUS_RUN PROG - two "hosts" of one job (two chorus-runs on this
# machine, --nnodes 2 --master-addr 127.0.0.1) given rank lists that do not fit: the job must
# fail within seconds, not wait out the connect timeout, and the library must say why.
#   sizes:   host 0 -n 2,2 (a job of 4 ranks), host 1 -n 2,3 (5): every rank is refused
#            ("was started for a job of ...").
#   gap:     host 0 -n 1,3 (rank 0 of 4), host 1 -n 2,3 (ranks 2-4 of 5): nobody is rank 1, for
#            which rank 0 waits; the ranks that find the sizes differ leave an abort entry in the
#            store, and rank 0 fails with their sentence.
#   overlap: host 0 -n 2,2, host 1 -n 1,3 (ranks 1..3): rank 1 is started twice; the second to
#            claim it is refused ("another process holds rank 1 already"), and both chorus-runs
#            end with an error (the other host's when the refused rank's chorus-run stops the
#            job's ranks there).
# PROG is chorus-test-allreduce-loop, running for 30 s if the job forms (so that the overlap's
# complete job on one host is still running when the other host's chorus-run ends its ranks).
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_nodes_mismatch.sh CHORUS_RUN PROG}
PROG=${2:?missing PROG}

free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run_pair NAME LIST0 LIST1: starts both hosts, waits for both (bounded), sets RC0 and RC1.
run_pair() {
  local name=$1 port
  port=$(free_port)
  local common=(--prefix --timeout 40 --term-delay 1 --nnodes 2 --master-addr 127.0.0.1 --master-port "$port"
                -x CHORUS_CONNECT_TIMEOUT_SEC=30)
  local t0=$SECONDS
  timeout -s KILL 60 "$RUN" "${common[@]}" --node-rank 0 -n "$2" -x CHORUS_HOST_ID=mm0 "$PROG" 30 \
    >"$TMP/$name.0" 2>&1 &
  local p0=$!
  CLEANUP_PIDS+=("$p0")
  timeout -s KILL 60 "$RUN" "${common[@]}" --node-rank 1 -n "$3" -x CHORUS_HOST_ID=mm1 "$PROG" 30 \
    >"$TMP/$name.1" 2>&1 &
  local p1=$!
  CLEANUP_PIDS+=("$p1")
  wait "$p0"; RC0=$?
  wait "$p1"; RC1=$?
  ELAPSED=$((SECONDS - t0))
}

run_pair sizes 2,2 2,3
[ $RC0 != 0 ] && [ $RC1 != 0 ] || fail "sizes: exits $RC0 and $RC1, expected both non-zero"
((ELAPSED < 20)) || fail "sizes: took $ELAPSED s (the connect timeout is 30)"
n=$(cat "$TMP/sizes.0" "$TMP/sizes.1" | grep -c "was started for a job of [45] ranks, this rank for [45]")
((n >= 4)) || fail "sizes: $n ranks named the size mismatch: $(cat "$TMP/sizes.0" "$TMP/sizes.1" | head -n 40)"
ok "-n 2,2 and -n 2,3 on two hosts: both fail in $ELAPSED s, $n ranks name the sizes"

run_pair gap 1,3 2,3
[ $RC0 != 0 ] && [ $RC1 != 0 ] || fail "gap: exits $RC0 and $RC1, expected both non-zero"
((ELAPSED < 20)) || fail "gap: took $ELAPSED s (the connect timeout is 30)"
grep -q "^\[0\] .*rank 0 of 4: rank [234] (host mm1): rank 0 (host mm0, pid [0-9]*) was started for a job of 4 ranks" \
  "$TMP/gap.0" || fail "gap: rank 0 did not fail with the abort's sentence: $(head -n 20 "$TMP/gap.0")"
ok "-n 1,3 and -n 2,3 on two hosts: rank 0, waiting for a rank 1 nobody is, fails in $ELAPSED s"

run_pair overlap 2,2 1,3
[ $RC0 != 0 ] && [ $RC1 != 0 ] || fail "overlap: exits $RC0 and $RC1, expected both non-zero"
((ELAPSED < 30)) || fail "overlap: took $ELAPSED s (the connect timeout is 30)"
grep -q "another process holds rank 1 already (host mm[01], pid [0-9]*)" "$TMP/overlap.0" "$TMP/overlap.1" ||
  fail "overlap: no rank said rank 1 is held twice: $(cat "$TMP/overlap.0" "$TMP/overlap.1" | head -n 20)"
ok "-n 2,2 and -n 1,3 on two hosts: rank 1 refused the second time, both fail in $ELAPSED s"
