"""A DDP communication hook that averages gradient buckets through Chorus, for programs that
keep another backend (e.g. gloo) as the default process group:

    state = chorus.torch.ChorusHookState()           # bootstraps through the default store
    ddp_model.register_comm_hook(state, chorus.torch.allreduce_hook)

The bucket's flat buffer is averaged in place with a non-blocking CHORUS_AVG allreduce; the
returned future completes from the communicator's completion thread, so backward continues; a
failed allreduce fails it, and DDP's backward raises the library's error.
"""

import itertools

import torch.distributed as dist

from .. import _buffers, _lib
from ..comm import Communicator
from .completion import CompletionThread
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

    def shutdown(self):
        self.engine.shutdown()
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
