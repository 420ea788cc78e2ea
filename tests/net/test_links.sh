#!/usr/bin/env bash
# test_links.sh - chorus-diag --links finds a slow host. 4 emulated hosts, one rank each; host
# 3's link is shaped to 50 Mbit/s in both directions (tc tbf on both ends of its veth), the
# others are not. The 6 directed links to and from rank 3 must be exactly the flagged ones (in
# the table and in the JSON), and the JSON (which must parse) and the SVG heatmap must be
# written. Usage: test_links.sh CHORUS_DIAG
set -u
DIAG=$1
. "$(dirname "$0")/netns.sh"
net_test_begin 20
SLOW=3

net_create 4 || fail "cannot create the namespaces"
shape="rate 50mbit burst 32kbit latency 50ms"
tc -n "$(net_ns $SLOW)" qdisc add dev eth0 root tbf $shape || fail "tc tbf on host $SLOW's eth0"
tc -n "${NET_TAG}sw" qdisc add dev "${NET_TAG}p$SLOW" root tbf $shape || fail "tc tbf on the switch port of host $SLOW"

for r in 0 1 2 3; do
  net_start $r $r 4 "$NET_TMP/links$r.out" "$DIAG" --links --bytes 1048576 \
    --json "$NET_TMP/links.json" --svg "$NET_TMP/links.svg"
done
net_wait 90 || fail "chorus-diag --links did not finish in 90 s"
for rc in "${NET_RCS[@]}"; do [ "$rc" -eq 0 ] || fail "chorus-diag --links exited $rc"; done
out="$NET_TMP/links0.out"

# The table: a star marks a flagged link; rows are senders.
flagged=$(awk '/^# bandwidth/ {on = 1; getline; next} on && /^ +[0-9]+ / {
    for (j = 2; j <= NF; j++) if ($j ~ /\*$/) printf "%d>%d ", $1, j - 2 } /^# [0-9]+ slow/ {on = 0}' "$out")
want=""
for ((i = 0; i < 4; i++)); do for ((j = 0; j < 4; j++)); do
  ((i != j && (i == SLOW || j == SLOW))) && want+="$i>$j "
done; done
[ "$flagged" = "$want" ] || fail "table flags '$flagged', expected '$want'"
grep -q "^# 6 slow link(s)" "$out" || fail "the summary does not count 6 slow links"

[ -s "$NET_TMP/links.json" ] || fail "no JSON written"
/usr/bin/python3 - "$NET_TMP/links.json" "$SLOW" <<'EOF' || fail "the JSON is wrong"
import json, sys
doc = json.load(open(sys.argv[1]))
slow = int(sys.argv[2])
links = doc["links"]
assert doc["nranks"] == 4 and len(links) == 12, "12 directed links expected"
flagged = {(l["src"], l["dst"]) for l in links if l["slow"]}
want = {(i, j) for i in range(4) for j in range(4) if i != j and slow in (i, j)}
assert flagged == want, f"JSON flags {sorted(flagged)}, expected {sorted(want)}"
for l in links:
    assert l["gbps"] > 0 and l["latency_us"] > 0, f"link {l} has no measurement"
    assert (l["gbps"] < doc["median_gbps"] / 2) == l["slow"], f"link {l} flag disagrees with the median"
EOF
[ -s "$NET_TMP/links.svg" ] || fail "no SVG written"
/usr/bin/python3 - "$NET_TMP/links.svg" <<'EOF' || fail "the SVG is wrong"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
rects = [e for e in root.iter() if e.tag.endswith("rect")]
assert len(rects) == 16, f"{len(rects)} cells, expected 16"
assert sum(1 for r in rects if r.get("stroke") == "red") == 6, "6 cells outlined in red expected"
EOF
echo "ok: links to and from host $SLOW (tbf 50 Mbit/s) flagged, and only they; JSON and SVG written"
sed -n '/^# bandwidth/,/slow link/p' "$out"
