"""Servers that misbehave on purpose, for the RedisBloomFilter tests (the real RedisBloom
module itself is started by conftest.py's bf_server fixtures, see redis_server.py).

- ``PlainRedis``: a real ``redis-server`` without the module (for ModuleMissingError).
- ``SilentListener``: a socket that accepts connections into its backlog and never answers.
- ``ScriptedServer``: a tiny RESP server in a thread that answers each command with canned
  bytes and records what it was sent (the exact commands on the wire; replies of other
  module versions or of broken servers).

Everything listens on 127.0.0.1 on a port the kernel picked; everything started is stopped
(``stop()``, context managers, and at interpreter exit).
"""
from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Union

HOST = "127.0.0.1"

_live: List["_Stoppable"] = []


class _Stoppable:
    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for s in list(_live):
        try:
            s.stop()
        except Exception:
            pass


from redis_server import free_port, server_env  # noqa: E402  (this worker's own ports: xdist-safe)


def _wait_port(port: int, proc: Optional[subprocess.Popen] = None, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server process exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on {HOST}:{port} after {timeout} s")


class PlainRedis(_Stoppable):
    """A real redis-server without modules, on a free port of 127.0.0.1, no persistence."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if not exe:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="lb-plain-redis-")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--daemonize", "no", "--protected-mode", "no"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=server_env(),
        )
        _live.append(self)
        try:
            _wait_port(self.port, self.proc)
        except Exception:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self in _live:
            _live.remove(self)


class SilentListener(_Stoppable):
    """Listens on 127.0.0.1 and never accepts nor answers: connects succeed (the kernel's
    backlog), every command times out."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        _live.append(self)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def stop(self) -> None:
        self.sock.close()
        if self in _live:
            _live.remove(self)


Reply = Union[bytes, Callable[[List[bytes]], bytes]]


def _read_command(f) -> Optional[List[bytes]]:
    line = f.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        raise ValueError(f"not a RESP array: {line!r}")
    n = int(line[1:].strip())
    args = []
    for _ in range(n):
        head = f.readline()
        size = int(head[1:].strip())
        data = f.read(size + 2)
        args.append(data[:-2])
    return args


class ScriptedServer(_Stoppable):
    """Answers each command with the bytes replies[COMMAND NAME] (or replies[name](args)),
    in a thread; unknown commands get the real "unknown command" error.  ``commands``
    records every command received (lists of bytes)."""

    def __init__(self, replies: Dict[str, Reply]) -> None:
        self.replies = {k.upper(): v for k, v in replies.items()}
        self.commands: List[List[bytes]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._conns: List[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        _live.append(self)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def names(self) -> List[str]:
        return [c[0].decode().upper() for c in self.commands]

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self._conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        try:
            while not self._stop.is_set():
                args = _read_command(f)
                if args is None:
                    return
                self.commands.append(args)
                name = args[0].decode().upper()
                reply = self.replies.get(name)
                if reply is None:
                    out = (b"-ERR unknown command '" + args[0] + b"', with args beginning with: \r\n")
                elif callable(reply):
                    out = reply(args)
                else:
                    out = reply
                conn.sendall(out)
        except (OSError, ValueError):
            return
        finally:
            f.close()
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass
        self.thread.join(5)
        if self in _live:
            _live.remove(self)
