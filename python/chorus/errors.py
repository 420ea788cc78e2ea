"""Exceptions raised for Chorus status codes.

Every negative chorus_status_t becomes a ChorusError subclass that carries the status value,
its name (CHORUS_ERR_TIMEOUT) and the library's full sentence from chorus_comm_last_error,
which names the operation, sequence number and peer. Subclasses also derive from the closest
built-in exception so that `except TimeoutError` or `except ValueError` work as expected.
"""

from . import _lib


class ChorusError(RuntimeError):
    """A Chorus call failed. `status` is the chorus_status_t value, `status_name` its name and
    `detail` the library's sentence (may be empty when no communicator existed)."""

    def __init__(self, status, detail="", operation=""):
        self.status = status
        self.status_name = _lib.status_name(status)
        self.detail = detail
        self.operation = operation
        where = f"{operation}: " if operation else ""
        text = detail if detail else _lib.status_message(status)
        super().__init__(f"{where}{text} [{self.status_name}]")


class InvalidArgumentError(ChorusError, ValueError):
    pass


class InvalidUsageError(ChorusError):
    pass


class NoMemoryError(ChorusError, MemoryError):
    pass


class SystemCallError(ChorusError, OSError):
    pass


class RemoteError(ChorusError, ConnectionError):
    pass


class TimeoutError(ChorusError, TimeoutError):  # noqa: A001 - deliberately mirrors the builtin
    pass


class CommBrokenError(ChorusError):
    pass


class NotSupportedError(ChorusError, NotImplementedError):
    pass


class MismatchError(ChorusError):
    pass


class ProtocolError(ChorusError):
    pass


class InternalError(ChorusError):
    pass


class TruncationError(ChorusError, ValueError):
    """A message longer than its receive buffer (the buffer holds its first part)."""


_CLASS_BY_STATUS_NAME = {
    "CHORUS_ERR_INVALID_ARG": InvalidArgumentError,
    "CHORUS_ERR_INVALID_USAGE": InvalidUsageError,
    "CHORUS_ERR_NO_MEMORY": NoMemoryError,
    "CHORUS_ERR_SYSTEM": SystemCallError,
    "CHORUS_ERR_REMOTE": RemoteError,
    "CHORUS_ERR_TIMEOUT": TimeoutError,
    "CHORUS_ERR_COMM_BROKEN": CommBrokenError,
    "CHORUS_ERR_NOT_SUPPORTED": NotSupportedError,
    "CHORUS_ERR_MISMATCH": MismatchError,
    "CHORUS_ERR_PROTOCOL": ProtocolError,
    "CHORUS_ERR_INTERNAL": InternalError,
    "CHORUS_ERR_TRUNCATED": TruncationError,
}


def error_for_status(status, detail="", operation=""):
    """The exception object for a negative status (not raised)."""
    cls = _CLASS_BY_STATUS_NAME.get(_lib.status_name(status), ChorusError)
    return cls(status, detail, operation)


def python_side_error(status_name, detail, operation=""):
    """An exception for a misuse the Python layer catches before calling the library (it must,
    for sizes: C cannot check how long a buffer is), with the status the library would use."""
    return error_for_status(_lib.status_value(status_name), detail, operation)
