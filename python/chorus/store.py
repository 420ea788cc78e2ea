"""A minimal file-based key-value store for bootstrapping without torch (set / blocking get),
the same protocol Communicator.from_store uses with torch.distributed stores. Values are written
to a temporary name and renamed, so a reader never sees a partial value.
"""

import os
import time

_POLL_INTERVAL_SEC = 0.01


class FileStore:
    """Keys are files under `directory` (shared by every rank, e.g. on one host or NFS)."""

    def __init__(self, directory, timeout_sec=60.0):
        self.directory = directory
        self.timeout_sec = float(timeout_sec)
        os.makedirs(directory, exist_ok=True)

    def _path(self, key):
        return os.path.join(self.directory, key.encode().hex())

    def set(self, key, value):
        if isinstance(value, str):
            value = value.encode()
        path = self._path(key)
        tmp_path = f"{path}.tmp.{os.getpid()}"
        with open(tmp_path, "wb") as f:
            f.write(bytes(value))
        os.replace(tmp_path, path)

    def get(self, key):
        """The value of key, waiting up to timeout_sec for some rank to set it."""
        deadline = time.monotonic() + self.timeout_sec
        path = self._path(key)
        while True:
            try:
                with open(path, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"chorus.FileStore: key {key!r} not set within {self.timeout_sec} s "
                        f"in {self.directory}") from None
                time.sleep(_POLL_INTERVAL_SEC)
