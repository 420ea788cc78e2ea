"""Communicator, Request and UniqueId: the Pythonic face of include/chorus.h.

Collectives operate in place on the caller's numpy arrays or torch tensors (no copies): the
library gets their data pointers. Blocking calls run the C blocking call with the GIL released;
async_op=True (or the i-prefixed twins) returns a Request whose wait() returns the output. A
request's buffers are kept alive until the library is done with them, even if the Request
object is dropped, so a forgotten request can never write into freed memory.
"""

import collections
import ctypes
import functools
import numbers
import threading
import weakref

from . import _lib
from ._buffers import as_buffer, new_like
from .errors import error_for_status, python_side_error

_lib_handle = _lib.lib

ANY_SOURCE = _lib.ANY_SOURCE
ANY_TAG = _lib.ANY_TAG

#: What a completed receive got (chorus_msg_info_t): the sender's rank, the message's tag, and
#: its element count (more than the buffer holds when the receive raised TruncationError).
MessageInfo = collections.namedtuple("MessageInfo", "source tag count")


# ---- groups (chorus_group_start / chorus_group_end) ----

class _GroupState(threading.local):
    """The calling thread's open group: its depth, the buffers of its blocking calls (the C
    library reads and writes them only at the outermost group_end), its requests (which must
    not be waited for before) and the communicators it used (for the error text)."""

    def __init__(self):
        self.depth = 0
        self.keepalive = []
        self.records = []
        self.comms = []


_group = _GroupState()


def group_start():
    """Opens (or nests) a group on this thread: until the matching outermost group_end(), this
    thread's calls are gathered instead of run. Blocking calls return at once (their results are
    in place after group_end); non-blocking ones return requests that complete after group_end.
    group_end fuses allreduces of the same dtype and op (and allgathers of the same dtype) into
    few operations and lets point-to-point calls progress together (see include/chorus.h)."""
    status = _lib_handle.chorus_group_start()
    if status < 0:
        raise error_for_status(status, operation="group_start")
    _group.depth += 1


def group_end():
    """Closes the group opened by the matching group_start(); the outermost one posts the
    gathered calls, waits for the blocking ones and raises the first error among them."""
    if _group.depth == 0:
        raise python_side_error("CHORUS_ERR_INVALID_USAGE", "group_end() without group_start()", "group_end")
    status = _lib_handle.chorus_group_end()
    _group.depth -= 1
    if _group.depth:
        return
    comms, records = _group.comms, _group.records
    _group.keepalive, _group.records, _group.comms = [], [], []
    for record in records:
        record.deferred = None
        record.posted.set()
    if status < 0:
        detail = next((c.last_error for c in comms if not c.closed and c.last_error), "")
        raise error_for_status(status, detail, "group_end")


class group:
    """`with chorus.group(): ...` runs group_start() and, on the way out (also after an
    exception, which then propagates), group_end()."""

    def __enter__(self):
        group_start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            group_end()
            return False
        try:
            group_end()
        except Exception:  # the body's exception is the one to report
            pass
        return False


def _note_group_call(comm, keepalive=None, record=None):
    """Books a call made while this thread's group is open."""
    if comm not in _group.comms:
        _group.comms.append(comm)
    if keepalive is not None:
        _group.keepalive.append(keepalive)
    if record is not None:
        record.deferred = threading.get_ident()
        record.posted.clear()
        _group.records.append(record)


def _op_code(op):
    """Chorus op value for "sum"/"prod"/"max"/"min"/"avg" (any case) or a chorus.SUM constant."""
    name = str(op).lower()
    if name == "product":
        name = "prod"
    if name not in _lib.OPS:
        raise ValueError(f"unknown reduction op {op!r}; known: {', '.join(_lib.OPS)}")
    return _lib.OPS[name]


def compression_opts(codec, scope="inter"):
    """A chorus_compression_opts_t for codec "none", "fp16", "bf16", "int8", "int4" or
    "topk:FRACTION" ("topk:0.01", "topk:1%") and scope "inter" (only data crossing hosts) or
    "all" (every level)."""
    name = str(codec).lower()
    fraction = 0.0
    if name.startswith("topk:"):
        text = name[5:]
        try:
            fraction = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            fraction = -1.0
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"compression {codec!r}: the top-k fraction must lie in (0, 1]")
        name = "topk"
    if name not in _lib.CODECS or name == "topk" and fraction == 0.0:
        known = ", ".join(c for c in _lib.CODECS if c != "topk")
        raise ValueError(f"unknown compression {codec!r}; known: {known}, topk:FRACTION")
    if scope not in _lib.COMPRESSION_SCOPES:
        raise ValueError(f"unknown compression scope {scope!r}; known: inter, all")
    return _lib.CompressionOptsStruct(_lib.CODECS[name], fraction, _lib.COMPRESSION_SCOPES[scope])


class Residual:
    """Error-feedback state of one gradient buffer (chorus_residual_t): `count` float32 of what
    compression dropped from this rank's contribution, added back at the next allreduce given
    it. One per buffer (a DDP bucket), one call at a time; close() (or garbage collection)
    frees it once its calls are done (the calls keep it alive while they run)."""

    def __init__(self, comm, count):
        handle = ctypes.c_void_p()
        status = _lib_handle.chorus_residual_create(comm._live_handle(), int(count), ctypes.byref(handle))
        if status < 0:
            raise error_for_status(status, operation="residual", detail=comm.last_error)
        self.comm = comm
        self.count = int(count)
        self._handle = handle.value

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("chorus: this residual was closed")
        return self._handle

    def close(self):
        if self._handle is not None:
            _lib_handle.chorus_residual_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def __repr__(self):
        return f"<chorus.Residual of {self.count} elements{' (closed)' if self._handle is None else ''}>"


def _make_config(timeout_sec=0, connect_timeout_sec=0, nsocks_per_peer=0, name=None):
    """A chorus_config_t (CHORUS_CONFIG_INIT plus the given fields) and the bytes it points at."""
    name_bytes = name.encode() if name else None
    cfg = _lib.ConfigStruct(
        ctypes.sizeof(_lib.ConfigStruct),
        _lib.HEADER_VERSION_CODE,
        int(timeout_sec),
        int(connect_timeout_sec),
        int(nsocks_per_peer),
        name_bytes,
    )
    return cfg, name_bytes


class UniqueId:
    """The 128-byte opaque bootstrap identity of chorus_get_unique_id. Making one (new()) also
    makes this process serve the bootstrap store until every rank has joined."""

    NBYTES = _lib.UNIQUE_ID_BYTES

    def __init__(self, raw_bytes):
        raw_bytes = bytes(raw_bytes)
        if len(raw_bytes) != self.NBYTES:
            raise ValueError(f"a chorus unique id has {self.NBYTES} bytes, got {len(raw_bytes)}")
        self._raw = raw_bytes

    @classmethod
    def new(cls, near=None):
        """near: the host name or address of the rendezvous the other ranks reach (for
        example the c10d store's host): the bootstrap store then listens on the interface that
        routes there (chorus_get_unique_id_near), so that ranks on other hosts reach it too;
        "" picks the first interface that is neither loopback nor a container's. None:
        chorus_get_unique_id (loopback unless MASTER_ADDR or CHORUS_SOCKET_IFNAME say)."""
        struct = _lib.UniqueIdStruct()
        if near is None:
            status = _lib_handle.chorus_get_unique_id(ctypes.byref(struct))
        else:
            status = _lib_handle.chorus_get_unique_id_near(ctypes.byref(struct),
                                                           str(near).encode())
        if status < 0:
            raise error_for_status(status, operation="chorus_get_unique_id")
        return cls(bytes(struct.internal))

    @classmethod
    def from_bytes(cls, raw_bytes):
        return cls(raw_bytes)

    def to_bytes(self):
        return self._raw

    def _struct(self):
        struct = _lib.UniqueIdStruct()
        ctypes.memmove(struct.internal, self._raw, self.NBYTES)
        return struct

    def __repr__(self):
        return f"UniqueId({self._raw[:8].hex()}...)"


class _InFlight:
    """One posted non-blocking operation: the C request and the buffers it uses."""

    __slots__ = ("handle", "keepalive", "status", "error", "operation", "lock", "is_recv", "info",
                 "deferred", "posted")

    def __init__(self, handle, keepalive, operation, is_recv=False):
        self.handle = handle  # int address of the chorus_req_t, None once freed
        self.keepalive = keepalive
        self.status = None  # final chorus_status_t once known
        self.error = ""  # the library's sentence when status < 0
        self.operation = operation
        self.lock = threading.Lock()
        self.is_recv = is_recv  # a receive: its MessageInfo is read before the request is freed
        self.info = None  # MessageInfo of a completed receive
        # Posted in a group still open: the id of the thread whose group_end posts it (None
        # otherwise); `posted` is set once it is posted.
        self.deferred = None
        self.posted = threading.Event()
        self.posted.set()


class Request:
    """A non-blocking operation. wait() blocks until it completes and returns its output (or
    raises a ChorusError); test() returns True once it has completed."""

    def __init__(self, comm, record, result):
        self._comm = comm
        self._record = record
        self._result = result

    def test(self):
        record = self._record
        if record.deferred is not None:  # its group is still open: nothing has run
            return False
        with record.lock:
            if record.status is None:
                self._comm._test_record(record)
            status = record.status
        if status is None:
            return False
        self._raise_if_failed(status)
        return True

    def wait(self):
        record = self._record
        self._comm._await_posting(record)
        with record.lock:
            if record.status is None:
                self._comm._wait_record(record)
            status = record.status
        self._raise_if_failed(status)
        return self._result

    @property
    def done(self):
        return self._record.status is not None

    @property
    def result(self):
        """The output object (valid once the request completed)."""
        return self._result

    @property
    def info(self):
        """For a receive that completed (also with TruncationError or MismatchError): a
        MessageInfo(source, tag, count); None before, and for other operations."""
        return self._record.info

    def _raise_if_failed(self, status):
        if status < 0:
            raise error_for_status(status, self._record.error,
                                   self._record.operation)

    def __del__(self):
        # Dropped while in flight: the communicator keeps the buffers until completion.
        comm = getattr(self, "_comm", None)
        if comm is not None and self._record.status is None:
            comm._adopt_orphan(self._record)


def _destroy_handle(handle, inflight, books_lock):
    """Frees leftover requests (they finish in the background), then the communicator, which
    waits for its operations; only then may the kept-alive buffers go. A request another
    thread is waiting on is freed by that thread once its wait returns (record.lock)."""
    with books_lock:
        records = list(inflight)
    for record in records:
        with record.lock, books_lock:
            if record.handle is not None:
                _lib_handle.chorus_req_free(record.handle)
                record.handle = None
    _lib_handle.chorus_comm_destroy(handle)
    with books_lock:
        inflight.clear()


class Communicator:
    """A group of ranks (chorus_comm_t). Make one with chorus.init(), Communicator.from_env(),
    Communicator.from_unique_id() or Communicator.from_store()."""

    def __init__(self, handle):
        self._handle = handle
        # _lock orders posting (and blocking calls) across threads; _books_lock guards the
        # record sets below for the short moments they change. Order: _lock, then _books_lock.
        self._lock = threading.RLock()
        self._compression_version = 0
        self._books_lock = threading.Lock()
        self._inflight = set()  # _InFlight records whose handle is not yet freed
        self._orphans = set()  # records whose Request object was dropped
        self._rank = self._query("rank")
        self._size = self._query("size")
        self._finalizer = weakref.finalize(self, _destroy_handle, handle, self._inflight,
                                          self._books_lock)

    # ---- construction ----

    @classmethod
    def from_env(cls, **config):
        """chorus_comm_init_env: CHORUS_RANK/SIZE/ADDR, torchrun, Slurm or Open MPI variables.
        Keyword arguments are chorus_config_t fields (timeout_sec, connect_timeout_sec,
        nsocks_per_peer, name)."""
        cfg, _name_bytes = _make_config(**config)
        handle = ctypes.c_void_p()
        status = _lib_handle.chorus_comm_init_env(ctypes.byref(handle), ctypes.byref(cfg))
        _raise_for_init(status, "chorus_comm_init_env")
        return cls(handle.value)

    @classmethod
    def from_unique_id(cls, size, rank, unique_id, **config):
        """chorus_comm_init: every one of `size` ranks calls this with the same unique id."""
        cfg, _name_bytes = _make_config(**config)
        struct = unique_id._struct()
        handle = ctypes.c_void_p()
        status = _lib_handle.chorus_comm_init(ctypes.byref(handle), int(size), int(rank),
                                              ctypes.byref(struct), ctypes.byref(cfg))
        _raise_for_init(status, "chorus_comm_init")
        return cls(handle.value)

    @classmethod
    def from_store(cls, store, rank, size, key="chorus/unique_id", near=None, **config):
        """Rank 0 makes a unique id (UniqueId.new(near)) and publishes its 128 bytes under
        `key` in `store` (any object with set(key, bytes) and a get(key) that waits for the
        key, such as a torch.distributed Store or chorus.FileStore); the other ranks read it
        there."""
        if int(rank) == 0:
            unique_id = UniqueId.new(near)
            store.set(key, unique_id.to_bytes())
        else:
            unique_id = UniqueId.from_bytes(store.get(key))
        return cls.from_unique_id(size, rank, unique_id, **config)

    # ---- lifecycle and queries ----

    def destroy(self):
        """Waits for this communicator's operations, then frees it (chorus_comm_destroy)."""
        with self._lock:
            if self._handle is not None:
                self._finalizer()
                self._handle = None

    close = destroy

    def abort(self):
        """Marks the communicator broken and wakes every waiter (chorus_comm_abort). Safe from
        any thread; destroy() must still be called."""
        handle = self._handle
        if handle is not None:
            _lib_handle.chorus_comm_abort(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.destroy()

    @property
    def closed(self):
        return self._handle is None

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return self._size

    @property
    def local_rank(self):
        return self._query("local_rank")

    @property
    def local_size(self):
        return self._query("local_size")

    @property
    def host_count(self):
        return self._query("host_count")

    @property
    def last_error(self):
        """chorus_comm_last_error: the full sentence of the last error, or ""."""
        handle = self._live_handle()
        raw = _lib_handle.chorus_comm_last_error(handle)
        return raw.decode(errors="replace") if raw else ""

    def split(self, color, key=0):
        """chorus_comm_split; returns None for color chorus.SPLIT_NOCOLOR (or any negative)."""
        new_handle = ctypes.c_void_p()
        with self._lock:
            status = _lib_handle.chorus_comm_split(self._live_handle(), int(color), int(key),
                                                   ctypes.byref(new_handle))
            self._raise_for(status, "split")
        return Communicator(new_handle.value) if new_handle.value else None

    def __repr__(self):
        state = "closed" if self._handle is None else f"rank {self._rank} of {self._size}"
        return f"<chorus.Communicator {state}>"

    # ---- collectives ----

    def allreduce(self, buffer, op="sum", out=None, *, dtype=None, async_op=False, compression=None,
                  residual=None):
        """out[i] = op over ranks of buffer[i]. In place (into buffer) when out is None.
        compression: this call's own codec (a compression_opts() argument: "int8", or a
        (codec, scope) pair) instead of the communicator's; residual: a Residual of this
        communicator and count for error feedback (chorus_allreduce_ex)."""
        send, recv = self._send_recv_pair(buffer, out, dtype, "allreduce")
        self._require_count(recv, send.count, "allreduce out")
        args = (send.address, recv.address, send.count, send.dtype_code, _op_code(op))
        if compression is None and residual is None:
            return self._run("allreduce", args, (send, recv), recv.obj, async_op)
        if isinstance(compression, tuple):
            compression = compression_opts(*compression)
        elif compression is not None:
            compression = compression_opts(compression)
        opts = _lib.AllreduceOptsStruct(ctypes.pointer(compression) if compression is not None else None,
                                        residual.handle if residual is not None else None)
        keep = (send, recv, compression, opts, residual)
        return self._run("allreduce_ex", args + (ctypes.byref(opts),), keep, recv.obj, async_op,
                         operation="allreduce")

    # ---- gradient compression ----

    @property
    def compression(self):
        """The compression in force: (codec, scope), codec as compression_opts() takes it
        ("int8", "topk:0.01", "none"), scope "inter" or "all"."""
        opts = _lib.CompressionOptsStruct()
        with self._lock:
            self._raise_for(_lib_handle.chorus_comm_get_compression(self._live_handle(), ctypes.byref(opts)),
                            "compression")
        names = {v: k for k, v in _lib.CODECS.items()}
        codec = names.get(opts.codec, str(opts.codec))
        if codec == "topk":
            codec = f"topk:{opts.topk_fraction!r}"  # exact: set on another rank, the same k
        scope = {v: k for k, v in _lib.COMPRESSION_SCOPES.items()}.get(opts.scope, str(opts.scope))
        return codec, scope

    @property
    def compression_min_bytes(self):
        """The setting leaves allreduces of fewer bytes uncompressed (chorus_comm_get_compression_min_bytes;
        CHORUS_COMPRESSION_MIN_BYTES, 65536 by default; a call's own compression applies at any size)."""
        value = ctypes.c_size_t()
        with self._lock:
            self._raise_for(_lib_handle.chorus_comm_get_compression_min_bytes(self._live_handle(), ctypes.byref(value)),
                            "compression_min_bytes")
        return value.value

    @compression_min_bytes.setter
    def compression_min_bytes(self, min_bytes):
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, numbers.Integral) or not 0 <= min_bytes < 2**64:
            raise ValueError(f"compression_min_bytes {min_bytes!r}: expected an integer in [0, 2^64)")
        with self._lock:
            self._raise_for(_lib_handle.chorus_comm_set_compression_min_bytes(self._live_handle(), int(min_bytes)),
                            "compression_min_bytes")
            self._compression_version += 1

    @property
    def compression_version(self):
        """A number that changes whenever this object changes the setting (set_compression,
        compression_min_bytes), for caches of it."""
        return self._compression_version

    def set_compression(self, codec=None, scope="inter"):
        """Compresses the float32 sum/avg allreduces posted from now on, from
        compression_min_bytes on (chorus_comm_set_compression): codec as compression_opts()
        takes it; None goes back to CHORUS_COMPRESSION. Every rank must make the same change
        before the same call."""
        opts = compression_opts(codec, scope) if codec is not None else None
        with self._lock:
            status = _lib_handle.chorus_comm_set_compression(self._live_handle(),
                                                             ctypes.byref(opts) if opts is not None else None)
            self._raise_for(status, "set_compression")
            self._compression_version += 1

    def residual(self, count):
        """A Residual (error-feedback state) for allreduces of `count` float32 elements."""
        return Residual(self, count)

    def broadcast(self, buffer, root=0, out=None, *, dtype=None, async_op=False):
        """root's buffer lands in every rank's out (in place into buffer when out is None)."""
        send, recv = self._send_recv_pair(buffer, out, dtype, "broadcast")
        self._require_count(recv, send.count, "broadcast out")
        args = (send.address, recv.address, send.count, send.dtype_code, int(root))
        return self._run("broadcast", args, (send, recv), recv.obj, async_op)

    def reduce(self, buffer, root=0, op="sum", out=None, *, dtype=None, async_op=False):
        """Like allreduce, but only root receives the result (in out, or in place). Returns
        the result on root and None on the other ranks."""
        send, recv = self._send_recv_pair(buffer, out, dtype, "reduce")
        self._require_count(recv, send.count, "reduce out")
        args = (send.address, recv.address, send.count, send.dtype_code, _op_code(op), int(root))
        result = recv.obj if self._rank == root else None
        return self._run("reduce", args, (send, recv), result, async_op)

    def allgather(self, buffer, out=None, *, dtype=None, async_op=False):
        """out holds every rank's buffer in rank order; allocated (size, *buffer.shape) when
        None. In place when buffer is this rank's slot of out."""
        send = as_buffer(buffer, dtype=dtype, what="allgather buffer")
        out = self._output_or_new(out, send, send.count * self._size,
                                  (self._size,) + tuple(buffer.shape))
        recv = as_buffer(out, dtype=send.dtype, writable=True, what="allgather out")
        self._require_count(recv, send.count * self._size, "allgather out")
        args = (send.address, recv.address, send.count, send.dtype_code)
        return self._run("allgather", args, (send, recv), out, async_op)

    def reduce_scatter(self, buffer, op="sum", out=None, *, dtype=None, async_op=False):
        """buffer holds size blocks; this rank's out gets block `rank` of the reduction."""
        send = as_buffer(buffer, dtype=dtype, what="reduce_scatter buffer")
        recvcount = self._block_count(send, "reduce_scatter buffer")
        out = self._output_or_new(out, send, recvcount, self._block_shape(buffer, recvcount))
        recv = as_buffer(out, dtype=send.dtype, writable=True, what="reduce_scatter out")
        self._require_count(recv, recvcount, "reduce_scatter out")
        args = (send.address, recv.address, recvcount, send.dtype_code, _op_code(op))
        return self._run("reduce_scatter", args, (send, recv), out, async_op)

    def alltoall(self, buffer, out=None, *, dtype=None, async_op=False):
        """Block j of this rank's buffer lands as block `rank` of rank j's out."""
        send = as_buffer(buffer, dtype=dtype, what="alltoall buffer")
        block_count = self._block_count(send, "alltoall buffer")
        out = self._output_or_new(out, send, send.count, tuple(buffer.shape))
        recv = as_buffer(out, dtype=send.dtype, writable=True, what="alltoall out")
        self._require_count(recv, send.count, "alltoall out")
        args = (send.address, recv.address, block_count, send.dtype_code)
        return self._run("alltoall", args, (send, recv), out, async_op)

    def gather(self, buffer, root=0, out=None, *, dtype=None, async_op=False):
        """root's out (allocated (size, *buffer.shape) when None) receives every rank's
        buffer in rank order. Returns out on root, None elsewhere."""
        send = as_buffer(buffer, dtype=dtype, what="gather buffer")
        keep = [send]
        recv_address = None
        result = None
        if self._rank == root:
            out = self._output_or_new(out, send, send.count * self._size,
                                      (self._size,) + tuple(buffer.shape))
            recv = as_buffer(out, dtype=send.dtype, writable=True, what="gather out")
            self._require_count(recv, send.count * self._size, "gather out")
            keep.append(recv)
            recv_address, result = recv.address, out
        args = (send.address, recv_address, send.count, send.dtype_code, int(root))
        return self._run("gather", args, tuple(keep), result, async_op)

    def scatter(self, buffer, out, root=0, *, dtype=None, async_op=False):
        """Block r of root's buffer (size * out elements) lands in rank r's out. buffer is
        read on root only and may be None elsewhere."""
        recv = as_buffer(out, dtype=dtype, writable=True, what="scatter out")
        keep = [recv]
        send_address = None
        if self._rank == root:
            send = as_buffer(buffer, dtype=recv.dtype, what="scatter buffer")
            self._require_count(send, recv.count * self._size, "scatter buffer")
            keep.append(send)
            send_address = send.address
        args = (send_address, recv.address, recv.count, recv.dtype_code, int(root))
        return self._run("scatter", args, tuple(keep), out, async_op)

    def barrier(self, *, async_op=False):
        """Returns once every rank has entered the barrier."""
        return self._run("barrier", (), (), None, async_op)

    def send(self, buffer, peer, *, tag=0, dtype=None, async_op=False):
        """Sends buffer to rank `peer` with `tag` (0..chorus.TAG_MAX). Messages to one peer
        with one tag are received in the order sent."""
        send = as_buffer(buffer, dtype=dtype, what="send buffer")
        args = (send.address, send.count, send.dtype_code, int(peer), int(tag))
        return self._run("send_tag", args, (send,), None, async_op, "send")

    def recv(self, out, peer=ANY_SOURCE, *, tag=0, dtype=None, async_op=False, with_info=False):
        """Receives a message from rank `peer` (or chorus.ANY_SOURCE) with `tag` (or
        chorus.ANY_TAG) into out, which may be larger than the message; returns out, or
        (out, MessageInfo) with with_info=True. A longer message raises TruncationError (out
        holds its first part), one of another dtype MismatchError. async_op=True returns a
        Request whose .info is the MessageInfo once it completed."""
        recv = as_buffer(out, dtype=dtype, writable=True, what="recv out")
        args = (recv.address, recv.count, recv.dtype_code, int(peer), int(tag))
        if async_op:
            record = self.post("recv_tag", args, (recv,), "recv", is_recv=True)
            return Request(self, record, out)
        if with_info and _group.depth:
            raise python_side_error("CHORUS_ERR_INVALID_USAGE",
                                    "recv(with_info=True) inside a group: its info is known only after "
                                    "group_end; use async_op=True and the request's .info", "recv")
        info = _lib.MsgInfoStruct(-1, -1, 0)
        with self._lock:
            status = _lib_handle.chorus_recv_tag(*args, self._live_handle(), ctypes.byref(info))
            if _group.depth:
                _note_group_call(self, keepalive=(recv,))
            self._raise_for(status, "recv")
        return (out, MessageInfo(info.source, info.tag, info.count)) if with_info else out

    def sendrecv(self, buffer, dst, out, src, *, dtype=None, async_op=False):
        """Sends buffer to dst and receives out from src at once; returns out."""
        send = as_buffer(buffer, dtype=dtype, what="sendrecv buffer")
        recv = as_buffer(out, dtype=send.dtype, writable=True, what="sendrecv out")
        args = (send.address, send.count, int(dst), recv.address, recv.count, int(src),
                send.dtype_code)
        return self._run("sendrecv", args, (send, recv), out, async_op)

    # ---- variable-size collectives ----
    # Counts and displacements are element counts, one per rank, in rank order: any sequence
    # of non-negative integers (list, tuple, numpy array, torch tensor). Displacements None:
    # the blocks lie back to back in rank order. The library copies them when the call is
    # posted. Outputs not given are allocated flat (1-D), as long as the blocks need. Every
    # method has the low-level twin prepare("<name>", ...) for post().

    def allgatherv(self, buffer, counts, out=None, displs=None, *, dtype=None, async_op=False):
        """Rank i's buffer (counts[i] elements) lands in every rank's out at displs[i]. In place
        when buffer is this rank's block of out (a view at displs[rank]). Returns out."""
        return self._run_v("allgatherv", async_op, buffer, counts, out, displs, dtype=dtype)

    def reduce_scatterv(self, buffer, counts, op="sum", out=None, *, dtype=None, async_op=False):
        """buffer holds sum(counts) elements, rank i's block (counts[i]) after rank i-1's; this
        rank's out (counts[rank] elements) gets its block of the element-wise reduction over
        ranks. In place when out is this rank's block of buffer (a view). Returns out."""
        return self._run_v("reduce_scatterv", async_op, buffer, counts, op, out, dtype=dtype)

    def alltoallv(self, buffer, send_counts, recv_counts, out=None, send_displs=None,
                  recv_displs=None, *, dtype=None, async_op=False):
        """The send_counts[j] elements at send_displs[j] of this rank's buffer land in rank j's
        out at its recv_displs[rank]; recv_counts[i] is what this rank expects from rank i.
        In place when out is buffer: its blocks (recv_counts, recv_displs) are sent and
        replaced, and send_counts/send_displs must be None or equal them. Returns out."""
        return self._run_v("alltoallv", async_op, buffer, send_counts, recv_counts, out,
                           send_displs, recv_displs, dtype=dtype)

    def gatherv(self, buffer, counts=None, root=0, out=None, displs=None, *, dtype=None,
                async_op=False):
        """root's out receives rank i's buffer (counts[i] elements) at displs[i]. counts, out
        and displs are used on root only (None elsewhere). Returns out on root, None
        elsewhere."""
        return self._run_v("gatherv", async_op, buffer, counts, root, out, displs, dtype=dtype)

    def scatterv(self, buffer, counts, out, root=0, displs=None, *, dtype=None, async_op=False):
        """The counts[i] elements at displs[i] of root's buffer land in rank i's out (all of
        it: out's size is what this rank expects). buffer, counts and displs are used on root
        only (None elsewhere). Returns out."""
        return self._run_v("scatterv", async_op, buffer, counts, out, root, displs, dtype=dtype)

    def prepare(self, coll, *call_args, **call_kwargs):
        """The library call a variable-size method would make, for post(): returns (args,
        keepalive, result) for coll in "allgatherv", "reduce_scatterv", "alltoallv",
        "gatherv", "scatterv", given that method's arguments (without async_op); result is
        what the method returns. Raises as the method would for bad arguments."""
        preparer = getattr(self, "_prepare_" + str(coll), None)
        if preparer is None:
            raise ValueError(f"prepare: {coll!r} is not a variable-size collective")
        self._require_symbol(coll)
        return preparer(*call_args, **call_kwargs)

    def _run_v(self, coll, async_op, *call_args, **call_kwargs):
        args, keepalive, result = self.prepare(coll, *call_args, **call_kwargs)
        return self._run(coll, args, keepalive, result, async_op)

    def _prepare_allgatherv(self, buffer, counts, out=None, displs=None, *, dtype=None):
        send = as_buffer(buffer, dtype=dtype, what="allgatherv buffer")
        counts_c, counts_v = self._size_array(counts, "allgatherv counts")
        displs_c, extent = self._displacements(displs, counts_v, "allgatherv displs")
        out = self._output_or_new(out, send, extent, (extent,))
        recv = as_buffer(out, dtype=send.dtype, writable=True, what="allgatherv out")
        self._require_at_least(recv, extent, "allgatherv out")
        args = (send.address, send.count, recv.address, counts_c, displs_c, send.dtype_code)
        return args, (send, recv), out

    def _prepare_reduce_scatterv(self, buffer, counts, op="sum", out=None, *, dtype=None):
        send = as_buffer(buffer, dtype=dtype, what="reduce_scatterv buffer")
        counts_c, counts_v = self._size_array(counts, "reduce_scatterv counts")
        self._require_count(send, sum(counts_v), "reduce_scatterv buffer")
        mine = counts_v[self._rank]
        out = self._output_or_new(out, send, mine, (mine,))
        recv = as_buffer(out, dtype=send.dtype, writable=True, what="reduce_scatterv out")
        self._require_count(recv, mine, "reduce_scatterv out")
        args = (send.address, recv.address, counts_c, send.dtype_code, _op_code(op))
        return args, (send, recv), out

    def _prepare_alltoallv(self, buffer, send_counts, recv_counts, out=None, send_displs=None,
                           recv_displs=None, *, dtype=None):
        in_place = out is buffer
        send = as_buffer(buffer, dtype=dtype, writable=in_place, what="alltoallv buffer")
        recv_c, recv_v = self._size_array(recv_counts, "alltoallv recv_counts")
        rdispls_c, recv_extent = self._displacements(recv_displs, recv_v, "alltoallv recv_displs")
        send_c = sdispls_c = None
        if not in_place or send_counts is not None:
            send_c, send_v = self._size_array(send_counts, "alltoallv send_counts")
            sdispls_c, send_extent = self._displacements(send_displs, send_v,
                                                         "alltoallv send_displs")
            self._require_at_least(send, send_extent, "alltoallv buffer")
        elif send_displs is not None:
            sdispls_c, _ = self._displacements(send_displs, recv_v, "alltoallv send_displs")
        out = self._output_or_new(out, send, recv_extent, (recv_extent,))
        recv = send if in_place else as_buffer(out, dtype=send.dtype, writable=True,
                                               what="alltoallv out")
        self._require_at_least(recv, recv_extent, "alltoallv out")
        args = (send.address, send_c, sdispls_c, recv.address, recv_c, rdispls_c,
                send.dtype_code)
        return args, (send, recv), out

    def _prepare_gatherv(self, buffer, counts=None, root=0, out=None, displs=None, *,
                         dtype=None):
        send = as_buffer(buffer, dtype=dtype, what="gatherv buffer")
        keep, result = [send], None
        recv_address = counts_c = displs_c = None
        if self._rank == root:
            counts_c, counts_v = self._size_array(counts, "gatherv counts")
            displs_c, extent = self._displacements(displs, counts_v, "gatherv displs")
            out = self._output_or_new(out, send, extent, (extent,))
            recv = as_buffer(out, dtype=send.dtype, writable=True, what="gatherv out")
            self._require_at_least(recv, extent, "gatherv out")
            keep.append(recv)
            recv_address, result = recv.address, out
        args = (send.address, send.count, recv_address, counts_c, displs_c, send.dtype_code,
                int(root))
        return args, tuple(keep), result

    def _prepare_scatterv(self, buffer, counts, out, root=0, displs=None, *, dtype=None):
        recv = as_buffer(out, dtype=dtype, writable=True, what="scatterv out")
        keep = [recv]
        send_address = counts_c = displs_c = None
        if self._rank == root:
            send = as_buffer(buffer, dtype=recv.dtype, what="scatterv buffer")
            counts_c, counts_v = self._size_array(counts, "scatterv counts")
            displs_c, extent = self._displacements(displs, counts_v, "scatterv displs")
            self._require_at_least(send, extent, "scatterv buffer")
            keep.append(send)
            send_address = send.address
        args = (send_address, counts_c, displs_c, recv.address, recv.count, recv.dtype_code,
                int(root))
        return args, tuple(keep), out

    iallgatherv = functools.partialmethod(allgatherv, async_op=True)
    ireduce_scatterv = functools.partialmethod(reduce_scatterv, async_op=True)
    ialltoallv = functools.partialmethod(alltoallv, async_op=True)
    igatherv = functools.partialmethod(gatherv, async_op=True)
    iscatterv = functools.partialmethod(scatterv, async_op=True)

    iallreduce = functools.partialmethod(allreduce, async_op=True)
    ibroadcast = functools.partialmethod(broadcast, async_op=True)
    ireduce = functools.partialmethod(reduce, async_op=True)
    iallgather = functools.partialmethod(allgather, async_op=True)
    ireduce_scatter = functools.partialmethod(reduce_scatter, async_op=True)
    ialltoall = functools.partialmethod(alltoall, async_op=True)
    igather = functools.partialmethod(gather, async_op=True)
    iscatter = functools.partialmethod(scatter, async_op=True)
    ibarrier = functools.partialmethod(barrier, async_op=True)
    isend = functools.partialmethod(send, async_op=True)
    irecv = functools.partialmethod(recv, async_op=True)
    isendrecv = functools.partialmethod(sendrecv, async_op=True)

    # ---- low-level posting, used by chorus.torch as well ----

    def post(self, coll, args, keepalive, operation=None, is_recv=False):
        """Posts the non-blocking chorus_i<coll>(*args, comm, &req) and returns its _InFlight
        record. Posting is serialised per communicator so that posting order, which is the
        collectives' completion order, is well defined across threads. is_recv: a receive,
        whose MessageInfo the record keeps."""
        req = ctypes.c_void_p()
        fn = getattr(_lib_handle, "chorus_i" + coll)
        with self._lock:
            self._reap_orphans()
            status = fn(*args, self._live_handle(), ctypes.byref(req))
            self._raise_for(status, operation or coll)
            record = _InFlight(req.value, keepalive, operation or coll, is_recv)
            with self._books_lock:
                self._inflight.add(record)
            if _group.depth:
                _note_group_call(self, record=record)
        return record

    def wait_record(self, record):
        """Blocks (GIL released) until the record completes; returns its status and the
        library's error sentence ("" on success). A record posted in another thread's open
        group is waited for once that group ends."""
        self._await_posting(record)
        with record.lock:
            if record.status is None:
                self._wait_record(record)
        return record.status, record.error

    def test_record(self, record):
        """Returns (status, error) if the record completed, None if it is still running (or
        not posted yet: its group is still open)."""
        if record.deferred is not None:
            return None
        with record.lock:
            if record.status is None:
                self._test_record(record)
            if record.status is None:
                return None
            return record.status, record.error

    def _run(self, coll, args, keepalive, result, async_op, operation=None):
        if async_op:
            record = self.post(coll, args, keepalive, operation)
            return Request(self, record, result)
        fn = getattr(_lib_handle, "chorus_" + coll)
        with self._lock:
            status = fn(*args, self._live_handle())
            if _group.depth:  # runs at group_end: its buffers must live until then
                _note_group_call(self, keepalive=keepalive)
            self._raise_for(status, operation or coll)
        return result

    @staticmethod
    def _await_posting(record):
        """A record of a group still open: the thread that opened it must end it first (its
        own wait is a usage error); any other thread waits until it does."""
        owner = record.deferred
        if owner is None:
            return
        if owner == threading.get_ident():
            raise python_side_error("CHORUS_ERR_INVALID_USAGE",
                                    "the request belongs to a group that is still open (call group_end first)",
                                    record.operation)
        record.posted.wait()

    def _wait_record(self, record):
        if record.handle is None:
            self._finish_orphaned_by_destroy(record)
            return
        status = _lib_handle.chorus_wait(record.handle)
        self._finish_record(record, status)

    def _test_record(self, record):
        if record.handle is None:
            self._finish_orphaned_by_destroy(record)
            return
        done = ctypes.c_int(0)
        status = _lib_handle.chorus_test(record.handle, ctypes.byref(done))
        if done.value:
            self._finish_record(record, status)
        elif status < 0:  # the test itself failed (e.g. a bad request)
            self._finish_record(record, status)

    def _finish_orphaned_by_destroy(self, record):
        # destroy() freed the request before anyone waited for it: its outcome is unknown.
        with self._books_lock:
            record.error = "the communicator was destroyed before the request completed"
            record.status = _lib.status_value("CHORUS_ERR_INVALID_USAGE")
            record.keepalive = None

    def _finish_record(self, record, status):
        with self._books_lock:
            if status < 0:
                record.error = self._error_text()
            if record.is_recv and record.handle is not None:
                info = _lib.MsgInfoStruct(-1, -1, 0)
                if _lib_handle.chorus_req_info(record.handle, ctypes.byref(info)) == 0:
                    record.info = MessageInfo(info.source, info.tag, info.count)
            record.status = status
            if record.handle is not None:
                _lib_handle.chorus_req_free(record.handle)
                record.handle = None
            self._inflight.discard(record)
            self._orphans.discard(record)
            record.keepalive = None

    def _adopt_orphan(self, record):
        with self._books_lock:
            if record.status is None and record.handle is not None:
                self._orphans.add(record)

    def _reap_orphans(self):
        with self._books_lock:
            orphans = list(self._orphans)
        for record in orphans:
            if record.lock.acquire(blocking=False):
                try:
                    if record.handle is not None:
                        self._test_record(record)
                finally:
                    record.lock.release()

    # ---- helpers ----

    def _live_handle(self):
        handle = self._handle
        if handle is None:
            raise python_side_error("CHORUS_ERR_INVALID_USAGE", "the communicator was destroyed")
        return handle

    def _query(self, what):
        value = ctypes.c_int()
        fn = getattr(_lib_handle, "chorus_comm_" + what)
        status = fn(self._live_handle(), ctypes.byref(value))
        self._raise_for(status, what)
        return value.value

    def _error_text(self):
        raw = _lib_handle.chorus_comm_last_error(self._handle) if self._handle else None
        return raw.decode(errors="replace") if raw else ""

    def _raise_for(self, status, operation):
        if status < 0:
            raise error_for_status(status, self._error_text(), operation)

    def _send_recv_pair(self, buffer, out, dtype, what):
        in_place = out is None or out is buffer
        send = as_buffer(buffer, dtype=dtype, writable=in_place, what=f"{what} buffer")
        if in_place:
            return send, send
        recv = as_buffer(out, dtype=send.dtype, writable=True, what=f"{what} out")
        return send, recv

    def _block_count(self, buf, what):
        if buf.count % self._size:
            raise python_side_error(
                "CHORUS_ERR_INVALID_ARG",
                f"{what} has {buf.count} elements, not a multiple of size {self._size}")
        return buf.count // self._size

    def _block_shape(self, buffer, recvcount):
        # A (size, ...) buffer scatters into (...)-shaped blocks; anything else into flat ones.
        shape = tuple(buffer.shape)
        if len(shape) >= 2 and shape[0] == self._size:
            return shape[1:]
        return (recvcount,)

    @staticmethod
    def _output_or_new(out, send, count, shape):
        return new_like(send, count, shape) if out is None else out

    def _size_array(self, values, what):
        """(ctypes size_t array, list of ints) of one non-negative count per rank."""
        if values is None:
            raise python_side_error("CHORUS_ERR_INVALID_ARG", f"{what} is None")
        try:
            ints = [int(v) for v in values]
        except (TypeError, ValueError) as exc:
            raise python_side_error("CHORUS_ERR_INVALID_ARG",
                                    f"{what}: expected a sequence of integers ({exc})") from None
        if len(ints) != self._size:
            raise python_side_error("CHORUS_ERR_INVALID_ARG",
                                    f"{what} has {len(ints)} entries, expected one per rank "
                                    f"({self._size})")
        negative = [v for v in ints if v < 0]
        if negative:
            raise python_side_error("CHORUS_ERR_INVALID_ARG",
                                    f"{what} holds a negative value ({negative[0]})")
        return (ctypes.c_size_t * len(ints))(*ints), ints

    def _displacements(self, displs, counts, what):
        """(ctypes array or None, extent): the elements a buffer needs for these blocks, back to
        back when displs is None, else up to the end of the last non-empty one."""
        if displs is None:
            return None, sum(counts)
        displs_c, displs_v = self._size_array(displs, what)
        return displs_c, max((d + c for d, c in zip(displs_v, counts) if c), default=0)

    def _require_symbol(self, coll):
        if not hasattr(_lib_handle, "chorus_" + coll):
            raise python_side_error("CHORUS_ERR_NOT_SUPPORTED",
                                    f"the loaded libchorus ({_lib.library_path}) has no "
                                    f"chorus_{coll}: it is older than this package")

    @staticmethod
    def _require_at_least(buf, count, what):
        if buf.count < count:
            raise python_side_error("CHORUS_ERR_INVALID_ARG",
                                    f"{what} has {buf.count} elements, the blocks need {count}")

    @staticmethod
    def _require_count(buf, count, what):
        if buf.count != count:
            raise python_side_error("CHORUS_ERR_INVALID_ARG",
                                    f"{what} has {buf.count} elements, expected {count}")


def _raise_for_init(status, operation):
    if status < 0:
        raise error_for_status(status, operation=operation)


def init(store=None, rank=None, size=None, *, key="chorus/unique_id", **config):
    """A communicator from the environment (chorus_comm_init_env) or, when `store` is given,
    bootstrapped through it (rank 0 publishes the unique id). config: timeout_sec,
    connect_timeout_sec, nsocks_per_peer, name."""
    if store is None:
        return Communicator.from_env(**config)
    if rank is None or size is None:
        raise ValueError("chorus.init(store=...) needs rank and size")
    return Communicator.from_store(store, rank, size, key=key, **config)
