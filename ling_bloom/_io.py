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


# Enough of a saved filter for its header to give the whole length (format.h).
HEADER_BYTES = 48


def read_file(path: PathLike) -> bytes:
    """The saved filter at path, read no further than its header says it goes.

    A file that is not a saved filter (``/dev/zero``, a huge log) raises ValueError after
    its first 48 bytes; one longer than its header says raises ValueError too.  A short
    one is returned as it is, for from_bytes to say what is missing.
    """
    from ._core import _saved_length

    with open(os.fspath(path), "rb") as f:
        head = f.read(HEADER_BYTES)
        if len(head) < HEADER_BYTES:
            return head
        total = _saved_length(head)
        rest = f.read(total - len(head))
        if len(rest) < total - len(head):
            return head + rest
        if f.read(1):
            raise ValueError(f"not a valid saved filter: the file goes on past the "
                             f"{total} bytes its header describes")
        return head + rest
