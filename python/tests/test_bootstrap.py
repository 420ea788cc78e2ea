"""Bootstrapping a communicator through a key-value store, in one process whose ranks are
threads: chorus.init(store, rank, size) with chorus.FileStore and with a minimal in-memory store
(any object with set and a blocking get), unique ids handed over by bytes, and the store's
own timeout. Each rank checks an allreduce and allgather against values computed here.
    /usr/bin/python3 python/tests/test_bootstrap.py
"""

import os
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402,F401

import chorus  # noqa: E402

JOIN_TIMEOUT_SEC = 60.0


class DictStore:
    """The smallest store chorus.init accepts: set(key, bytes) and a get that waits."""

    def __init__(self):
        self._values = {}
        self._cond = threading.Condition()

    def set(self, key, value):
        with self._cond:
            self._values[key] = bytes(value)
            self._cond.notify_all()

    def get(self, key):
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._values, timeout=JOIN_TIMEOUT_SEC):
                raise TimeoutError(key)
            return self._values[key]


def run_ranks(nranks, make_comm):
    """make_comm(rank) in nranks threads, then a check collective; returns per-rank outcomes."""
    outcomes = [None] * nranks

    def rank_main(rank):
        try:
            with make_comm(rank) as comm:
                summed = comm.allreduce(np.full(5, rank + 1, dtype=np.int32))
                gathered = comm.allgather(np.array([rank * 10], dtype=np.int64))
                outcomes[rank] = (comm.rank, comm.size, summed.tolist(), gathered.ravel().tolist())
        except Exception as exc:
            outcomes[rank] = exc

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(nranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_SEC)
        if thread.is_alive():
            raise AssertionError("a rank did not finish in time")
    return outcomes


def expected_outcomes(nranks):
    total = nranks * (nranks + 1) // 2
    return [(r, nranks, [total] * 5, [10 * q for q in range(nranks)]) for r in range(nranks)]


class StoreBootstrapTests(unittest.TestCase):
    def test_file_store(self):
        with tempfile.TemporaryDirectory(prefix="chorus-store-") as directory:
            store = chorus.FileStore(directory, timeout_sec=JOIN_TIMEOUT_SEC)
            outcomes = run_ranks(3, lambda rank: chorus.init(store, rank, 3, key="job-a"))
        self.assertEqual(outcomes, expected_outcomes(3))

    def test_in_memory_store_and_two_jobs_under_different_keys(self):
        store = DictStore()
        first = run_ranks(2, lambda rank: chorus.init(store, rank, 2, key="first"))
        second = run_ranks(4, lambda rank: chorus.Communicator.from_store(store, rank, 4,
                                                                          key="second"))
        self.assertEqual(first, expected_outcomes(2))
        self.assertEqual(second, expected_outcomes(4))

    def test_unique_id_bytes_round_trip(self):
        unique_id = chorus.UniqueId.new()
        raw = unique_id.to_bytes()
        outcomes = run_ranks(2, lambda rank: chorus.Communicator.from_unique_id(
            2, rank, unique_id if rank == 0 else chorus.UniqueId.from_bytes(raw)))
        self.assertEqual(outcomes, expected_outcomes(2))

    def test_init_needs_rank_and_size_with_a_store(self):
        with self.assertRaisesRegex(ValueError, "needs rank and size"):
            chorus.init(DictStore())

    def test_file_store_get_times_out(self):
        with tempfile.TemporaryDirectory(prefix="chorus-store-") as directory:
            store = chorus.FileStore(directory, timeout_sec=0.3)
            started = time.monotonic()
            with self.assertRaisesRegex(TimeoutError, "not set within"):
                store.get("never")
            self.assertLess(time.monotonic() - started, 10)
            store.set("k", "v")
            self.assertEqual(store.get("k"), b"v")


if __name__ == "__main__":
    unittest.main(verbosity=2)
