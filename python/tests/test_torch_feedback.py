"""Error feedback in the "chorus" backend: with CHORUS_COMPRESSION set (here int4, scope all,
CHORUS_COMPRESSION_MIN_BYTES=4096), the backend keeps one residual per tensor object, as for
DDP's buckets, and frees it with the tensor. Run by every rank under the launcher:
    CHORUS_COMPRESSION=int4 CHORUS_COMPRESSION_SCOPE=all CHORUS_COMPRESSION_MIN_BYTES=4096 \\
        build/chorus-run -n 3 /usr/bin/python3 python/tests/test_torch_feedback.py
Checks, bitwise on every rank: successive allreduces of one tensor equal the library's own
allreduces with one chorus.Residual carried along (the backend passes it, keyed right); another
tensor starts from a zero residual; a tensor under min_bytes is exact; a dead tensor's residual
is freed; DDP's bucket keeps one residual from its second step on; CHORUS_COMPRESSION_FEEDBACK=off
keeps none, and a bad value is refused.
"""

import gc
import os
import sys
import unittest
import weakref

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
from chorus.torch import feedback  # noqa: E402

COUNT = 5003
CALLS = 3


class FeedbackTests(unittest.TestCase):
    @property
    def pg(self):
        return dist.distributed_c10d._get_default_group()

    def inputs(self, seed):
        rng = np.random.default_rng(seed * 97 + dist.get_rank())
        return [(rng.standard_normal(COUNT) * 3).astype(np.float32) for _ in range(CALLS)]

    def library(self, xs, residual):
        """The same calls on the communicator itself (its CHORUS_COMPRESSION setting)."""
        return [self.pg.comm.allreduce(x.copy(), residual=residual) for x in xs]

    def backend(self, tensor, xs):
        outs = []
        for x in xs:
            tensor.copy_(torch.from_numpy(x))
            dist.all_reduce(tensor)
            outs.append(tensor.numpy().copy())
        return outs

    def assert_same(self, got, want, what):
        for k, (g, w) in enumerate(zip(got, want)):
            self.assertTrue(np.array_equal(g, w), f"{what}: call {k} differs")

    def test_setting_seen(self):
        self.assertEqual(self.pg.comm.compression, ("int4", "all"))
        self.assertEqual(self.pg.comm.compression_min_bytes, 4096)

    def test_residual_per_tensor(self):
        xs = self.inputs(1)
        residual = self.pg.comm.residual(COUNT)
        want = self.library(xs, residual)
        residual.close()
        tensor = torch.zeros(COUNT)
        self.assert_same(self.backend(tensor, xs), want, "one tensor, residual carried")
        # Without the residual the calls after the first differ: it was really carried.
        unfed = self.library(xs, None)
        self.assertTrue(np.array_equal(unfed[0], want[0]))
        self.assertFalse(np.array_equal(unfed[1], want[1]))
        # Another tensor object starts from zero, while the first keeps its own.
        other = torch.zeros(COUNT)
        self.assert_same(self.backend(other, xs[:1]), unfed[:1], "a second tensor's first call")

    def test_small_tensor_exact(self):
        x = np.random.default_rng(dist.get_rank()).standard_normal(1000).astype(np.float32)  # 4000 bytes
        exact = self.pg.comm.allreduce(x.copy(), compression="none")
        tensor = torch.from_numpy(x.copy())
        before = len(self.pg._residuals)
        dist.all_reduce(tensor)
        self.assertTrue(np.array_equal(tensor.numpy(), exact))
        self.assertEqual(len(self.pg._residuals), before, "a residual for a call left exact")

    def test_residual_freed_with_tensor(self):
        tensor = torch.ones(COUNT)
        key = id(tensor)
        dist.all_reduce(tensor)
        self.assertIn(key, self.pg._residuals._by_id)
        residual = weakref.ref(self.pg._residuals.get(tensor, COUNT))
        del tensor
        # The backend keeps its newest works (and so their tensors) for c10d: push it out.
        small = torch.zeros(4)
        for _ in range(chorus.torch.work.WorkKeeper.RECENT + 1):
            dist.all_reduce(small)
        gc.collect()
        len(self.pg._residuals)  # forgets the dead
        self.assertNotIn(key, self.pg._residuals._by_id)
        self.assertIsNone(residual(), "the residual outlived its tensor")

    def test_ddp_bucket_keeps_its_residual(self):
        """DDP's default path: every step's bucket allreduce after the first (DDP rebuilds its
        buckets then) gets the same residual, and training keeps the ranks' parameters equal."""
        used = []
        get = self.pg._residuals.get

        def recording_get(tensor, count):
            residual = get(tensor, count)
            used.append(residual)
            return residual

        self.pg._residuals.get = recording_get
        try:
            torch.manual_seed(0)
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))  # 16.6 KB
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            rng = torch.Generator().manual_seed(dist.get_rank())
            steps = 5
            for _ in range(steps):
                model(torch.randn(8, 64, generator=rng)).square().sum().backward()
                opt.step()
                opt.zero_grad()
        finally:
            del self.pg._residuals.get
        self.assertEqual(len(used), steps, "one compressed bucket allreduce per step")
        self.assertEqual(len({id(r) for r in used[1:]}), 1, "the bucket changed residuals after the first step")
        self.assertIsNot(used[0], used[1])  # the first step's bucket is rebuilt, with a new residual
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        everyone = self.pg.comm.allgather(flat)
        for r in range(dist.get_world_size()):
            self.assertTrue(np.array_equal(everyone[r], flat), f"rank {r}'s parameters differ")

    def test_feedback_off(self):
        xs = self.inputs(2)
        want = self.library(xs, None)
        mode = self.pg._feedback
        self.pg._feedback, self.pg._feedback_plan = "off", (None, False, 0)
        try:
            self.assert_same(self.backend(torch.zeros(COUNT), xs), want, "CHORUS_COMPRESSION_FEEDBACK=off")
        finally:
            self.pg._feedback, self.pg._feedback_plan = mode, (None, False, 0)

    def test_mode_variable(self):
        saved = os.environ.get(feedback.FEEDBACK_ENV)
        try:
            for value, mode in (("", "auto"), ("ON", "on"), ("off", "off")):
                os.environ[feedback.FEEDBACK_ENV] = value
                self.assertEqual(feedback.feedback_mode(), mode)
            os.environ[feedback.FEEDBACK_ENV] = "sometimes"
            with self.assertRaisesRegex(ValueError, "CHORUS_COMPRESSION_FEEDBACK"):
                feedback.feedback_mode()
        finally:
            if saved is None:
                os.environ.pop(feedback.FEEDBACK_ENV, None)
            else:
                os.environ[feedback.FEEDBACK_ENV] = saved
        self.assertTrue(feedback.codec_wants_feedback("auto", "int4"))
        self.assertTrue(feedback.codec_wants_feedback("auto", "topk:0.01"))
        self.assertFalse(feedback.codec_wants_feedback("auto", "int8"))
        self.assertTrue(feedback.codec_wants_feedback("on", "fp16"))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("chorus")
    program = unittest.main(argv=sys.argv[:1], exit=False, verbosity=1)
    ok = program.result.wasSuccessful()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
