"""PyTorch's own backend test suite (torch/testing/_internal/distributed/distributed_test.py,
class DistributedTest._DistTestBase) run with gloo's selection of tests, each test under gloo
(the control) and then under chorus, one after the other, so that both see the same machine
load when their times are compared.

The suite reads BACKEND once, at import, and most of its skips compare that name with "gloo".
This module imports it with BACKEND=gloo, then sets BACKEND to the backend under test (in
os.environ and in the module), so "chorus" gets exactly the tests gloo runs. The test class
subclasses TestDistBackend and _DistTestBase as upstream's
test/distributed/test_distributed_spawn.py does. Every rank is a spawned process that imports
this module again (as __mp_main__): there CHORUS_SUITE_BACKEND, set by the parent before it
spawns the ranks of a test, names the backend, and chorus.torch is imported. Init method:
file:// (TestDistBackend's). A test gloo skips is not run under chorus.

Workarounds, each for gloo and chorus alike unless said: a stand-in for expecttest (not in
Debian); DDP's ReplicatedTensor mode stays off (its import fails on Python 3.11); and, for the
backend under test only, one test helper that branches on the backend's name sees "gloo"
(see TestDistBackendWithSpawn).

Run by run_suite.py, one world size per process:
    WORLD_SIZE=2 /usr/bin/python3 dist_suite.py --results out.json [-k pattern ...]
"""

import argparse
import json
import os
import sys
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("gloo", "chorus")
TARGET_BACKEND = os.environ.get("CHORUS_SUITE_BACKEND", "chorus")
os.environ.setdefault("WORLD_SIZE", "2")
# TestDistBackend always initializes through a file:// URL, and its setUp points INIT_METHOD at
# the test's own file before the ranks are spawned (they re-initialize with it). The runner's
# import-time checks (test_barrier_timeout_global) only look at the scheme, env:// when unset.
if not os.environ.get("INIT_METHOD", "").startswith("file://"):
    os.environ["INIT_METHOD"] = "file://"

# expecttest is not packaged in Debian; the stand-in goes last on the path so that a real
# installation wins.
try:
    import expecttest  # noqa: F401
except ImportError:
    sys.path.append(os.path.join(HERE, "standin"))

import torch.nn.parallel._replicated_tensor_ddp_utils as _replicated  # noqa: E402


def _keep_replicated_tensor_off(value):
    """TestDistBackend._run turns on DDP's ReplicatedTensor mode in every rank, whose import
    (torch.distributed._shard.replicated_tensor) fails on Python 3.11: a dataclass there has a
    mutable default ("mutable default TensorProperties"), which 3.11 refuses. It fails for gloo
    just the same, so the mode stays off, which is torch's default outside this suite."""
    del value


_replicated._set_ddp_with_replicated_tensor = _keep_replicated_tensor_off

os.environ["BACKEND"] = "gloo"  # gloo's selection: the suite's decorators run at import
from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)



def use_backend(backend):
    """Makes `backend` the one the suite's test bodies see, here and in ranks spawned later."""
    os.environ["CHORUS_SUITE_BACKEND"] = backend
    os.environ["BACKEND"] = backend
    distributed_test.BACKEND = backend


use_backend(TARGET_BACKEND)
if TARGET_BACKEND == "chorus":
    import chorus.torch  # noqa: E402,F401  (registers the backend in this rank)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def _test_accumulate_gradients_no_sync(self, *args, **kwargs):
        """This helper of four DDP tests builds its model only under `if BACKEND == "mpi" or
        BACKEND == "gloo"` (CPU) or `"nccl"` (GPU): any other name leaves it undefined. The
        body is run seeing "gloo", the CPU case; the process group stays the backend's."""
        saved = distributed_test.BACKEND
        distributed_test.BACKEND = "gloo"
        try:
            return super()._test_accumulate_gradients_no_sync(*args, **kwargs)
        finally:
            distributed_test.BACKEND = saved


class RecordingResult(unittest.TextTestResult):
    """Keeps, per test, the outcome, the reason (the failure's text or the skip's) and the
    wall time from setUp to tearDown (spawning the ranks included, as for every backend)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = {}
        self._started = {}

    @staticmethod
    def _name(test):
        return test.id().split(".")[-1]

    def _record(self, test, outcome, reason=""):
        name = self._name(test)
        seconds = time.monotonic() - self._started.get(name, time.monotonic())
        self.records[name] = {"outcome": outcome, "reason": reason, "seconds": round(seconds, 2)}

    def startTest(self, test):  # noqa: N802 - unittest's names
        self._started[self._name(test)] = time.monotonic()
        super().startTest(test)

    def addSuccess(self, test):  # noqa: N802
        super().addSuccess(test)
        self._record(test, "pass")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._record(test, "fail", "".join(traceback.format_exception(*err)))

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self._record(test, "error", "".join(traceback.format_exception(*err)))

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self._record(test, "skip", str(reason))

    def addExpectedFailure(self, test, err):  # noqa: N802
        super().addExpectedFailure(test, err)
        self._record(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._record(test, "fail", "unexpected success")


def _test_names(patterns, exact):
    if exact:
        return list(exact)
    loader = unittest.TestLoader()
    if patterns:
        loader.testNamePatterns = [f"*{pattern}*" for pattern in patterns]
    return list(loader.getTestCaseNames(TestDistBackendWithSpawn))


def run_one(name, backend, result):
    use_backend(backend)
    print(f"[{backend}] ", end="", flush=True)
    TestDistBackendWithSpawn(name).run(result)
    return result.records[name]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", required=True, help="JSON file for the per-test records")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="run only tests whose name contains this (repeatable)")
    parser.add_argument("--exact", nargs="+", default=[], help="run exactly these tests")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma-separated, gloo first (default: gloo,chorus)")
    parser.add_argument("--list", action="store_true", help="print the test names and exit")
    args = parser.parse_args()
    names = _test_names(args.patterns, args.exact)
    if args.list:
        print("\n".join(names))
        return 0
    backends = args.backends.split(",")
    stream = unittest.runner._WritelnDecorator(sys.stdout)
    results = {backend: RecordingResult(stream, True, 2) for backend in backends}
    records = {}
    started = time.monotonic()
    for index, name in enumerate(names):
        print(f"== {index + 1}/{len(names)} {name} ({time.monotonic() - started:.0f} s)",
              flush=True)
        records[name] = {}
        for backend in backends:
            record = run_one(name, backend, results[backend])
            records[name][backend] = record
            if backend == "gloo" and record["outcome"] == "skip":
                break  # gloo's selection: what gloo skips, chorus is not asked to run
        with open(args.results, "w") as out:  # after every test: a killed run keeps its part
            json.dump({"world_size": int(os.environ["WORLD_SIZE"]), "tests": records}, out,
                      indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    # common_utils parses sys.argv at import (parse_known_args); our options do not clash.
    sys.exit(main())
