#!/usr/bin/python3
"""ddp.py - DistributedDataParallel training across emulated hosts: examples/train_ddp.py on H
hosts of L ranks (scripts/cluster.sh: network namespaces on a bridge, every host link shaped with
tc tbf), with the Chorus backend and with gloo, alternating the two run by run, over a list of
batch sizes, so that the share of communication in a step goes from small to large. Reports per
batch size the medians of samples/s, step time and communication in flight per step (the union
of the bucket allreduces' post-to-completion intervals), the communication share of gloo's step,
and the chorus / gloo ratios. Every run checks that the parameters are bit-identical on every
rank (train_ddp.py exits non-zero otherwise). Needs root.

    /usr/bin/python3 bench/cluster/ddp.py [--hosts 4] [--ranks 2] [--rate 2gbit]
        [--batches 16 64 256] [--repeats 3] [--steps 20] [--contenders chorus gloo chorus+int8]
        [-- extra train_ddp.py arguments]

A contender chorus+CODEC trains with the chorus backend and averages the buckets through
chorus.torch.compress_hook(CODEC) with scope inter (only what crosses hosts is compressed);
its ratios are given against plain chorus. chorus-plain is the chorus backend with
CHORUS_ZEROS=off (every block crosses whole, zeros included), against gloo.

No Chorus variable is set: the backend finds its way across hosts by itself. gloo is given
GLOO_SOCKET_IFNAME=eth0 (without it, it binds the address the hostname resolves to, which the
namespaces share).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "train_ddp.py")
CLUSTER = os.path.join(REPO, "scripts", "cluster.sh")
CONTENDERS = ("chorus", "gloo")
FIELDS = ("samples_per_sec", "step_ms", "comm_inflight_ms")
RESULT_RE = re.compile(r"^\[host0\] RESULT (.*)$", re.MULTILINE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--ranks", type=int, default=2, help="ranks per host")
    p.add_argument("--rate", default="2gbit", help="tc tbf rate of every host link, each way")
    p.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256], help="samples per rank and step")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--timeout-sec", type=int, default=600)
    p.add_argument("--contenders", nargs="+", default=list(CONTENDERS),
                   help="chorus, gloo, chorus-plain (CHORUS_ZEROS=off), chorus+CODEC (fp16, bf16, int8, int4, topk:F)")
    p.add_argument("extra", nargs="*", help="passed on to train_ddp.py (after --)")
    return p.parse_args()


def run_once(args, contender, batch, env):
    backend, _, codec = contender.partition("+")
    plain = backend == "chorus-plain"
    backend = "chorus" if plain else backend
    compression = ["--compression", codec, "--compression-scope", "inter"] if codec else []
    command = [CLUSTER, "-H", str(args.hosts), "-n", str(args.ranks), "--rate", args.rate,
               "--timeout", str(args.timeout_sec), "--chorus-run", os.path.join(args.build, "chorus-run")]
    if backend == "gloo":
        command += ["--run-opt", "-x", "--run-opt", "GLOO_SOCKET_IFNAME=eth0"]
    if plain:
        command += ["--run-opt", "-x", "--run-opt", "CHORUS_ZEROS=off"]
    command += ["--", "/usr/bin/python3", EXAMPLE, "--backend", backend, "--steps", str(args.steps),
                "--batch-per-rank", str(batch), "--log-every", "0", "--no-check", "--threads",
                str(args.threads)] + compression + args.extra
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout_sec + 60)
    match = RESULT_RE.search(done.stdout)
    if done.returncode != 0 or not match:
        sys.stderr.write(f"ddp: {contender} batch {batch} failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}{done.stderr[-2000:]}\n")
        return None
    values = dict(item.split("=", 1) for item in match.group(1).split())
    if values.get("status") != "ok":
        sys.stderr.write(f"ddp: {contender} batch {batch}: parameters differ between ranks\n")
        return None
    return {field: float(values[field]) for field in FIELDS}


def median_of(results, field):
    values = [r[field] for r in results if r[field] == r[field]]
    return statistics.median(values) if values else float("nan")


def main():
    args = parse_args()
    env = dict(os.environ)
    for var in [v for v in env if v.startswith("CHORUS_")]:
        del env[var]  # "no Chorus variable set"
    env["CHORUS_LIBRARY"] = os.path.join(args.build, "libchorus.so")
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    results = {(b, n): [] for b in args.contenders for n in args.batches}
    started = time.monotonic()
    print(f"# {args.hosts} hosts x {args.ranks} ranks, links {args.rate}; start "
          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()[0]:.2f}", flush=True)
    for repeat in range(args.repeats):
        for batch in args.batches:
            order = args.contenders if repeat % 2 == 0 else list(reversed(args.contenders))
            for contender in order:
                result = run_once(args, contender, batch, env)
                if result is not None:
                    results[(contender, batch)].append(result)
                print(f"  run {repeat + 1}/{args.repeats} {contender:6s} batch {batch:4d}: "
                      f"{result['samples_per_sec'] if result else float('nan'):8.1f} samples/s, "
                      f"comm {result['comm_inflight_ms'] if result else float('nan'):8.1f} ms/step", flush=True)
    print_table(args, results, time.monotonic() - started)
    return 0 if all(results.values()) else 1


def print_table(args, results, elapsed_sec):
    print(f"\ntrain_ddp.py on {args.hosts} hosts x {args.ranks} ranks ({args.rate} links), {args.steps} steps, "
          f"{args.threads} torch thread(s) per rank, medians of {args.repeats} runs ({elapsed_sec:.0f} s; load "
          f"{os.getloadavg()[0]:.2f} at the end), extra args: {' '.join(args.extra) or '-'}\n")
    print("| batch per rank | contender | samples/s | step (ms) | comm in flight (ms/step) | comm share of step |")
    print("|---|---|---|---|---|---|")
    for batch in args.batches:
        for contender in args.contenders:
            r = results[(contender, batch)]
            step, comm = median_of(r, "step_ms"), median_of(r, "comm_inflight_ms")
            print(f"| {batch} | {contender} | {median_of(r, 'samples_per_sec'):.1f} | {step:.1f} | {comm:.1f} | "
                  f"{100 * comm / step:.0f}% |")
        for contender in args.contenders:  # chorus against gloo, compressed against plain chorus
            base = "gloo" if contender in ("chorus", "chorus-plain") else "chorus" if "+" in contender else None
            if base not in args.contenders:
                continue
            c, g = results[(contender, batch)], results[(base, batch)]
            rate = median_of(c, "samples_per_sec") / median_of(g, "samples_per_sec")
            comm = median_of(c, "comm_inflight_ms") / median_of(g, "comm_inflight_ms")
            print(f"| {batch} | {contender} / {base} | {rate:.2f}x | | {comm:.2f}x | |")


if __name__ == "__main__":
    sys.exit(main())
