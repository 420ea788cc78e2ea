"""A DDP communication hook that averages gradient buckets through Chorus, for programs that
keep another backend (e.g. gloo) as the default process group:

    state = chorus.torch.ChorusHookState()           # bootstraps through the default store
    ddp_model.register_comm_hook(state, chorus.torch.allreduce_hook)

The bucket's flat buffer is averaged in place with a non-blocking CHORUS_AVG allreduce; the
returned future completes from the communicator's completion thread, so backward continues; a
failed allreduce fails it, and DDP's backward raises the library's error.

compress_hook(codec) makes the same hook with gradient compression (chorus_allreduce_ex):

    ddp_model.register_comm_hook(state, chorus.torch.compress_hook("int8"))

with an error-feedback residual per bucket, kept in the state (on by default for int4 and top-k,
whose dropped parts must come back later for training to converge).
"""

import ctypes
import itertools

import torch.distributed as dist

from .. import _buffers, _lib
from ..comm import Communicator, compression_opts
from .completion import CompletionThread
from .feedback import codec_wants_feedback
from .work import checked_future

_hook_state_counter = itertools.count()


class ChorusHookState:
    """The Chorus communicator (and its completion thread) a comm hook uses. Without `comm`,
    one is bootstrapped over `process_group` (default: the default group) through the default
    c10d store; every rank of that group must construct its state in the same order."""

    def __init__(self, comm=None, process_group=None):
        if comm is None:
            comm = _comm_over_group(process_group)
        self.comm = comm
        self.engine = CompletionThread(comm, name=f"chorus-hook-{comm.rank}")
        # compress_hook's error feedback: bucket index -> chorus.Residual, and the backward
        # passes it has seen (the residuals start after the first: see _bucket_residual).
        self.residuals = {}
        self.iterations = 0

    def shutdown(self):
        self.engine.shutdown()
        for residual in self.residuals.values():
            residual.close()
        self.residuals.clear()
        self.comm.destroy()

    def __repr__(self):
        return f"<ChorusHookState {self.comm!r}>"


def _comm_over_group(process_group):
    rank = dist.get_rank(process_group)
    size = dist.get_world_size(process_group)
    store = dist.distributed_c10d._get_default_store()
    key = f"chorus_hook_unique_id/{next(_hook_state_counter)}"
    return Communicator.from_store(store, rank, size, key=key)


def allreduce_hook(state, bucket):
    """DDP comm hook: bucket.buffer() <- average over ranks, in place, through Chorus."""
    buffer = bucket.buffer()
    buf = _buffers.as_buffer(buffer, what="chorus allreduce_hook bucket")
    args = (buf.address, buf.address, buf.count, buf.dtype_code, _lib.OPS["avg"])
    future = state.engine.submit("allreduce", args, (buffer, buf), lambda: buffer,
                                 operation="ddp bucket allreduce")
    return checked_future(future)  # a failure must fail DDP's backward


def _bucket_residual(state, bucket, count):
    """The bucket's residual, or None during the first backward pass: DDP rebuilds its buckets
    after it, in the order gradients became ready, so an index may then hold other parameters
    (with the same count, for a model in one bucket), and a residual kept from the first pass
    would be added to the wrong ones (PyTorch's PowerSGD hook waits likewise). Remade when an
    index later holds another number of elements."""
    if state.iterations == 0:
        return None
    residual = state.residuals.get(bucket.index())
    if residual is None or residual.count != count:
        if residual is not None:
            residual.close()
        residual = state.residuals[bucket.index()] = state.comm.residual(count)
    return residual


def compress_hook(codec, error_feedback=None, scope="inter"):
    """A DDP comm hook averaging buckets through Chorus with gradient compression: codec "fp16",
    "bf16", "int8", "int4" or "topk:FRACTION"; scope "inter" (only what crosses hosts) or "all".
    error_feedback: keep a residual per bucket (None: on for int4 and top-k; from the second
    backward pass on, once DDP's buckets are final). Register it with a ChorusHookState of its
    own, one per DDP model: ddp.register_comm_hook(state, compress_hook("int8")). Buckets that
    are not float32 go uncompressed."""
    opts = compression_opts(codec, scope)
    if error_feedback is None:
        error_feedback = codec_wants_feedback("auto", str(codec).lower())

    def hook(state, bucket):
        buffer = bucket.buffer()
        buf = _buffers.as_buffer(buffer, what="chorus compress_hook bucket")
        residual = _bucket_residual(state, bucket, buf.count) \
            if error_feedback and buf.dtype == "float32" else None
        call_opts = _lib.AllreduceOptsStruct(ctypes.pointer(opts), residual.handle if residual else None)
        args = (buf.address, buf.address, buf.count, buf.dtype_code, _lib.OPS["avg"], ctypes.byref(call_opts))
        future = state.engine.submit("allreduce_ex", args, (buffer, buf, opts, call_opts, residual),
                                     lambda: buffer, operation=f"ddp bucket allreduce ({codec})")
        if bucket.is_last():
            state.iterations += 1
        return checked_future(future)

    hook.__name__ = hook.__qualname__ = f"chorus_compress_hook_{str(codec).replace(':', '_')}"
    return hook
