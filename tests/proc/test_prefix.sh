#!/bin/bash
# test_prefix.sh CHORUS_RUN - `--prefix` output relaying: each line of rank r is "[r] line" on
# the stream it was written to; last lines without a newline are completed; lines of
# different ranks never mix, each rank's lines keep their order; a line longer than the relay
# buffer arrives intact; without --prefix the output is untouched.
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_prefix.sh CHORUS_RUN}

# Mixed streams, an empty line, a partial last line on stdout and on stderr.
cat >"$TMP/mixed.sh" <<'EOF'
#!/bin/sh
r=$CHORUS_RANK
echo "out $r"
echo "err $r" >&2
printf 'a %s\n\nb %s\n' "$r" "$r"
printf 'errpart %s' "$r" >&2
printf 'partial %s' "$r"
EOF
chmod +x "$TMP/mixed.sh"
timeout 20 "$RUN" --prefix -n 3 "$TMP/mixed.sh" >"$TMP/out" 2>"$TMP/err" || fail "exit $?"
want_out="" want_err=""
for r in 0 1 2; do
  want_out+="[$r] out $r"$'\n'"[$r] a $r"$'\n'"[$r] "$'\n'"[$r] b $r"$'\n'"[$r] partial $r"$'\n'
  want_err+="[$r] err $r"$'\n'"[$r] errpart $r"$'\n'
done
# Ranks run concurrently: compare per rank, in order.
for r in 0 1 2; do
  got=$(grep "^\[$r\] " "$TMP/out")
  want=$(printf '%s' "$want_out" | grep "^\[$r\] ")
  [ "$got" = "$want" ] || fail "stdout of rank $r: '$got', expected '$want'"
  got=$(grep "^\[$r\] " "$TMP/err")
  want=$(printf '%s' "$want_err" | grep "^\[$r\] ")
  [ "$got" = "$want" ] || fail "stderr of rank $r: '$got', expected '$want'"
done
[ "$(wc -l <"$TMP/out")" = 15 ] || fail "stdout has $(wc -l <"$TMP/out") lines, expected 15"
[ "$(wc -l <"$TMP/err")" = 6 ] || fail "stderr has $(wc -l <"$TMP/err") lines, expected 6"
[ "$(tail -c 1 "$TMP/out" | od -An -c | tr -d ' ')" = '\n' ] || fail "stdout does not end a line"
ok "stdout/stderr kept apart, empty line, partial last lines completed"

# Many ranks writing many lines at once: no line is mixed or lost, order kept per rank.
cat >"$TMP/chatty.sh" <<'EOF'
#!/bin/bash
for ((i = 0; i < 2000; i++)); do
  echo "rank $CHORUS_RANK line $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
done
EOF
chmod +x "$TMP/chatty.sh"
timeout 60 "$RUN" --prefix -n 4 "$TMP/chatty.sh" >"$TMP/chatty" || fail "chatty exit $?"
bad=$(grep -vcE '^\[([0-3])\] rank \1 line [0-9]+ x{68}$' "$TMP/chatty")
[ "$bad" = 0 ] || fail "$bad malformed lines, e.g. $(grep -vE '^\[([0-3])\] rank \1 line' "$TMP/chatty" | head -n 2)"
for r in 0 1 2 3; do
  seq_got=$(grep "^\[$r\] " "$TMP/chatty" | awk '{print $5}' | tr '\n' ' ')
  seq_want=$(seq 0 1999 | tr '\n' ' ')
  [ "$seq_got" = "$seq_want" ] || fail "rank $r: lines lost or reordered"
done
ok "4 ranks x 2000 lines: none mixed, lost or reordered"

# A 100000-byte line and a 70000-byte partial last line (both longer than the relay buffer)
# come out whole, with one prefix each.
cat >"$TMP/long.sh" <<'EOF'
#!/bin/bash
head -c 100000 /dev/zero | tr '\0' 'L'
echo
head -c 70000 /dev/zero | tr '\0' 'P'
EOF
chmod +x "$TMP/long.sh"
timeout 20 "$RUN" --prefix -n 1 "$TMP/long.sh" >"$TMP/long" || fail "long exit $?"
want="[0] $(head -c 100000 /dev/zero | tr '\0' 'L')"$'\n'"[0] $(head -c 70000 /dev/zero | tr '\0' 'P')"
[ "$(cat "$TMP/long")" = "$want" ] || fail "long lines changed: $(wc -lc <"$TMP/long")"
ok "lines longer than the relay buffer stay whole"

# Without --prefix the bytes are the program's own, partial line included.
got=$(timeout 10 "$RUN" -n 1 sh -c 'printf "x\ny"; printf "e" >&2' 2>"$TMP/err1" | od -An -c | tr -d ' \n')
[ "$got" = 'x\ny' ] || fail "without --prefix, stdout was '$got'"
[ "$(cat "$TMP/err1")" = e ] || fail "without --prefix, stderr was '$(cat "$TMP/err1")'"
ok "without --prefix output is passed through unchanged"

# The rank's last lines precede chorus-run's report of its failure on stderr.
timeout 10 "$RUN" --prefix -n 1 sh -c 'echo "last words" >&2; exit 5' 2>"$TMP/err2"
code=$?
[ $code = 5 ] || fail "failing rank: exit $code"
[ "$(head -n 1 "$TMP/err2")" = "[0] last words" ] || fail "order on stderr: $(cat "$TMP/err2")"
grep -q '^chorus-run: rank 0 (pid [0-9]*) exited with status 5$' "$TMP/err2" ||
  fail "no failure line: $(cat "$TMP/err2")"
ok "a failed rank's last output comes before the failure line"

done_testing
