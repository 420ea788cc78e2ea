"""Error feedback for the "chorus" backend's compressed allreduces: one chorus.Residual per
gradient tensor, so that CHORUS_COMPRESSION=int4 (or top-k) on a plain DDP model keeps, bucket by
bucket, what quantisation dropped and adds it to the next step's gradients, as
chorus.torch.compress_hook does for the buckets it sees.

Which tensor is which: the backend only sees tensors, not DDP's buckets. A residual belongs to
one tensor object (DDP hands its bucket's same tensor to every step's allreduce, and torch keeps
one Python object per tensor while it lives), and is freed when that tensor is: so the buckets
of DDP's first step, which it rebuilds after that step, take their residuals with them, and a
later tensor that happens to reuse an address or an id() starts from zero. A tensor that
changes its number of elements starts again from zero too.

CHORUS_COMPRESSION_FEEDBACK chooses: auto (the default: on for int4 and top-k, the codecs that
need it to converge), on, or off.
"""

import os
import threading
import weakref

FEEDBACK_ENV = "CHORUS_COMPRESSION_FEEDBACK"
_MODES = ("auto", "on", "off")


def feedback_mode():
    """CHORUS_COMPRESSION_FEEDBACK's value; ValueError naming the variable for another."""
    mode = os.environ.get(FEEDBACK_ENV, "").strip().lower() or "auto"
    if mode not in _MODES:
        raise ValueError(f"chorus: {FEEDBACK_ENV}={os.environ[FEEDBACK_ENV]!r}: expected auto, on or off")
    return mode


def codec_wants_feedback(mode, codec):
    """Whether a residual is kept for calls compressed with `codec` ("int4", "topk:0.01")."""
    if mode == "auto":
        return codec.startswith(("int4", "topk"))
    return mode == "on"


class TensorResiduals:
    """comm's residuals, one per live tensor object.

    Lifetimes: a call in flight holds its tensor and its Residual (the work's keepalive), so
    this registry only ever drops its own references, and a Residual is freed (Residual.__del__)
    once no call uses it any more. The weakref callback that reports a dead tensor takes no lock
    and allocates nothing: it can run wherever the garbage collector does, even inside get()
    on this thread, so it only appends the key to a list that get(), __len__ and close() empty."""

    def __init__(self, comm):
        self._comm = comm
        self._lock = threading.Lock()
        self._by_id = {}  # id(tensor) -> (weakref to it, Residual)
        self._dead = []  # keys whose tensor died; list.append is atomic

    def __len__(self):
        self._drop_dead()
        return len(self._by_id)

    def get(self, tensor, count):
        """The residual of `tensor` for calls of `count` float32, made (zero) on its first call."""
        self._drop_dead()
        key = id(tensor)
        with self._lock:
            entry = self._by_id.get(key)
        if entry is not None and entry[0]() is tensor and entry[1].count == count:
            return entry[1]
        residual = self._comm.residual(count)  # outside the lock: it may run the collector
        ref = weakref.ref(tensor, _on_death(self._dead, key))
        with self._lock:
            # Another size for the same tensor (or its id reused): the old Residual goes when
            # the calls that hold it end.
            stale, self._by_id[key] = self._by_id.get(key), (ref, residual)
        del stale
        return residual

    def _drop_dead(self):
        dropped = []
        with self._lock:
            while self._dead:
                key = self._dead.pop()
                entry = self._by_id.get(key)
                if entry is not None and entry[0]() is None:
                    dropped.append(self._by_id.pop(key))
        del dropped  # outside the lock: the Residuals that nothing else holds are freed here

    def close(self):
        """Lets go of every residual (each is freed once no call holds it)."""
        with self._lock:
            entries, self._by_id, self._dead[:] = self._by_id, {}, []
        del entries


def _on_death(dead, key):
    """The weakref callback of one tensor: records its key, nothing else (see TensorResiduals)."""

    def callback(_ref):
        dead.append(key)

    return callback
