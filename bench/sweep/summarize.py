#!/usr/bin/python3
"""summarize.py SAMPLES.csv AUTO_CHOICES.txt COLL [MODE [NRANKS]] - the sweep's table (bench/sweep/run.sh).

SAMPLES.csv: rep,algo,bytes,us (chorus-perf's average time per call, rank 0's row). Per size:
the median over repetitions of every contender, the fastest forced one, and auto / best, both
as the ratio of medians and as the median of the same-repetition ratios. MODE "launches" (a
job per contender and repetition: the machine drifts between repetitions, not within one)
judges the worst size by the same-repetition ratios; MODE "rounds" (all contenders in one job,
taking turns) by the ratio of medians, since there a repetition's best of a dozen contenders,
several of them one schedule, is the luckiest of their noisy samples. AUTO_CHOICES.txt: the
tune log's lines "COLL of N bytes on H host(s): NAME (...)", from which the automatic row's
choice per size is read. The log counts a rank's block where chorus-perf's size is NRANKS blocks
(allgather, reduce_scatter, alltoall, gather, scatter): NRANKS maps one onto the other.
"""

import collections
import csv
import re
import statistics
import sys


def human(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def main():
    samples_path, choices_path, coll = sys.argv[1:4]
    by_medians = len(sys.argv) > 4 and sys.argv[4] == "rounds"
    blocked = coll in ("allgather", "reduce_scatter", "alltoall", "gather", "scatter")
    per_size = int(sys.argv[5]) if blocked and len(sys.argv) > 5 else 1
    times = collections.defaultdict(list)  # (algo, bytes) -> [us]
    by_rep = collections.defaultdict(dict)  # (rep, bytes) -> {algo: us}
    algos = []
    with open(samples_path) as f:
        for row in csv.DictReader(f):
            algo, size, us = row["algo"], int(row["bytes"]), float(row["us"])
            times[(algo, size)].append(us)
            by_rep[(row["rep"], size)][algo] = us
            if algo not in algos:
                algos.append(algo)
    choice = {}
    try:
        with open(choices_path) as f:
            for line in f:
                m = re.match(rf"{coll} of (\d+) bytes on \d+ host\(s\): (\S+)", line.strip())
                if m:
                    choice[int(m.group(1)) * per_size] = m.group(2)
    except OSError:
        pass
    forced = [a for a in algos if a != "auto"]
    sizes = sorted({s for (_, s) in times})
    header = ["size", "auto (us)", "auto's choice", "best forced", "best (us)", "auto / best (medians)",
              "auto / best (same rep, median)"] + [f"{a} (us)" for a in forced]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    worst = (0.0, None)
    for size in sizes:
        med = {a: statistics.median(times[(a, size)]) for a in algos if times.get((a, size))}
        cands = {a: v for a, v in med.items() if a != "auto"}
        if "auto" not in med or not cands:
            continue
        best = min(cands, key=cands.get)
        ratio = med["auto"] / cands[best]
        same = []
        for (rep, s), got in by_rep.items():
            if s != size or "auto" not in got:
                continue
            rep_best = min((v for a, v in got.items() if a != "auto"), default=None)
            if rep_best:
                same.append(got["auto"] / rep_best)
        same_ratio = statistics.median(same) if same else float("nan")
        judged = ratio if by_medians else same_ratio
        if judged > worst[0]:
            worst = (judged, size)
        cells = [human(size), f"{med['auto']:.2f}", choice.get(size, "?"), best, f"{cands[best]:.2f}", f"{ratio:.2f}",
                 f"{same_ratio:.2f}"] + [f"{med[a]:.2f}" if a in med else "-" for a in forced]
        print("| " + " | ".join(cells) + " |")
    if worst[1] is not None:
        how = "ratio of medians" if by_medians else "median of same-repetition ratios"
        print(f"\nWorst size: {human(worst[1])}, auto at {worst[0]:.2f}x the best forced contender ({how}).")


if __name__ == "__main__":
    main()
