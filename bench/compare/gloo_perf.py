#!/usr/bin/python3
"""gloo_perf.py - the Gloo twin of chorus-perf: torch.distributed with backend "gloo" (PyTorch
1.13 from Debian), same flags, rows, busbw factors and timing rule (average per iteration,
maximum over ranks) as chorus-perf and mpi_perf.c, and a -c check against expected values every
rank computes on its own. Launch with chorus-run or torchrun (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), e.g.  chorus-run -n 2 /usr/bin/python3 gloo_perf.py allreduce -b 8 -e 1M
"""
import argparse
import datetime
import os
import socket
import sys
import time

EXIT_BAD_USAGE = 2
PERIOD = 61  # prime period of the input pattern, as in mpi_perf.c
SENTINEL_BYTE = 0xA5  # written over outputs before the checked call

# name -> (reduces, blocked, bus factor kind); blocked: "size" is nranks per-rank blocks
COLLECTIVES = {
    "allreduce": (True, False, "allreduce"),
    "reduce_scatter": (True, True, "n-1"),
    "allgather": (False, True, "n-1"),
    "broadcast": (False, False, "one"),
    "alltoall": (False, True, "n-1"),
    "reduce": (True, False, "one"),
}
DTYPES = ("float32", "float64", "int32")


def bus_factor(kind, nranks):
    """nccl-tests' factors: busbw = algbw * factor."""
    if kind == "allreduce":
        return 2.0 * (nranks - 1) / nranks
    if kind == "n-1":
        return (nranks - 1) / nranks
    return 1.0


def parse_bytes(text):
    """'64M' style sizes, powers of 1024, as chorus-perf."""
    units = {"k": 10, "m": 20, "g": 30}
    body = text.lower().rstrip("b")
    shift = units.get(body[-1:], 0)
    if shift:
        body = body[:-1]
    if not body.isdigit():
        raise argparse.ArgumentTypeError("bad size '%s'" % text)
    return int(body) << shift


def int_at_least(low):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("'%s' is not an integer" % text)
        if value < low:
            raise argparse.ArgumentTypeError("needs >= %d, got %d" % (low, value))
        return value
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="gloo_perf.py", add_help=False,
        description="torch.distributed gloo benchmark with chorus-perf's rows. size: bytes of "
        "the largest buffer per rank (allgather: the receive buffer; reduce_scatter, alltoall: "
        "the send buffer). time: average per iteration, maximum over ranks. The op is sum.")
    p.add_argument("collective", choices=list(COLLECTIVES) + ["all"])
    p.add_argument("-b", type=parse_bytes, default=8, help="smallest size [8]")
    p.add_argument("-e", type=parse_bytes, default=64 << 20, help="largest size [64M]")
    p.add_argument("-f", type=int_at_least(2), default=2, help="size factor per step [2]")
    p.add_argument("-n", type=int_at_least(1), default=20, help="timed iterations [20]")
    p.add_argument("-w", type=int_at_least(0), default=5, help="warm-up iterations [5]")
    p.add_argument("-c", type=int, choices=(0, 1), default=1, help="check one call per row [1]")
    p.add_argument("-d", choices=DTYPES, default="float32", help="element type [float32]")
    p.add_argument("-x", type=int, choices=(0, 1), default=0,
                   help="self-test of the check: corrupt one output element per checked call")
    p.add_argument("-h", action="help", help="this help")
    args = p.parse_args(argv)
    if args.b > args.e:
        p.error("-b is larger than -e")
    return args


class Pattern:
    """Rank r's element i is pattern(r, i % PERIOD), an integer in [-15, 15] (the formula of
    mpi_perf.c), so every sum is exact; expected outputs are built from these rows alone."""

    def __init__(self, torch, dtype, nranks):
        self.torch = torch
        self.dtype = dtype
        rows = [[self.value(r, k) for k in range(PERIOD)] for r in range(nranks)]
        self.inputs = [torch.tensor(row, dtype=torch.int64) for row in rows]
        self.summed = torch.tensor([sum(col) for col in zip(*rows)], dtype=torch.int64)

    @staticmethod
    def value(r, phase):
        return (phase * 7 + r * 13 + (phase * r) % 5) % 31 - 15

    def region(self, row, count, first=0):
        """count elements of the periodic row starting at index first, in the bench dtype."""
        repeats = (first % PERIOD + count) // PERIOD + 1
        return row.to(self.dtype).repeat(repeats)[first % PERIOD: first % PERIOD + count]


def bits(torch, t):
    """A same-size integer view, so that comparisons are bitwise (NaN-safe)."""
    return t.view(torch.int64 if t.element_size() == 8 else torch.int32)


def count_wrong(torch, got, want):
    return int((bits(torch, got) != bits(torch, want)).sum())


class Bench:
    def __init__(self, torch, dist, args, rank, nranks):
        self.torch, self.dist, self.args = torch, dist, args
        self.rank, self.nranks = rank, nranks
        self.dtype = getattr(torch, args.d)
        self.elem_bytes = torch.tensor([], dtype=self.dtype).element_size()
        self.pattern = Pattern(torch, self.dtype, nranks)
        self.wrong_total = 0
        self.busbw = []
        self.allgather_into_tensor = None  # gloo's support, learnt at the first allgather

    # ---- the calls: each returns a closure that runs one call on given buffers ----

    def make_call(self, coll, send, recv):
        d = self.dist
        if coll == "allreduce":
            return lambda: d.all_reduce(recv)  # in place: recv holds the input
        if coll == "broadcast":
            return lambda: d.broadcast(recv, src=0)
        if coll == "reduce":
            return lambda: d.reduce(recv, dst=0)  # in place: recv holds the input
        if coll == "reduce_scatter":
            blocks = list(send.chunk(self.nranks))
            return lambda: d.reduce_scatter(recv, blocks)
        if coll == "alltoall":
            return lambda: d.all_to_all_single(recv, send)
        if coll == "allgather":
            return self.allgather_call(send, recv)
        raise ValueError(coll)

    def allgather_call(self, send, recv):
        """all_gather_into_tensor where gloo has it, else all_gather into views of recv."""
        d = self.dist
        if self.allgather_into_tensor is None:  # probe once, with the first buffers
            try:
                d.all_gather_into_tensor(recv, send)
                self.allgather_into_tensor = True
            except RuntimeError:
                self.allgather_into_tensor = False
        if self.allgather_into_tensor:
            return lambda: d.all_gather_into_tensor(recv, send)
        views = list(recv.chunk(self.nranks))
        return lambda: d.all_gather(views, send)

    # ---- one row ----

    def buffers(self, coll, count):
        """(send, recv) tensors; count is the per-rank block for blocked collectives."""
        t, n = self.torch, self.nranks
        send_elems = count * n if coll in ("reduce_scatter", "alltoall") else count
        recv_elems = count * n if coll in ("allgather", "alltoall") else count
        return t.empty(send_elems, dtype=self.dtype), t.empty(recv_elems, dtype=self.dtype)

    def fill_for_check(self, coll, send, recv):
        p, me = self.pattern, self.rank
        recv.view(self.torch.uint8).fill_(SENTINEL_BYTE)
        send.copy_(p.region(p.inputs[me], send.numel()))
        if coll in ("allreduce", "reduce"):
            recv.copy_(send)
        elif coll == "broadcast" and me == 0:
            recv.copy_(p.region(p.inputs[0], recv.numel()))

    def wrong_after_check(self, coll, send, recv, count):
        t, p, me, n = self.torch, self.pattern, self.rank, self.nranks
        if coll == "allreduce":
            want = p.region(p.summed, count)
        elif coll == "reduce":  # only the root's buffer is defined afterwards
            return count_wrong(t, recv, p.region(p.summed, count)) if me == 0 else 0
        elif coll == "reduce_scatter":
            want = p.region(p.summed, count, me * count)
        elif coll == "broadcast":
            want = p.region(p.inputs[0], count)
        else:  # allgather, alltoall: block r comes from rank r
            first = me * count if coll == "alltoall" else 0
            want = t.cat([p.region(p.inputs[r], count, first) for r in range(n)])
        wrong = count_wrong(t, recv, want)
        if coll != "broadcast" and coll != "allreduce":  # the input must come back unchanged
            wrong += count_wrong(t, send, p.region(p.inputs[me], send.numel()))
        return wrong

    def check_row(self, coll, call, send, recv, count):
        self.fill_for_check(coll, send, recv)
        call()
        if self.args.x and self.rank == 0:
            recv.view(self.torch.uint8)[0] ^= 1
        local = self.torch.tensor([self.wrong_after_check(coll, send, recv, count)], dtype=self.torch.int64)
        self.dist.all_reduce(local)
        return int(local.item())

    def time_row(self, call):
        for _ in range(self.args.w):
            call()
        self.dist.barrier()
        start = time.perf_counter()
        for _ in range(self.args.n):
            call()
        local_us = (time.perf_counter() - start) * 1e6 / self.args.n
        worst = self.torch.tensor([local_us], dtype=self.torch.float64)
        self.dist.all_reduce(worst, op=self.dist.ReduceOp.MAX)
        return float(worst.item())

    def run_row(self, coll, size_bytes, count):
        send, recv = self.buffers(coll, count)
        call = self.make_call(coll, send, recv)
        wrong = self.check_row(coll, call, send, recv, count) if self.args.c else 0
        # Timed calls run on zeros: repeated in-place sums then neither overflow nor go subnormal.
        send.zero_()
        recv.zero_()
        time_us = self.time_row(call)
        algbw = size_bytes / time_us / 1e3 if time_us > 0 else 0.0
        busbw = algbw * bus_factor(COLLECTIVES[coll][2], self.nranks)
        self.wrong_total += wrong
        self.busbw.append(busbw)
        if self.rank == 0:
            print(" %12d %12d %9s %6s %10s %10.2f %12.3f %12.3f %7d" % (
                size_bytes, size_bytes // self.elem_bytes, self.args.d,
                "sum" if COLLECTIVES[coll][0] else "none", "gloo", time_us, algbw, busbw, wrong),
                flush=True)

    # ---- one collective ----

    def supported(self, coll):
        """None if gloo serves the collective, else the reason (probed with one tiny call)."""
        send, recv = self.buffers(coll, 1)
        try:
            self.make_call(coll, send, recv)()
        except RuntimeError as err:
            return str(err).splitlines()[0]
        return None

    def sizes(self):
        size = self.args.b
        while size <= self.args.e:
            yield size
            size = size * self.args.f if size > 0 else 1

    def call_form(self, coll):
        if coll == "allgather":
            return "all_gather_into_tensor" if self.allgather_into_tensor else "all_gather into views"
        forms = {"allreduce": "all_reduce (in place)", "broadcast": "broadcast (in place)",
                 "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all_single",
                 "reduce": "reduce (in place)"}
        return forms[coll]

    def print_header(self, coll):
        a = self.args
        print("#\n# collective: %s" % coll)
        print("# nranks %d | dtype %s | op %s | root 0 | iters %d | warmup %d | check %d | %s | blocking"
              % (self.nranks, a.d, "sum" if COLLECTIVES[coll][0] else "none", a.n, a.w, a.c,
                 "in place" if coll in ("allreduce", "broadcast", "reduce") else "out of place"))
        print("# host %s | torch %s gloo | call %s | algo gloo\n#" % (
            socket.gethostname(), self.torch.__version__, self.call_form(coll)))
        print("#%12s %12s %9s %6s %10s %10s %12s %12s %7s" % (
            "size", "count", "type", "redop", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
            "#wrong"), flush=True)

    def run_collective(self, coll):
        reason = self.supported(coll)
        if reason is not None:
            if self.rank == 0:
                print("#\n# collective: %s\n# skipped: not supported by gloo in torch %s: %s"
                      % (coll, self.torch.__version__, reason), flush=True)
            return
        if self.rank == 0:
            self.print_header(coll)
        blocked = COLLECTIVES[coll][1]
        unit = self.elem_bytes * (self.nranks if blocked else 1)
        for size_bytes in self.sizes():
            if size_bytes > 0 and size_bytes % unit == 0:
                self.run_row(coll, size_bytes, size_bytes // unit)


def init_distributed(dist):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            sys.stderr.write("gloo_perf.py: %s is not set: launch with chorus-run or torchrun\n" % name)
            sys.exit(EXIT_BAD_USAGE)
    # Loopback only: gloo otherwise picks the interface of the host name.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout_sec = int(os.environ.get("GLOO_PERF_TIMEOUT_SEC", "300"))
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=timeout_sec))
    return dist.get_rank(), dist.get_world_size()


def main(argv):
    args = parse_args(argv)
    import torch  # after parsing: -h and bad usage answer without the slow import
    import torch.distributed as dist
    torch.set_num_threads(1)  # one rank per core at most, as the other libraries
    rank, nranks = init_distributed(dist)
    bench = Bench(torch, dist, args, rank, nranks)
    names = list(COLLECTIVES) if args.collective == "all" else [args.collective]
    for coll in names:
        bench.run_collective(coll)
    if rank == 0:
        avg = sum(bench.busbw) / len(bench.busbw) if bench.busbw else 0.0
        print("#\n# Wrong elements : %d %s" % (bench.wrong_total, "FAILED" if bench.wrong_total else "OK"))
        print("# Avg bus bandwidth : %.3f\n#" % avg, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if bench.wrong_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
