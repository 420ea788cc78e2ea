#!/usr/bin/python3
"""convergence.py - does compressed training still learn? Trains examples/train_ddp.py (an MLP
on scikit-learn's digits, DistributedDataParallel) on 4 ranks for a fixed number of steps with
every codec, with and without error feedback, over several seeds, and compares the final test
accuracy with uncompressed training. Writes runs.csv, curves.csv, table.md and curves.svg (loss
and test accuracy per codec, mean over seeds) to --out.

    /usr/bin/python3 bench/compression/convergence.py --build build --out /tmp/conv

Codecs apply at every level (--compression-scope all): the ranks share one host here, and
scope inter would leave them exact.
"""

import argparse
import csv
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# (label, --compression, --error-feedback, allowed accuracy loss in points, or None: shown only)
CONFIGS = [
    ("none", None, "off", None),
    ("fp16", "fp16", "off", 0.5),
    ("bf16", "bf16", "off", 0.5),
    ("int8+EF", "int8", "on", 0.5),
    ("int4+EF", "int4", "on", 1.0),
    ("topk1%+EF", "topk:0.01", "on", 1.0),
    ("int4", "int4", "off", None),
    ("topk1%", "topk:0.01", "off", None),
    # No hook: CHORUS_COMPRESSION on the backend, with its residual per bucket (feedback.py).
    ("int4+EF backend", "env:int4", "on", 1.0),
    ("topk1%+EF backend", "env:topk:0.01", "on", 1.0),
]
COLORS = ["#000000", "#1f77b4", "#17becf", "#2ca02c", "#ff7f0e", "#d62728", "#ffbb78", "#ff9896",
          "#9467bd", "#8c564b"]
EVAL_RE = re.compile(r"^eval step (\d+) loss ([0-9.eE+-]+) acc ([0-9.eE+-]+)")
RESULT_RE = re.compile(r"^RESULT .* test_acc=([0-9.]+) status=(\w+)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--out", default="/tmp/chorus-convergence")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--batch-per-rank", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--timeout-sec", type=int, default=600)
    p.add_argument("--configs", nargs="+", help="only these labels (\"none\" is always run: the baseline)")
    args = p.parse_args()
    known = [c[0] for c in CONFIGS]
    unknown = [c for c in args.configs or [] if c not in known]
    if unknown:
        p.error(f"unknown --configs {unknown}; known: {known}")
    return args


def run_one(args, label, codec, feedback, seed):
    cmd = [os.path.join(args.build, "chorus-run"), "-n", str(args.ranks), "--timeout", str(args.timeout_sec),
           "/usr/bin/python3", os.path.join(REPO, "examples", "train_ddp.py"), "--steps", str(args.steps),
           "--eval-every", str(args.eval_every), "--log-every", "0", "--exposed-steps", "0", "--no-check",
           "--seed", str(seed), "--batch-per-rank", str(args.batch_per_rank), "--lr", str(args.lr)]
    env = dict(os.environ, CHORUS_LIBRARY=os.path.join(args.build, "libchorus.so"),
               PYTHONPATH=os.path.join(REPO, "python"), OMP_NUM_THREADS="1")
    if codec and codec.startswith("env:"):
        env.update(CHORUS_COMPRESSION=codec[4:], CHORUS_COMPRESSION_SCOPE="all", CHORUS_COMPRESSION_FEEDBACK=feedback)
    elif codec:
        cmd += ["--compression", codec, "--compression-scope", "all", "--error-feedback", feedback]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout_sec + 30)
    with open(os.path.join(args.out, "raw", f"{label}.seed{seed}.log"), "w") as f:
        f.write(out.stdout + out.stderr)
    curve = [(int(m[1]), float(m[2]), float(m[3])) for m in map(EVAL_RE.match, out.stdout.splitlines()) if m]
    result = [m for m in map(RESULT_RE.match, out.stdout.splitlines()) if m]
    if out.returncode != 0 or not result or not curve:
        sys.exit(f"convergence.py: {label} seed {seed} failed (exit {out.returncode}); see {args.out}/raw")
    return float(result[-1][1]), result[-1][2], curve


def polyline(points, x0, y0, w, h, xmax, ymin, ymax):
    return " ".join(f"{x0 + w * x / xmax:.1f},{y0 + h * (1 - (y - ymin) / (ymax - ymin)):.1f}" for x, y in points)


def panel(title, curves, x0, y0, w, h, xmax, ymin, ymax, ylabel):
    parts = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>',
             f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-size="14">{title}</text>',
             f'<text x="{x0 + w / 2}" y="{y0 + h + 32}" text-anchor="middle" font-size="12">step</text>',
             f'<text x="{x0 - 42}" y="{y0 + h / 2}" font-size="12" transform="rotate(-90 {x0 - 42} {y0 + h / 2})" '
             f'text-anchor="middle">{ylabel}</text>']
    for k in range(5):
        v = ymin + (ymax - ymin) * k / 4
        y = y0 + h * (1 - k / 4)
        parts.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{v:.2f}</text>')
        parts.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{x0 + w * k / 4:.1f}" y="{y0 + h + 16}" text-anchor="middle" font-size="10">'
                     f'{xmax * k / 4:.0f}</text>')
    for (label, pts), color in zip(curves, COLORS):
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                     f'points="{polyline(pts, x0, y0, w, h, xmax, ymin, ymax)}"><title>{label}</title></polyline>')
    return parts


def write_svg(path, mean_curves, steps, note):
    w, h = 420, 280
    loss = [(label, [(s, l) for s, l, _ in pts]) for label, pts in mean_curves]
    acc = [(label, [(s, a) for s, _, a in pts]) for label, pts in mean_curves]
    lmax = max(l for _, pts in loss for _, l in pts)
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="1040" height="420" font-family="sans-serif">',
             '<rect width="100%" height="100%" fill="white"/>']
    parts += panel("training loss (mean over seeds)", loss, 70, 40, w, h, steps, 0.0, lmax, "loss")
    parts += panel("test accuracy (mean over seeds)", acc, 570, 40, w, h, steps, 0.0, 1.0, "accuracy")
    for i, (label, _) in enumerate(mean_curves):
        x, y = 70 + (i % 4) * 230, 368 + (i // 4) * 18
        parts.append(f'<line x1="{x}" x2="{x + 24}" y1="{y}" y2="{y}" stroke="{COLORS[i]}" stroke-width="2"/>')
        parts.append(f'<text x="{x + 30}" y="{y + 4}" font-size="12">{label}</text>')
    parts.append(f'<text x="70" y="412" font-size="10" fill="#555">{note}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    global CONFIGS
    args = parse_args()
    if args.configs:
        CONFIGS = [c for c in CONFIGS if c[0] == "none" or c[0] in args.configs]
    os.makedirs(os.path.join(args.out, "raw"), exist_ok=True)
    runs, curves = [], {}
    # Configurations alternate within each seed, so that machine load hits them alike.
    for seed in args.seeds:
        for label, codec, feedback, _ in CONFIGS:
            acc, status, curve = run_one(args, label, codec, feedback, seed)
            runs.append((label, seed, acc, status))
            curves[(label, seed)] = curve
            print(f"{label:10s} seed {seed}: test accuracy {acc * 100:.2f}% ({status})", flush=True)
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        csv.writer(f).writerows([("config", "seed", "test_acc", "status")] + runs)
    with open(os.path.join(args.out, "curves.csv"), "w", newline="") as f:
        rows = [(label, seed, s, l, a) for (label, seed), pts in curves.items() for s, l, a in pts]
        csv.writer(f).writerows([("config", "seed", "step", "loss", "test_acc")] + rows)
    base = statistics.mean(a for label, _, a, _ in runs if label == "none")
    lines = [f"{args.ranks} ranks, {args.steps} steps, global batch {args.batch_per_rank * args.ranks}, lr {args.lr}, "
             f"seeds {' '.join(map(str, args.seeds))}; mean final test accuracy over seeds:", "",
             "| config | accuracy (%) per seed | mean (%) | vs none (points) | allowed | verdict |", "|---|---|---|---|---|---|"]
    failed = 0
    for label, _, _, allowed in CONFIGS:
        accs = [a for l, _, a, _ in runs if l == label]
        mean = statistics.mean(accs)
        diff = (mean - base) * 100
        verdict = "-" if allowed is None else ("ok" if diff >= -allowed else "MISSED")
        failed += verdict == "MISSED"
        lines.append(f"| {label} | {' '.join(f'{a * 100:.2f}' for a in accs)} | {mean * 100:.2f} | {diff:+.2f} | "
                     f"{'' if allowed is None else f'-{allowed}'} | {verdict} |")
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    mean_curves = []
    for label, _, _, _ in CONFIGS:
        per_seed = [curves[(label, s)] for s in args.seeds]
        mean_curves.append((label, [(pts[0][0], statistics.mean(p[1] for p in pts), statistics.mean(p[2] for p in pts))
                                    for pts in zip(*per_seed)]))
    write_svg(os.path.join(args.out, "curves.svg"), mean_curves, args.steps,
              f"bench/compression/convergence.py --steps {args.steps} --seeds {' '.join(map(str, args.seeds))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
