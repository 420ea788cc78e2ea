"""ProcessGroupChorus: a torch.distributed ProcessGroup (torch 1.13 Python subclass) whose
collectives run on a Chorus communicator bootstrapped through the c10d store it is given.

Every call posts a Chorus non-blocking operation and returns a ChorusWork (work.py) completed
by the communicator's completion thread, so DDP's bucket allreduces overlap with the rest of
backward, and whose wait(), result(), future and DDP's backward raise the library's error
when the operation fails after posting. Methods accept opts=None and a bare tensor where
torch passes a list. Tensors are used in place; a staging copy is made only when torch hands
separate output tensors to a collective that needs one contiguous buffer (allgather,
reduce_scatter, gather, scatter, alltoall), and skipped when those tensors are already
consecutive views of one buffer.
"""

import ctypes
import math
import os
import threading

import torch
import torch.distributed as dist

from .. import _buffers, _lib
from ..comm import ANY_SOURCE, Communicator
from ..comm import group_end as chorus_group_end
from ..comm import group_start as chorus_group_start
from ..errors import python_side_error
from .completion import COLLECTIVES, POINT_TO_POINT, CompletionThread
from .feedback import TensorResiduals, codec_wants_feedback, feedback_mode
from .sparse import sparse_allreduce
from .work import ChorusWork, WorkKeeper

BACKEND_NAME = "chorus"
UNIQUE_ID_KEY = "chorus_unique_id"

_ReduceOp = dist.ReduceOp
_OPS = (
    (_ReduceOp.SUM, "sum"),
    (_ReduceOp.PRODUCT, "prod"),
    (_ReduceOp.MIN, "min"),
    (_ReduceOp.MAX, "max"),
    (_ReduceOp.AVG, "avg"),
)


# int(RedOpType) -> name. Keyed by the integer because hashing a pybind11 enum goes through a
# bound C++ function: in DDP's hook, on cold caches, that lookup alone took about 19 us.
_OP_NAMES = {int(getattr(torch_op, "op", torch_op)): name for torch_op, name in _OPS}


def reduce_op_name(op):
    """The Chorus op name for a torch ReduceOp (or RedOpType); ValueError for BAND, BOR, BXOR
    and PREMUL_SUM, which Chorus does not offer."""
    try:
        name = _OP_NAMES.get(int(getattr(op, "op", op)))
    except TypeError:
        name = None
    if name is not None:
        return name
    for torch_op, name in _OPS:
        if op == torch_op:
            return name
    raise ValueError(f"chorus: reduce op {op} is not supported (sum, product, min, max, avg)")


def _as_tensor_list(tensors):
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    return list(tensors)


def _as_list_of_lists(tensor_lists):
    """[[t0, t1, ...]] from either that or a bare [t0, t1, ...]."""
    tensor_lists = list(tensor_lists)
    if tensor_lists and isinstance(tensor_lists[0], torch.Tensor):
        return [tensor_lists]
    return [list(inner) for inner in tensor_lists]


def _single(tensors, what):
    tensors = _as_tensor_list(tensors)
    if len(tensors) != 1:
        raise ValueError(f"chorus: {what} takes exactly one tensor per process, got {len(tensors)}")
    return tensors


# The torch dtypes Chorus reduces (torch 1.13 has no uint32/uint64).
_TORCH_DTYPES = frozenset(getattr(torch, name) for name in _lib.DTYPES if hasattr(torch, name))


def _plain_tensor(tensors):
    """The call's one tensor when it is a contiguous, strided CPU tensor of a dtype Chorus
    knows, else None: then the full checks run and raise the precise error. Few Python steps on
    purpose: a one-rank group calls this from DDP's hook, where every step runs on cold caches."""
    tensor = tensors if isinstance(tensors, torch.Tensor) else (
        tensors[0] if len(tensors) == 1 else None)
    if (tensor is not None and tensor.is_cpu and tensor.layout == torch.strided
            and tensor.dtype in _TORCH_DTYPES and tensor.is_contiguous()):
        return tensor
    return None


def _option(opts, attribute, default):
    return default if opts is None else getattr(opts, attribute, default)


def _reduce_op_of(opts):
    """opts may be None, an *Options object, or a bare ReduceOp (as in pg.allreduce(t, op))."""
    if opts is None:
        return "sum"
    op = getattr(opts, "reduceOp", opts)
    return reduce_op_name(op)


def _root_of(opts):
    """opts may be None (root 0), an options object with rootRank, or a bare int."""
    if isinstance(opts, int):
        return opts
    if _option(opts, "rootTensor", 0) != 0:
        raise ValueError("chorus: only rootTensor 0 is supported (one tensor per process)")
    return _option(opts, "rootRank", 0)


def _consecutive_views(tensors):
    """True when the tensors are contiguous views of one storage, same dtype and size, laid
    end to end in list order: then they are one buffer and need no staging copy."""
    first = tensors[0]
    nbytes = first.numel() * first.element_size()
    storage_address = first.storage().data_ptr()
    for index, tensor in enumerate(tensors):
        if (not tensor.is_contiguous() or tensor.dtype != first.dtype
                or tensor.numel() != first.numel()
                or tensor.storage().data_ptr() != storage_address
                or tensor.data_ptr() != first.data_ptr() + index * nbytes):
            return False
    return True


def _check_same_shape(tensors, reference, what):
    for tensor in tensors:
        if tensor.numel() != reference.numel() or tensor.dtype != reference.dtype:
            raise ValueError(f"chorus: every {what} tensor must have the numel and dtype of "
                             f"the input ({reference.numel()} x {reference.dtype})")


def _block_buffer(tensors):
    """(buffer, needs_copy): one contiguous buffer over the list of same-shape tensors; a
    fresh staging buffer when they are not already consecutive views of one storage."""
    first = tensors[0]
    if _consecutive_views(tensors):
        flat = first.as_strided((len(tensors) * first.numel(),), (1,), first.storage_offset())
        return flat, False
    return torch.empty((len(tensors), first.numel()), dtype=first.dtype), True


def _copy_blocks_out(flat, tensors):
    for index, tensor in enumerate(tensors):
        tensor.view(-1).copy_(flat.view(len(tensors), -1)[index])


def _copy_blocks_in(flat, tensors):
    for index, tensor in enumerate(tensors):
        flat.view(len(tensors), -1)[index].copy_(tensor.reshape(-1))


def _check_coalesced(tensors, what):
    """The coalesced calls take dense CPU tensors of one dtype (as gloo)."""
    if not tensors:
        raise ValueError(f"chorus: {what} needs at least one tensor")
    for tensor in tensors:
        if tensor.dtype != tensors[0].dtype:
            raise ValueError(f"chorus: {what} needs tensors of one dtype, got {tensors[0].dtype} "
                             f"and {tensor.dtype}")
        if not tensor.is_cpu or tensor.layout != torch.strided:
            raise ValueError(f"chorus: {what} needs dense CPU tensors")


def _no_value():
    return None


def _complete_when_all_done(future, parts, finish):
    """Completes future once every part is done: with finish()'s value, or with the first
    part's failure (in posting order)."""
    remaining = [len(parts)]
    lock = threading.Lock()

    def one_done(_):
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        for part in parts:
            try:
                part.value()
            except Exception as error:  # noqa: BLE001 - the first failure is the Work's
                future.set_exception(error)
                return
        try:
            future.set_result(finish())
        except Exception as error:  # noqa: BLE001 - a failed copy-out fails the Work
            future.set_exception(error)

    for part in parts:
        part.add_done_callback(one_done)


def _coalesced_buffer(tensors, what):
    """(flat, needs_copy): one contiguous 1-D buffer holding the tensors end to end, itself
    when they already are consecutive views of one storage."""
    if not tensors:
        raise ValueError(f"chorus: {what} needs at least one tensor")
    first = tensors[0]
    for tensor in tensors:
        if tensor.dtype != first.dtype:
            raise ValueError(f"chorus: {what} needs tensors of one dtype, got {first.dtype} "
                             f"and {tensor.dtype}")
        if not tensor.is_cpu or tensor.layout != torch.strided:
            raise ValueError(f"chorus: {what} needs dense CPU tensors")
    total = sum(tensor.numel() for tensor in tensors)
    if _laid_end_to_end(tensors):
        return first.as_strided((total,), (1,), first.storage_offset()), False
    return torch.empty(total, dtype=first.dtype), True


def _laid_end_to_end(tensors):
    first = tensors[0]
    address = first.data_ptr()
    for tensor in tensors:
        if (not tensor.is_contiguous() or tensor.data_ptr() != address
                or tensor.storage().data_ptr() != first.storage().data_ptr()):
            return False
        address += tensor.numel() * tensor.element_size()
    return True


def _copy_flat_in(flat, tensors):
    offset = 0
    for tensor in tensors:
        flat[offset:offset + tensor.numel()].copy_(tensor.reshape(-1))
        offset += tensor.numel()


def _copy_flat_out(flat, tensors):
    offset = 0
    for tensor in tensors:
        tensor.copy_(flat[offset:offset + tensor.numel()].view(tensor.shape))
        offset += tensor.numel()


def _tag(tag):
    tag = int(tag)
    if not 0 <= tag <= _lib.TAG_MAX:
        raise ValueError(f"chorus: tag {tag} is out of range (0..{_lib.TAG_MAX})")
    return tag


def _env_sec(variable):
    value = os.environ.get(variable)
    return int(value) if value else 0


def _whole_seconds(timeout):
    """torch's timedelta as the library's whole seconds, rounded up (a 0.5 s timeout must not
    become 0, which means "the default"); 0 for None."""
    return math.ceil(timeout.total_seconds()) if timeout is not None else 0


_TIMEOUT_STATUS = _lib.status_value("CHORUS_ERR_TIMEOUT")


class ProcessGroupChorus(dist.ProcessGroup):
    """A torch.distributed process group served by Chorus. Created by
    dist.init_process_group("chorus") once chorus.torch is imported, or directly with
    ProcessGroupChorus(store, rank, size, timeout) or ProcessGroupChorus.from_comm(comm)."""

    def __init__(self, store, rank, size, timeout=None, comm=None):
        super().__init__(rank, size)
        feedback = feedback_mode()  # a bad CHORUS_COMPRESSION_FEEDBACK fails before any set-up
        if comm is None:
            comm = _comm_from_store(store, rank, size, timeout)
        if comm.rank != rank or comm.size != size:
            raise ValueError(f"chorus: communicator is rank {comm.rank} of {comm.size}, "
                             f"the process group rank {rank} of {size}")
        self._comm = comm
        self._alone = size == 1
        self._done_memo = None  # (tensor, Work) of the last one-rank call: see _done
        self._keeper = WorkKeeper()
        self._timeout_sec = _env_sec("CHORUS_TIMEOUT_SEC") or _whole_seconds(timeout)
        self._feedback = feedback
        self._feedback_plan = (None, False, 0)  # (compression_version, residuals on, min_bytes)
        self._residuals = TensorResiduals(comm)
        self._engine = CompletionThread(comm, name=f"chorus-pg-{rank}",
                                        describe_failure=self._describe_failure)

    @classmethod
    def from_comm(cls, comm):
        return cls(None, comm.rank, comm.size, comm=comm)

    @property
    def comm(self):
        """The underlying chorus.Communicator."""
        return self._comm

    def getBackendName(self):  # noqa: N802 - the name c10d calls
        return BACKEND_NAME

    def shutdown(self):
        """Completes queued operations, stops the completion thread, frees the communicator."""
        engine, self._engine = getattr(self, "_engine", None), None
        self._done_memo = None
        if engine is not None:
            engine.shutdown()
            self._residuals.close()
            self._comm.destroy()
        self._keeper.clear()

    # ---- helpers ----

    def _work(self, coll, args, keepalive, finish, operation=None, lane=COLLECTIVES):
        operation = operation or coll
        engine = self._engine_or_raise()
        entry = engine.submit_entry(coll, args, keepalive, finish, operation, lane)
        return ChorusWork(entry.future, operation, self._keeper, engine=engine, entry=entry)

    def _work_group(self, calls, keepalive, finish, operation):
        """The calls, each (coll, args) of a chorus_i<coll>, posted as one Chorus group and
        completed together: the Work's value is finish()'s once every call succeeded, else the
        first failure. Nothing else is posted on the communicator while the group is open."""
        engine = self._engine_or_raise()
        entries = []
        with engine.lock:
            chorus_group_start()
            try:
                for coll, args in calls:
                    entries.append(engine.submit_entry(coll, args, keepalive, _no_value, operation))
            finally:
                chorus_group_end()
        future = torch.futures.Future()
        _complete_when_all_done(future, [entry.future for entry in entries], finish)
        return ChorusWork(future, operation, self._keeper, engine=engine, entry=entries)

    def _describe_failure(self, status, operation):
        """The head of a failed operation's error: which backend, operation and rank, and for
        a timeout the bound that expired, in words torch users (and torch's own tests, which
        look for " timeout ") recognise. The library's sentence follows."""
        text = f"chorus {operation} failed on rank {self.rank()}"
        if status == _TIMEOUT_STATUS and self._timeout_sec:
            text += f" after the operation timeout ({self._timeout_sec} s)"
        return text

    def _done(self, tensor):
        """A Work already complete with [tensor]: what an in-place allreduce or broadcast is on
        a group of one rank, which has nothing to move (no call into the library). The last
        such Work is handed out again for the same tensor, as DDP passes the same bucket tensor
        every step: it is complete and holds that very tensor, so no caller can tell the two
        apart, and the call skips making a future and a Work (about 45 us in DDP's hook, where
        every step runs on cold caches)."""
        self._engine_or_raise()
        memo = self._done_memo
        if memo is not None and memo[0] is tensor:
            return memo[1]
        future = torch._C.Future([])  # the C++ future: torch.futures.Future adds Python steps
        future.set_result([tensor])
        work = ChorusWork(future, "one-rank call", self._keeper)
        self._done_memo = (tensor, work)
        return work

    def _engine_or_raise(self):
        if self._engine is None:
            raise RuntimeError("chorus: this process group was shut down")
        return self._engine

    @staticmethod
    def _buf(tensor, what):
        return _buffers.as_buffer(tensor, what=f"chorus {what}")

    # ---- collectives served through the c10d trampoline (and from Python) ----

    def allreduce(self, tensors, opts=None):
        if self._alone:
            tensor = _plain_tensor(tensors)
            if tensor is not None and _reduce_op_of(opts):  # raises for an unsupported op
                return self._done(tensor)
        tensors = _single(tensors, "allreduce")
        if tensors[0].layout == torch.sparse_coo:
            return sparse_allreduce(self, tensors[0], _reduce_op_of(opts))
        buf = self._buf(tensors[0], "allreduce")
        op_name = _reduce_op_of(opts)
        args = (buf.address, buf.address, buf.count, buf.dtype_code, self._comm_op(op_name))
        residual = self._residual_for(tensors[0], buf, op_name)
        if residual is not None:  # the communicator's compression, with this tensor's residual
            call_opts = _lib.AllreduceOptsStruct(None, residual.handle)
            return self._work("allreduce_ex", args + (ctypes.byref(call_opts),),
                              (tensors, buf, call_opts, residual), lambda: tensors, "allreduce")
        return self._work("allreduce", args, (tensors, buf), lambda: tensors)

    def _residual_for(self, tensor, buf, op_name):
        """The error-feedback residual of an allreduce that the communicator's compression
        (CHORUS_COMPRESSION) will compress, when CHORUS_COMPRESSION_FEEDBACK asks for one
        (feedback.py); None otherwise."""
        version = self._comm.compression_version
        if self._feedback_plan[0] != version:
            codec, scope = self._comm.compression
            on = (codec != "none" and codec_wants_feedback(self._feedback, codec)
                  and (scope == "all" or self._comm.host_count > 1))
            self._feedback_plan = (version, on, self._comm.compression_min_bytes)
        _, on, min_bytes = self._feedback_plan
        if not on or buf.dtype != "float32" or op_name not in ("sum", "avg") or buf.count * 4 < min_bytes:
            return None
        return self._residuals.get(tensor, buf.count)

    def broadcast(self, tensors, opts=None):
        if self._alone and _root_of(opts) == 0:
            tensor = _plain_tensor(tensors)
            if tensor is not None:
                return self._done(tensor)
        tensors = _single(tensors, "broadcast")
        buf = self._buf(tensors[0], "broadcast")
        args = (buf.address, buf.address, buf.count, buf.dtype_code, _root_of(opts))
        return self._work("broadcast", args, (tensors, buf), lambda: tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        outputs = _as_list_of_lists(output_tensors)
        inputs = _single(input_tensors, "allgather")
        if len(outputs) != 1 or len(outputs[0]) != self.size():
            raise ValueError(f"chorus: allgather needs one list of {self.size()} output tensors")
        outs = outputs[0]
        _check_same_shape(outs, inputs[0], "allgather output")
        send = self._buf(inputs[0], "allgather input")
        flat, needs_copy = _block_buffer(outs)
        recv = self._buf(flat, "allgather output")
        args = (send.address, recv.address, send.count, send.dtype_code)

        def finish():
            if needs_copy:
                _copy_blocks_out(flat, outs)
            return outs

        return self._work("allgather", args, (inputs, outs, flat, send, recv), finish)

    def _allgather_base(self, output_tensor, input_tensor, opts=None):
        return self._allgather_flat(output_tensor, input_tensor, "allgather")

    def _allgather_flat(self, output_tensor, input_tensor, operation, finish=None):
        """Allgather between two contiguous tensors; finish() gives the Work's value."""
        send = self._buf(input_tensor, "allgather input")
        recv = self._buf(output_tensor, "allgather output")
        if recv.count != send.count * self.size() or recv.dtype != send.dtype:
            raise ValueError("chorus: allgather output must hold size x input elements")
        args = (send.address, recv.address, send.count, send.dtype_code)
        return self._work("allgather", args, (input_tensor, output_tensor, send, recv),
                          finish or (lambda: [output_tensor]), operation)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        outputs = _single(output_tensors, "reduce_scatter")
        inputs = _as_list_of_lists(input_tensors)
        if len(inputs) != 1 or len(inputs[0]) != self.size():
            raise ValueError(f"chorus: reduce_scatter needs one list of {self.size()} inputs")
        ins = inputs[0]
        _check_same_shape(ins, outputs[0], "reduce_scatter input")
        flat, needs_copy = _block_buffer(ins)
        if needs_copy:
            _copy_blocks_in(flat, ins)
        send = self._buf(flat, "reduce_scatter input")
        recv = self._buf(outputs[0], "reduce_scatter output")
        op = self._comm_op(_reduce_op_of(opts))
        args = (send.address, recv.address, recv.count, recv.dtype_code, op)
        return self._work("reduce_scatter", args, (outputs, ins, flat, send, recv),
                          lambda: outputs)

    def _reduce_scatter_base(self, output_tensor, input_tensor, opts=None):
        send = self._buf(input_tensor, "reduce_scatter input")
        recv = self._buf(output_tensor, "reduce_scatter output")
        if send.count != recv.count * self.size() or recv.dtype != send.dtype:
            raise ValueError("chorus: reduce_scatter input must hold size x output elements")
        op = self._comm_op(_reduce_op_of(opts))
        args = (send.address, recv.address, recv.count, recv.dtype_code, op)
        return self._work("reduce_scatter", args, (input_tensor, output_tensor, send, recv),
                          lambda: [output_tensor])

    def allreduce_coalesced(self, tensors, opts=None):
        """One allreduce per tensor, posted as one Chorus group (chorus_group_start/end), which
        the library fuses into one operation over the tensors where they lie (NCCL's groups);
        tensors of one dtype, as gloo requires. A tensor that is not contiguous goes through a
        contiguous copy."""
        tensors = _as_tensor_list(tensors)
        _check_coalesced(tensors, "allreduce_coalesced")
        op = self._comm_op(_reduce_op_of(opts))
        staged = [t if t.is_contiguous() else t.contiguous() for t in tensors]
        bufs = [self._buf(t, "allreduce_coalesced") for t in staged]
        calls = [("allreduce", (b.address, b.address, b.count, b.dtype_code, op)) for b in bufs]

        def finish():
            for tensor, copy in zip(tensors, staged):
                if copy is not tensor:
                    tensor.copy_(copy)
            return tensors

        return self._work_group(calls, (tensors, staged, bufs), finish, "allreduce_coalesced")

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        """One allgather per input, posted as one Chorus group (the library fuses allgathers of
        one dtype); rank r's block of input i lands in output_lists[r][i]. Inputs of one dtype
        (as gloo); outputs shaped like the inputs."""
        inputs = _as_tensor_list(input_tensors)
        outputs = [_as_tensor_list(outs) for outs in output_lists]
        if len(outputs) != self.size():
            raise ValueError(f"chorus: allgather_coalesced needs {self.size()} output lists")
        for outs in outputs:
            if len(outs) != len(inputs):
                raise ValueError("chorus: allgather_coalesced needs one output per input in "
                                 "every rank's list")
            for out, tensor in zip(outs, inputs):
                _check_same_shape([out], tensor, "allgather_coalesced output")
        _check_coalesced(inputs, "allgather_coalesced")
        sends = [t if t.is_contiguous() else t.contiguous() for t in inputs]
        recvs = [torch.empty(self.size() * t.numel(), dtype=t.dtype) for t in inputs]
        send_bufs = [self._buf(t, "allgather_coalesced input") for t in sends]
        recv_bufs = [self._buf(t, "allgather_coalesced output") for t in recvs]
        calls = [("allgather", (sb.address, rb.address, sb.count, sb.dtype_code))
                 for sb, rb in zip(send_bufs, recv_bufs)]

        def finish():
            for i, recv in enumerate(recvs):
                for block, outs in zip(recv.view(self.size(), -1), outputs):
                    outs[i].copy_(block.view_as(outs[i]))
            return [out for outs in outputs for out in outs]

        keep = (inputs, outputs, sends, recvs, send_bufs, recv_bufs)
        return self._work_group(calls, keep, finish, "allgather_coalesced")

    def barrier(self, opts=None):
        return self._work("barrier", (), (), lambda: [])

    def send(self, tensors, dstRank, tag=0):  # noqa: N803 - c10d's argument names
        """Point to point, tagged: messages between a pair of ranks match by tag, in order.
        Point-to-point operations progress independently of each other and of collectives."""
        tensors = _single(tensors, "send")
        buf = self._buf(tensors[0], "send")
        args = (buf.address, buf.count, buf.dtype_code, int(dstRank), _tag(tag))
        return self._work("send_tag", args, (tensors, buf), lambda: tensors, "send",
                          lane=POINT_TO_POINT)

    def recv(self, tensors, srcRank, tag=0):  # noqa: N803
        return self._recv(tensors, int(srcRank), tag, "recv")

    def recv_anysource(self, tensors, tag=0):
        """A receive from whichever rank sends first; Work._source_rank() says which."""
        return self._recv(tensors, ANY_SOURCE, tag, "recv from any source")

    def _recv(self, tensors, source, tag, operation):
        tensors = _single(tensors, "recv")
        buf = self._buf(tensors[0], "recv")
        args = (buf.address, buf.count, buf.dtype_code, source, _tag(tag))
        engine = self._engine_or_raise()

        def finish(record):
            info = record.info
            if info is not None and info.count != buf.count:
                raise python_side_error(
                    "CHORUS_ERR_MISMATCH", f"rank {info.source} sent {info.count} elements "
                    f"with tag {info.tag}, the receive expects exactly {buf.count}", operation)
            return tensors

        finish.needs_record = True  # it may run inside submit_entry, before entry is bound
        entry = engine.submit_entry("recv_tag", args, (tensors, buf), finish, operation,
                                    POINT_TO_POINT, is_recv=True)
        return ChorusWork(entry.future, operation, self._keeper, engine=engine, entry=entry,
                          source_rank=lambda: entry.record.info.source)

    # ---- collectives that torch.distributed calls from Python only ----

    def reduce(self, tensors, opts=None):
        tensors = _single(tensors, "reduce")
        buf = self._buf(tensors[0], "reduce")
        op = self._comm_op(_reduce_op_of(opts))
        args = (buf.address, buf.address, buf.count, buf.dtype_code, op, _root_of(opts))
        return self._work("reduce", args, (tensors, buf), lambda: tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        inputs = _single(input_tensors, "gather")
        root = _root_of(opts)
        send = self._buf(inputs[0], "gather input")
        keep = [inputs, send]
        recv_address, outs, flat, needs_copy = None, [], None, False
        if self.rank() == root:
            outs = _as_list_of_lists(output_tensors)[0]
            if len(outs) != self.size():
                raise ValueError(f"chorus: gather needs {self.size()} output tensors on root")
            _check_same_shape(outs, inputs[0], "gather output")
            flat, needs_copy = _block_buffer(outs)
            recv = self._buf(flat, "gather output")
            keep += [outs, flat, recv]
            recv_address = recv.address
        args = (send.address, recv_address, send.count, send.dtype_code, root)

        def finish():
            if needs_copy:
                _copy_blocks_out(flat, outs)
            return outs

        return self._work("gather", args, tuple(keep), finish)

    def scatter(self, output_tensors, input_tensors, opts=None):
        outputs = _single(output_tensors, "scatter")
        root = _root_of(opts)
        recv = self._buf(outputs[0], "scatter output")
        keep = [outputs, recv]
        send_address = None
        if self.rank() == root:
            ins = _as_list_of_lists(input_tensors)[0]
            if len(ins) != self.size():
                raise ValueError(f"chorus: scatter needs {self.size()} input tensors on root")
            _check_same_shape(ins, outputs[0], "scatter input")
            flat, needs_copy = _block_buffer(ins)
            if needs_copy:
                _copy_blocks_in(flat, ins)
            send = self._buf(flat, "scatter input")
            keep += [ins, flat, send]
            send_address = send.address
        args = (send_address, recv.address, recv.count, recv.dtype_code, root)
        return self._work("scatter", args, tuple(keep), lambda: outputs)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        outs, ins = _as_tensor_list(output_tensors), _as_tensor_list(input_tensors)
        if len(outs) != self.size() or len(ins) != self.size():
            raise ValueError(f"chorus: alltoall needs {self.size()} input and output tensors")
        if any(t.numel() != ins[0].numel() for t in outs + ins):
            return self._alltoall_unequal(outs, ins)
        _check_same_shape(outs + ins, ins[0], "alltoall")
        send_flat, send_copy = _block_buffer(ins)
        if send_copy:
            _copy_blocks_in(send_flat, ins)
        recv_flat, recv_copy = _block_buffer(outs)
        send = self._buf(send_flat, "alltoall input")
        recv = self._buf(recv_flat, "alltoall output")
        args = (send.address, recv.address, ins[0].numel(), send.dtype_code)

        def finish():
            if recv_copy:
                _copy_blocks_out(recv_flat, outs)
            return outs

        keep = (outs, ins, send_flat, recv_flat, send, recv)
        return self._work("alltoall", args, keep, finish)

    def _alltoall_unequal(self, outs, ins):
        """all_to_all with tensors of different sizes: one alltoallv between buffers that
        hold the inputs, and the outputs, end to end."""
        send_flat, send_copy = _coalesced_buffer(ins, "all_to_all")
        if send_copy:
            _copy_flat_in(send_flat, ins)
        recv_flat, recv_copy = _coalesced_buffer(outs, "all_to_all")
        if recv_flat.dtype != send_flat.dtype:
            raise ValueError("chorus: all_to_all needs inputs and outputs of one dtype")
        args, keep = self._alltoallv_args(send_flat, [t.numel() for t in ins],
                                          recv_flat, [t.numel() for t in outs])

        def finish():
            if recv_copy:
                _copy_flat_out(recv_flat, outs)
            return outs

        return self._work("alltoallv", args, (keep, outs, ins, send_flat, recv_flat), finish,
                          "alltoall")

    def _alltoallv_args(self, send, send_counts, recv, recv_counts):
        """The chorus_ialltoallv arguments (and the objects they point into) for blocks laid
        back to back in rank order."""
        args, keep, _ = self._comm.prepare("alltoallv", send, send_counts, recv_counts, recv)
        return args, keep

    def alltoall_base(self, output_tensor, input_tensor, output_split_sizes,
                      input_split_sizes, opts=None):
        if output_split_sizes or input_split_sizes:
            return self._alltoall_split(output_tensor, input_tensor, output_split_sizes,
                                        input_split_sizes)
        send = self._buf(input_tensor, "alltoall input")
        recv = self._buf(output_tensor, "alltoall output")
        if send.count != recv.count or send.count % self.size() or send.dtype != recv.dtype:
            raise ValueError("chorus: all_to_all_single needs equal-size input and output "
                             "divisible by the group size")
        args = (send.address, recv.address, send.count // self.size(), send.dtype_code)
        return self._work("alltoall", args, (input_tensor, output_tensor, send, recv),
                          lambda: [output_tensor])

    def _alltoall_split(self, output_tensor, input_tensor, output_split_sizes,
                        input_split_sizes):
        """all_to_all_single with split sizes: rows of dim 0, as torch counts them (an empty
        list means equal splits), through one alltoallv."""
        send_counts = self._split_counts(input_tensor, input_split_sizes, "input")
        recv_counts = self._split_counts(output_tensor, output_split_sizes, "output")
        args, keep = self._alltoallv_args(input_tensor, send_counts, output_tensor, recv_counts)
        return self._work("alltoallv", args, (keep, input_tensor, output_tensor),
                          lambda: [output_tensor], "alltoall")

    def _split_counts(self, tensor, split_sizes, what):
        rows = tensor.shape[0] if tensor.dim() else 1
        row_elements = tensor.numel() // rows if rows else 0
        if not split_sizes:
            if rows % self.size():
                raise ValueError(f"chorus: all_to_all_single {what} has {rows} rows, not a "
                                 f"multiple of the group size {self.size()}")
            split_sizes = [rows // self.size()] * self.size()
        split_sizes = [int(rows_of_rank) for rows_of_rank in split_sizes]
        if len(split_sizes) != self.size() or sum(split_sizes) != rows or min(split_sizes) < 0:
            raise ValueError(f"chorus: all_to_all_single {what} split sizes {split_sizes} must "
                             f"be {self.size()} counts of rows adding up to {rows}")
        return [rows_of_rank * row_elements for rows_of_rank in split_sizes]

    @staticmethod
    def _comm_op(name):
        return _lib.OPS[name]


def _comm_from_store(store, rank, size, timeout):
    """Bootstraps a Communicator through the c10d store: rank 0 publishes the unique id.
    torch's timeout bounds the connections and every operation unless CHORUS_TIMEOUT_SEC /
    CHORUS_CONNECT_TIMEOUT_SEC say otherwise; the wait for rank 0's id is the store's own
    (torch gives the store its timeout when init_method makes it)."""
    timeout_sec = _whole_seconds(timeout)
    config = {
        "timeout_sec": 0 if _env_sec("CHORUS_TIMEOUT_SEC") else timeout_sec,
        "connect_timeout_sec": 0 if _env_sec("CHORUS_CONNECT_TIMEOUT_SEC") else timeout_sec,
        "name": f"torch-rank{rank}",
    }
    return Communicator.from_store(store, rank, size, key=UNIQUE_ID_KEY,
                                   near=_rendezvous_host(store), **config)


def _rendezvous_host(store):
    """The host every rank reaches for the rendezvous: the TCPStore's host (under torch's
    PrefixStores), else MASTER_ADDR, else "" (no hint). Rank 0's bootstrap store listens on the
    interface that routes there (a loopback rendezvous keeps a single-host job on loopback);
    with no hint, on the first interface that is neither loopback nor a container's."""
    for _ in range(16):  # PrefixStore over PrefixStore ... over the real store
        host = getattr(store, "host", None)
        if isinstance(host, str) and host:
            return host
        store = getattr(store, "underlying_store", None)
        if store is None:
            break
    return os.environ.get("MASTER_ADDR", "")


def create_process_group(store, rank, size, timeout):
    """The creator function registered with torch.distributed.Backend.register_backend."""
    return ProcessGroupChorus(store, rank, size, timeout)
