#!/usr/bin/python3
"""torch_init_bench.py - how long torch.distributed takes to set up a process group of N ranks
on this host: init_process_group (file:// rendezvous, as PyTorch's own test suite starts every
test), the first all_reduce and destroy_process_group, per backend, the backends alternating
launch by launch. Prints each launch and, per backend, the medians of the slowest rank's times.

Usage: /usr/bin/python3 bench/torch_init_bench.py [--ranks N] [--repeats R] [--backends chorus gloo]
The library is found as chorus's Python package finds it (CHORUS_LIBRARY, or the build tree); a
backend given as chorus=PATH runs the library at PATH, so that two builds can alternate
(--backends chorus=old/build/libchorus.so chorus gloo).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

PHASES = ("init", "first_allreduce", "destroy")
ORIGINAL_LIBRARY = {k: v for k, v in os.environ.items() if k == "CHORUS_LIBRARY"}


def one_rank(rank, size, backend, url, results):
    if backend == "chorus":
        import chorus.torch  # noqa: F401  (registers the backend)
    times = {}
    started = time.perf_counter()
    dist.init_process_group(backend, init_method=url, rank=rank, world_size=size)
    times["init"] = time.perf_counter() - started
    started = time.perf_counter()
    dist.all_reduce(torch.ones(16))
    times["first_allreduce"] = time.perf_counter() - started
    started = time.perf_counter()
    dist.destroy_process_group()
    times["destroy"] = time.perf_counter() - started
    results.put((rank, times))


def launch(contender, size):
    """The slowest rank's seconds per phase of one launch of `size` ranks."""
    backend, _, library = contender.partition("=")
    if library:
        os.environ["CHORUS_LIBRARY"] = os.path.abspath(library)
    elif "CHORUS_LIBRARY" in ORIGINAL_LIBRARY:
        os.environ["CHORUS_LIBRARY"] = ORIGINAL_LIBRARY["CHORUS_LIBRARY"]
    else:
        os.environ.pop("CHORUS_LIBRARY", None)
    context = mp.get_context("spawn")
    results = context.Queue()
    with tempfile.TemporaryDirectory() as scratch:
        url = "file://" + os.path.join(scratch, "rendezvous")
        procs = [context.Process(target=one_rank, args=(r, size, backend, url, results)) for r in range(size)]
        for p in procs:
            p.start()
        per_rank = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        failed = [p.exitcode for p in procs if p.exitcode != 0]
        if failed:
            raise SystemExit(f"{backend}: a rank exited with {failed}")
    return {phase: max(times[phase] for _, times in per_rank) for phase in PHASES}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["chorus", "gloo"])
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    seen = {b: [] for b in args.backends}
    width = max(len(b) for b in args.backends)
    for repeat in range(args.repeats):
        for backend in args.backends:
            t = launch(backend, args.ranks)
            seen[backend].append(t)
            print(f"launch {repeat + 1} {backend:{width}s} " + "  ".join(f"{p} {t[p] * 1e3:7.1f} ms" for p in PHASES),
                  flush=True)
    print(f"# medians over {args.repeats} launches of {args.ranks} ranks (slowest rank of each launch)")
    for backend in args.backends:
        med = {p: statistics.median(t[p] for t in seen[backend]) for p in PHASES}
        print(f"{backend:{width}s} " + "  ".join(f"{p} {med[p] * 1e3:7.1f} ms" for p in PHASES))


if __name__ == "__main__":
    main()
