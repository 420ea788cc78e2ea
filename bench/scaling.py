#!/usr/bin/python3
"""scaling.py - runs examples/train_ddp.py at 1, 2 and 4 ranks with the Chorus backend and with
gloo, alternating the two backends run by run, and reports side by side the medians of
samples/s, step time and communication time (bucket allreduces in flight per step, and the
part of the step not explained by compute alone), with the Chorus/gloo ratios.

    /usr/bin/python3 bench/scaling.py [--build build] [--repeats 3] [--ranks 1 2 4]
                                      [-- extra train_ddp.py arguments]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "train_ddp.py")
BACKENDS = ("chorus", "gloo")
FIELDS = ("samples_per_sec", "step_ms", "comm_inflight_ms", "comm_exposed_ms")
RESULT_RE = re.compile(r"^RESULT (.*)$", re.MULTILINE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(REPO, "build"),
                   help="build directory holding chorus-run and libchorus.so")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--timeout-sec", type=float, default=300,
                   help="bound on one launch (a hung run is reported and skipped)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per rank (1: each rank one core, so 1 -> 2 ranks "
                        "adds a core on a 2-core machine; 0: train_ddp.py's default)")
    p.add_argument("extra", nargs="*", help="passed on to train_ddp.py (after --)")
    return p.parse_args()


def run_once(args, backend, nranks, env):
    command = [os.path.join(args.build, "chorus-run"), "-n", str(nranks), "--timeout",
               str(int(args.timeout_sec)), "/usr/bin/python3", EXAMPLE, "--backend", backend,
               "--steps", str(args.steps), "--log-every", "0", "--no-check",
               "--threads", str(args.threads)] + args.extra
    done = subprocess.run(command, capture_output=True, text=True, env=env,
                          timeout=args.timeout_sec + 60)
    match = RESULT_RE.search(done.stdout)
    if done.returncode != 0 or not match:
        sys.stderr.write(f"scaling: {' '.join(command)} failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}\n")
        return None
    values = dict(item.split("=", 1) for item in match.group(1).split())
    return {field: float(values[field]) for field in FIELDS}


def median_of(results, field):
    values = [r[field] for r in results if r[field] == r[field]]  # drop NaN
    return statistics.median(values) if values else float("nan")


def main():
    args = parse_args()
    env = dict(os.environ)
    env.setdefault("CHORUS_LIBRARY", os.path.join(args.build, "libchorus.so"))
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    results = {(b, n): [] for b in BACKENDS for n in args.ranks}
    started = time.monotonic()
    for repeat in range(args.repeats):
        for nranks in args.ranks:
            order = BACKENDS if repeat % 2 == 0 else tuple(reversed(BACKENDS))
            for backend in order:  # alternate, so drifting machine load hits both alike
                result = run_once(args, backend, nranks, env)
                if result is not None:
                    results[(backend, nranks)].append(result)
                print(f"  run {repeat + 1}/{args.repeats} {backend:6s} {nranks} ranks: "
                      f"{result['samples_per_sec'] if result else float('nan'):8.0f} samples/s",
                      flush=True)
    print_table(args, results, time.monotonic() - started)
    return 0 if all(results.values()) else 1


def print_table(args, results, elapsed_sec):
    print(f"\ntrain_ddp.py, {args.steps} steps, {args.threads or 'default'} torch thread(s) "
          f"per rank, medians of {args.repeats} runs "
          f"({elapsed_sec:.0f} s), extra args: {' '.join(args.extra) or '-'}")
    print(f"{'ranks':>5} {'backend':>7} {'samples/s':>10} {'step ms':>8} {'comm in flight ms':>18} "
          f"{'comm exposed ms':>16}")
    for nranks in args.ranks:
        for backend in BACKENDS:
            r = results[(backend, nranks)]
            print(f"{nranks:5d} {backend:>7} {median_of(r, 'samples_per_sec'):10.0f} "
                  f"{median_of(r, 'step_ms'):8.2f} {median_of(r, 'comm_inflight_ms'):18.2f} "
                  f"{median_of(r, 'comm_exposed_ms'):16.2f}")
        chorus_rate = median_of(results[("chorus", nranks)], "samples_per_sec")
        gloo_rate = median_of(results[("gloo", nranks)], "samples_per_sec")
        chorus_comm = median_of(results[("chorus", nranks)], "comm_inflight_ms")
        gloo_comm = median_of(results[("gloo", nranks)], "comm_inflight_ms")
        print(f"{nranks:5d} {'ratio':>7} {chorus_rate / gloo_rate:10.2f}x {'':8} "
              f"{chorus_comm / gloo_comm if gloo_comm else float('nan'):17.2f}x  "
              f"(chorus / gloo)")


if __name__ == "__main__":
    sys.exit(main())
