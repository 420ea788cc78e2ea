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
    """comm's residuals, one per live tensor object."""

    def __init__(self, comm):
        self._comm = comm
        self._lock = threading.Lock()
        self._by_id = {}  # id(tensor) -> (weakref to it, Residual)

    def __len__(self):
        return len(self._by_id)

    def get(self, tensor, count):
        """The residual of `tensor` for calls of `count` float32, made (zero) on its first call."""
        key = id(tensor)
        with self._lock:
            entry = self._by_id.get(key)
            if entry is not None and entry[0]() is tensor and entry[1].count == count:
                return entry[1]
            stale = entry[1] if entry is not None else None
            residual = self._comm.residual(count)
            self._by_id[key] = (weakref.ref(tensor, self._forget(key)), residual)
        if stale is not None:  # the same tensor with another size: no call of it is in flight
            stale.close()
        return residual

    def _forget(self, key):
        """The callback that frees a residual with its tensor. A work in flight holds its
        tensor, so the tensor, and then its residual, go only once no call uses them."""
        owner = weakref.ref(self)

        def forget(ref):
            self_ = owner()
            if self_ is None:
                return
            with self_._lock:
                entry = self_._by_id.get(key)
                if entry is None or entry[0] is not ref:
                    return
                del self_._by_id[key]
            entry[1].close()

        return forget

    def close(self):
        """Frees every residual (after the last call that uses them completed)."""
        with self._lock:
            entries, self._by_id = list(self._by_id.values()), {}
        for _, residual in entries:
            residual.close()
