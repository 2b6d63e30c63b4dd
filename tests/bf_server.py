"""Servers that speak BF.* (or pretend to), for the RedisBloomFilter tests, benchmark and demo.

- ``bf_url()``: the URL of a server with BF.* commands: ``LING_BLOOM_REDISBLOOM_URL`` when set
  (a Redis with the real RedisBloom module), else a fakeredis TCP server started here.
- ``FakeBFServer``: fakeredis's TcpFakeServer (with pyprobables, so BF.* exists) in a child
  process on a free port of 127.0.0.1: it can be killed, restarted, paused.
- ``PlainRedis``: a real ``redis-server`` without the module (for ModuleMissingError).
- ``SilentListener``: a socket that accepts connections into its backlog and never answers.
- ``ScriptedServer``: a tiny RESP server in a thread that answers each command with canned
  bytes (the replies recorded from the real module) and records what it was sent.

Everything listens on 127.0.0.1 on a port the kernel picked; everything started is stopped
(``stop()``, context managers, and at interpreter exit).
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Union

HOST = "127.0.0.1"
ENV_URL = "LING_BLOOM_REDISBLOOM_URL"

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


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


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


def fakeredis_available() -> Optional[str]:
    """None when fakeredis with BF support can be used here, else why not."""
    try:
        import fakeredis  # noqa: F401
        from fakeredis import TcpFakeServer  # noqa: F401
    except ImportError as e:
        return f"fakeredis with TcpFakeServer is not installed ({e}); pip install 'fakeredis[bf]>=2.41'"
    try:
        import probables  # noqa: F401
    except ImportError:
        return "pyprobables is not installed, so fakeredis has no BF.* (pip install 'fakeredis[bf]')"
    return None


_SERVE = r"""
import sys
from fakeredis import TcpFakeServer
server = TcpFakeServer((sys.argv[1], int(sys.argv[2])), server_version=(7, 4))
try:
    server.serve_forever(poll_interval=0.05)
finally:
    server.server_close()
"""


class FakeBFServer(_Stoppable):
    """fakeredis's TCP server (BF.* through pyprobables) in a child process."""

    kind = "fakeredis"

    def __init__(self, port: Optional[int] = None) -> None:
        why = fakeredis_available()
        if why:
            raise RuntimeError(why)
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.start()
        _live.append(self)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> None:
        """Start (again, after kill() or stop(): an empty server on the same port)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE, HOST, str(self.port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, self.proc)

    def kill(self) -> None:
        """SIGKILL: connections drop without a word."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self in _live:
            _live.remove(self)


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


class BFTarget:
    """Where the tests send BF.* commands: the real module (URL from the environment) or
    a FakeBFServer started for them."""

    def __init__(self) -> None:
        url = os.environ.get(ENV_URL)
        self.fake: Optional[FakeBFServer] = None
        if url:
            self.url = url
            self.kind = "module"
        else:
            self.fake = FakeBFServer()
            self.url = self.fake.url
            self.kind = "fakeredis"

    @property
    def real(self) -> bool:
        return self.kind == "module"

    def stop(self) -> None:
        if self.fake is not None:
            self.fake.stop()


def bf_server_or_reason() -> Union[BFTarget, str]:
    """A BFTarget, or the reason none can be had here (for a skip or a demo line)."""
    if os.environ.get(ENV_URL):
        return BFTarget()
    why = fakeredis_available()
    if why:
        return why
    try:
        return BFTarget()
    except Exception as e:  # pragma: no cover - environment dependent
        return f"could not start a fakeredis server: {e}"


if __name__ == "__main__":  # python tests/bf_server.py: a fake BF server until ^C
    srv = FakeBFServer()
    print(srv.url, flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
