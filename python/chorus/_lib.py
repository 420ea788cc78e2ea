"""Locates and loads libchorus with ctypes and declares the C prototypes of include/chorus.h.

The enum values (dtypes, ops, status codes) are read from the library's own name functions
rather than copied here, so the Python side cannot drift from the header. CDLL releases the
GIL around every foreign call, which lets blocking collectives and chorus_wait run while other
Python threads (autograd, the completion thread) keep going.
"""

import ctypes
import ctypes.util
import glob
import os

LIBRARY_ENV_VAR = "CHORUS_LIBRARY"
LIBRARY_BASENAME = "libchorus.so"
LIBRARY_SONAME = "libchorus.so.0"

# The chorus_config_t layout below is the one of header version 0.1.0 (CHORUS_VERSION_CODE).
HEADER_VERSION_CODE = 100
UNIQUE_ID_BYTES = 128


class UniqueIdStruct(ctypes.Structure):
    # c_ubyte, not c_char: a c_char array would stop at the first NUL byte.
    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


class ConfigStruct(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("version", ctypes.c_uint),
        ("timeout_sec", ctypes.c_int),
        ("connect_timeout_sec", ctypes.c_int),
        ("nsocks_per_peer", ctypes.c_int),
        ("name", ctypes.c_char_p),
    ]


class CompressionOptsStruct(ctypes.Structure):
    """chorus_compression_opts_t."""
    _fields_ = [("codec", ctypes.c_int), ("topk_fraction", ctypes.c_double), ("scope", ctypes.c_int)]


class AllreduceOptsStruct(ctypes.Structure):
    """chorus_allreduce_opts_t: the call's own compression (or NULL) and its residual (or NULL)."""
    _fields_ = [("compression", ctypes.POINTER(CompressionOptsStruct)), ("residual", ctypes.c_void_p)]


class MsgInfoStruct(ctypes.Structure):
    """chorus_msg_info_t: what a completed receive got."""
    _fields_ = [("source", ctypes.c_int), ("tag", ctypes.c_int), ("count", ctypes.c_size_t)]


ANY_SOURCE = -1  # CHORUS_ANY_SOURCE
ANY_TAG = -1  # CHORUS_ANY_TAG
TAG_MAX = 0x7FFFFFFF  # CHORUS_TAG_MAX


def _recorded_library():
    """The installed library setup.py found at build time (CHORUS_PREFIX, pkg-config or
    CMAKE_PREFIX_PATH), from the generated module; None in a source tree or when bundled."""
    try:
        from . import _install_info
    except ImportError:
        return None
    return getattr(_install_info, "LIBRARY_PATH", None)


def _library_candidates():
    """Paths to try, in order: next to the package (bundled), the installed library the package
    was built against, the repository's build directories (when running from the source tree),
    then the dynamic loader's search (ldconfig's cache, LD_LIBRARY_PATH, the default paths)."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    yield from sorted(glob.glob(os.path.join(package_dir, LIBRARY_BASENAME + "*")))
    recorded = _recorded_library()
    if recorded:
        yield recorded
    repo_dir = os.path.dirname(os.path.dirname(package_dir))
    build_dirs = glob.glob(os.path.join(repo_dir, "build*"))
    # The conventional "build" first, then the most recently built of the others.
    build_dirs.sort(key=lambda d: (os.path.basename(d) != "build", -_mtime_or_zero(d)))
    for build_dir in build_dirs:
        yield os.path.join(build_dir, LIBRARY_BASENAME)
    system_name = ctypes.util.find_library("chorus")
    if system_name:
        yield system_name
    # dlopen's own search by SONAME, which also covers LD_LIBRARY_PATH (find_library may not).
    if system_name != LIBRARY_SONAME:
        yield LIBRARY_SONAME


def _mtime_or_zero(directory):
    try:
        return os.path.getmtime(os.path.join(directory, LIBRARY_BASENAME))
    except OSError:
        return 0.0


def _load_library():
    explicit = os.environ.get(LIBRARY_ENV_VAR)
    if explicit:
        path = explicit
        if os.path.isdir(path):
            path = os.path.join(path, LIBRARY_BASENAME)
        try:
            return ctypes.CDLL(path), path
        except OSError as exc:
            raise ImportError(f"chorus: cannot load {LIBRARY_ENV_VAR}={explicit}: {exc}") from exc
    tried = []
    for path in _library_candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as exc:
            tried.append(f"{path} ({exc})")
    raise ImportError(
        "chorus: cannot find libchorus.so; set CHORUS_LIBRARY to its path (or reinstall the "
        "package with CHORUS_PREFIX set to Chorus's install prefix). Tried: "
        + ", ".join(tried)
    )


def _declare(lib, name, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes


def _declare_prototypes(lib):
    st = ctypes.c_int  # chorus_status_t
    vp, cvp, sz, i = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    comm = ctypes.c_void_p
    pcomm = ctypes.POINTER(ctypes.c_void_p)
    preq = ctypes.POINTER(ctypes.c_void_p)
    pint = ctypes.POINTER(ctypes.c_int)

    _declare(lib, "chorus_status_name", ctypes.c_char_p, [st])
    _declare(lib, "chorus_status_str", ctypes.c_char_p, [st])
    _declare(lib, "chorus_dtype_name", ctypes.c_char_p, [i])
    _declare(lib, "chorus_dtype_size", sz, [i])
    _declare(lib, "chorus_op_name", ctypes.c_char_p, [i])
    _declare(lib, "chorus_version", i, [])

    _declare(lib, "chorus_get_unique_id", st, [ctypes.POINTER(UniqueIdStruct)])
    _declare(lib, "chorus_get_unique_id_near", st,
             [ctypes.POINTER(UniqueIdStruct), ctypes.c_char_p])
    _declare(lib, "chorus_comm_init", st,
             [pcomm, i, i, ctypes.POINTER(UniqueIdStruct), ctypes.POINTER(ConfigStruct)])
    _declare(lib, "chorus_comm_init_env", st, [pcomm, ctypes.POINTER(ConfigStruct)])
    _declare(lib, "chorus_comm_split", st, [comm, i, i, pcomm])
    _declare(lib, "chorus_comm_destroy", st, [comm])
    _declare(lib, "chorus_comm_abort", st, [comm])
    for query in ("rank", "size", "local_rank", "local_size", "host_count"):
        _declare(lib, "chorus_comm_" + query, st, [comm, pint])
    _declare(lib, "chorus_comm_last_error", ctypes.c_char_p, [comm])

    # Blocking collectives and their non-blocking twins (same arguments plus chorus_req_t**).
    collective_args = {
        "allreduce": [cvp, vp, sz, i, i, comm],
        "broadcast": [cvp, vp, sz, i, i, comm],
        "reduce": [cvp, vp, sz, i, i, i, comm],
        "allgather": [cvp, vp, sz, i, comm],
        "reduce_scatter": [cvp, vp, sz, i, i, comm],
        "alltoall": [cvp, vp, sz, i, comm],
        "gather": [cvp, vp, sz, i, i, comm],
        "scatter": [cvp, vp, sz, i, i, comm],
        "barrier": [comm],
        "send": [cvp, sz, i, i, comm],
        "recv": [vp, sz, i, i, comm],
        "sendrecv": [cvp, sz, i, vp, sz, i, i, comm],
    }
    for coll, args in collective_args.items():
        _declare(lib, "chorus_" + coll, st, args)
        _declare(lib, "chorus_i" + coll, st, args + [preq])

    # The variable-size collectives (counts and displacements: size_t arrays, one per rank, or
    # None for NULL). Declared when the library has them, so that an older libchorus still
    # loads (the methods then say what is missing).
    psz = ctypes.POINTER(ctypes.c_size_t)
    v_collective_args = {
        "allgatherv": [cvp, sz, vp, psz, psz, i, comm],
        "reduce_scatterv": [cvp, vp, psz, i, i, comm],
        "alltoallv": [cvp, psz, psz, vp, psz, psz, i, comm],
        "gatherv": [cvp, sz, vp, psz, psz, i, i, comm],
        "scatterv": [cvp, psz, psz, vp, sz, i, i, comm],
    }
    for coll, args in v_collective_args.items():
        if hasattr(lib, "chorus_" + coll):
            _declare(lib, "chorus_" + coll, st, args)
            _declare(lib, "chorus_i" + coll, st, args + [preq])

    # Tagged point to point (tag 0..TAG_MAX; receives also ANY_TAG, ANY_SOURCE).
    pinfo = ctypes.POINTER(MsgInfoStruct)
    _declare(lib, "chorus_send_tag", st, [cvp, sz, i, i, i, comm])
    _declare(lib, "chorus_isend_tag", st, [cvp, sz, i, i, i, comm, preq])
    _declare(lib, "chorus_recv_tag", st, [vp, sz, i, i, i, comm, pinfo])
    _declare(lib, "chorus_irecv_tag", st, [vp, sz, i, i, i, comm, preq])
    _declare(lib, "chorus_req_info", st, [vp, pinfo])

    # Gradient compression (declared when the library has it, so that an older one loads).
    if hasattr(lib, "chorus_comm_set_compression"):
        popts = ctypes.POINTER(CompressionOptsStruct)
        _declare(lib, "chorus_compression_name", ctypes.c_char_p, [i])
        _declare(lib, "chorus_comm_set_compression", st, [comm, popts])
        _declare(lib, "chorus_comm_get_compression", st, [comm, popts])
        _declare(lib, "chorus_residual_create", st, [comm, sz, ctypes.POINTER(ctypes.c_void_p)])
        _declare(lib, "chorus_residual_destroy", st, [vp])
        ar_ex = [cvp, vp, sz, i, i, ctypes.POINTER(AllreduceOptsStruct), comm]
        _declare(lib, "chorus_allreduce_ex", st, ar_ex)
        _declare(lib, "chorus_iallreduce_ex", st, ar_ex + [preq])
    if hasattr(lib, "chorus_comm_set_compression_min_bytes"):
        _declare(lib, "chorus_comm_set_compression_min_bytes", st, [comm, sz])
        _declare(lib, "chorus_comm_get_compression_min_bytes", st, [comm, ctypes.POINTER(sz)])

    _declare(lib, "chorus_group_start", st, [])
    _declare(lib, "chorus_group_end", st, [])

    _declare(lib, "chorus_test", st, [vp, pint])
    _declare(lib, "chorus_wait", st, [vp])
    _declare(lib, "chorus_req_free", None, [vp])


def _read_enum_names(name_fn, limit=64):
    """{name: value} for the values 0.. that name_fn knows (it returns NULL past the end)."""
    names = {}
    for value in range(limit):
        raw = name_fn(value)
        if raw is None:
            break
        names[raw.decode()] = value
    return names


def _read_status_names(lib):
    """{value: "CHORUS_ERR_X"} for every status code the library names."""
    names = {}
    for value in range(-64, 64):
        raw = lib.chorus_status_name(value)
        if raw is not None and raw != b"CHORUS_UNKNOWN_STATUS":
            names[value] = raw.decode()
    return names


lib, library_path = _load_library()
_declare_prototypes(lib)

DTYPES = _read_enum_names(lib.chorus_dtype_name)  # {"float32": 8, ...}
DTYPE_SIZES = {name: lib.chorus_dtype_size(value) for name, value in DTYPES.items()}
OPS = _read_enum_names(lib.chorus_op_name)  # {"sum": 0, ...}
# {"none": 0, "fp16": 1, ...}; empty for a library without compression.
CODECS = (_read_enum_names(lib.chorus_compression_name)
          if hasattr(lib, "chorus_compression_name") else {})
COMPRESSION_SCOPES = {"inter": 0, "all": 1}  # chorus_compression_scope_t
STATUS_NAMES = _read_status_names(lib)  # {-6: "CHORUS_ERR_TIMEOUT", ...}
STATUS_OK = 0
STATUS_INPROGRESS = 1


def status_message(status):
    raw = lib.chorus_status_str(status)
    return raw.decode() if raw else f"unknown status {status}"


def status_name(status):
    return STATUS_NAMES.get(status, f"CHORUS_STATUS_{status}")


def status_value(name):
    """The value of a status given its name, e.g. "CHORUS_ERR_TIMEOUT"."""
    for value, known in STATUS_NAMES.items():
        if known == name:
            return value
    raise KeyError(f"the loaded libchorus has no status {name}")
