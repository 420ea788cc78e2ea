"""Every collective, dtype and op of the chorus Python package, checked bitwise against
tests/reference.py, on numpy arrays (--kind numpy) or torch tensors (--kind torch). Run by
every rank under the launcher, e.g.
    build/chorus-run -n 4 /usr/bin/python3 python/tests/test_collectives.py --kind numpy
Each rank runs the same unittest cases in the same order; a failed check fails that rank.
"""

import argparse
import os
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

COUNTS = (0, 1, 7, 1023, 65539)
POLL_DEADLINE_SEC = 60.0


class NumpyKind:
    """Buffers are numpy arrays; bfloat16 is a uint16 array named with dtype="bfloat16"."""

    name = "numpy"
    dtypes = tuple(ref.NUMPY_HOLDER)

    @staticmethod
    def make(holder):
        return np.array(holder, copy=True)

    @staticmethod
    def empty(count, dtype):
        return np.full(count, 0x5A, dtype=ref.NUMPY_HOLDER[dtype]) if count else \
            np.empty(0, dtype=ref.NUMPY_HOLDER[dtype])

    @staticmethod
    def to_numpy(buf):
        return np.asarray(buf)

    @staticmethod
    def dtype_arg(dtype):
        return "bfloat16" if dtype == "bfloat16" else None

    @staticmethod
    def rows(buf, nrows):
        return [buf.reshape(nrows, -1)[i] for i in range(nrows)]


class TorchKind:
    """Buffers are torch tensors; torch 1.13 has no uint32/uint64."""

    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch
        self.dtypes = tuple(d for d in ref.NUMPY_HOLDER if hasattr(torch, d))
        self.torch_dtype = {d: getattr(torch, d) for d in self.dtypes}

    def make(self, holder):
        if holder.dtype == np.uint16:  # bfloat16 bits
            return self.torch.from_numpy(holder.view(np.int16).copy()).view(self.torch.bfloat16)
        return self.torch.from_numpy(np.array(holder, copy=True))

    def empty(self, count, dtype):
        tensor = self.torch.empty(count, dtype=self.torch_dtype[dtype])
        tensor.view(self.torch.uint8).fill_(0x5A)
        return tensor

    def to_numpy(self, buf):
        if buf.dtype == self.torch.bfloat16:
            return buf.view(self.torch.int16).numpy().view(np.uint16)
        return buf.numpy()

    @staticmethod
    def dtype_arg(dtype):
        return None

    @staticmethod
    def rows(buf, nrows):
        return list(buf.reshape(nrows, -1).unbind(0))


class KindTestCase(unittest.TestCase):
    """Cases that every rank runs on its communicator `comm`, with buffers of `kind`."""

    comm = None
    kind = None

    @property
    def n(self):
        return self.comm.size

    @property
    def r(self):
        return self.comm.rank

    def input(self, dtype, count, op="sum", salt=0, rank=None):
        rank = self.r if rank is None else rank
        return self.kind.make(ref.rank_input(rank, count, dtype, op, salt))

    def assertBits(self, actual, expected, what):
        got = self.kind.to_numpy(actual)
        if not ref.same_bits(got, expected):
            bad = np.flatnonzero(got.reshape(-1) != np.asarray(expected).reshape(-1))[:5]
            self.fail(f"{what}: wrong elements at {bad.tolist()}: got "
                      f"{got.reshape(-1)[bad].tolist()}, expected "
                      f"{np.asarray(expected).reshape(-1)[bad].tolist()}")


class CollectiveTests(KindTestCase):

    # ---- reductions ----

    def test_allreduce_every_dtype_op_count_in_place(self):
        for dtype in self.kind.dtypes:
            for op in ref.OPS:
                for count in COUNTS:
                    buf = self.input(dtype, count, op)
                    result = self.comm.allreduce(buf, op=op, dtype=self.kind.dtype_arg(dtype))
                    self.assertIs(result, buf)
                    self.assertBits(buf, ref.expected_reduction(self.n, count, dtype, op),
                                    f"allreduce {dtype} {op} count {count}")

    def test_allreduce_out_of_place_keeps_input(self):
        for dtype in self.kind.dtypes:
            send = self.input(dtype, 1023, "max", salt=1)
            out = self.kind.empty(1023, dtype)
            result = self.comm.allreduce(send, op="max", out=out,
                                         dtype=self.kind.dtype_arg(dtype))
            self.assertIs(result, out)
            self.assertBits(out, ref.expected_reduction(self.n, 1023, dtype, "max", salt=1),
                            f"allreduce out-of-place {dtype}")
            self.assertBits(send, ref.rank_input(self.r, 1023, dtype, "max", salt=1),
                            f"allreduce input {dtype} untouched")

    def test_reduce_to_first_and_last_root(self):
        for root in sorted({0, self.n - 1}):
            for dtype in self.kind.dtypes:
                for op in ("sum", "min", "avg"):
                    buf = self.input(dtype, 1023, op, salt=root)
                    out = self.kind.empty(1023, dtype)
                    result = self.comm.reduce(buf, root=root, op=op, out=out,
                                              dtype=self.kind.dtype_arg(dtype))
                    if self.r == root:
                        self.assertIs(result, out)
                        self.assertBits(out, ref.expected_reduction(self.n, 1023, dtype, op,
                                                                    salt=root),
                                        f"reduce root {root} {dtype} {op}")
                    else:
                        self.assertIsNone(result)

    def test_reduce_scatter_blocks(self):
        for dtype in self.kind.dtypes:
            for op in ("sum", "max", "avg"):
                for block in (0, 1, 7, 1000):
                    send = self.input(dtype, block * self.n, op, salt=3)
                    expected = ref.expected_reduction(self.n, block * self.n, dtype, op, salt=3)
                    out = self.comm.reduce_scatter(send, op=op, dtype=self.kind.dtype_arg(dtype))
                    self.assertEqual(tuple(out.shape), (block,))
                    self.assertBits(out, expected[self.r * block:(self.r + 1) * block],
                                    f"reduce_scatter {dtype} {op} block {block}")

    # ---- data movement ----

    def test_broadcast_from_every_root(self):
        for root in range(self.n):
            for dtype in self.kind.dtypes:
                expected = ref.rank_input(root, 1023, dtype, salt=7)
                buf = self.input(dtype, 1023, salt=7) if self.r == root else \
                    self.kind.empty(1023, dtype)
                self.comm.broadcast(buf, root=root, dtype=self.kind.dtype_arg(dtype))
                self.assertBits(buf, expected, f"broadcast root {root} {dtype}")
                send = self.input(dtype, 7, salt=root)
                out = self.kind.empty(7, dtype)
                self.comm.broadcast(send, root=root, out=out, dtype=self.kind.dtype_arg(dtype))
                self.assertBits(out, ref.rank_input(root, 7, dtype, salt=root),
                                f"broadcast out-of-place root {root} {dtype}")

    def test_allgather_allocated_given_and_in_place(self):
        for dtype in self.kind.dtypes:
            for count in (0, 1, 7, 1023):
                expected = np.concatenate(
                    [ref.rank_input(r, count, dtype, salt=2) for r in range(self.n)])
                arg = self.kind.dtype_arg(dtype)
                out = self.comm.allgather(self.input(dtype, count, salt=2), dtype=arg)
                self.assertEqual(tuple(out.shape), (self.n, count))
                self.assertBits(out, expected, f"allgather new {dtype} {count}")
                given = self.kind.empty(self.n * count, dtype)
                self.comm.allgather(self.input(dtype, count, salt=2), out=given, dtype=arg)
                self.assertBits(given, expected, f"allgather out {dtype} {count}")
                if count:
                    slots = self.kind.empty(self.n * count, dtype)
                    mine = self.kind.rows(slots, self.n)[self.r]
                    mine[:] = self.input(dtype, count, salt=2)
                    self.comm.allgather(mine, out=slots, dtype=arg)
                    self.assertBits(slots, expected, f"allgather in place {dtype} {count}")

    def test_alltoall(self):
        for dtype in self.kind.dtypes:
            for block in (1, 5, 999):
                def block_of(src, dst):
                    values = (src * 10 + dst + np.arange(block) % 3).astype(np.int64)
                    return ref.to_holder(values, dtype)
                send = self.kind.make(np.concatenate([block_of(self.r, d) for d in range(self.n)]))
                expected = np.concatenate([block_of(s, self.r) for s in range(self.n)])
                out = self.comm.alltoall(send, dtype=self.kind.dtype_arg(dtype))
                self.assertBits(out, expected, f"alltoall {dtype} block {block}")

    def test_gather_and_scatter(self):
        for root in sorted({0, self.n - 1}):
            for dtype in self.kind.dtypes:
                arg = self.kind.dtype_arg(dtype)
                gathered = self.comm.gather(self.input(dtype, 33, salt=root), root=root,
                                            dtype=arg)
                if self.r == root:
                    expected = np.concatenate(
                        [ref.rank_input(r, 33, dtype, salt=root) for r in range(self.n)])
                    self.assertBits(gathered, expected, f"gather root {root} {dtype}")
                else:
                    self.assertIsNone(gathered)
                whole = self.kind.make(ref.rank_input(root, 33 * self.n, dtype, salt=5)) \
                    if self.r == root else None
                out = self.kind.empty(33, dtype)
                self.comm.scatter(whole, out, root=root, dtype=arg)
                expected = ref.rank_input(root, 33 * self.n, dtype, salt=5)
                self.assertBits(out, expected[self.r * 33:(self.r + 1) * 33],
                                f"scatter root {root} {dtype}")

    def test_point_to_point(self):
        dtype = "float32" if "float32" in self.kind.dtypes else self.kind.dtypes[0]
        for count in (0, 1, 4097, 300000):
            # Pairs (0,1), (2,3)...: even ranks send first, odd ranks receive first.
            partner = self.r ^ 1
            if partner < self.n:
                mine = self.input(dtype, count, salt=11)
                got = self.kind.empty(count, dtype)
                if self.r % 2 == 0:
                    self.comm.send(mine, partner)
                    self.comm.recv(got, partner)
                else:
                    self.comm.recv(got, partner)
                    self.comm.send(mine, partner)
                self.assertBits(got, ref.rank_input(partner, count, dtype, salt=11),
                                f"send/recv count {count}")
            # A ring with sendrecv: everybody sends right and receives from the left at once.
            right, left = (self.r + 1) % self.n, (self.r - 1) % self.n
            got = self.kind.empty(count, dtype)
            self.comm.sendrecv(self.input(dtype, count, salt=12), right, got, left)
            self.assertBits(got, ref.rank_input(left, count, dtype, salt=12),
                            f"sendrecv ring count {count}")

    # ---- non-blocking ----

    def test_many_requests_in_flight_waited_out_of_order(self):
        posted = []
        for i, dtype in enumerate(self.kind.dtypes):
            op = ref.OPS[i % len(ref.OPS)]
            buf = self.input(dtype, 4099, op, salt=i)
            request = self.comm.iallreduce(buf, op=op, dtype=self.kind.dtype_arg(dtype))
            posted.append((request, buf, ref.expected_reduction(self.n, 4099, dtype, op, salt=i)))
        barrier = self.comm.ibarrier()
        for request, buf, expected in reversed(posted):
            self.assertIs(request.wait(), buf)
            self.assertTrue(request.done)
            self.assertBits(buf, expected, "iallreduce")
        self.assertIsNone(barrier.wait())

    def test_test_polls_until_done(self):
        dtype = self.kind.dtypes[-1]
        buf = self.input(dtype, 200000, salt=9)
        request = self.comm.iallreduce(buf, dtype=self.kind.dtype_arg(dtype))
        deadline = time.monotonic() + POLL_DEADLINE_SEC
        while not request.test():
            self.assertLess(time.monotonic(), deadline, "request never completed")
            time.sleep(0.0005)
        self.assertBits(buf, ref.expected_reduction(self.n, 200000, dtype, "sum", salt=9),
                        "polled iallreduce")
        self.assertIs(request.wait(), buf)

    def test_every_nonblocking_twin(self):
        dtype = "int32"
        n, r = self.n, self.r
        a = self.input(dtype, 10, "sum")
        b = self.input(dtype, 10, salt=1) if r == 0 else self.kind.empty(10, dtype)
        c = self.input(dtype, 10, "max", salt=2)
        requests = {
            "allreduce": self.comm.iallreduce(a),
            "broadcast": self.comm.ibroadcast(b, root=0),
            "reduce": self.comm.ireduce(c, root=n - 1, op="max"),
            "allgather": self.comm.iallgather(self.input(dtype, 3, salt=3)),
            "reduce_scatter": self.comm.ireduce_scatter(self.input(dtype, 2 * n, salt=4)),
            "alltoall": self.comm.ialltoall(self.kind.make(np.arange(n, dtype=np.int32) + 100 * r)),
            "gather": self.comm.igather(self.input(dtype, 2, salt=5), root=0),
            "scatter": self.comm.iscatter(
                self.kind.make(np.arange(n, dtype=np.int32) * 3) if r == 0 else None,
                self.kind.empty(1, dtype), root=0),
            "sendrecv": self.comm.isendrecv(self.input(dtype, 6, salt=6), (r + 1) % n,
                                            self.kind.empty(6, dtype), (r - 1) % n),
            "barrier": self.comm.ibarrier(),
        }
        results = {name: request.wait() for name, request in requests.items()}
        self.assertBits(results["allreduce"], ref.expected_reduction(n, 10, dtype, "sum"), "ia")
        self.assertBits(results["broadcast"], ref.rank_input(0, 10, dtype, salt=1), "ibcast")
        if r == n - 1:
            self.assertBits(results["reduce"],
                            ref.expected_reduction(n, 10, dtype, "max", salt=2), "ireduce")
        else:
            self.assertIsNone(results["reduce"])
        self.assertBits(results["allgather"],
                        np.concatenate([ref.rank_input(q, 3, dtype, salt=3) for q in range(n)]),
                        "iallgather")
        self.assertBits(results["reduce_scatter"],
                        ref.expected_reduction(n, 2 * n, dtype, "sum", salt=4)[2 * r:2 * r + 2],
                        "ireduce_scatter")
        self.assertBits(results["alltoall"], np.arange(n, dtype=np.int32) * 100 + r, "ialltoall")
        if r == 0:
            self.assertBits(results["gather"], np.concatenate(
                [ref.rank_input(q, 2, dtype, salt=5) for q in range(n)]), "igather")
        self.assertBits(results["scatter"], np.array([3 * r], dtype=np.int32), "iscatter")
        self.assertBits(results["sendrecv"], ref.rank_input((r - 1) % n, 6, dtype, salt=6),
                        "isendrecv")
        self.assertIsNone(results["barrier"])

    def test_dropped_request_still_completes_into_its_buffer(self):
        kept = self.input("int64", 5000, salt=8)
        request = self.comm.iallreduce(kept)
        del request  # the communicator keeps the buffer alive and reaps the request later
        dropped = self.comm.iallreduce(self.input("int64", 5000, salt=9))
        del dropped
        self.comm.barrier()  # operations complete in posting order
        self.assertBits(kept, ref.expected_reduction(self.n, 5000, "int64", "sum", salt=8),
                        "dropped request")

    # ---- communicator ----

    def test_queries(self):
        self.assertEqual(self.comm.size, int(os.environ.get("CHORUS_SIZE", "1")))
        self.assertEqual(self.comm.rank, int(os.environ.get("CHORUS_RANK", "0")))
        self.assertEqual(self.comm.local_rank, int(os.environ.get("CHORUS_LOCAL_RANK", "0")))
        self.assertEqual(self.comm.local_size, int(os.environ.get("CHORUS_LOCAL_SIZE", "1")))
        self.assertEqual(self.comm.host_count, 1)
        self.assertEqual(self.comm.last_error, "")

    def test_split_by_parity_reversed(self):
        sub = self.comm.split(self.r % 2, key=-self.r)
        try:
            members = [q for q in range(self.n) if q % 2 == self.r % 2]
            self.assertEqual(sub.size, len(members))
            self.assertEqual(sub.rank, sorted(members, reverse=True).index(self.r))
            buf = self.kind.make(np.array([self.r], dtype=np.int64))
            sub.allreduce(buf)
            self.assertEqual(int(self.kind.to_numpy(buf)[0]), sum(members))
        finally:
            sub.destroy()
        nobody = self.comm.split(-1 if self.r == 0 else 0)
        if self.r == 0:
            self.assertIsNone(nobody)
        else:
            self.assertEqual(nobody.size, self.n - 1)
            nobody.destroy()


def make_comm():
    import chorus

    if "CHORUS_RANK" in os.environ:
        return chorus.init()
    return chorus.Communicator.from_unique_id(1, 0, chorus.UniqueId.new())


def run_tests(test_class, title):
    """Runs the unittest cases of the calling script (in __main__) on this rank, with
    test_class.comm and .kind set from the command line (--kind numpy|torch); returns the exit
    status (77: torch asked for but missing)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("numpy", "torch"), default="numpy")
    args, rest = parser.parse_known_args()
    if args.kind == "torch":
        try:
            kind = TorchKind()
        except ImportError:
            print("SKIP: torch is not installed for this python", flush=True)
            return ref.SKIP_RETURN_CODE
        kind.torch.set_num_threads(1)
    else:
        kind = NumpyKind()
    test_class.comm = make_comm()
    test_class.kind = kind
    started = time.monotonic()
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=1)
    ok = program.result.wasSuccessful()
    print(f"rank {test_class.comm.rank}: {args.kind} {title} "
          f"{'passed' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s", flush=True)
    test_class.comm.destroy()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_tests(CollectiveTests, "collectives"))
