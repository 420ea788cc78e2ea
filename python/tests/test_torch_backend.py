"""The torch.distributed backend "chorus": every collective torch routes to it, through
torch.distributed and through direct ProcessGroup calls (bare tensors, opts=None), async work,
errors, the non-blocking behaviour DDP relies on, DDP itself (default path and the Chorus comm
hook over a gloo default group), all checked bitwise against tests/reference.py. Run by every
rank under the launcher (env:// init, or tcp:// with --init tcp):
    build/chorus-run -n 4 /usr/bin/python3 python/tests/test_torch_backend.py [--init tcp]
"""

import argparse
import copy
import datetime
import os
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIP: torch is not installed for this python", flush=True)
    sys.exit(ref.SKIP_RETURN_CODE)

import chorus.torch  # noqa: E402  (registers the backend)

TORCH_DTYPES = ("int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64")
TORCH_OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
             "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}
DELAY_SEC = 1.0
GLOO_DRAIN_SEC = 0.5


def tensor_of(holder):
    if holder.dtype == np.uint16:  # bfloat16 bits
        return torch.from_numpy(holder.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(holder, copy=True))


def numpy_of(tensor):
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


class BackendTests(unittest.TestCase):
    @property
    def n(self):
        return dist.get_world_size()

    @property
    def r(self):
        return dist.get_rank()

    @property
    def pg(self):
        return dist.distributed_c10d._get_default_group()

    def input(self, dtype, count, op="sum", salt=0, rank=None):
        return tensor_of(ref.rank_input(self.r if rank is None else rank, count, dtype, op, salt))

    def assertBits(self, tensor, expected, what):
        got = numpy_of(tensor)
        self.assertTrue(ref.same_bits(got, expected),
                        f"{what}: got {got.reshape(-1)[:8]}, expected "
                        f"{np.asarray(expected).reshape(-1)[:8]}")

    def test_backend_is_chorus(self):
        self.assertEqual(dist.get_backend(), "chorus")
        self.assertIsInstance(self.pg, chorus.torch.ProcessGroupChorus)
        self.assertEqual(self.pg.comm.size, self.n)
        self.assertEqual(self.pg.comm.rank, self.r)

    def test_all_reduce_every_dtype_and_op(self):
        for dtype in TORCH_DTYPES:
            for op_name, op in TORCH_OPS.items():
                for count in (0, 1, 1023, 70001):
                    t = self.input(dtype, count, op_name)
                    dist.all_reduce(t, op=op)
                    self.assertBits(t, ref.expected_reduction(self.n, count, dtype, op_name),
                                    f"all_reduce {dtype} {op_name} {count}")

    def test_async_all_reduce_many_in_flight(self):
        posted = []
        for i, dtype in enumerate(TORCH_DTYPES):
            t = self.input(dtype, 50000, "max", salt=i)
            posted.append((dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True), t, dtype, i))
        for work, t, dtype, i in reversed(posted):
            work.wait()
            self.assertTrue(work.is_completed())
            self.assertBits(t, ref.expected_reduction(self.n, 50000, dtype, "max", salt=i),
                            f"async all_reduce {dtype}")

    def test_futures_chain(self):
        t = self.input("float32", 100, salt=4)
        fut = dist.all_reduce(t, async_op=True).get_future()
        doubled = fut.then(lambda f: f.value()[0] * 2).wait()
        expected = ref.expected_reduction(self.n, 100, "float32", "sum", salt=4) * 2
        self.assertBits(doubled, expected, "future.then")

    def test_one_rank_group_completes_at_post(self):
        """On a group of one rank the request is done while being posted: its future must be
        complete when the call returns, without a trip through the completion thread."""
        singles = [dist.new_group([i]) for i in range(self.n)]
        t = self.input("float32", 1000, salt=6)
        before = numpy_of(t).copy()
        work = dist.all_reduce(t, group=singles[self.r], async_op=True)
        self.assertTrue(work.is_completed(), "a one-rank allreduce was still pending")
        work.wait()
        self.assertBits(t, before, "one-rank allreduce")
        # The same tensor again (DDP's bucket every step), then another: each Work holds the
        # very tensor it was given, for allreduce and broadcast alike.
        other = self.input("float32", 10, salt=7)
        for tensor in (t, t, other, t):
            for call in (lambda x: dist.all_reduce(x, group=singles[self.r], async_op=True),
                         lambda x: dist.broadcast(x, src=self.r, group=singles[self.r],
                                                  async_op=True)):
                result = call(tensor).get_future().value()
                self.assertEqual(len(result), 1)
                self.assertEqual(result[0].data_ptr(), tensor.data_ptr())
                self.assertEqual(result[0].numel(), tensor.numel())
        # The shortcut must not swallow what the full checks reject.
        with self.assertRaisesRegex(ValueError, "not supported"):
            dist.all_reduce(t, op=dist.ReduceOp.BAND, group=singles[self.r])
        with self.assertRaisesRegex(ValueError, "contiguous"):
            dist.all_reduce(torch.zeros(4, 4)[:, 1], group=singles[self.r])
        for g in singles:
            dist.destroy_process_group(g)

    def test_posting_does_not_block(self):
        """Rank 0 posts before the others join: the call must return at once with an
        incomplete Work, which completes once they arrive (what DDP overlap relies on)."""
        t = self.input("float32", 1000, salt=5)
        if self.r != 0:
            time.sleep(DELAY_SEC)
        started = time.monotonic()
        work = self.pg.allreduce(t)
        posted_sec = time.monotonic() - started
        if self.r == 0:
            self.assertLess(posted_sec, DELAY_SEC / 2, "allreduce blocked the caller")
            self.assertFalse(work.is_completed(), "completed before the peers called")
            if self.n > 1:  # Work.wait(timeout) gives up with the operation still running
                with self.assertRaisesRegex(RuntimeError, "did not complete within"):
                    work.wait(datetime.timedelta(seconds=DELAY_SEC / 10))
        work.wait()
        self.assertBits(t, ref.expected_reduction(self.n, 1000, "float32", "sum", salt=5),
                        "late allreduce")

    def test_broadcast_from_every_root(self):
        for root in range(self.n):
            for dtype in TORCH_DTYPES:
                t = self.input(dtype, 777, salt=root) if self.r == root else \
                    torch.zeros(777, dtype=getattr(torch, dtype))
                dist.broadcast(t, src=root)
                self.assertBits(t, ref.rank_input(root, 777, dtype, salt=root),
                                f"broadcast {dtype} root {root}")

    def test_all_gather_separate_and_view_outputs(self):
        for dtype in TORCH_DTYPES:
            expected = np.concatenate([ref.rank_input(q, 257, dtype, salt=2) for q in range(self.n)])
            separate = [torch.empty(257, dtype=getattr(torch, dtype)) for _ in range(self.n)]
            dist.all_gather(separate, self.input(dtype, 257, salt=2))
            self.assertBits(torch.cat(separate), expected, f"all_gather separate {dtype}")
            whole = torch.empty(self.n * 257, dtype=getattr(torch, dtype))
            dist.all_gather(list(whole.chunk(self.n)), self.input(dtype, 257, salt=2))
            self.assertBits(whole, expected, f"all_gather into views {dtype}")
            into = torch.empty(self.n * 257, dtype=getattr(torch, dtype))
            dist.all_gather_into_tensor(into, self.input(dtype, 257, salt=2))
            self.assertBits(into, expected, f"all_gather_into_tensor {dtype}")

    def test_reduce_scatter_list_and_tensor(self):
        for dtype in TORCH_DTYPES:
            for op_name in ("sum", "min", "avg"):
                whole = self.input(dtype, 100 * self.n, op_name, salt=3)
                expected = ref.expected_reduction(self.n, 100 * self.n, dtype, op_name, salt=3)
                mine = expected[self.r * 100:(self.r + 1) * 100]
                out = torch.empty(100, dtype=getattr(torch, dtype))
                dist.reduce_scatter(out, [c.clone() for c in whole.chunk(self.n)],
                                    op=TORCH_OPS[op_name])
                self.assertBits(out, mine, f"reduce_scatter list {dtype} {op_name}")
                out2 = torch.empty(100, dtype=getattr(torch, dtype))
                dist.reduce_scatter_tensor(out2, whole, op=TORCH_OPS[op_name])
                self.assertBits(out2, mine, f"reduce_scatter_tensor {dtype} {op_name}")

    def test_reduce_gather_scatter(self):
        root = self.n - 1
        t = self.input("int64", 64, "max", salt=6)
        dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
        if self.r == root:
            self.assertBits(t, ref.expected_reduction(self.n, 64, "int64", "max", salt=6), "reduce")
        gathered = [torch.empty(5, dtype=torch.float64) for _ in range(self.n)] \
            if self.r == 0 else None
        dist.gather(self.input("float64", 5, salt=7), gathered, dst=0)
        if self.r == 0:
            self.assertBits(torch.cat(gathered), np.concatenate(
                [ref.rank_input(q, 5, "float64", salt=7) for q in range(self.n)]), "gather")
        pieces = [tensor_of(ref.rank_input(q, 9, "int32", salt=8)) for q in range(self.n)] \
            if self.r == root else None
        out = torch.empty(9, dtype=torch.int32)
        dist.scatter(out, pieces, src=root)
        self.assertBits(out, ref.rank_input(self.r, 9, "int32", salt=8), "scatter")

    def test_all_to_all_list_and_single(self):
        n, r = self.n, self.r
        ins = [torch.full((3,), float(10 * r + j)) for j in range(n)]
        outs = [torch.empty(3) for _ in range(n)]
        dist.all_to_all(outs, ins)
        self.assertBits(torch.cat(outs), np.repeat(np.arange(n) * 10.0 + r, 3).astype(np.float32),
                        "all_to_all")
        single_out = torch.empty(3 * n)
        dist.all_to_all_single(single_out, torch.cat(ins))
        self.assertBits(single_out, np.repeat(np.arange(n) * 10.0 + r, 3).astype(np.float32),
                        "all_to_all_single")

    COALESCED_SHAPES = ((5,), (0,), (3, 4), (2, 1, 3))

    def coalesced_inputs(self, rank, dtype, op, salt):
        """rank's tensors for a coalesced call, and the flat reference input they cut."""
        total = sum(int(np.prod(shape)) for shape in self.COALESCED_SHAPES)
        flat = tensor_of(ref.rank_input(rank, total, dtype, op, salt))
        pieces, offset = [], 0
        for shape in self.COALESCED_SHAPES:
            size = int(np.prod(shape))
            pieces.append(flat[offset:offset + size].clone().view(shape))
            offset += size
        return pieces, total

    def test_all_reduce_coalesced(self):
        for dtype in ("int32", "bfloat16", "float32", "float64"):
            for op_name in ("sum", "prod", "max", "min"):
                tensors, total = self.coalesced_inputs(self.r, dtype, op_name, salt=14)
                dist.all_reduce_coalesced(tensors, op=TORCH_OPS[op_name])
                self.assertBits(torch.cat([t.reshape(-1) for t in tensors]),
                                ref.expected_reduction(self.n, total, dtype, op_name, salt=14),
                                f"all_reduce_coalesced {dtype} {op_name}")
        # In place on consecutive views of one buffer: no staging copy, same result.
        whole = self.input("float32", 12, salt=15)
        views = [whole[:4].view(2, 2), whole[4:12]]
        dist.all_reduce_coalesced(views, async_op=True).wait()
        self.assertBits(whole, ref.expected_reduction(self.n, 12, "float32", "sum", salt=15),
                        "all_reduce_coalesced on views")
        with self.assertRaisesRegex(ValueError, "one dtype"):  # torch checks it first too
            self.pg.allreduce_coalesced([torch.ones(2), torch.ones(2, dtype=torch.float64)])

    def test_all_gather_coalesced(self):
        for dtype in ("int8", "float16", "float64"):
            inputs, total = self.coalesced_inputs(self.r, dtype, "sum", salt=16)
            outputs = [[torch.full(t.shape, -1).to(getattr(torch, dtype)) for t in inputs]
                       for _ in range(self.n)]
            dist.all_gather_coalesced(outputs, inputs)
            for q in range(self.n):
                self.assertBits(torch.cat([t.reshape(-1) for t in outputs[q]]),
                                ref.rank_input(q, total, dtype, salt=16),
                                f"all_gather_coalesced {dtype} from rank {q}")

    SPARSE_SHAPE = (6, 4, 3)  # two sparse dimensions, one dense

    def sparse_input(self, rank, dtype, salt):
        """rank's uncoalesced COO tensor: 2 * rank non-zeros (none on rank 0), some indices
        repeated, values from the reference's integers; and its dense int64 equivalent."""
        nnz = 2 * rank
        k = np.arange(nnz)
        indices = np.stack([(k * (rank + 1)) % 6, (k + rank) % 4])
        values = ref.integer_values(rank, nnz * 3, dtype, "sum", salt).reshape(nnz, 3)
        dense = np.zeros(self.SPARSE_SHAPE, dtype=np.int64)
        np.add.at(dense, (indices[0], indices[1]), values)
        held = ref.to_holder(values.reshape(-1), dtype).reshape(nnz, 3)
        tensor = torch.sparse_coo_tensor(torch.from_numpy(indices), tensor_of(held),
                                         self.SPARSE_SHAPE)
        return tensor, dense

    def test_sparse_all_reduce(self):
        for dtype in ("float32", "float64", "int32", "int64", "bfloat16"):
            for salt in range(2):
                mine, _ = self.sparse_input(self.r, dtype, salt)
                total = sum(self.sparse_input(q, dtype, salt)[1] for q in range(self.n))
                work = dist.all_reduce(mine, async_op=True)
                result = work.get_future().wait()[0]
                self.assertIs(result, mine)
                self.assertTrue(mine.is_sparse and mine.is_coalesced())
                self.assertBits(mine.to_dense().reshape(-1),
                                ref.to_holder(total.reshape(-1), dtype),
                                f"sparse all_reduce {dtype}")
        with self.assertRaisesRegex(ValueError, "only SUM"):
            dist.all_reduce(self.sparse_input(self.r, "float32", 0)[0], op=dist.ReduceOp.MAX)
        odd = torch.sparse_coo_tensor(torch.zeros(2, 1, dtype=torch.int64), torch.ones(1, 3),
                                      (6, 4 + self.r % 2, 3))
        if self.n > 1:  # every rank sees the disagreement in the gathered shapes
            with self.assertRaisesRegex(ValueError, "same shape"):
                dist.all_reduce(odd)
        t = torch.ones(2)
        dist.all_reduce(t)  # the group still works
        self.assertBits(t, np.full(2, self.n, dtype=np.float32), "after the sparse errors")

    def test_all_to_all_single_equal_every_dtype(self):
        """Block j of rank q's input lands as block q of rank j's output (2-D rows too)."""
        n, r, block = self.n, self.r, 37
        for dtype in TORCH_DTYPES:
            expected = np.concatenate(
                [ref.rank_input(q, n * block, dtype, salt=12)[r * block:(r + 1) * block]
                 for q in range(n)])
            out = torch.empty(n * block, dtype=getattr(torch, dtype))
            dist.all_to_all_single(out, self.input(dtype, n * block, salt=12))
            self.assertBits(out, expected, f"all_to_all_single {dtype}")
            rows = torch.empty(n * block, dtype=getattr(torch, dtype)).view(n, block)
            work = dist.all_to_all_single(rows, self.input(dtype, n * block, salt=12).view(n, block),
                                          async_op=True)
            work.wait()
            self.assertBits(rows.reshape(-1), expected, f"all_to_all_single rows {dtype}")

    @staticmethod
    def split_rows(sender, receiver):
        """Rows rank `sender` sends rank `receiver` in the split tests (0 included)."""
        return (sender + 2 * receiver) % 3

    def split_expectation(self, dtype, width, salt):
        """(rank r's input, the rows r sends each rank, the rows it receives from each, and
        what its output must hold), all from the reference inputs of every rank."""
        n, r = self.n, self.r

        def rank_rows(q):
            sends = [self.split_rows(q, j) for j in range(n)]
            whole = ref.rank_input(q, sum(sends) * width, dtype, salt=salt)
            return sends, whole.reshape(-1, width) if whole.size else whole.reshape(0, width)

        sends, mine = rank_rows(r)
        expected = []
        for q in range(n):
            q_sends, q_rows = rank_rows(q)
            start = sum(q_sends[:r])
            expected.append(q_rows[start:start + q_sends[r]])
        receives = [self.split_rows(q, r) for q in range(n)]
        return tensor_of(mine), sends, receives, np.concatenate(expected)

    def test_all_to_all_single_split_sizes(self):
        for dtype in ("int8", "int64", "bfloat16", "float32"):
            mine, sends, receives, expected = self.split_expectation(dtype, 4, salt=17)
            out = torch.full((sum(receives), 4), -1).to(getattr(torch, dtype))
            dist.all_to_all_single(out, mine, output_split_sizes=receives,
                                   input_split_sizes=sends)
            self.assertBits(out.reshape(-1), expected.reshape(-1),
                            f"all_to_all_single split {dtype}")
        # Only one side split: the other is divided equally.
        equal = 2 * self.n
        out = torch.empty(equal * 3)
        dist.all_to_all_single(out.view(equal, 3), torch.arange(equal * 3.0).view(equal, 3),
                               output_split_sizes=[2] * self.n)
        base = np.arange(equal * 3.0, dtype=np.float32).reshape(equal, 3)[2 * self.r:2 * self.r + 2]
        self.assertBits(out, np.tile(base.reshape(-1), self.n), "all_to_all_single one side split")
        with self.assertRaisesRegex(ValueError, "split sizes"):  # 5 rows of 4 (and of 1)
            dist.all_to_all_single(torch.empty(4), torch.empty(4),
                                   input_split_sizes=[5] + [0] * (self.n - 1))

    def test_all_to_all_unequal_tensors(self):
        for dtype in ("int32", "float64"):
            mine, sends, receives, expected = self.split_expectation(dtype, 3, salt=18)
            ins = list(mine.split(sends))
            outs = [torch.full((rows, 3), -1).to(getattr(torch, dtype)) for rows in receives]
            work = dist.all_to_all(outs, ins, async_op=True)
            work.wait()
            self.assertBits(torch.cat(outs).reshape(-1), expected.reshape(-1),
                            f"all_to_all unequal {dtype}")

    def test_all_to_all_list_separate_and_views(self):
        n, r, block = self.n, self.r, 11
        for dtype in ("int8", "bfloat16", "float64"):
            expected = np.concatenate(
                [ref.rank_input(q, n * block, dtype, salt=13)[r * block:(r + 1) * block]
                 for q in range(n)])
            ins = [c.clone() for c in self.input(dtype, n * block, salt=13).chunk(n)]
            separate = [torch.empty(block, dtype=getattr(torch, dtype)) for _ in range(n)]
            dist.all_to_all(separate, ins)
            self.assertBits(torch.cat(separate), expected, f"all_to_all separate {dtype}")
            whole = torch.empty(n * block, dtype=getattr(torch, dtype))
            dist.all_to_all(list(whole.chunk(n)), list(self.input(dtype, n * block,
                                                                  salt=13).chunk(n)))
            self.assertBits(whole, expected, f"all_to_all into views {dtype}")

    def test_barrier_and_point_to_point(self):
        dist.barrier()
        if self.n == 1:
            return  # a blocking send to oneself before the receive cannot complete
        right, left = (self.r + 1) % self.n, (self.r - 1) % self.n
        got = torch.empty(5000, dtype=torch.float32)
        if self.r % 2 == 0:
            dist.send(self.input("float32", 5000, salt=10), dst=right)
            dist.recv(got, src=left)
        else:
            dist.recv(got, src=left)
            dist.send(self.input("float32", 5000, salt=10), dst=right)
        self.assertBits(got, ref.rank_input(left, 5000, "float32", salt=10), "send/recv ring")
        got2 = torch.empty(10, dtype=torch.int64)
        sender = self.r % 2 == 0 and right != self.r
        if sender and self.r + 1 < self.n:
            dist.isend(self.input("int64", 10, salt=11), dst=self.r + 1).wait()
        elif self.r % 2 == 1:
            dist.irecv(got2, src=self.r - 1).wait()
            self.assertBits(got2, ref.rank_input(self.r - 1, 10, "int64", salt=11), "irecv")

    def test_batch_isend_irecv_receives_first(self):
        """Every rank posts its receive from the left before its send to the right (as
        pipeline parallelism does): the operations progress together, none waits for a send
        queued behind a receive. Messages above the eager size (rendezvous) and below."""
        if self.n == 1:
            return
        right, left = (self.r + 1) % self.n, (self.r - 1) % self.n
        for count in (7, 100000):
            got = torch.empty(count, dtype=torch.float32)
            started = time.monotonic()
            works = dist.batch_isend_irecv([
                dist.P2POp(dist.irecv, got, left),
                dist.P2POp(dist.isend, self.input("float32", count, salt=19), right)])
            for work in works:
                work.wait()
            self.assertLess(time.monotonic() - started, 30, "the exchange waited on a timeout")
            self.assertBits(got, ref.rank_input(left, count, "float32", salt=19),
                            f"batch_isend_irecv {count}")

    def test_tags_and_any_source(self):
        if self.n == 1:
            return
        if self.r == 0:
            # Tags select: the message tagged 5 is received first although it was sent last.
            five, three = torch.empty(4, dtype=torch.int64), torch.empty(4, dtype=torch.int64)
            dist.recv(five, src=1, tag=5)
            dist.recv(three, src=1, tag=3)
            self.assertBits(five, ref.rank_input(1, 4, "int64", salt=5), "tag 5")
            self.assertBits(three, ref.rank_input(1, 4, "int64", salt=3), "tag 3")
            # From any source: every other rank sends once, the source is reported.
            seen = set()
            for _ in range(self.n - 1):
                got = torch.empty(6, dtype=torch.int32)
                source = dist.recv(got, tag=9)
                self.assertBits(got, ref.rank_input(source, 6, "int32", salt=9),
                                f"recv from any source (said {source})")
                seen.add(source)
            self.assertEqual(seen, set(range(1, self.n)))
        else:
            if self.r == 1:
                three = dist.isend(self.input("int64", 4, salt=3), dst=0, tag=3)
                dist.send(self.input("int64", 4, salt=5), dst=0, tag=5)
                three.wait()
            dist.send(self.input("int32", 6, salt=9), dst=0, tag=9)

    def test_receive_does_not_hold_back_collectives(self):
        """Rank 0 posts a receive that rank 1 satisfies only after an allreduce: the
        allreduce's Work and future complete while the receive waits."""
        if self.n == 1:
            return
        got = torch.empty(3)
        pending = dist.irecv(got, src=1, tag=11) if self.r == 0 else None
        t = self.input("float32", 10, salt=20)
        future = dist.all_reduce(t, async_op=True).get_future()
        future.wait()
        self.assertBits(t, ref.expected_reduction(self.n, 10, "float32", "sum", salt=20),
                        "allreduce behind a pending receive")
        if self.r == 1:
            dist.send(torch.full((3,), 7.0), dst=0, tag=11)
        if pending is not None:
            pending.wait()
            self.assertBits(got, np.full(3, 7.0, dtype=np.float32), "the held-back receive")

    def test_receive_of_another_size_fails(self):
        if self.n == 1:
            return
        if self.r == 0:
            with self.assertRaisesRegex(chorus.MismatchError, "expects exactly 8"):
                dist.recv(torch.empty(8), src=1, tag=12)
        elif self.r == 1:
            dist.send(torch.ones(5), dst=0, tag=12)
        dist.barrier()

    def test_direct_calls_with_bare_tensors_and_no_opts(self):
        pg, n, r = self.pg, self.n, self.r
        t = self.input("float32", 10)
        pg.allreduce(t).wait()
        self.assertBits(t, ref.expected_reduction(n, 10, "float32", "sum"), "pg.allreduce(t)")
        t = self.input("int32", 10, "max")
        pg.allreduce([t], dist.ReduceOp.MAX).wait()
        self.assertBits(t, ref.expected_reduction(n, 10, "int32", "max"), "allreduce op arg")
        b = self.input("int32", 4, salt=1) if r == 0 else torch.zeros(4, dtype=torch.int32)
        pg.broadcast(b).wait()
        self.assertBits(b, ref.rank_input(0, 4, "int32", salt=1), "pg.broadcast(t)")
        outs = [torch.empty(2, dtype=torch.int64) for _ in range(n)]
        pg.allgather(outs, self.input("int64", 2, salt=2)).wait()
        self.assertBits(torch.cat(outs), np.concatenate(
            [ref.rank_input(q, 2, "int64", salt=2) for q in range(n)]), "pg.allgather bare")
        out = torch.empty(3, dtype=torch.float64)
        ins = list(self.input("float64", 3 * n, salt=3).chunk(n))
        pg.reduce_scatter(out, ins).wait()
        self.assertBits(out, ref.expected_reduction(n, 3 * n, "float64", "sum", salt=3)[3 * r:3 * r + 3],
                        "pg.reduce_scatter bare")
        pg.barrier().wait()
        if n > 1:
            if r == 0:
                pg.send(self.input("uint8", 7, salt=4), 1, 0).wait()
            elif r == 1:
                got = torch.empty(7, dtype=torch.uint8)
                pg.recv(got, 0, 0).wait()
                self.assertBits(got, ref.rank_input(0, 7, "uint8", salt=4), "pg.send/recv bare")
        pg.barrier(None).wait()

    def test_errors_raise_in_caller(self):
        with self.assertRaisesRegex(ValueError, "not supported"):
            dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND)
        with self.assertRaisesRegex((TypeError, RuntimeError), "not supported by chorus"):
            dist.all_reduce(torch.ones(3, dtype=torch.bool))
        with self.assertRaisesRegex(ValueError, "contiguous"):
            dist.all_reduce(torch.ones(4, 4)[:, 0])
        with self.assertRaises(chorus.InvalidArgumentError):  # the library judges the root
            self.pg.broadcast(torch.ones(3), self.n + 3)
        # The group still works afterwards.
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertBits(t, np.full(2, self.n, dtype=np.float32), "after errors")

    def _ddp_params(self, hook):
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(),
                                    torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                    torch.nn.Linear(64, 3)).double()
        reference_model = copy.deepcopy(model)  # trained on the full batch in one process
        group = dist.new_group(backend="gloo") if hook else None
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=0.01, process_group=group)
        state = None
        if hook:
            state = chorus.torch.ChorusHookState(process_group=group)
            ddp.register_comm_hook(state, chorus.torch.allreduce_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        ref_optimizer = torch.optim.SGD(reference_model.parameters(), lr=0.1)
        generator = torch.Generator().manual_seed(2)
        for _ in range(3):
            x = torch.randn(8 * self.n, 16, generator=generator, dtype=torch.float64)
            y = torch.randn(8 * self.n, 3, generator=generator, dtype=torch.float64)
            mine = slice(8 * self.r, 8 * (self.r + 1))
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(ddp(x[mine]), y[mine]).backward()
            optimizer.step()
            ref_optimizer.zero_grad()
            torch.nn.functional.mse_loss(reference_model(x), y).backward()
            ref_optimizer.step()
        for p, q in zip(model.parameters(), reference_model.parameters()):
            self.assertTrue(torch.allclose(p, q, rtol=1e-10, atol=1e-12),
                            f"DDP parameter differs from the full-batch reference by "
                            f"{(p - q).abs().max().item():.3g}")
        if state is not None:
            self.assertGreaterEqual(state.engine.max_pending, 1)
            state.shutdown()
        if group is not None:
            # torch 1.13 can deadlock destroying a gloo group whose workers still free a
            # finished work's tensors (pytorch/pytorch#56297): drain, then destroy.
            del ddp, optimizer
            dist.barrier(group)
            time.sleep(GLOO_DRAIN_SEC)
            dist.destroy_process_group(group)

    def test_ddp_sparse_gradients_match_full_batch(self):
        """An embedding with sparse gradients: DDP's reducer allreduces them through the
        backend's sparse path (from C++) and uses the future's value."""
        torch.manual_seed(3)
        model = torch.nn.Embedding(20, 4, sparse=True).double()
        reference = copy.deepcopy(model)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.5)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
        for step in range(3):
            indices = [torch.tensor([(3 * q + step) % 20, (q * q + 2 * step) % 20, 7])
                       for q in range(self.n)]
            optimizer.zero_grad()
            ddp(indices[self.r]).square().sum().backward()
            optimizer.step()
            ref_optimizer.zero_grad()
            (sum(reference(i).square().sum() for i in indices) / self.n).backward()
            ref_optimizer.step()
        self.assertTrue(torch.allclose(model.weight, reference.weight, rtol=1e-12, atol=1e-12),
                        f"sparse DDP differs from the reference by "
                        f"{(model.weight - reference.weight).abs().max().item():.3g}")

    def test_ddp_default_path_matches_full_batch(self):
        self._ddp_params(hook=False)

    def test_ddp_chorus_hook_over_gloo_group_matches_full_batch(self):
        self._ddp_params(hook=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init", choices=("env", "tcp"), default="env")
    args, rest = parser.parse_known_args()
    torch.set_num_threads(1)
    if args.init == "tcp":
        method = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group("chorus", init_method=method, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]),
                                timeout=datetime.timedelta(seconds=120))
    else:
        dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=120))
    started = time.monotonic()
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=1)
    ok = program.result.wasSuccessful()
    print(f"rank {dist.get_rank()}: torch backend ({args.init}://) "
          f"{'passed' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
