"""PyTorch integration: importing chorus.torch registers the torch.distributed backend
"chorus", so that

    import chorus.torch
    dist.init_process_group("chorus")          # env:// (torchrun, chorus-run) or tcp://

bootstraps a Chorus communicator through the c10d store. It also provides allreduce_hook, a
DDP communication hook that averages buckets through Chorus while another backend stays the
default group, and compress_hook(codec), the same with gradient compression. Without a hook,
CHORUS_COMPRESSION compresses the backend's own large float32 sum allreduces (DDP's buckets),
with an error-feedback residual per bucket for int4 and top-k (feedback.py). Needs torch >= 1.13
(Python ProcessGroup subclasses, _create_work_from_future).
"""

import torch.distributed as dist

from .completion import CompletionThread
from .hooks import ChorusHookState, allreduce_hook, compress_hook
from .process_group import BACKEND_NAME, ProcessGroupChorus, create_process_group, reduce_op_name


def _register_backend():
    # Importing twice (or reloading) must not trip register_backend's duplicate assertion.
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, create_process_group)


_register_backend()

__all__ = [
    "BACKEND_NAME", "ChorusHookState", "CompletionThread", "ProcessGroupChorus",
    "allreduce_hook", "compress_hook", "create_process_group", "reduce_op_name",
]
