"""Gradient compression through the chorus Python package, run by every rank under the launcher:
    build/chorus-run -n 3 /usr/bin/python3 python/tests/test_compression.py
One host, so the calls use scope "all" (scope "inter" leaves one host exact, also checked).
Checks: the setting and its errors; min_bytes (smaller calls stay exact); every codec's result bitwise equal on every rank, exact
where the codec is lossless for the data, within the quantisation bound otherwise; error
feedback: with a residual the sum over many calls of top-k's results stays within a fixed
distance of the exact sum, without one the gap grows with every call.
"""

import hashlib
import unittest

import numpy as np

import chorus

COUNT = 5003


def digest(array):
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).digest()


class CompressionTest(unittest.TestCase):
    comm = None

    @classmethod
    def setUpClass(cls):
        cls.comm = chorus.init()
        cls.rng = np.random.default_rng(1234 + cls.comm.rank)

    @classmethod
    def tearDownClass(cls):
        cls.comm.destroy()

    def same_everywhere(self, array):
        mine = np.frombuffer(digest(array), dtype=np.uint8).copy()
        everyone = self.comm.allgather(mine)
        for r in range(self.comm.size):
            self.assertTrue(np.array_equal(everyone[r], mine), f"rank {r}'s result differs")

    def exact_sum(self, x):
        return self.comm.allreduce(x.astype(np.float64))

    def test_setting(self):
        self.assertIn("int8", chorus.CODECS)
        self.assertEqual(self.comm.compression, ("none", "inter"))
        self.comm.set_compression("topk:2%", "all")
        self.assertEqual(self.comm.compression, ("topk:0.02", "all"))
        for bad in ("int3", "topk:0", "topk:2", "topk:x"):
            with self.assertRaises(ValueError):
                self.comm.set_compression(bad)
        with self.assertRaises(ValueError):
            self.comm.set_compression("int8", "host")
        self.comm.set_compression(None)
        self.assertEqual(self.comm.compression, ("none", "inter"))
        self.assertEqual(self.comm.compression_min_bytes, 65536)  # CHORUS_COMPRESSION_MIN_BYTES
        version = self.comm.compression_version
        self.comm.compression_min_bytes = np.int64(1000)
        self.assertEqual(self.comm.compression_min_bytes, 1000)
        self.assertNotEqual(self.comm.compression_version, version)
        for bad in (-1, 1.5, "64k", True, 2**64):
            with self.assertRaises(ValueError):
                self.comm.compression_min_bytes = bad
        self.assertEqual(self.comm.compression_min_bytes, 1000)
        self.comm.compression_min_bytes = 65536

    def test_min_bytes(self):
        """Calls of fewer bytes than min_bytes stay exact; a call of min_bytes is compressed."""
        for count, compressed in ((999, False), (1000, True)):
            x = self.rng.standard_normal(count).astype(np.float32)
            plain = self.comm.allreduce(x.copy())
            self.comm.set_compression("int8", "all")
            self.comm.compression_min_bytes = 4000
            try:
                out = self.comm.allreduce(x.copy())
                own = self.comm.allreduce(x.copy(), compression=("int8", "all"))  # any size
            finally:
                self.comm.set_compression(None)
                self.comm.compression_min_bytes = 65536
            self.assertEqual(not np.array_equal(out, plain), compressed, count)
            self.assertFalse(np.array_equal(own, plain), count)

    def test_codecs(self):
        for codec in ("fp16", "bf16", "int8", "int4", "topk:0.1", "topk:1"):
            for small_ints in (False, True):
                with self.subTest(codec=codec, small_ints=small_ints):
                    x = (self.rng.integers(-8, 9, COUNT) if small_ints else
                         self.rng.standard_normal(COUNT) * 4).astype(np.float32)
                    out = self.comm.allreduce(x.copy(), compression=(codec, "all"))
                    self.same_everywhere(out)
                    exact = self.exact_sum(x)
                    lossless = small_ints and codec in ("fp16", "bf16", "topk:1")
                    if lossless:
                        self.assertTrue(np.array_equal(out, exact.astype(np.float32)))
                    elif codec in ("int8", "int4"):
                        amax = self.comm.allreduce(np.array([np.abs(x).max()]), op="max")[0]
                        q = 127 if codec == "int8" else 7
                        bound = 2.05 * self.comm.size * amax / q
                        self.assertLessEqual(float(np.abs(out - exact).max()), bound)
                        if not small_ints:
                            self.assertFalse(np.array_equal(out, exact.astype(np.float32)))

    def test_one_host_inter_is_exact(self):
        x = self.rng.standard_normal(COUNT).astype(np.float32)
        self.assertTrue(np.array_equal(self.comm.allreduce(x.copy(), compression="int4"),
                                       self.comm.allreduce(x.copy())))

    def cumulative_gap(self, residual, calls=60):
        x = np.linspace(-1, 1, COUNT, dtype=np.float32) * (self.comm.rank + 1)
        total = np.zeros(COUNT)
        for _ in range(calls):
            total += self.comm.allreduce(x.copy(), compression=("topk:0.1", "all"), residual=residual)
        return float(np.abs(total - calls * self.exact_sum(x)).max())

    def test_error_feedback(self):
        residual = self.comm.residual(COUNT)
        with_feedback = self.cumulative_gap(residual)
        without = self.cumulative_gap(None)
        residual.close()
        self.assertLess(with_feedback, 0.2 * without, (with_feedback, without))

    def test_bad_residual(self):
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.allreduce(np.zeros(8, np.float32), compression="int8", residual=self.comm.residual(7))
        closed = self.comm.residual(8)
        closed.close()
        with self.assertRaises(ValueError):
            self.comm.allreduce(np.zeros(8, np.float32), residual=closed)
        self.comm.barrier()  # the refused calls left the communicator working


if __name__ == "__main__":
    unittest.main(verbosity=1)
