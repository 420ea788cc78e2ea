"""The variable-size collectives of the chorus Python package (allgatherv, reduce_scatterv,
alltoallv, gatherv, scatterv and their i-twins, and prepare() + post() as chorus.torch uses
them), checked bitwise against tests/reference.py, on numpy arrays (--kind numpy) or torch
tensors (--kind torch): irregular counts with empty blocks and a large one, every dtype (and
op), allocated and given outputs, scattered displacements whose gaps must stay untouched, in
place; bad arguments, and counts that disagree across ranks (ChorusError MISMATCH on every
rank, on a communicator split off for it). Run by every rank under the launcher, e.g.
    build/chorus-run -n 3 /usr/bin/python3 python/tests/test_varsize.py --kind numpy
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402
from test_collectives import KindTestCase, run_tests  # noqa: E402

LARGE = 70001  # elements of the one large block: over a chunk of the ring for every dtype


def counts_of(n, salt):
    """One count per rank: a third of them 0, one of them LARGE, the rest small."""
    counts = [0 if (r + salt) % 3 == 0 else 1 + (r * 7 + salt * 3) % 13 for r in range(n)]
    counts[salt % n] = LARGE
    return counts


def pair_counts(n, salt, symmetric=False):
    """counts[i][j]: what rank i sends rank j (symmetric for in-place alltoallv)."""
    def count(i, j):
        a, b = (min(i, j), max(i, j)) if symmetric else (i, j)
        return 0 if (a * 5 + b + salt) % 4 == 0 else 1 + (a * 11 + b * 3 + salt) % 17
    counts = [[count(i, j) for j in range(n)] for i in range(n)]
    big = salt % n
    counts[big][(big + 1) % n] = LARGE
    if symmetric:
        counts[(big + 1) % n][big] = LARGE
    return counts


def scattered(counts):
    """Displacements: blocks in reverse rank order with a gap of 1-3 elements before each;
    returns (displs, extent)."""
    displs, position = [0] * len(counts), 0
    for r in reversed(range(len(counts))):
        position += r % 3 + 1
        displs[r] = position
        position += counts[r]
    return displs, position


def packed(counts):
    displs, position = [], 0
    for c in counts:
        displs.append(position)
        position += c
    return displs, position


class VarsizeTests(KindTestCase):
    def block(self, rank, count, dtype, salt):
        """Rank's data block (holder representation)."""
        return ref.rank_input(rank, count, dtype, salt=salt)

    def empty(self, count, dtype):
        """(a buffer from kind.empty(), a numpy copy of its filler to build expectations on)."""
        buf = self.kind.empty(count, dtype)
        return buf, self.kind.to_numpy(buf).copy()

    def placed(self, expected, displs, blocks):
        for displ, block in zip(displs, blocks):
            expected[displ:displ + len(block)] = block
        return expected

    # ---- allgatherv ----

    def test_allgatherv_every_dtype_allocated_displaced_in_place(self):
        for salt, dtype in enumerate(self.kind.dtypes):
            arg = self.kind.dtype_arg(dtype)
            counts = counts_of(self.n, salt)
            blocks = [self.block(q, counts[q], dtype, salt) for q in range(self.n)]
            mine = self.kind.make(blocks[self.r])
            out = self.comm.allgatherv(mine, counts, dtype=arg)
            self.assertEqual(tuple(out.shape), (sum(counts),))
            self.assertBits(out, np.concatenate(blocks), f"allgatherv allocated {dtype}")
            displs, extent = scattered(counts)
            given, filler = self.empty(extent, dtype)
            self.assertIs(self.comm.allgatherv(mine, counts, out=given, displs=displs, dtype=arg),
                          given)
            self.assertBits(given, self.placed(filler, displs, blocks), f"allgatherv displaced {dtype}")
            slots, filler = self.empty(extent, dtype)
            own = slots[displs[self.r]:displs[self.r] + counts[self.r]]
            own[:] = mine
            self.comm.allgatherv(own, counts, out=slots, displs=displs, dtype=arg)
            self.assertBits(slots, self.placed(filler, displs, blocks), f"allgatherv in place {dtype}")

    # ---- reduce_scatterv ----

    def test_reduce_scatterv_every_dtype_op_in_place(self):
        for salt, dtype in enumerate(self.kind.dtypes):
            arg = self.kind.dtype_arg(dtype)
            counts = counts_of(self.n, salt)
            offsets, total = packed(counts)
            lo, hi = offsets[self.r], offsets[self.r] + counts[self.r]
            for op in ref.OPS:
                expected = ref.expected_reduction(self.n, total, dtype, op, salt=salt)[lo:hi]
                send = self.kind.make(ref.rank_input(self.r, total, dtype, op, salt=salt))
                out = self.comm.reduce_scatterv(send, counts, op=op, dtype=arg)
                self.assertEqual(tuple(out.shape), (counts[self.r],))
                self.assertBits(out, expected, f"reduce_scatterv {dtype} {op}")
                self.assertBits(send, ref.rank_input(self.r, total, dtype, op, salt=salt),
                                f"reduce_scatterv input {dtype} {op} untouched")
                own = send[lo:hi]
                self.assertIs(self.comm.reduce_scatterv(send, counts, op=op, out=own, dtype=arg),
                              own)
                self.assertBits(own, expected, f"reduce_scatterv in place {dtype} {op}")

    # ---- alltoallv ----

    def alltoallv_blocks(self, counts, dtype, salt, receiver=None):
        """Blocks rank `receiver` gets (from each rank), or this rank sends (to each rank)."""
        if receiver is None:
            return [ref.to_holder(np.arange(counts[self.r][j], dtype=np.int64) % 50 + self.r * 10 + j,
                                  dtype) for j in range(self.n)]
        return [ref.to_holder(np.arange(counts[i][receiver], dtype=np.int64) % 50 + i * 10 + receiver,
                              dtype) for i in range(self.n)]

    def test_alltoallv_every_dtype_allocated_displaced_in_place(self):
        for salt, dtype in enumerate(self.kind.dtypes):
            arg = self.kind.dtype_arg(dtype)
            counts = pair_counts(self.n, salt)
            send_counts = counts[self.r]
            recv_counts = [counts[i][self.r] for i in range(self.n)]
            sent = self.alltoallv_blocks(counts, dtype, salt)
            received = self.alltoallv_blocks(counts, dtype, salt, receiver=self.r)
            send = self.kind.make(np.concatenate(sent))
            out = self.comm.alltoallv(send, send_counts, recv_counts, dtype=arg)
            self.assertBits(out, np.concatenate(received), f"alltoallv allocated {dtype}")
            # Scattered on both sides; the send side's gaps hold other data.
            sdispls, sextent = scattered(send_counts)
            rdispls, rextent = scattered(recv_counts)
            spread = self.kind.make(self.placed(np.full(sextent, 3, dtype=ref.NUMPY_HOLDER[dtype]),
                                                sdispls, sent))
            given, filler = self.empty(rextent, dtype)
            self.comm.alltoallv(spread, send_counts, recv_counts, out=given, send_displs=sdispls,
                                recv_displs=rdispls, dtype=arg)
            self.assertBits(given, self.placed(filler, rdispls, received), f"alltoallv displaced {dtype}")
            # In place: one set of blocks, sent then replaced; the gaps hold 9s.
            sym = pair_counts(self.n, salt, symmetric=True)
            mine = [sym[j][self.r] for j in range(self.n)]
            displs, extent = scattered(mine)
            nines = np.full(extent, 9, dtype=ref.NUMPY_HOLDER[dtype])
            buf = self.kind.make(self.placed(nines.copy(), displs, self.alltoallv_blocks(sym, dtype, salt)))
            self.assertIs(self.comm.alltoallv(buf, None, mine, out=buf, recv_displs=displs,
                                              dtype=arg), buf)
            self.assertBits(buf, self.placed(nines, displs, self.alltoallv_blocks(sym, dtype, salt,
                                                                                  receiver=self.r)),
                            f"alltoallv in place {dtype}")

    # ---- gatherv and scatterv ----

    def test_gatherv_and_scatterv_first_and_last_root(self):
        for root in sorted({0, self.n - 1}):
            for salt, dtype in enumerate(self.kind.dtypes):
                arg = self.kind.dtype_arg(dtype)
                counts = counts_of(self.n, salt + root)
                blocks = [self.block(q, counts[q], dtype, salt) for q in range(self.n)]
                displs, extent = scattered(counts)
                is_root = self.r == root
                out, filler = self.empty(extent, dtype) if is_root else (None, None)
                result = self.comm.gatherv(self.kind.make(blocks[self.r]),
                                           counts if is_root else None, root=root, out=out,
                                           displs=displs if is_root else None, dtype=arg)
                if is_root:
                    self.assertIs(result, out)
                    self.assertBits(out, self.placed(filler, displs, blocks), f"gatherv root {root} {dtype}")
                else:
                    self.assertIsNone(result)
                whole = self.kind.make(self.placed(np.full(extent, 7, dtype=ref.NUMPY_HOLDER[dtype]),
                                                   displs, blocks)) if is_root else None
                got = self.kind.empty(counts[self.r], dtype)
                self.assertIs(self.comm.scatterv(whole, counts if is_root else None, got, root=root,
                                                 displs=displs if is_root else None, dtype=arg), got)
                self.assertBits(got, blocks[self.r], f"scatterv root {root} {dtype}")

    # ---- non-blocking, and the low-level path chorus.torch takes ----

    def test_nonblocking_twins_and_prepare_post(self):
        dtype, n, r = "int32", self.n, self.r
        counts = counts_of(n, 4)
        blocks = [self.block(q, counts[q], dtype, 4) for q in range(n)]
        pairs = pair_counts(n, 2)
        offsets, total = packed(counts)
        requests = {
            "allgatherv": self.comm.iallgatherv(self.kind.make(blocks[r]), counts),
            "reduce_scatterv": self.comm.ireduce_scatterv(
                self.kind.make(ref.rank_input(r, total, dtype, salt=5)), counts),
            "alltoallv": self.comm.ialltoallv(
                self.kind.make(np.concatenate(self.alltoallv_blocks(pairs, dtype, 2))),
                pairs[r], [pairs[i][r] for i in range(n)]),
            "gatherv": self.comm.igatherv(self.kind.make(blocks[r]), counts, root=0),
            "scatterv": self.comm.iscatterv(self.kind.make(np.concatenate(blocks)) if r == n - 1
                                            else None, counts, self.kind.empty(counts[r], dtype),
                                            root=n - 1),
        }
        results = {name: request.wait() for name, request in requests.items()}
        self.assertBits(results["allgatherv"], np.concatenate(blocks), "iallgatherv")
        self.assertBits(results["reduce_scatterv"],
                        ref.expected_reduction(n, total, dtype, "sum", salt=5)[
                            offsets[r]:offsets[r] + counts[r]], "ireduce_scatterv")
        self.assertBits(results["alltoallv"],
                        np.concatenate(self.alltoallv_blocks(pairs, dtype, 2, receiver=r)),
                        "ialltoallv")
        if r == 0:
            self.assertBits(results["gatherv"], np.concatenate(blocks), "igatherv")
        else:
            self.assertIsNone(results["gatherv"])
        self.assertBits(results["scatterv"], blocks[r], "iscatterv")
        # prepare() + post(), as the torch backend's completion thread does.
        out = self.kind.empty(sum(pairs[i][r] for i in range(n)), dtype)
        args, keepalive, result = self.comm.prepare(
            "alltoallv", self.kind.make(np.concatenate(self.alltoallv_blocks(pairs, dtype, 2))),
            pairs[r], [pairs[i][r] for i in range(n)], out=out)
        self.assertIs(result, out)
        record = self.comm.post("alltoallv", args, keepalive)
        self.assertEqual(self.comm.wait_record(record), (0, ""))
        self.assertBits(out, np.concatenate(self.alltoallv_blocks(pairs, dtype, 2, receiver=r)),
                        "prepare + post alltoallv")

    # ---- errors ----

    def test_bad_arguments(self):
        import chorus

        buf = self.kind.make(ref.rank_input(self.r, 8, "int32"))
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.allgatherv(buf, [8] * (self.n + 1))  # one count too many
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.allgatherv(buf, [-1] + [8] * (self.n - 1))
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.allgatherv(buf, [8] * self.n, out=self.kind.empty(8 * self.n - 1, "int32"))
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.reduce_scatterv(buf, [1] * self.n if self.n != 8 else [2] * self.n)
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.alltoallv(buf, [9] * self.n, [1] * self.n)  # more than buf holds
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.gatherv(buf, None, root=self.r)  # the root needs counts
        with self.assertRaises(ValueError):
            self.comm.prepare("allreduce", buf)
        # The library's own checks: this rank's sendcount is not its count.
        with self.assertRaises(chorus.InvalidArgumentError) as caught:
            self.comm.allgatherv(buf, [7] * self.n)
        self.assertIn("differs from recvcounts", str(caught.exception))
        self.comm.barrier()  # still usable

    def test_counts_that_disagree_raise_mismatch_on_every_rank(self):
        import chorus

        if self.n < 2:
            self.skipTest("needs two ranks")
        sub = self.comm.split(0)
        try:
            counts = [2] * self.n
            if self.r == 0:
                counts[1] = 3  # rank 1 sends 2
            buf = self.kind.make(ref.rank_input(self.r, counts[self.r], "int32"))
            started = time.monotonic()
            with self.assertRaises(chorus.MismatchError) as caught:
                sub.allgatherv(buf, counts)
            self.assertIn("mismatched calls", str(caught.exception))
            self.assertLess(time.monotonic() - started, 10.0)
        finally:
            sub.destroy()
        self.comm.barrier()  # the parent communicator is not affected


if __name__ == "__main__":
    sys.exit(run_tests(VarsizeTests, "variable-size collectives"))
