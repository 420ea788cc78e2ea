"""Turns numpy arrays and torch tensors into (address, element count, Chorus dtype) without
copying: the library reads and writes the caller's memory directly, so a buffer must be
C-contiguous, in native byte order, on the CPU, and writable when it receives data.
bfloat16 data held in a numpy uint16/int16 array can be named with dtype="bfloat16".
"""

import sys

from . import _lib


class Buffer:
    """One user buffer seen by the C library. `obj` keeps the memory alive while in flight."""

    __slots__ = ("obj", "address", "count", "dtype", "itemsize")

    def __init__(self, obj, address, count, dtype, itemsize):
        self.obj = obj
        self.address = address
        self.count = count
        self.dtype = dtype  # a key of _lib.DTYPES, e.g. "float32"
        self.itemsize = itemsize

    @property
    def dtype_code(self):
        return _lib.DTYPES[self.dtype]

    @property
    def nbytes(self):
        return self.count * self.itemsize

    def element_address(self, index):
        """Address of element `index` (for in-place slots of allgather/gather)."""
        return self.address + index * self.itemsize


def _torch_module():
    # Only consult torch if the program already imported it: chorus never imports it itself.
    return sys.modules.get("torch")


def _is_torch_tensor(obj):
    torch = _torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


def _resolve_dtype(natural_name, itemsize, override, what):
    """The Chorus dtype for a buffer whose own dtype is natural_name, honouring an override
    of the same element size (how bfloat16 travels in numpy uint16 arrays)."""
    if override is not None:
        name = str(override)
        if name not in _lib.DTYPES:
            raise TypeError(f"{what}: unknown chorus dtype {name!r}; known: {sorted(_lib.DTYPES)}")
        if _lib.DTYPE_SIZES[name] != itemsize:
            raise TypeError(
                f"{what}: dtype {name} has {_lib.DTYPE_SIZES[name]}-byte elements, "
                f"the buffer has {itemsize}-byte elements"
            )
        return name
    if natural_name not in _lib.DTYPES:
        raise TypeError(
            f"{what}: element type {natural_name} is not supported by chorus "
            f"(supported: {', '.join(sorted(_lib.DTYPES))})"
        )
    return natural_name


_TORCH_DTYPE_NAMES = {}  # torch.dtype -> "float32", ...: str() of a dtype is slow


def _from_torch(tensor, dtype, writable, what):
    if tensor.device.type != "cpu":
        raise ValueError(f"{what}: tensor is on {tensor.device}; chorus needs CPU tensors")
    if tensor.layout != _torch_module().strided:
        raise ValueError(f"{what}: tensor layout {tensor.layout} is not supported (need strided)")
    if not tensor.is_contiguous():
        raise ValueError(f"{what}: tensor must be contiguous (call .contiguous() first)")
    natural = _TORCH_DTYPE_NAMES.get(tensor.dtype)
    if natural is None:
        natural = _TORCH_DTYPE_NAMES[tensor.dtype] = str(tensor.dtype).replace("torch.", "")
    itemsize = tensor.element_size()
    name = _resolve_dtype(natural, itemsize, dtype, what)
    return Buffer(tensor, tensor.data_ptr(), tensor.numel(), name, itemsize)


def _from_numpy(array, dtype, writable, what):
    if not array.flags.c_contiguous:
        raise ValueError(f"{what}: array must be C-contiguous (use numpy.ascontiguousarray)")
    if writable and not array.flags.writeable:
        raise ValueError(f"{what}: array is read-only but receives data")
    if not array.dtype.isnative:
        raise ValueError(f"{what}: array must be in native byte order")
    name = _resolve_dtype(array.dtype.name, array.dtype.itemsize, dtype, what)
    address = array.__array_interface__["data"][0]
    return Buffer(array, address, array.size, name, array.dtype.itemsize)


def as_buffer(obj, *, dtype=None, writable=False, what="buffer"):
    """A Buffer over obj (numpy.ndarray or torch.Tensor), never a copy."""
    if _is_torch_tensor(obj):
        return _from_torch(obj, dtype, writable, what)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        return _from_numpy(obj, dtype, writable, what)
    raise TypeError(f"{what}: expected a numpy.ndarray or a torch.Tensor, got {type(obj).__name__}")


def new_like(buf, count, shape=None):
    """A fresh, uninitialised buffer of the same kind (numpy or torch) and dtype as buf, with
    `count` elements, for outputs the caller did not provide."""
    if shape is None:
        shape = (count,)
    if _is_torch_tensor(buf.obj):
        return buf.obj.new_empty(shape)
    numpy = sys.modules["numpy"]
    return numpy.empty(shape, dtype=buf.obj.dtype)
