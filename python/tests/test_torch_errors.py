"""Failures after posting reach the torch caller: a peer that is killed (SIGKILL) or stopped
(SIGSTOP) while the survivor runs a plain collective, a barrier with a timeout, or DDP
training. The survivor's Work.wait(), Work.result(), the future's wait() and value(), a
blocking call and DDP's backward must raise with the library's message (the status name and
its sentence), is_success() must be False, and a stopped peer must cost the operation timeout,
no more (it used to "succeed": torch 1.13 completes a Python future successfully when it is
given an exception). Two more scenarios without a victim: all_reduce with mismatched counts
(both ranks raise) and an abort while waiting (COMM_BROKEN before the timeout). The driver
starts the two ranks of each scenario itself, a few scenarios at once, with a file://
rendezvous, so that it can reap the victim:
    /usr/bin/python3 python/tests/test_torch_errors.py [--only stop-barrier ...]
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

OP_TIMEOUT_SEC = 2
SETUP_TIMEOUT_SEC = 60  # the store's and the connections' (CHORUS_CONNECT_TIMEOUT_SEC)
SLACK_SEC = 25.0  # past the timeout, under oversubscribed test runs
JOB_TIMEOUT_SEC = 120
ABORT_AFTER_SEC = 0.3
ABORT_IDLE_SEC = 4.0
FATES = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}
# name -> (fate of rank 1, workload): rank 1 kills or stops itself after the warm-up; with no
# fate both ranks run the workload and must exit 0.
SCENARIOS = {f"{fate}-{workload}": (fate, workload)
             for fate in FATES for workload in ("allreduce", "barrier", "ddp")}
SCENARIOS.update({"mismatch": (None, "mismatch"), "abort": (None, "abort")})
SURVIVOR, VICTIM = 0, 1
WARMUP_STEPS = 2
PARALLEL_JOBS = 8  # scenarios at once: most of each is torch's import or a timeout


class Checks:
    """Collects the survivor's findings; each failed expectation is one line."""

    def __init__(self, fate):
        self.fate = fate
        self.problems = []
        self.messages = []

    def expect_raise(self, what, call, started=None):
        try:
            call()
        except Exception as error:  # noqa: BLE001 - any exception is examined below
            self._examine(what, error, started)
            return error
        self.problems.append(f"{what}: no exception raised")
        return None

    def _examine(self, what, error, started):
        text = str(error)
        self.messages.append(f"{what}: {type(error).__name__}: {text.splitlines()[0][:300]}")
        if "[CHORUS_ERR_" not in text:
            self.problems.append(f"{what}: the library's status is not in the message: {text!r}")
        if self.fate == "stop" and started is not None:
            if "CHORUS_ERR_TIMEOUT" not in text or " timeout " not in text:
                self.problems.append(f"{what}: a stopped peer must be a timeout: {text!r}")
            elapsed = time.monotonic() - started
            if elapsed < OP_TIMEOUT_SEC - 0.2 or elapsed > OP_TIMEOUT_SEC + SLACK_SEC:
                self.problems.append(f"{what}: raised after {elapsed:.1f} s, the timeout is "
                                     f"{OP_TIMEOUT_SEC} s")

    def expect(self, condition, what):
        if not condition:
            self.problems.append(what)


def check_failed_work(checks, work, started, what):
    """Every way a caller can look at a failed Work raises (or says it failed)."""
    checks.expect_raise(f"{what} Work.wait()", work.wait, started)
    checks.expect(work.is_completed(), f"{what}: is_completed() is False after the failure")
    checks.expect(not work.is_success(), f"{what}: is_success() is True after the failure")
    checks.expect(work.exception() is not None, f"{what}: exception() is None")
    checks.expect_raise(f"{what} Work.result()", work.result)
    checks.expect_raise(f"{what} future.wait()", work.get_future().wait)
    checks.expect_raise(f"{what} future.value()", work.get_future().value)


def survivor_allreduce(checks, dist, torch):
    t = torch.ones(4096)
    started = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    check_failed_work(checks, work, started, "all_reduce")
    checks.expect_raise("blocking all_reduce after the failure",
                        lambda: dist.all_reduce(torch.ones(8)))


def survivor_barrier(checks, dist, torch):
    started = time.monotonic()
    work = dist.barrier(async_op=True)
    check_failed_work(checks, work, started, "barrier")
    checks.expect_raise("blocking barrier after the failure", dist.barrier)


def both_mismatch(checks, dist, torch):
    """The ranks call all_reduce with different counts: both raise, none hangs."""
    work = dist.all_reduce(torch.ones(4 + dist.get_rank()), async_op=True)
    check_failed_work(checks, work, None, "mismatched all_reduce")


def both_abort(checks, dist, torch):
    """Rank 0 aborts its communicator while its all_reduce waits for rank 1, which does not
    call: the wait must end at once with the abort, long before the operation timeout."""
    if dist.get_rank() != 0:
        time.sleep(ABORT_IDLE_SEC)  # alive and silent while rank 0 waits
        return
    pg = dist.distributed_c10d._get_default_group()
    timer = threading.Timer(ABORT_AFTER_SEC, pg.comm.abort)
    work = dist.all_reduce(torch.ones(16), async_op=True)
    started = time.monotonic()
    timer.start()
    try:
        error = checks.expect_raise("aborted all_reduce Work.wait()", work.wait)
    finally:
        timer.cancel()
    checks.expect(time.monotonic() - started < OP_TIMEOUT_SEC,
                  "the abort did not end the wait before the operation timeout")
    checks.expect(error is not None and "CHORUS_ERR_COMM_BROKEN" in str(error),
                  f"an aborted operation must fail as COMM_BROKEN: {error}")
    check_failed_work(checks, work, None, "aborted all_reduce")


def survivor_ddp(checks, torch, model, optimizer):
    """Trains on with the warm-up's DDP (a new one would first broadcast its parameters)."""
    steps_done = 0

    def train():
        nonlocal steps_done
        for _ in range(10):
            train_step(torch, model, optimizer)
            steps_done += 1

    checks.expect_raise("DDP training (loss.backward)", train, time.monotonic())
    checks.expect(steps_done == 0, f"DDP trained {steps_done} steps with a dead peer")


def make_ddp(torch):
    torch.manual_seed(1)
    layers = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    model = torch.nn.parallel.DistributedDataParallel(layers)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(torch, model, optimizer):
    optimizer.zero_grad()
    loss = model(torch.randn(16, 32)).square().mean()
    loss.backward()
    optimizer.step()


def rank_main(args):
    import torch
    import torch.distributed as dist

    import chorus.torch  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    fate = args.fate if args.fate != "none" else None
    # The store gets its own, set-up timeout: with init_method torch gives it the operations'
    # 2 s, and under the suite's load one rank's torch import can lag the other's by more, so
    # rank 1 gave up waiting for rank 0's id before rank 0 had written it.
    store = dist.FileStore(args.init_file, 2)
    store.set_timeout(datetime.timedelta(seconds=SETUP_TIMEOUT_SEC))
    dist.init_process_group("chorus", store=store, rank=args.rank, world_size=2,
                            timeout=datetime.timedelta(seconds=OP_TIMEOUT_SEC))
    if args.workload == "ddp":
        model, optimizer = make_ddp(torch)
        for _ in range(WARMUP_STEPS):
            train_step(torch, model, optimizer)
    else:
        dist.all_reduce(torch.ones(16))  # connections up, both ranks alive
    if fate is not None and args.rank == VICTIM:
        print("victim: signalling itself", flush=True)
        os.kill(os.getpid(), FATES[fate])
        time.sleep(JOB_TIMEOUT_SEC)  # stopped: the driver kills it
        return 3
    checks = Checks(fate)
    if args.workload == "ddp":
        survivor_ddp(checks, torch, model, optimizer)
    else:
        workloads = {"allreduce": survivor_allreduce, "barrier": survivor_barrier,
                     "mismatch": both_mismatch, "abort": both_abort}
        workloads[args.workload](checks, dist, torch)
    dist.destroy_process_group()
    print("RESULT " + json.dumps({"problems": checks.problems, "messages": checks.messages}),
          flush=True)
    return 1 if checks.problems else 0


class Scenario:
    """The two rank processes of one scenario, started at once and judged when both end."""

    def __init__(self, name, tmp):
        self.name = name
        self.fate, workload = SCENARIOS[name]
        init_file = os.path.join(tmp, f"{name}.rendezvous")
        env = dict(os.environ)
        env.pop("CHORUS_TIMEOUT_SEC", None)  # torch's timeout bounds every operation
        env["CHORUS_CONNECT_TIMEOUT_SEC"] = str(SETUP_TIMEOUT_SEC)  # but not set-up, under load
        self.ranks = []
        for rank in (SURVIVOR, VICTIM):
            command = [sys.executable, os.path.abspath(__file__), "--rank-mode",
                       "--rank", str(rank), "--fate", self.fate or "none",
                       "--workload", workload, "--init-file", init_file]
            self.ranks.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True))
        self.started = time.monotonic()

    def finish(self):
        """Waits for the survivor(s), reaps a victim, prints the verdict; True if it passed."""
        outputs, statuses = [], []
        for rank, process in enumerate(self.ranks):
            is_victim = self.fate is not None and rank == VICTIM
            if is_victim:
                # The survivor is done: a stopped victim (or one that failed to die) goes now.
                if process.poll() is None:
                    process.kill()
            try:
                out, _ = process.communicate(timeout=max(1.0, self.deadline()))
            except subprocess.TimeoutExpired:
                process.kill()
                out, _ = process.communicate()
                out += "\n(driver: the rank hung and was killed)"
            outputs.append(out)
            statuses.append(process.returncode)
        elapsed = time.monotonic() - self.started
        expected = [0, -signal.SIGKILL if self.fate else 0]
        results = [self._result(out) for out in outputs]
        judged = [r for r, victim in zip(results, (False, self.fate is not None)) if not victim]
        ok = statuses == expected and all(r is not None for r in judged)
        print(f"{'ok  ' if ok else 'FAIL'} {self.name}: exit statuses {statuses}, expected "
              f"{expected}, {elapsed:.1f} s", flush=True)
        for result in judged:
            for line in (result or {}).get("messages", []):
                print(f"     {line}", flush=True)
        if not ok:
            for rank, out in enumerate(outputs):
                print(f"---- rank {rank} output ----\n{out[-4000:]}", flush=True)
        return ok

    def deadline(self):
        return JOB_TIMEOUT_SEC - (time.monotonic() - self.started)

    @staticmethod
    def _result(out):
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        return json.loads(line[len("RESULT "):]) if line else None


def driver(args):
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: torch is not installed for this python", flush=True)
        return ref.SKIP_RETURN_CODE
    names = [name for name in SCENARIOS if not args.only or name in args.only]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="chorus-torch-errors-") as tmp:
        for first in range(0, len(names), args.jobs):
            batch = [Scenario(name, tmp) for name in names[first:first + args.jobs]]
            failures += sum(not scenario.finish() for scenario in batch)
    print(f"{'FAILED' if failures else 'passed'}: {failures} of {len(names)} scenarios failed",
          flush=True)
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank-mode", action="store_true")
    parser.add_argument("--rank", type=int)
    parser.add_argument("--fate", choices=sorted(FATES) + ["none"])
    parser.add_argument("--workload")
    parser.add_argument("--jobs", type=int, default=PARALLEL_JOBS)
    parser.add_argument("--init-file")
    parser.add_argument("--only", action="append", default=[], choices=sorted(SCENARIOS),
                        help="run only this scenario (repeatable)")
    args = parser.parse_args()
    return rank_main(args) if args.rank_mode else driver(args)


if __name__ == "__main__":
    sys.exit(main())
