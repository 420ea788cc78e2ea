"""Chorus for Python: collectives over shared memory and TCP on numpy arrays and torch tensors,
in place, through ctypes. `import chorus.torch` adds the torch.distributed backend "chorus".

    import chorus, numpy as np
    comm = chorus.init()                  # from CHORUS_* / torchrun / Slurm / Open MPI env
    x = np.arange(4, dtype=np.float32)
    comm.allreduce(x)                     # in place, sum over ranks
    req = comm.iallreduce(x, op="max")    # non-blocking
    req.wait()
    with chorus.group():                  # gathered, fused, run at the end of the block
        comm.allreduce(a); comm.allreduce(b)
"""

from . import _lib
from .comm import (
    ANY_SOURCE,
    ANY_TAG,
    Communicator,
    MessageInfo,
    Request,
    Residual,
    UniqueId,
    compression_opts,
    group,
    group_end,
    group_start,
    init,
)
from .errors import (
    ChorusError,
    CommBrokenError,
    InternalError,
    InvalidArgumentError,
    InvalidUsageError,
    MismatchError,
    NoMemoryError,
    NotSupportedError,
    ProtocolError,
    RemoteError,
    SystemCallError,
    TimeoutError,
    TruncationError,
)
from .store import FileStore

__version__ = "0.1.0"

SUM, PROD, MAX, MIN, AVG = "sum", "prod", "max", "min", "avg"
SPLIT_NOCOLOR = -1
TAG_MAX = _lib.TAG_MAX

#: The element types and reduction ops the loaded library knows, by name.
DTYPES = tuple(_lib.DTYPES)
OPS = tuple(_lib.OPS)
#: The compression codecs the loaded library knows (Communicator.set_compression).
CODECS = tuple(_lib.CODECS)
#: Path of the libchorus.so in use.
library_path = _lib.library_path


def library_version():
    """CHORUS_VERSION_CODE of the loaded library (major * 10000 + minor * 100 + patch)."""
    return _lib.lib.chorus_version()


__all__ = [
    "ANY_SOURCE", "ANY_TAG", "AVG", "CODECS", "ChorusError", "CommBrokenError", "Communicator", "DTYPES",
    "FileStore", "InternalError", "InvalidArgumentError", "InvalidUsageError", "MAX", "MIN",
    "MessageInfo", "MismatchError", "NoMemoryError", "NotSupportedError", "OPS", "PROD",
    "ProtocolError", "RemoteError", "Request", "Residual", "SPLIT_NOCOLOR", "SUM", "SystemCallError",
    "TAG_MAX", "TimeoutError", "TruncationError", "UniqueId", "compression_opts", "group", "group_end",
    "group_start", "init", "library_path", "library_version",
]
