"""ChorusWork: the Work the backend returns, through which every failure reaches the caller.

torch 1.13 gives a Python backend two ways to hand back a Work, and neither reports failures
on its own: _create_work_from_future's Work returns True from wait() and reports success
whatever its future holds, and a Python future's set_exception completes the C++ future
*successfully*, with the exception as its value, so C++ consumers such as DDP's reducer see a
result. So:

- ChorusWork subclasses c10d's Work (pybind11 routes C++ calls of wait() and getFuture() to
  the Python overrides) and raises the library's error from wait() and result();
  is_success() is False and exception() returns the error after a failure.
- Its get_future() is a future derived with then() from the one the completion thread
  completes: a callback that raises is the one way Python can make a C++ future fail, so DDP's
  backward, wait() and value() all raise (torch prefixes the message with "Got the following
  error when running the callback", then the exception's name and the library's sentence).
- c10d's C++ side (DDP's reducer, broadcast_coalesced, verify_params) keeps only the C++ half
  of a Work it got from Python; once the Python object is gone its calls reach Work's base
  methods, which wait forever for a finish() that Python cannot call. WorkKeeper therefore
  keeps each ChorusWork alive while its operation runs and until somebody has looked at it
  after it completed (see WorkKeeper for the exact rule).
"""

import collections
import datetime
import threading
import time

from torch._C._distributed_c10d import Work as _C10dWork

_NO_TIMEOUT = datetime.timedelta(0)
_FIRST_POLL_SEC, _LAST_POLL_SEC = 0.0005, 0.05


def _value_or_raise(future):
    return future.value()  # re-raises the ChorusError set with set_exception


def checked_future(future):
    """A future that completes with `future`'s value, or *fails* (at the C++ level, which is
    what DDP and Work.wait() look at) when `future` was completed with set_exception."""
    return future.then(_value_or_raise)


class ChorusWork(_C10dWork):
    """A posted operation. `future` is the torch.futures.Future the completion thread
    completes with the operation's value (a list of tensors) or with set_exception; `entry`
    its queue entry, or the list of them of a group posted as one operation."""

    def __init__(self, future, operation, keeper=None, source_rank=None, engine=None,
                 entry=None):
        super().__init__()
        self._future = future
        self._engine = engine  # the CompletionThread and queue entries, to settle in wait()
        self._entries = entry if isinstance(entry, list) else [entry]
        self._checked = None  # made by the first get_future(): callers that only wait skip it
        self._operation = operation
        self._source_rank_value = source_rank  # an int, or a callable for any-source receives
        self._keeper = keeper
        self.looked_at = False
        if keeper is not None:
            keeper.hold(self)

    # ---- what c10d calls (from C++ too: wait and get_future) ----

    def wait(self, timeout=_NO_TIMEOUT):
        self.looked_at = True
        if not self._future.done():
            if timeout and timeout > _NO_TIMEOUT:
                self._wait_until_done(timeout)
            elif self._engine is not None:
                for entry in self._entries:
                    self._engine.settle_now(entry)
        self._future.wait()  # raises the ChorusError of a failed operation
        return True

    def get_future(self):
        self.looked_at = True
        checked = self._checked
        if checked is None:  # two racing first calls would each get a valid future
            checked = self._checked = checked_future(self._future)
        return checked

    def is_completed(self):
        self.looked_at = True
        return self._future.done()

    def is_success(self):
        return self.is_completed() and self.exception() is None

    def exception(self):
        """The ChorusError the operation failed with, None while it runs or if it succeeded."""
        self.looked_at = True
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as error:  # noqa: BLE001 - the failure is the answer
            return error
        return None

    def result(self):
        self.wait()
        return self._future.value()

    def source_rank(self):
        self.wait()
        source = self._source_rank_value
        if callable(source):
            source = source()
        if source is None:
            raise RuntimeError(f"chorus: {self._operation} has no source rank")
        return int(source)

    _source_rank = source_rank

    def synchronize(self):
        """CPU tensors: nothing to synchronize with."""

    # ---- helpers ----

    def _wait_until_done(self, timeout):
        """Polls the request (it may complete before the thread reaches it) until it is done
        or the caller's timeout expires."""
        deadline = time.monotonic() + timeout.total_seconds()
        pause = _FIRST_POLL_SEC
        while not self._future.done():
            if self._engine is not None and all(self._engine.try_settle(e) for e in self._entries):
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"chorus: {self._operation} did not complete within "
                                   f"{timeout.total_seconds():g} s (Work.wait timeout); it "
                                   f"is still running")
            time.sleep(pause)
            pause = min(pause * 2, _LAST_POLL_SEC)

    def __repr__(self):
        state = "running"
        if self._future.done():
            state = "failed" if self.exception() is not None else "done"
        return f"<ChorusWork {self._operation} {state}>"


class WorkKeeper:
    """Keeps ChorusWork objects alive for c10d's C++ side, in posting order. The oldest is let
    go once its operation has completed and (a) somebody called wait(), get_future(),
    is_completed() or exception() on it, or (b) more than UNLOOKED_LIMIT works were posted
    after it. The RECENT newest works are always kept, so a C++ caller that looks twice (wait,
    then result) still finds the Python object. C++ callers look at a Work right after getting
    it (DDP takes the future at once, broadcast_coalesced waits with at most two in flight), so
    (b) only frees works a Python caller dropped without looking, which it may not hold."""

    RECENT = 16
    UNLOOKED_LIMIT = 256

    def __init__(self):
        self._works = collections.deque()
        self._lock = threading.Lock()

    def hold(self, work):
        with self._lock:
            self._works.append(work)
            self._let_go_of_finished()

    def _let_go_of_finished(self):
        works = self._works
        while len(works) > self.RECENT:
            oldest = works[0]
            if not oldest._future.done():
                return
            if not oldest.looked_at and len(works) <= self.UNLOOKED_LIMIT:
                return
            works.popleft()

    def clear(self):
        with self._lock:
            self._works.clear()

    def __len__(self):
        with self._lock:
            return len(self._works)
