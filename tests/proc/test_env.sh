#!/bin/bash
# test_env.sh CHORUS_RUN - the environment chorus-run gives its ranks: every rank dumps its
# environment to a file, and the values are checked (rank numbers unique and complete, the
# same store address, secret and master port everywhere, user values that must win, -x, stdin
# from /dev/null, and no file descriptor leaked into the ranks).
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_env.sh CHORUS_RUN}

DUMP="$TMP/dump.sh"
cat >"$DUMP" <<'EOF'
#!/bin/sh
env > "$OUT/env.$CHORUS_RANK"
EOF
chmod +x "$DUMP"

# value FILE NAME: the value of NAME in an env dump ("" if absent).
value() { sed -n "s/^$2=//p" "$1" | head -n 1; }

check_env_run() {
  local n=$1 dir="$TMP/n$1" r f addr secret mport
  mkdir -p "$dir"
  timeout 20 "$RUN" -n "$n" -x OUT="$dir" "$DUMP" || fail "n=$n: chorus-run exited $?"
  [ "$(ls "$dir" | wc -l)" = "$n" ] || fail "n=$n: expected $n env dumps, got $(ls "$dir")"
  addr=$(value "$dir/env.0" CHORUS_ADDR)
  secret=$(value "$dir/env.0" CHORUS_SECRET)
  mport=$(value "$dir/env.0" MASTER_PORT)
  [[ $addr =~ ^127\.0\.0\.1:([0-9]+)$ ]] || fail "n=$n: CHORUS_ADDR='$addr'"
  local sport=${BASH_REMATCH[1]}
  ((sport >= 1 && sport <= 65535)) || fail "n=$n: store port $sport"
  [[ $secret =~ ^[0-9a-f]{32}$ ]] || fail "n=$n: CHORUS_SECRET='$secret'"
  [[ $mport =~ ^[0-9]+$ ]] && ((mport >= 1 && mport <= 65535)) || fail "n=$n: MASTER_PORT='$mport'"
  [ "$mport" != "$sport" ] || fail "n=$n: MASTER_PORT equals the store port $sport"
  for ((r = 0; r < n; r++)); do
    f="$dir/env.$r"
    [ -f "$f" ] || fail "n=$n: rank $r wrote no dump"
    for var in CHORUS_RANK RANK CHORUS_LOCAL_RANK LOCAL_RANK; do
      [ "$(value "$f" $var)" = "$r" ] || fail "n=$n rank $r: $var='$(value "$f" $var)'"
    done
    for var in CHORUS_SIZE WORLD_SIZE CHORUS_LOCAL_SIZE LOCAL_WORLD_SIZE; do
      [ "$(value "$f" $var)" = "$n" ] || fail "n=$n rank $r: $var='$(value "$f" $var)'"
    done
    [ "$(value "$f" CHORUS_ADDR)" = "$addr" ] || fail "n=$n rank $r: another CHORUS_ADDR"
    [ "$(value "$f" CHORUS_SECRET)" = "$secret" ] || fail "n=$n rank $r: another CHORUS_SECRET"
    [ "$(value "$f" MASTER_PORT)" = "$mport" ] || fail "n=$n rank $r: another MASTER_PORT"
    [ "$(value "$f" MASTER_ADDR)" = 127.0.0.1 ] || fail "n=$n rank $r: MASTER_ADDR"
    [ "$(grep -c '^CHORUS_RANK=' "$f")" = 1 ] || fail "n=$n rank $r: CHORUS_RANK set twice"
  done
  echo "$secret" >>"$TMP/secrets"
  ok "n=$n: ranks 0..$((n - 1)) once each, sizes, shared addr/secret/port ($addr, $mport)"
}

for n in 1 3 4; do check_env_run $n; done
[ "$(sort -u "$TMP/secrets" | wc -l)" = 3 ] || fail "secrets repeat across runs"
ok "a new secret per run"

# The free ports stay held while the job runs: a plain bind of either (what an outgoing
# connection or another program would need) is refused, and a SO_REUSEADDR listener, as rank 0's
# store and PyTorch's TCPStore are, binds it.
PORTS="$TMP/ports.py"
cat >"$PORTS" <<'EOF'
import errno, os, socket, sys
for port in (int(os.environ["CHORUS_ADDR"].rsplit(":", 1)[1]), int(os.environ["MASTER_PORT"])):
    plain = socket.socket()
    try:
        plain.bind(("0.0.0.0", port))
        sys.exit(f"port {port}: a plain bind succeeded while the job runs")
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    listener.close()
print("ports held")
EOF
# (Without CHORUS_ADDR and MASTER_PORT from the outside: chorus-run picks and holds no port the
# user set.)
env -u CHORUS_ADDR -u MASTER_PORT timeout 20 "$RUN" -n 1 /usr/bin/python3 "$PORTS" | grep -qx "ports held" ||
  fail "the store and master ports are not held for the job"
ok "the store and master ports are held for the job, and rank 0 can listen on them"

# Values that must win or be replaced: the user's CHORUS_ADDR/MASTER_PORT stay; a stale
# CHORUS_RANK/RANK from an outer launcher is replaced; other variables are inherited; -x sets
# (last one wins, '=' allowed in the value) and overrides inherited values.
dir="$TMP/user"
mkdir -p "$dir"
CHORUS_ADDR=127.0.0.1:45678 MASTER_PORT=45679 CHORUS_RANK=77 RANK=77 INHERITED=yes \
  OVERRIDDEN=old timeout 20 "$RUN" -n 2 -x OUT="$dir" -x OVERRIDDEN=new -x EQ=a=b \
  -x TWICE=1 -x TWICE=2 "$DUMP" || fail "user-set run exited $?"
for r in 0 1; do
  f="$dir/env.$r"
  [ "$(value "$f" CHORUS_ADDR)" = 127.0.0.1:45678 ] || fail "user CHORUS_ADDR lost"
  [ "$(value "$f" MASTER_PORT)" = 45679 ] || fail "user MASTER_PORT lost"
  [ "$(value "$f" MASTER_ADDR)" = 127.0.0.1 ] || fail "MASTER_ADDR missing"
  [ "$(value "$f" CHORUS_RANK)" = $r ] || fail "stale CHORUS_RANK kept"
  [ "$(value "$f" RANK)" = $r ] || fail "stale RANK kept"
  [ "$(value "$f" INHERITED)" = yes ] || fail "inherited variable lost"
  [ "$(value "$f" OVERRIDDEN)" = new ] || fail "-x did not override"
  [ "$(grep -c '^OVERRIDDEN=' "$f")" = 1 ] || fail "OVERRIDDEN set twice"
  [ "$(value "$f" EQ)" = a=b ] || fail "-x EQ=a=b gave '$(value "$f" EQ)'"
  [ "$(value "$f" TWICE)" = 2 ] || fail "-x TWICE: last should win"
  [ "$(grep -c '^TWICE=' "$f")" = 1 ] || fail "TWICE set twice"
  [[ $(value "$f" CHORUS_SECRET) =~ ^[0-9a-f]{32}$ ]] || fail "secret missing"
done
ok "user CHORUS_ADDR/MASTER_PORT win, stale ranks replaced, inheritance and -x"

dir="$TMP/user2"
mkdir -p "$dir"
CHORUS_SECRET=0123 timeout 20 "$RUN" -n 1 -x OUT="$dir" -x MASTER_ADDR=127.0.0.2 "$DUMP" ||
  fail "run with a user secret exited $?"
[ "$(value "$dir/env.0" CHORUS_SECRET)" = 0123 ] || fail "user CHORUS_SECRET lost"
[ "$(value "$dir/env.0" MASTER_ADDR)" = 127.0.0.2 ] || fail "-x MASTER_ADDR lost"
ok "user CHORUS_SECRET and -x MASTER_ADDR win"

# One host's share of a multi-host job: --nnodes 3 --node-rank 1 -n 2 numbers the ranks by
# host (2, 3) or round robin (1, 4); the addresses are the options' (even over the user's);
# no secret is drawn (every host would draw another) unless the user set one.
for numbering in host rr; do
  dir="$TMP/nodes-$numbering"
  mkdir -p "$dir"
  CHORUS_ADDR=127.0.0.1:45678 timeout 20 "$RUN" --nnodes 3 --node-rank 1 --master-addr node0.example \
    --master-port 4000 --numbering $numbering -n 2 -x OUT="$dir" "$DUMP" ||
    fail "--nnodes run ($numbering) exited $?"
  if [ $numbering = host ]; then ranks="2 3"; else ranks="1 4"; fi
  l=0
  for r in $ranks; do
    f="$dir/env.$r"
    [ -f "$f" ] || fail "$numbering: no dump of rank $r: $(ls "$dir")"
    for kv in CHORUS_RANK=$r RANK=$r CHORUS_SIZE=6 WORLD_SIZE=6 CHORUS_LOCAL_RANK=$l LOCAL_RANK=$l \
      CHORUS_LOCAL_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 GROUP_WORLD_SIZE=3 NODE_RANK=1 \
      CHORUS_ADDR=node0.example:4000 MASTER_ADDR=node0.example MASTER_PORT=4001; do
      [ "$(value "$f" "${kv%%=*}")" = "${kv#*=}" ] || fail "$numbering rank $r: want $kv, got '$(value "$f" "${kv%%=*}")'"
    done
    grep -q '^CHORUS_SECRET=' "$f" && fail "$numbering rank $r: a secret was drawn for a multi-host job"
    l=$((l + 1))
  done
done
# Hosts of unequal rank counts: -n 3,1,2 on host 2 of 3 runs 2 ranks, numbered 4 and 5 of 6.
dir="$TMP/nodes-uneven"
mkdir -p "$dir"
timeout 20 "$RUN" --nnodes 3 --node-rank 2 --master-addr node0.example -n 3,1,2 -x OUT="$dir" "$DUMP" ||
  fail "--nnodes run with -n 3,1,2 exited $?"
[ "$(ls "$dir" | wc -l)" = 2 ] || fail "-n 3,1,2 on host 2: want 2 ranks, got $(ls "$dir")"
l=0
for r in 4 5; do
  f="$dir/env.$r"
  [ -f "$f" ] || fail "-n 3,1,2: no dump of rank $r: $(ls "$dir")"
  for kv in CHORUS_RANK=$r RANK=$r CHORUS_SIZE=6 WORLD_SIZE=6 CHORUS_LOCAL_RANK=$l LOCAL_RANK=$l \
    CHORUS_LOCAL_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=2 GROUP_WORLD_SIZE=3 NODE_RANK=2; do
    [ "$(value "$f" "${kv%%=*}")" = "${kv#*=}" ] || fail "-n 3,1,2 rank $r: want $kv, got '$(value "$f" "${kv%%=*}")'"
  done
  l=$((l + 1))
done
dir="$TMP/nodes-secret"
mkdir -p "$dir"
CHORUS_SECRET=s3 timeout 20 "$RUN" --nnodes 2 --node-rank 0 --master-addr 198.18.0.1 -n 1 -x OUT="$dir" "$DUMP" ||
  fail "--nnodes run with a secret exited $?"
[ "$(value "$dir/env.0" CHORUS_SECRET)" = s3 ] || fail "--nnodes: user CHORUS_SECRET lost"
[ "$(value "$dir/env.0" CHORUS_ADDR)" = 198.18.0.1:29500 ] || fail "--nnodes: default port"
ok "--nnodes/--node-rank/--master-addr/--numbering/-n N0,N1,...: ranks, sizes, addresses, secret"

# stdin is /dev/null: a rank that reads stdin sees EOF at once even though ours has data.
got=$(echo "must not be read" | timeout 10 "$RUN" -n 2 sh -c 'cat; echo "eof $CHORUS_RANK"' | sort)
[ "$got" = $'eof 0\neof 1' ] || fail "stdin: got '$got'"
ok "ranks read stdin from /dev/null"

# No descriptor of chorus-run (pipes, signalfd, sockets) leaks into the ranks: `ls` started by
# a rank sees the same open descriptors as `ls` started directly, with and without --prefix.
FDS="$TMP/fds.sh"
cat >"$FDS" <<'EOF2'
#!/bin/sh
exec ls /proc/self/fd >"$OUT/fds.${CHORUS_RANK:-direct}"
EOF2
chmod +x "$FDS"
for mode in "" --prefix; do
  dir="$TMP/fds$mode"
  mkdir -p "$dir"
  OUT="$dir" "$FDS" </dev/null
  timeout 10 "$RUN" $mode -n 3 -x OUT="$dir" "$FDS" || fail "fd listing run exited $?"
  want=$(tr '\n' ' ' <"$dir/fds.direct")
  for r in 0 1 2; do
    got=$(tr '\n' ' ' <"$dir/fds.$r")
    [ "$got" = "$want" ] || fail "descriptors in rank $r ($mode): '$got', expected '$want'"
  done
done
ok "no descriptor leaks into ranks (they see: $want)"

done_testing
