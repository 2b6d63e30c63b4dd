"""File helpers behind save() and load(): an atomic write and a bounded read."""
from __future__ import annotations

import os
import tempfile
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]


def atomic_write(path: PathLike, data: bytes) -> None:
    """Write data to path so that readers see the old file or the new one, never half of one.

    The bytes go to a temporary file in the same directory, are flushed to disk, and the
    temporary file is renamed over path.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".ling_bloom-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def read_file(path: PathLike) -> bytes:
    with open(os.fspath(path), "rb") as f:
        return f.read()
