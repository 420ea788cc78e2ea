#!/usr/bin/python3
"""summarize.py - turns the raw outputs of bench/compare/run.sh into medians and tables. Reads
OUT/runs.csv and the raw files it names (rows of chorus-perf, mpi_perf, gloo_perf.py), writes
OUT/samples.csv (every row of every run), OUT/medians.csv (median over repetitions) and
OUT/compare.md (per ranks and collective: latency at 8 B, 1 KiB, 64 KiB, busbw at 1, 16,
256 MiB, and the ratio of Chorus to the best MPI), and prints the markdown.
"""
import argparse
import csv
import os
import statistics
import sys

LIBS = ("chorus", "chorus_reg", "openmpi", "mpich", "gloo")
LIB_NAMES = {"chorus": "Chorus", "chorus_reg": "Chorus, registered buffers", "openmpi": "Open MPI",
             "mpich": "MPICH", "gloo": "Gloo"}
MPIS = ("openmpi", "mpich")
COLLS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "alltoall", "reduce")
LATENCY_SIZES = (8, 1 << 10, 64 << 10)
BANDWIDTH_SIZES = (1 << 20, 16 << 20, 256 << 20)
PLACEHOLDER_SKIPS = {("gloo", "reduce_scatter")}  # torch 1.13's gloo lacks it


def size_label(size_bytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size_bytes >= 1 << shift and size_bytes % (1 << shift) == 0:
            return "%d %s" % (size_bytes >> shift, unit)
    return "%d B" % size_bytes


def parse_rows(path):
    """(rows, skipped reason or None) of one raw output: rows are dicts of the 9 columns."""
    rows, skipped = [], None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("# skipped:"):
                skipped = line[len("# skipped:"):].strip()
            fields = line.split()
            if line.startswith("#") or len(fields) != 9 or not fields[0].isdigit():
                continue
            try:
                rows.append({"size_bytes": int(fields[0]), "count": int(fields[1]),
                             "time_us": float(fields[5]), "busbw_gbps": float(fields[7]),
                             "wrong": int(fields[8])})
            except ValueError:
                continue
    return rows, skipped


def load_runs(out_dir):
    with open(os.path.join(out_dir, "runs.csv")) as f:
        return list(csv.DictReader(f))


def collect(out_dir, runs):
    """samples[(nranks, coll, lib, size)] = [row, ...]; status[(nranks, coll, lib)] = notes."""
    samples, status = {}, {}
    for run in runs:
        key = (int(run["nranks"]), run["collective"], run["library"])
        rows, skipped = parse_rows(os.path.join(out_dir, run["raw_file"]))
        notes = status.setdefault(key, set())
        if skipped:
            notes.add("skipped: " + skipped)
        if run["exit_code"] == "124" or run["exit_code"] == "137":
            notes.add("timeout (rows measured before it are kept)")
        elif run["exit_code"] != "0" and not skipped:
            notes.add("exit %s (%s)" % (run["exit_code"], run["raw_file"]))
        for row in rows:
            row.update(rep=int(run["rep"]), sweep=run["sweep"])
            samples.setdefault(key + (row["size_bytes"],), []).append(row)
    return samples, status


def median_row(rows):
    """Median time; busbw from the median time (busbw * time is fixed for a size)."""
    times = [r["time_us"] for r in rows]
    time_us = statistics.median(times)
    bytes_factor = max(r["busbw_gbps"] * r["time_us"] for r in rows)
    return {"reps": len(rows), "time_us": time_us, "time_min_us": min(times),
            "time_max_us": max(times), "busbw_gbps": bytes_factor / time_us if time_us > 0 else 0.0,
            "count": rows[0]["count"], "wrong": max(r["wrong"] for r in rows)}


def write_csvs(out_dir, samples, medians):
    with open(os.path.join(out_dir, "samples.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["nranks", "collective", "library", "size_bytes", "count", "rep", "time_us",
                    "busbw_gbps", "wrong"])
        for key in sorted(samples):
            for r in samples[key]:
                w.writerow(list(key) + [r["count"], r["rep"], r["time_us"], r["busbw_gbps"], r["wrong"]])
    with open(os.path.join(out_dir, "medians.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["nranks", "collective", "library", "size_bytes", "count", "reps",
                    "time_us_median", "time_us_min", "time_us_max", "busbw_gbps_median", "wrong_max"])
        for key in sorted(medians):
            m = medians[key]
            w.writerow(list(key) + [m["count"], m["reps"], "%.3f" % m["time_us"],
                                    "%.3f" % m["time_min_us"], "%.3f" % m["time_max_us"],
                                    "%.4f" % m["busbw_gbps"], m["wrong"]])


class Table:
    """The markdown of one (nranks, collective)."""

    def __init__(self, medians, status, nranks, coll, libs, anchors):
        self.medians, self.status = medians, status
        self.nranks, self.coll, self.libs, self.anchors = nranks, coll, libs, anchors
        self.placeholder = False  # every cell "pending": the layout, before a quiet-machine run

    def cell_size(self, lib, size):
        """The size measured for a column: latency columns fall back to the smallest size above
        (8 B is not a whole float32 block per rank for blocked collectives at 4 ranks)."""
        if (self.nranks, self.coll, lib, size) in self.medians or size not in LATENCY_SIZES:
            return size
        above = sorted(s for (n, c, l, s) in self.medians
                       if (n, c, l) == (self.nranks, self.coll, lib) and s > size and s < size * 8)
        return above[0] if above else size

    def value(self, lib, size):
        """(number, shown size) where number is us for latency sizes, GB/s for bandwidth."""
        shown = self.cell_size(lib, size)
        m = self.medians.get((self.nranks, self.coll, lib, shown))
        if m is None:
            return None, shown
        return (m["time_us"] if size in LATENCY_SIZES else m["busbw_gbps"]), shown

    def cell(self, lib, size):
        if self.placeholder:
            return "skip" if (lib, self.coll) in PLACEHOLDER_SKIPS else "pending"
        number, shown = self.value(lib, size)
        if number is None:
            notes = self.status.get((self.nranks, self.coll, lib), set())
            return "skip" if any(n.startswith("skipped") for n in notes) else "-"
        m = self.medians[(self.nranks, self.coll, lib, shown)]
        text = ("%.2f" if size in LATENCY_SIZES else "%.3f") % number
        if shown != size:
            text += " (%s)" % size_label(shown)
        if m["wrong"]:
            text += " WRONG"
        return text

    def ratio_cell(self, size, mine="chorus"):
        if self.placeholder:
            return "pending"
        chorus, chorus_size = self.value(mine, size)
        best = None
        for lib in self.anchors:
            number, shown = self.value(lib, size)
            if number is None or shown != chorus_size:
                continue
            better = best is None or (number < best[0] if size in LATENCY_SIZES else number > best[0])
            if better:
                best = (number, lib)
        if chorus is None or best is None or chorus <= 0 or best[0] <= 0:
            return "-"
        ratio = best[0] / chorus if size in LATENCY_SIZES else chorus / best[0]
        return "**%.2fx** (vs %s)" % (ratio, LIB_NAMES[best[1]])

    def markdown(self):
        sizes = LATENCY_SIZES + BANDWIDTH_SIZES
        head = ["library"] + ["%s lat (us)" % size_label(s) for s in LATENCY_SIZES] + \
               ["%s busbw (GB/s)" % size_label(s) for s in BANDWIDTH_SIZES]
        lines = ["### %s, %d ranks" % (self.coll, self.nranks), "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for lib in self.libs:
            lines.append("| %s | %s |" % (LIB_NAMES[lib], " | ".join(self.cell(lib, s) for s in sizes)))
        for mine in ("chorus", "chorus_reg"):
            if mine in self.libs:
                lines.append("| %s vs best MPI | %s |" % (LIB_NAMES[mine], " | ".join(self.ratio_cell(s, mine) for s in sizes)))
        for lib in self.libs:
            for note in sorted(self.status.get((self.nranks, self.coll, lib), ())):
                lines.append("")
                lines.append("- %s: %s" % (LIB_NAMES[lib], note))
        return "\n".join(lines) + "\n"


def anchors_for(nranks, cores, libs):
    """The MPIs the ratio compares against: MPICH busy-polls, so it is no anchor when the ranks
    outnumber the cores."""
    if nranks > cores:
        return ["openmpi"]
    return [m for m in MPIS if m in libs]


def placeholder_runs(ranks, colls):
    """runs.csv-like records naming every (nranks, collective, library), for --placeholder."""
    return [{"nranks": str(n), "collective": c, "library": l} for n in ranks for c in colls for l in LIBS]


def markdown(out_dir, medians, status, runs, cores, title, placeholder=False):
    keys = sorted({(int(r["nranks"]), r["collective"]) for r in runs},
                  key=lambda k: (k[0], COLLS.index(k[1]) if k[1] in COLLS else 99))
    libs = [l for l in LIBS if any(r["library"] == l for r in runs)]
    parts = ["## %s" % title, ""]
    context = os.path.join(out_dir, "context.txt")
    if os.path.exists(context):
        parts += ["```", open(context).read().rstrip(), "```", ""]
    parts += [
        "float32, sum. Medians over the repetitions; each library ran in turn, repetition by "
        "repetition. Latency: time per call in us (lower is better); bandwidth: busbw in GB/s "
        "(nccl-tests factors; higher is better). \"Chorus vs best MPI\": MPI time / Chorus time for "
        "latency, Chorus busbw / MPI busbw for bandwidth, so > 1 means Chorus is faster. "
        "A size in parentheses is the size actually shown, when the column's size is not a whole "
        "number of float32 blocks per rank. \"skip\": the library lacks the collective; \"-\": "
        "not measured (or the run failed, see the notes under the table); WRONG: the check "
        "found wrong elements.", ""]
    if any(n > cores for n, _ in keys):
        parts += ["With more ranks than the %d cores, Open MPI runs with `mpi_yield_when_idle 1`; "
                  "MPICH (ch4:ucx) has no such setting and busy-polls, so it is not the anchor of "
                  "the ratio there: the ratio compares with Open MPI only." % cores, ""]
    for nranks, coll in keys:
        table = Table(medians, status, nranks, coll, libs, anchors_for(nranks, cores, libs))
        table.placeholder = placeholder
        parts.append(table.markdown())
    return "\n".join(parts)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the run.sh output directory")
    p.add_argument("--placeholder", action="store_true",
                   help="print the tables' layout with every figure 'pending' (writes nothing)")
    p.add_argument("--ranks", default="2 4", help="with --placeholder: numbers of ranks")
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--title", default="Chorus vs Open MPI, MPICH and Gloo")
    args = p.parse_args(argv)
    if args.placeholder:
        runs = placeholder_runs([int(n) for n in args.ranks.split()], COLLS)
        sys.stdout.write(markdown(args.out, {}, {}, runs, args.cores, args.title, placeholder=True))
        return 0
    runs = load_runs(args.out)
    samples, status = collect(args.out, runs)
    medians = {key: median_row(rows) for key, rows in samples.items()}
    write_csvs(args.out, samples, medians)
    text = markdown(args.out, medians, status, runs, args.cores, args.title)
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
