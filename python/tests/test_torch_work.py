"""ChorusWork and WorkKeeper in one process, without a communicator: how a failed operation
shows through every part of the Work (and through a C++ consumer of its future), and which
works the keeper lets go of.
    /usr/bin/python3 python/tests/test_torch_work.py
"""

import datetime
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed for this python", flush=True)
    sys.exit(ref.SKIP_RETURN_CODE)

from torch._C._distributed_c10d import _create_work_from_future  # noqa: E402

import chorus  # noqa: E402
from chorus import _lib  # noqa: E402
from chorus.errors import error_for_status  # noqa: E402
from chorus.torch.work import ChorusWork, WorkKeeper  # noqa: E402


def timeout_error():
    return error_for_status(_lib.status_value("CHORUS_ERR_TIMEOUT"),
                            "allreduce #3 timed out: no progress for 2.0 s", "allreduce")


class FailedWorkTests(unittest.TestCase):
    def setUp(self):
        self.future = torch.futures.Future()
        self.work = ChorusWork(self.future, "allreduce")

    def test_running_work(self):
        self.assertFalse(self.work.is_completed())
        self.assertFalse(self.work.is_success())
        self.assertIsNone(self.work.exception())
        with self.assertRaisesRegex(RuntimeError, "did not complete within"):
            self.work.wait(datetime.timedelta(milliseconds=20))

    def test_failure_raises_everywhere(self):
        self.future.set_exception(timeout_error())
        with self.assertRaises(chorus.TimeoutError) as caught:
            self.work.wait()
        self.assertIn("no progress for 2.0 s", str(caught.exception))
        self.assertIn("CHORUS_ERR_TIMEOUT", str(caught.exception))
        self.assertTrue(self.work.is_completed())
        self.assertFalse(self.work.is_success())
        self.assertIsInstance(self.work.exception(), chorus.TimeoutError)
        with self.assertRaises(chorus.TimeoutError):
            self.work.result()
        for look in (lambda f: f.wait(), lambda f: f.value()):
            with self.assertRaisesRegex(RuntimeError, "no progress for 2.0 s"):
                look(self.work.get_future())

    def test_future_fails_for_cpp_consumers(self):
        """A future chained in C++ (as DDP's reducer and collect_all do) sees the failure:
        torch 1.13's set_exception alone would complete it successfully."""
        chained = torch.futures.collect_all([self.work.get_future()])
        self.future.set_exception(timeout_error())
        with self.assertRaisesRegex(RuntimeError, "CHORUS_ERR_TIMEOUT"):
            chained.wait()
        self.assertFalse(_create_work_from_future(self.work.get_future()).is_success())
        # The premise: at the C++ level the bare future succeeded.
        self.assertTrue(_create_work_from_future(self.future).is_success())

    def test_success(self):
        tensor = torch.ones(3)
        self.future.set_result([tensor])
        self.assertTrue(self.work.wait())
        self.assertTrue(self.work.is_success())
        self.assertIsNone(self.work.exception())
        self.assertIs(self.work.result()[0], tensor)
        self.assertIs(self.work.get_future().wait()[0], tensor)

    def test_source_rank(self):
        future = torch.futures.Future()
        work = ChorusWork(future, "recv from any source", source_rank=lambda: 2)
        future.set_result([torch.ones(1)])
        self.assertEqual(work._source_rank(), 2)
        self.future.set_result([])
        with self.assertRaisesRegex(RuntimeError, "no source rank"):
            self.work.source_rank()


class KeeperTests(unittest.TestCase):
    def test_keeps_running_works_and_lets_go_of_looked_at_ones(self):
        keeper = WorkKeeper()
        futures = [torch.futures.Future() for _ in range(40)]
        works = [ChorusWork(f, "op", keeper) for f in futures]
        self.assertEqual(len(keeper), 40)
        for future in futures[:30]:
            future.set_result([])
        ChorusWork(torch.futures.Future(), "op", keeper)  # the keeper sweeps when it holds
        self.assertEqual(len(keeper), 41, "completed works nobody looked at were let go")
        for work in works[:10]:
            work.wait()
        ChorusWork(torch.futures.Future(), "op", keeper)
        self.assertEqual(len(keeper), 32, "the ten oldest, completed and waited for, stay")
        works[10].get_future()
        works[12].is_completed()  # not the oldest: stays until the ones before it go
        ChorusWork(torch.futures.Future(), "op", keeper)
        self.assertEqual(len(keeper), 32)

    def test_never_lets_go_of_a_running_work(self):
        keeper = WorkKeeper()
        first = torch.futures.Future()
        ChorusWork(first, "op", keeper)
        for _ in range(WorkKeeper.UNLOOKED_LIMIT + 50):
            done = torch.futures.Future()
            done.set_result([])
            ChorusWork(done, "op", keeper)
        self.assertEqual(len(keeper), WorkKeeper.UNLOOKED_LIMIT + 51)
        first.set_result([])
        ChorusWork(torch.futures.Future(), "op", keeper)
        self.assertLessEqual(len(keeper), WorkKeeper.UNLOOKED_LIMIT)
        self.assertGreaterEqual(len(keeper), WorkKeeper.RECENT)


if __name__ == "__main__":
    unittest.main(verbosity=1)
