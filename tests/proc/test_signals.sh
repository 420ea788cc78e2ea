#!/bin/bash
# test_signals.sh CHORUS_RUN - signals sent to chorus-run: SIGTERM ends every rank and
# chorus-run dies of SIGTERM; a terminal-style SIGINT to chorus-run's process group reaches
# each rank exactly once (ranks have their own process groups); a second signal escalates to
# SIGKILL; SIGKILL of chorus-run kills the ranks (PR_SET_PDEATHSIG); an ignored SIGHUP stays
# ignored. Leftovers are checked by PID.
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_signals.sh CHORUS_RUN SIGRECORD}
SIGRECORD=${2:?usage: test_signals.sh CHORUS_RUN SIGRECORD}
set -m # background jobs get their own process group and keep SIGINT (not ignored)
export MARKER

cat >"$TMP/sleeper.sh" <<'EOF'
#!/bin/bash
# Ignore signals before announcing the PID: the test signals the job once every PID is written.
[ -n "${IGNORE_SIGS:-}" ] && trap "" $IGNORE_SIGS
echo $$ >"$PIDDIR/rank.$CHORUS_RANK.pid.tmp" && mv "$PIDDIR/rank.$CHORUS_RANK.pid.tmp" "$PIDDIR/rank.$CHORUS_RANK.pid"
exec -a "$MARKER" sleep 100
EOF
chmod +x "$TMP/sleeper.sh"

# start_job NAME N PROGRAM [options...]: starts chorus-run in the background, waits until every
# rank wrote its PID; sets RUN_PID and PIDS.
start_job() {
  local name=$1 n=$2 prog=$3
  shift 3
  export PIDDIR="$TMP/$name"
  mkdir -p "$PIDDIR"
  if [ "$prog" = "$SIGRECORD" ]; then set -- "$@" -n "$n" "$prog" "$PIDDIR"; else set -- "$@" -n "$n" "$prog"; fi
  "$RUN" "$@" 2>"$TMP/$name.err" &
  RUN_PID=$!
  CLEANUP_PIDS+=($RUN_PID)
  local files=() r
  for ((r = 0; r < n; r++)); do files+=("$PIDDIR/rank.$r.pid"); done
  wait_files 20 "${files[@]}" || fail "$name: ranks did not start"
  PIDS=$(read_pids "$PIDDIR" "$n")
  CLEANUP_PIDS+=($PIDS)
}

# SIGTERM: forwarded, every rank ends, chorus-run dies of SIGTERM (status 143).
start_job term 4 "$TMP/sleeper.sh"
for p in $PIDS; do
  pgrp=$(sed 's/.*) //' "/proc/$p/stat" | cut -d' ' -f3)
  [ "$pgrp" = "$p" ] || fail "rank $p is in process group $pgrp, not its own"
done
t0=$(now_us)
kill -TERM $RUN_PID
wait_exit 5 $RUN_PID
[ $EXIT_CODE = 143 ] || fail "term: chorus-run exited $EXIT_CODE, expected 143 (SIGTERM)"
wait_gone 2 $PIDS || fail "term: ranks left behind"
ok "SIGTERM: all 4 ranks (each its own process group) gone in $((($(now_us) - t0) / 1000)) ms, status 143"

# Ctrl-C on a terminal = SIGINT to the foreground process group, i.e. chorus-run's: each rank
# must receive it exactly once, and from chorus-run (had the ranks been in chorus-run's process
# group, the first copy would come straight from the sender, here this shell). sigrecord logs
# "SIGNO SENDER_PID" per signal and exits 0 one second after the first.
start_job ctrlc 3 "$SIGRECORD" </dev/null
kill -INT -- -$RUN_PID
wait_exit 10 $RUN_PID
[ $EXIT_CODE = 130 ] || fail "ctrl-c: chorus-run exited $EXIT_CODE, expected 130 (SIGINT)"
for r in 0 1 2; do
  got=$(cat "$PIDDIR/signals.$r" 2>/dev/null)
  [ "$got" = "2 $RUN_PID" ] || fail "ctrl-c: rank $r received '$got', expected '2 $RUN_PID' (SIGINT from chorus-run, once)"
done
wait_gone 2 $PIDS || fail "ctrl-c: ranks left behind"
ok "SIGINT to the process group reaches each rank once, from chorus-run; status 130"

# A second signal escalates to SIGKILL at once (the grace period is 30 s here).
IGNORE_SIGS=TERM start_job twice 3 "$TMP/sleeper.sh" --grace 30
kill -TERM $RUN_PID
sleep 0.5
for p in $PIDS; do pid_is_ours $p || fail "twice: rank $p died of an ignored SIGTERM"; done
t0=$(now_us)
kill -TERM $RUN_PID
wait_exit 3 $RUN_PID
[ $EXIT_CODE = 143 ] || fail "twice: chorus-run exited $EXIT_CODE, expected 143"
wait_gone 1 $PIDS || fail "twice: ranks left behind"
grep -q '^chorus-run: second signal (Terminated): sending SIGKILL to 3 ranks$' "$TMP/twice.err" ||
  fail "twice: stderr '$(cat "$TMP/twice.err")'"
ok "second SIGTERM escalates to SIGKILL ($((($(now_us) - t0) / 1000)) ms)"

# The first signal alone escalates after --grace.
IGNORE_SIGS=INT start_job graceful 2 "$TMP/sleeper.sh" --grace 1
t0=$(now_us)
kill -INT $RUN_PID
wait_exit 5 $RUN_PID
ms=$((($(now_us) - t0) / 1000))
[ $EXIT_CODE = 130 ] || fail "graceful: chorus-run exited $EXIT_CODE, expected 130"
((ms >= 900)) || fail "graceful: ended after $ms ms, before the grace period"
wait_gone 1 $PIDS || fail "graceful: ranks left behind"
ok "ranks ignoring a forwarded SIGINT get SIGKILL after --grace 1 ($ms ms)"

# SIGKILL of chorus-run itself: the kernel kills the ranks (PR_SET_PDEATHSIG).
start_job pdeath 4 "$TMP/sleeper.sh"
kill -KILL $RUN_PID
wait_exit 2 $RUN_PID
[ $EXIT_CODE = 137 ] || fail "pdeath: chorus-run exited $EXIT_CODE"
wait_gone 2 $PIDS || fail "pdeath: ranks survived the SIGKILL of chorus-run"
ok "SIGKILL of chorus-run leaves no rank behind"

# SIGHUP ignored at start (nohup) stays ignored in chorus-run and in the ranks.
trap '' HUP
start_job nohup 2 "$TMP/sleeper.sh"
trap - HUP
for p in $PIDS; do
  ign=$(sed -n 's/^SigIgn:\t//p' "/proc/$p/status")
  (((0x$ign >> 0) & 1)) || fail "nohup: rank $p does not ignore SIGHUP (SigIgn $ign)"
done
kill -HUP $RUN_PID
sleep 0.3
pid_alive $RUN_PID || fail "nohup: chorus-run died of an ignored SIGHUP"
kill -TERM $RUN_PID
wait_exit 5 $RUN_PID
wait_gone 2 $PIDS || fail "nohup: ranks left behind"
ok "an ignored SIGHUP stays ignored (nohup)"

done_testing
