"""Error paths of the chorus Python package, in one process: bad arguments caught in Python
(types, layout, sizes) and by the library (roots, peers, ranks), each raising the documented
exception with the library's message; timeouts, mismatched calls, abort and use after destroy
on 2-rank communicators whose ranks are threads of this process. Every case is time-bounded
by short communicator timeouts.
    /usr/bin/python3 python/tests/test_errors.py
"""

import os
import sys
import threading
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402,F401  (puts the package on the path the same way)

import chorus  # noqa: E402

OP_TIMEOUT_SEC = 2
JOIN_TIMEOUT_SEC = 30.0
SLACK_SEC = 20.0


def thread_ranks(nranks, body, **config):
    """Runs body(comm) in nranks threads, each a rank of a fresh communicator; returns the
    per-rank results (the value or the exception raised) in rank order."""
    unique_id = chorus.UniqueId.new()
    results = [None] * nranks
    comms = [None] * nranks

    def rank_main(rank):
        try:
            comms[rank] = chorus.Communicator.from_unique_id(nranks, rank, unique_id, **config)
            results[rank] = body(comms[rank])
        except Exception as exc:  # reported to the test as a value
            results[rank] = exc

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(nranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_SEC)
        if thread.is_alive():
            raise AssertionError("a rank thread did not finish in time")
    for comm in comms:
        if comm is not None:
            comm.destroy()
    return results


class PythonSideArgumentTests(unittest.TestCase):
    """Misuse the binding must catch itself: C cannot know how long a buffer is."""

    @classmethod
    def setUpClass(cls):
        cls.comm = chorus.Communicator.from_unique_id(1, 0, chorus.UniqueId.new())

    @classmethod
    def tearDownClass(cls):
        cls.comm.destroy()

    def test_unsupported_element_types(self):
        for bad in (np.zeros(4, dtype=bool), np.zeros(4, dtype=np.int16),
                    np.zeros(4, dtype=np.complex64)):
            with self.assertRaisesRegex(TypeError, "not supported by chorus"):
                self.comm.allreduce(bad)

    def test_not_an_array(self):
        with self.assertRaisesRegex(TypeError, "numpy.ndarray or a torch.Tensor"):
            self.comm.allreduce([1.0, 2.0])

    def test_non_contiguous_and_read_only(self):
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            self.comm.allreduce(np.zeros((4, 4), dtype=np.float32)[:, 1])
        frozen = np.zeros(4, dtype=np.float32)
        frozen.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            self.comm.allreduce(frozen)
        with self.assertRaisesRegex(ValueError, "native byte order"):
            self.comm.allreduce(np.zeros(4, dtype=">f4"))

    def test_size_mismatches_are_invalid_argument(self):
        x = np.zeros(8, dtype=np.float32)
        with self.assertRaises(chorus.InvalidArgumentError) as caught:
            self.comm.allreduce(x, out=np.zeros(7, dtype=np.float32))
        self.assertEqual(caught.exception.status_name, "CHORUS_ERR_INVALID_ARG")
        self.assertIn("expected 8", str(caught.exception))
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.allgather(x, out=np.zeros(9, dtype=np.float32))
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.scatter(np.zeros(3, dtype=np.float32), np.zeros(2, dtype=np.float32))

    def test_dtype_mismatch_between_buffers(self):
        with self.assertRaisesRegex(TypeError, "4-byte"):
            self.comm.allreduce(np.zeros(4, dtype=np.float32), out=np.zeros(4, dtype=np.float64))

    def test_bad_dtype_override_and_op(self):
        with self.assertRaisesRegex(TypeError, "unknown chorus dtype"):
            self.comm.allreduce(np.zeros(4, dtype=np.uint16), dtype="bf16")
        with self.assertRaisesRegex(TypeError, "2-byte"):
            self.comm.allreduce(np.zeros(4, dtype=np.float32), dtype="bfloat16")
        with self.assertRaisesRegex(ValueError, "unknown reduction op"):
            self.comm.allreduce(np.zeros(4, dtype=np.float32), op="xor")

    def test_unique_id_length(self):
        with self.assertRaisesRegex(ValueError, "128 bytes"):
            chorus.UniqueId.from_bytes(b"short")
        self.assertEqual(len(chorus.UniqueId.new().to_bytes()), 128)


class LibrarySideArgumentTests(unittest.TestCase):
    """Arguments only the library can judge: the exception carries its sentence."""

    @classmethod
    def setUpClass(cls):
        cls.comm = chorus.Communicator.from_unique_id(1, 0, chorus.UniqueId.new())

    @classmethod
    def tearDownClass(cls):
        cls.comm.destroy()

    def assert_library_rejects(self, call, operation):
        with self.assertRaises(chorus.InvalidArgumentError) as caught:
            call()
        exc = caught.exception
        self.assertEqual(exc.status, -1)
        self.assertEqual(exc.operation, operation)
        self.assertTrue(exc.detail, "the library gave no chorus_comm_last_error sentence")
        self.assertIn(exc.detail, str(exc))
        self.assertIsInstance(exc, ValueError)
        return exc

    def test_root_out_of_range(self):
        x = np.zeros(4, dtype=np.float32)
        self.assert_library_rejects(lambda: self.comm.broadcast(x, root=1), "broadcast")
        self.assert_library_rejects(lambda: self.comm.reduce(x, root=-1), "reduce")
        self.assert_library_rejects(lambda: self.comm.ibroadcast(x, root=5), "broadcast")

    def test_peer_out_of_range(self):
        x = np.zeros(4, dtype=np.float32)
        self.assert_library_rejects(lambda: self.comm.send(x, 3), "send")
        self.assert_library_rejects(lambda: self.comm.recv(x, -2), "recv")

    def test_comm_still_usable_after_argument_errors(self):
        x = np.arange(4, dtype=np.float32)
        with self.assertRaises(chorus.InvalidArgumentError):
            self.comm.broadcast(x, root=9)
        np.testing.assert_array_equal(self.comm.allreduce(x), np.arange(4, dtype=np.float32))

    def test_bad_init_arguments(self):
        unique_id = chorus.UniqueId.new()
        for size, rank in ((2, 5), (2, -1), (0, 0)):
            with self.assertRaises(chorus.InvalidArgumentError) as caught:
                chorus.Communicator.from_unique_id(size, rank, unique_id, connect_timeout_sec=2)
            self.assertEqual(caught.exception.operation, "chorus_comm_init")

    def test_init_env_without_variables(self):
        saved = {k: os.environ.pop(k) for k in list(os.environ)
                 if k.startswith(("CHORUS_", "OMPI_", "SLURM_")) and k != "CHORUS_LIBRARY"
                 or k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        try:
            with self.assertRaises(chorus.InvalidArgumentError) as caught:
                chorus.init(connect_timeout_sec=2)
            self.assertEqual(caught.exception.operation, "chorus_comm_init_env")
        finally:
            os.environ.update(saved)


class TwoRankFailureTests(unittest.TestCase):
    """Failures that need a peer: ranks are threads of this process."""

    def test_timeout_when_peer_never_calls(self):
        def body(comm):
            if comm.rank == 1:
                time.sleep(OP_TIMEOUT_SEC * 3)  # never joins; stays alive past the timeout
                return "idle"
            started = time.monotonic()
            try:
                comm.allreduce(np.ones(16, dtype=np.float32))
            except chorus.ChorusError as exc:
                return exc, time.monotonic() - started, comm.last_error
            return None

        results = thread_ranks(2, body, timeout_sec=OP_TIMEOUT_SEC, connect_timeout_sec=10)
        self.assertEqual(results[1], "idle")
        self.assertIsNotNone(results[0], "rank 0's lone allreduce did not fail")
        exc, elapsed_sec, last_error = results[0]
        self.assertIsInstance(exc, chorus.TimeoutError)
        self.assertIsInstance(exc, TimeoutError)  # the builtin, too
        self.assertEqual(exc.status_name, "CHORUS_ERR_TIMEOUT")
        self.assertTrue(exc.detail)
        self.assertIn("allreduce", exc.detail)
        self.assertTrue(last_error)
        self.assertLess(elapsed_sec, OP_TIMEOUT_SEC + SLACK_SEC)

    def test_nonblocking_timeout_then_broken(self):
        def body(comm):
            if comm.rank == 1:
                time.sleep(OP_TIMEOUT_SEC * 3)
                return "idle"
            request = comm.iallreduce(np.ones(16, dtype=np.float32))
            try:
                request.wait()
            except chorus.ChorusError as first:
                try:
                    comm.allreduce(np.ones(4, dtype=np.float32))
                except chorus.ChorusError as second:
                    return first, second
            return None

        results = thread_ranks(2, body, timeout_sec=OP_TIMEOUT_SEC, connect_timeout_sec=10)
        self.assertIsNotNone(results[0])
        first, second = results[0]
        self.assertIsInstance(first, chorus.TimeoutError)
        self.assertIsInstance(second, chorus.CommBrokenError)
        self.assertTrue(second.detail)

    def test_mismatched_counts(self):
        def body(comm):
            try:
                comm.allreduce(np.ones(4 + comm.rank, dtype=np.float32))
            except chorus.ChorusError as exc:
                return exc
            return None

        results = thread_ranks(2, body, timeout_sec=OP_TIMEOUT_SEC * 3, connect_timeout_sec=10)
        self.assertTrue(any(isinstance(r, chorus.MismatchError) for r in results),
                        f"no rank reported a mismatch: {results!r}")
        for result in results:
            self.assertIsInstance(result, chorus.ChorusError)
            self.assertTrue(result.detail)

    def test_abort_wakes_a_blocked_rank(self):
        def body(comm):
            if comm.rank == 1:
                time.sleep(OP_TIMEOUT_SEC)
                return "idle"
            timer = threading.Timer(0.5, comm.abort)
            timer.start()
            started = time.monotonic()
            try:
                comm.allreduce(np.ones(16, dtype=np.float32))
            except chorus.ChorusError as exc:
                return exc, time.monotonic() - started
            finally:
                timer.cancel()
            return None

        results = thread_ranks(2, body, timeout_sec=60, connect_timeout_sec=10)
        self.assertIsNotNone(results[0], "allreduce returned although the comm was aborted")
        exc, elapsed_sec = results[0]
        self.assertIsInstance(exc, chorus.CommBrokenError)
        self.assertLess(elapsed_sec, 30, "abort did not wake the waiter before the op timeout")

    def test_use_after_destroy(self):
        comm = chorus.Communicator.from_unique_id(1, 0, chorus.UniqueId.new())
        request = comm.iallreduce(np.ones(4, dtype=np.float32))
        comm.destroy()
        comm.destroy()  # idempotent
        with self.assertRaises(chorus.InvalidUsageError):
            comm.allreduce(np.ones(4, dtype=np.float32))
        with self.assertRaises(chorus.InvalidUsageError):
            _ = comm.last_error
        try:  # completed before the destroy, or reported as destroyed: never a crash
            request.wait()
        except chorus.InvalidUsageError as exc:
            self.assertIn("destroyed", str(exc))

    def test_thread_ranks_work(self):
        """The harness itself: a correct 2-rank allreduce through thread ranks."""
        def body(comm):
            return comm.allreduce(np.full(3, comm.rank + 1, dtype=np.int64)).tolist()

        self.assertEqual(thread_ranks(2, body, timeout_sec=30), [[3, 3, 3], [3, 3, 3]])


if __name__ == "__main__":
    unittest.main(verbosity=2)
