#!/bin/bash
# test_diag_tune.sh CHORUS_RUN CHORUS_DIAG - chorus-diag --tune writes the cost model's link
# figures, and a job reads them back with CHORUS_TUNE=FILE. Emulated hosts by CHORUS_HOST_ID:
# on 3 hosts (1+2+3 ranks) the file has intra, inter and inter_ring lines of positive figures,
# on 2 hosts no inter_ring line (a pair's exchange is already a 2-host ring's pattern); a job
# of 3 hosts given the file logs its figures as "links (FILE)", the ring's among them.
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_diag_tune.sh CHORUS_RUN CHORUS_DIAG}
DIAG=${2:?missing CHORUS_DIAG}

# Ranks 0 | 1 2 | 3 4 5 on 3 hosts; with HOSTS=2, ranks 0 1 | 2 3 4 5.
HOSTED='if [ "$HOSTS" = 3 ]; then h=$(( CHORUS_RANK == 0 ? 0 : CHORUS_RANK < 3 ? 1 : 2 )); else h=$(( CHORUS_RANK / 2 ? 1 : 0 )); fi
CHORUS_HOST_ID=tunehost$h exec "$0" "$@"'

# figure FILE LEVEL FIELD: field 2 (alpha) or 3 (bytes/us) of the line of LEVEL ("" if none).
figure() { awk -v l="$2" -v f="$3" '$1 == l { print $f }' "$1"; }

tune() { # tune HOSTS FILE
  timeout -s KILL 60 "$RUN" --timeout 50 -n 6 -x HOSTS="$1" sh -c "$HOSTED" "$DIAG" --tune "$2" \
    >"$TMP/out.$1" 2>"$TMP/err.$1" || fail "$1 hosts: chorus-diag --tune exited $?: $(tail -n 5 "$TMP/err.$1")"
  [ -s "$2" ] || fail "$1 hosts: no file written"
}

tune 3 "$TMP/three.tune"
for level in intra inter inter_ring; do
  for field in 2 3; do
    v=$(figure "$TMP/three.tune" $level $field)
    awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || fail "3 hosts: $level field $field is '$v': $(cat "$TMP/three.tune")"
  done
done
grep -q "in a ring of 3 hosts" "$TMP/out.3" || fail "3 hosts: the summary names no ring figure: $(cat "$TMP/out.3")"

tune 2 "$TMP/two.tune"
[ -n "$(figure "$TMP/two.tune" inter 3)" ] || fail "2 hosts: no inter line: $(cat "$TMP/two.tune")"
[ -z "$(figure "$TMP/two.tune" inter_ring 3)" ] || fail "2 hosts: an inter_ring line: $(cat "$TMP/two.tune")"

# Read back: every rank logs the file's figures; flat takes the lower of inter and inter_ring.
printf 'intra 1.5 12000\ninter 40 250\ninter_ring 40 200\n' >"$TMP/given.tune"
timeout -s KILL 60 "$RUN" --timeout 50 -n 6 -x HOSTS=3 -x CHORUS_TUNE="$TMP/given.tune" -x CHORUS_LOG_LEVEL=info \
  -x CHORUS_LOG_SUBSYS=tune sh -c "$HOSTED" "$DIAG" --topo >"$TMP/out.read" 2>&1 ||
  fail "chorus-diag --topo with CHORUS_TUNE=FILE exited $?: $(tail -n 5 "$TMP/out.read")"
n=$(grep -c "links ($TMP/given.tune): intra 1.5 us + 12000 B/us, inter 40.0 us + 250 B/us (200 B/us in a ring of hosts)" \
  "$TMP/out.read")
[ "$n" -ge 6 ] || fail "$n ranks logged the file's figures: $(grep 'links' "$TMP/out.read" | head -n 3)"
ok "chorus-diag --tune on 3 and 2 emulated hosts, and CHORUS_TUNE=FILE read back by 6 ranks"
