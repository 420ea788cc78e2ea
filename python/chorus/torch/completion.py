"""The completion thread that turns Chorus non-blocking requests into torch futures.

Any thread (the autograd engine's, the user's) posts a non-blocking call and gets a
torch.futures.Future at once; a thread per communicator waits for the requests in posting
order (a second one for point-to-point operations), with the GIL released inside chorus_wait,
then runs the finishing step (e.g. copying out of a staging buffer) and completes the future,
which runs DDP's callbacks. A caller that waits for one request (Work.wait) settles it itself
(settle_now) rather than wait for the thread to reach it: whichever comes first runs the
finishing step, once. Tensors stay referenced by the queue entry until their request is done.
"""

import atexit
import collections
import sys
import threading

import torch

from ..errors import error_for_status

_JOIN_TIMEOUT_SEC = 60.0


class _Entry:
    __slots__ = ("record", "future", "finish", "lock", "settled")

    def __init__(self, record, future, finish):
        self.record = record  # chorus.comm._InFlight, holds the buffers
        self.future = future
        self.finish = finish  # () -> the future's value, run after success
        self.lock = threading.Lock()
        self.settled = False  # claimed by the thread that completes the future


COLLECTIVES, POINT_TO_POINT = "collectives", "point-to-point"


class CompletionThread:
    """Posts chorus_i* calls on `comm` and completes their futures from daemon threads: one
    for collectives, which the library completes in posting order, and one (started with the
    first of them) for point-to-point operations, which complete in any order: a receive that
    waits for its sender must not hold back the futures of the collectives posted after it."""

    def __init__(self, comm, name="chorus-completion", describe_failure=None):
        self._comm = comm
        self._name = name
        # (status, operation) -> the text that heads the error of a failed operation
        self._describe_failure = describe_failure
        self._queues = {COLLECTIVES: collections.deque(), POINT_TO_POINT: collections.deque()}
        self._threads = {}
        self._cond = threading.Condition()
        self._stopping = False
        self.max_pending = 0  # most requests ever in flight at once: evidence of overlap
        self._start_lane(COLLECTIVES)
        # The threads must be gone before the interpreter finalizes: a daemon thread still
        # inside torch's C++ (completing a future) when it tries to retake the GIL is
        # killed by a forced unwind, and that aborts the process ("terminate called without
        # an active exception"). Registered after the communicator was made, so this runs
        # before the communicator's own exit-time finalizer (atexit is last in, first out).
        atexit.register(self.shutdown)

    def _start_lane(self, lane):
        suffix = "" if lane == COLLECTIVES else "-p2p"
        thread = threading.Thread(target=self._run, args=(lane,), name=self._name + suffix,
                                  daemon=True)
        self._threads[lane] = thread
        thread.start()

    def submit(self, coll, args, keepalive, finish, operation=None, lane=COLLECTIVES):
        """Posts chorus_i<coll>(*args) and returns a torch Future completed with finish()'s
        value, or with the ChorusError. Raises at once if the posting itself fails."""
        return self.submit_entry(coll, args, keepalive, finish, operation, lane).future

    def submit_entry(self, coll, args, keepalive, finish, operation=None, lane=COLLECTIVES,
                     is_recv=False):
        """submit(), returning the queue entry, which settle_now() and try_settle() take.
        is_recv: a receive, whose record keeps the MessageInfo (source, tag, count)."""
        future = torch.futures.Future()
        with self._cond:
            if self._stopping:
                raise RuntimeError("chorus: the completion thread was shut down")
            if lane not in self._threads:
                self._start_lane(lane)
            queue = self._queues[lane]
            # Post and enqueue under one lock: queue order is then posting order.
            record = self._comm.post(coll, args, keepalive, operation, is_recv=is_recv)
            entry = _Entry(record, future, finish)
            # A request that completed while being posted (one rank, a zero count) and has
            # nothing queued before it is finished here: handing it to the thread would cost
            # two context switches for nothing.
            outcome = None if queue else self._comm.test_record(record)
            if outcome is None:
                queue.append(entry)
                self.max_pending = max(self.max_pending, self._pending())
                self._cond.notify_all()
        if outcome is not None:
            self._settle_once(entry, *outcome)
        return entry

    def settle_now(self, entry):
        """Waits for the entry's request in the calling thread (GIL released) and completes
        its future, unless that is done or under way: so Work.wait() returns as soon as its
        own request completed, whatever the requests queued before it are doing."""
        if not entry.future.done():
            self._settle_once(entry, *self._comm.wait_record(entry.record))

    def try_settle(self, entry):
        """settle_now() if the request has completed; returns whether the future is done or
        being completed."""
        if entry.future.done():
            return True
        record = entry.record
        # Never block: the completion thread (or another waiter) holds the record's lock for
        # as long as it waits in chorus_wait, and then it settles the entry itself.
        if not record.lock.acquire(blocking=False):
            return False
        try:
            if record.status is None:
                self._comm._test_record(record)  # test_record() without taking the lock
            outcome = None if record.status is None else (record.status, record.error)
        finally:
            record.lock.release()
        if outcome is None:
            return False
        self._settle_once(entry, *outcome)
        return True

    def shutdown(self):
        """Lets the queued requests complete, then stops the threads. Idempotent."""
        atexit.unregister(self.shutdown)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            threads = list(self._threads.values())
        for thread in threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(_JOIN_TIMEOUT_SEC)

    @property
    def lock(self):
        """Held while posting: a caller that holds it posts several calls with nothing in
        between (a group)."""
        return self._cond

    @property
    def pending(self):
        with self._cond:
            return self._pending()

    def _pending(self):
        return sum(len(queue) for queue in self._queues.values())

    def _next_entry(self, queue):
        with self._cond:
            while not queue and not self._stopping:
                self._cond.wait()
            return queue[0] if queue else None

    def _run(self, lane):
        queue = self._queues[lane]
        while True:
            entry = self._next_entry(queue)
            if entry is None:
                return
            try:
                self._complete(entry)
            except BaseException as exc:  # never die with futures left incomplete
                if not entry.future.done():
                    entry.future.set_exception(exc)
            with self._cond:
                queue.popleft()

    def _complete(self, entry):
        status, detail = self._comm.wait_record(entry.record)
        self._settle_once(entry, status, detail)

    def _settle_once(self, entry, status, detail):
        with entry.lock:
            if entry.settled:
                return  # another thread completes (or completed) the future
            entry.settled = True
        self._settle(entry, status, detail)

    def _settle(self, entry, status, detail):
        if status < 0:
            operation = entry.record.operation
            if self._describe_failure is not None:
                operation = self._describe_failure(status, operation)
            entry.future.set_exception(error_for_status(status, detail, operation))
            return
        try:
            # A receive's finishing step reads its record (the message's size and source).
            value = (entry.finish(entry.record) if getattr(entry.finish, "needs_record", False)
                     else entry.finish())
        except Exception as exc:  # a failed copy-out must fail the future, not the thread
            entry.future.set_exception(exc)
            return
        try:
            entry.future.set_result(value)
        except Exception as exc:  # a callback raised: it is reported through its own future
            _report_callback_error(exc)


def _report_callback_error(exc):
    print(f"chorus: a future callback raised: {exc!r}", file=sys.stderr)
