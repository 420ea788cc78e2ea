"""Error feedback in the "chorus" backend: with CHORUS_COMPRESSION set (here int4, scope all,
CHORUS_COMPRESSION_MIN_BYTES=4096), the backend keeps one residual per tensor object, as for
DDP's buckets, and frees it with the tensor. Run by every rank under the launcher:
    CHORUS_COMPRESSION=int4 CHORUS_COMPRESSION_SCOPE=all CHORUS_COMPRESSION_MIN_BYTES=4096 \\
        build/chorus-run -n 3 /usr/bin/python3 python/tests/test_torch_feedback.py
Checks, bitwise on every rank: successive allreduces of one tensor equal the library's own
allreduces with one chorus.Residual carried along (the backend passes it, keyed right); another
tensor starts from a zero residual; a tensor under min_bytes is exact; a dead tensor's residual
is freed; CHORUS_COMPRESSION_FEEDBACK=off keeps none, and a bad value is refused.
"""

import gc
import os
import sys
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
        before = len(self.pg._residuals)
        tensor = torch.ones(COUNT)
        dist.all_reduce(tensor)
        self.assertEqual(len(self.pg._residuals), before + 1)
        del tensor
        # The backend keeps its newest works (and so their tensors) for c10d: push it out.
        small = torch.zeros(4)
        for _ in range(chorus.torch.work.WorkKeeper.RECENT + 1):
            dist.all_reduce(small)
        gc.collect()
        self.assertEqual(len(self.pg._residuals), before)

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
