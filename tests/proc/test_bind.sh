#!/bin/bash
# test_bind.sh CHORUS_RUN - --bind: with no more ranks than usable CPUs each rank is pinned to a
# CPU of its own (by default and with --bind core); a multiple of the CPUs is pinned round robin
# by default; other oversubscribed counts are left free by default; --bind none never pins;
# --bind core pins any count, round robin; the nodes of a multi-node job on one machine
# spread over its CPUs.
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_bind.sh CHORUS_RUN}

SHOW="$TMP/show.sh"
cat >"$SHOW" <<'EOF2'
#!/bin/sh
sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status > "$OUT/cpus.$CHORUS_RANK"
EOF2
chmod +x "$SHOW"

ALL=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
NCPUS=$(nproc)

# cpus_of N [options...]: runs N ranks, prints rank r's CPU list on line r.
cpus_of() {
  local n=$1 dir="$TMP/run$RANDOM"
  shift
  mkdir -p "$dir"
  timeout 20 "$RUN" "$@" -n "$n" -x OUT="$dir" "$SHOW" || fail "chorus-run $* -n $n exited $?"
  for ((r = 0; r < n; r++)); do cat "$dir/cpus.$r"; done
}

# Fits: one CPU each, all different, and a single CPU (no range, no list).
fits=$(cpus_of "$NCPUS")
[ "$(echo "$fits" | sort -u | wc -l)" = "$NCPUS" ] || fail "default, $NCPUS ranks: CPUs not distinct: $fits"
echo "$fits" | grep -Eqv '^[0-9]+$' && fail "default, $NCPUS ranks: a rank has more than one CPU: $fits"
[ "$(cpus_of "$NCPUS" --bind core)" = "$fits" ] || fail "--bind core differs from the default"

# Twice the CPUs: round robin, rank r + NCPUS on rank r's CPU.
double=$(cpus_of $((2 * NCPUS)))
[ "$(echo "$double" | head -n "$NCPUS")" = "$fits" ] || fail "default, $((2 * NCPUS)) ranks: first $NCPUS not as when they fit: $double"
[ "$(echo "$double" | tail -n "$NCPUS")" = "$fits" ] || fail "default, $((2 * NCPUS)) ranks: not round robin: $double"
over=$((NCPUS + 1))
if [ "$NCPUS" -gt 1 ]; then # with one CPU every count is a multiple
  for cpus in $(cpus_of "$over"); do
    [ "$cpus" = "$ALL" ] || fail "default, $over ranks on $NCPUS CPUs: a rank was pinned to $cpus"
  done
fi
for cpus in $(cpus_of "$NCPUS" --bind none); do
  [ "$cpus" = "$ALL" ] || fail "--bind none: a rank was pinned to $cpus"
done
forced=$(cpus_of "$over" --bind core)
[ "$(echo "$forced" | head -n 1)" = "$(echo "$forced" | tail -n 1)" ] ||
  fail "--bind core, $over ranks: rank $NCPUS should share rank 0's CPU: $forced"

# Several nodes on one machine spread out: node I's local rank l takes the CPU that job rank
# I*N + l would take on one node (node 1 of 2 x 1 rank is not on node 0's CPU).
if [ "$NCPUS" -gt 1 ]; then
  dir="$TMP/nodes"
  mkdir -p "$dir"
  timeout 20 "$RUN" --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 -n 1 -x OUT="$dir" "$SHOW" ||
    fail "chorus-run --nnodes 2 --node-rank 1 exited $?"
  [ "$(cat "$dir/cpus.1")" = "$(echo "$fits" | sed -n 2p)" ] ||
    fail "node 1 of 2 x 1 rank: pinned to $(cat "$dir/cpus.1"), not the second CPU of $(echo $fits)"
fi

"$RUN" --bind sometimes -n 1 true 2>"$TMP/err" && fail "--bind sometimes was accepted"
grep -q "core or none" "$TMP/err" || fail "--bind sometimes: unclear message: $(cat "$TMP/err")"
echo "ok: bound $NCPUS ranks to $(echo $fits), $((2 * NCPUS)) round robin; $over ranks and --bind none left free"
