#!/bin/bash
# test_usage.sh CHORUS_RUN - the command line: --help, each kind of bad usage (a clear message
# and exit 2, nothing started), and programs that cannot be executed (a message naming the
# program, exit 127 when not found, 126 when not executable).
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_usage.sh CHORUS_RUN}

# expect_usage_error PATTERN ARGS...: exit 2, PATTERN on stderr, nothing on stdout, no rank.
expect_usage_error() {
  local pattern=$1 code
  shift
  rm -f "$TMP/started"
  timeout 10 "$RUN" "$@" >"$TMP/out" 2>"$TMP/err"
  code=$?
  [ $code = 2 ] || fail "'$*': exit $code, expected 2 (stderr: $(cat "$TMP/err"))"
  grep -qE -e "$pattern" "$TMP/err" || fail "'$*': stderr '$(cat "$TMP/err")' lacks /$pattern/"
  grep -q "Try 'chorus-run --help'" "$TMP/err" || fail "'$*': no hint to --help"
  [ ! -s "$TMP/out" ] || fail "'$*': wrote to stdout"
  [ ! -e "$TMP/started" ] || fail "'$*': started a rank"
}

STARTER=(sh -c "touch $TMP/started")
expect_usage_error 'number of ranks \(-n N\) is required'
expect_usage_error 'number of ranks \(-n N\) is required' "${STARTER[@]}"
expect_usage_error 'no program given' -n 2
expect_usage_error "-n needs a number of ranks in 1\.\.1024, got '0'" -n 0 "${STARTER[@]}"
expect_usage_error "got '1025'" -n 1025 "${STARTER[@]}"
expect_usage_error "got '-3'" -n -3 "${STARTER[@]}"
expect_usage_error "got 'abc'" -n abc "${STARTER[@]}"
expect_usage_error "got '4x'" -n 4x "${STARTER[@]}"
expect_usage_error "got ''" -n '' "${STARTER[@]}"
expect_usage_error "option '-n' needs a value" -n
expect_usage_error "--timeout needs a number of seconds > 0, got '0'" --timeout 0 -n 1 "${STARTER[@]}"
expect_usage_error "got '-1'" --timeout -1 -n 1 "${STARTER[@]}"
expect_usage_error "got 'soon'" --timeout soon -n 1 "${STARTER[@]}"
expect_usage_error "got 'nan'" --timeout nan -n 1 "${STARTER[@]}"
expect_usage_error "--grace needs a number of seconds >= 0, got 'x'" --grace x -n 1 "${STARTER[@]}"
expect_usage_error "--term-delay needs" --term-delay -2 -n 1 "${STARTER[@]}"
expect_usage_error "option '--timeout' needs a value" -n 1 --timeout
expect_usage_error "-x needs VAR=VAL, got 'FOO'" -x FOO -n 1 "${STARTER[@]}"
expect_usage_error "--nnodes needs a number of hosts in 1\.\.65536, got '0'" --nnodes 0 -n 1 "${STARTER[@]}"
expect_usage_error "--nnodes 2 needs --node-rank" --nnodes 2 --master-addr h -n 1 "${STARTER[@]}"
expect_usage_error "--nnodes 2 needs --master-addr" --nnodes 2 --node-rank 1 -n 1 "${STARTER[@]}"
expect_usage_error "--node-rank 2 is not in 0\.\.1" --nnodes 2 --node-rank 2 --master-addr h -n 1 "${STARTER[@]}"
expect_usage_error "--node-rank needs a host number >= 0, got '-1'" --node-rank -1 -n 1 "${STARTER[@]}"
expect_usage_error "--master-port needs a port in 1\.\.65534" --master-addr h --master-port 65535 -n 1 "${STARTER[@]}"
expect_usage_error "--master-port needs --master-addr" --master-port 4000 -n 1 "${STARTER[@]}"
expect_usage_error "--master-addr needs a host name or IPv4 address, got 'h:1'" --master-addr h:1 -n 1 "${STARTER[@]}"
expect_usage_error "--numbering needs host or rr, got 'x'" --numbering x -n 1 "${STARTER[@]}"
expect_usage_error "-n 3,1: a list of counts needs --nnodes" -n 3,1 "${STARTER[@]}"
expect_usage_error "-n 3,1,2: expected 2 counts of ranks in 1\.\.1024" --nnodes 2 --node-rank 0 --master-addr h -n 3,1,2 "${STARTER[@]}"
expect_usage_error "-n 3,0: expected 2 counts" --nnodes 2 --node-rank 0 --master-addr h -n 3,0 "${STARTER[@]}"
expect_usage_error "-n 3,x: expected 2 counts" --nnodes 2 --node-rank 0 --master-addr h -n 3,x "${STARTER[@]}"
expect_usage_error "-n 3,\+1: expected 2 counts" --nnodes 2 --node-rank 0 --master-addr h -n 3,+1 "${STARTER[@]}"
expect_usage_error "-n 3, 1: expected 2 counts" --nnodes 2 --node-rank 0 --master-addr h -n "3, 1" "${STARTER[@]}"
expect_usage_error "-n 3,: a count is missing after the last comma" --nnodes 2 --node-rank 0 --master-addr h -n 3, "${STARTER[@]}"
expect_usage_error "-n 3,1 has 2 counts, but --nnodes is 3" --nnodes 3 --node-rank 0 --master-addr h -n 3,1 "${STARTER[@]}"
expect_usage_error "--numbering rr needs the same -n on every host" --nnodes 2 --node-rank 0 --master-addr h --numbering rr -n 3,1 "${STARTER[@]}"
expect_usage_error "-x needs VAR=VAL, got '=1'" -x =1 -n 1 "${STARTER[@]}"
expect_usage_error "'1A' is not a valid variable name" -x 1A=2 -n 1 "${STARTER[@]}"
expect_usage_error "unknown option '--bogus'" --bogus -n 1 "${STARTER[@]}"
expect_usage_error "unknown option '-q'" -q -n 1 "${STARTER[@]}"
ok "bad usage: clear messages, exit 2, nothing started (22 cases)"

# Options after the program belong to the program.
got=$(timeout 10 "$RUN" -n 1 echo -n --prefix --bogus) || fail "program options: exit $?"
[ "$got" = "--prefix --bogus" ] || fail "program options were parsed: '$got'"
got=$(timeout 10 "$RUN" -n 1 -- echo hi) || fail "'--': exit $?"
[ "$got" = hi ] || fail "'--' then program: '$got'"
ok "options after the program (or after --) are the program's"

for h in -h --help; do
  timeout 10 "$RUN" $h >"$TMP/help" 2>"$TMP/err" || fail "$h: exit $?"
  [ ! -s "$TMP/err" ] || fail "$h wrote to stderr"
  for word in 'Usage: chorus-run' -n --prefix --timeout --grace --term-delay -x CHORUS_ADDR \
    CHORUS_SECRET MASTER_PORT LOCAL_WORLD_SIZE 'process group' PDEATHSIG 'Exit status'; do
    grep -q -e "$word" "$TMP/help" || fail "$h text lacks '$word'"
  done
done
ok "-h/--help document the options, the environment, signals and exit status"

# Programs that cannot be executed.
timeout 10 "$RUN" -n 3 "$TMP/no-such-program" arg 2>"$TMP/err"
code=$?
[ $code = 127 ] || fail "missing program: exit $code, expected 127"
[ "$(cat "$TMP/err")" = "chorus-run: cannot execute '$TMP/no-such-program': No such file or directory" ] ||
  fail "missing program: stderr '$(cat "$TMP/err")'"
timeout 10 "$RUN" -n 2 chorus-no-such-command-on-path 2>"$TMP/err"
code=$?
[ $code = 127 ] || fail "missing command on PATH: exit $code"
grep -q "cannot execute 'chorus-no-such-command-on-path'" "$TMP/err" || fail "PATH: '$(cat "$TMP/err")'"
printf '#!/bin/sh\nexit 0\n' >"$TMP/not-executable"
chmod -x "$TMP/not-executable"
timeout 10 "$RUN" -n 2 "$TMP/not-executable" 2>"$TMP/err"
code=$?
[ $code = 126 ] || fail "not executable: exit $code, expected 126"
grep -q "cannot execute '$TMP/not-executable': Permission denied" "$TMP/err" ||
  fail "not executable: '$(cat "$TMP/err")'"
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "not executable: more than one line: $(cat "$TMP/err")"
ok "missing program (127), command not on PATH (127), not executable (126): one clear line"

# The maximum number of ranks starts and ends cleanly.
got=$(timeout 60 "$RUN" -n 1024 sh -c 'echo $CHORUS_RANK' | sort -n | uniq | wc -l)
[ "$got" = 1024 ] || fail "-n 1024: $got distinct ranks"
ok "-n 1024 runs 1024 distinct ranks"

done_testing
