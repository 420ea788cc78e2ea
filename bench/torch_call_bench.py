#!/usr/bin/python3
"""torch_call_bench.py - the cost of one DDP-style allreduce call on a one-rank group: what
the timed comm hook of examples/train_ddp.py measures (divide the bucket, all_reduce with
async_op, then() on its future), without DDP around it. Prints the median over 2000 calls,
after 300 warm-up calls, for three tensor sizes.

Usage: /usr/bin/python3 bench/torch_call_bench.py chorus|gloo [PORT]
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import chorus.torch  # noqa: E402,F401  (registers the backend)

CALLS, WARMUP = 2000, 300


def median_call_us(tensor):
    seconds = []

    def one():
        started = time.perf_counter()
        buffer = tensor.div_(1)
        future = dist.all_reduce(buffer, async_op=True).get_future()

        def finished(fut):
            seconds.append(time.perf_counter() - started)
            return fut.value()[0]

        return future.then(finished)

    for _ in range(WARMUP):
        one().wait()
    seconds.clear()
    for _ in range(CALLS):
        one().wait()
    seconds.sort()
    return seconds[len(seconds) // 2] * 1e6


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("chorus", "gloo"):
        sys.exit(__doc__)
    port = sys.argv[2] if len(sys.argv) > 2 else "29614"
    torch.set_num_threads(1)
    dist.init_process_group(sys.argv[1], init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    for numel in (1000, 100000, 1000000):
        print(f"{sys.argv[1]:6s} {numel:8d} float32: median {median_call_us(torch.ones(numel)):.1f} us per call")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
