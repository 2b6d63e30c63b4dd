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
        try:  # wakes the accept() waiting in _serve now, not at its next 0.1 s timeout
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass
        self.thread.join(5)
        if self in _live:
            _live.remove(self)


# ------------------------------------------------------------ other BF.* implementations

def _resp(v) -> bytes:
    """v in RESP2: None nil, bool/int an integer, bytes/str a bulk string, list an array,
    ``("+", text)`` a status, ``("-", text)`` an error, float a bulk string (as a module's
    double reads in RESP2)."""
    if v is None:
        return b"$-1\r\n"
    if isinstance(v, tuple):
        return v[0].encode() + v[1].encode() + b"\r\n"
    if isinstance(v, (bool, int)):
        return b":%d\r\n" % int(v)
    if isinstance(v, float):
        v = repr(v)
    if isinstance(v, str):
        v = v.encode()
    if isinstance(v, (bytes, bytearray)):
        return b"$%d\r\n%s\r\n" % (len(v), bytes(v))
    return b"*%d\r\n" % len(v) + b"".join(_resp(x) for x in v)


def redisbloom_info(f: "FakeBloom") -> list:
    """BF.INFO as RedisBloom 2.x answers it."""
    return [("+", "Capacity"), f.capacity_total(), ("+", "Size"), f.size(),
            ("+", "Number of filters"), f.filters(), ("+", "Number of items inserted"),
            len(f.items), ("+", "Expansion rate"), f.expansion or None]


def valkey_bloom_info(f: "FakeBloom") -> list:
    """BF.INFO as valkey-bloom answers it: RedisBloom's five, the error rate among them,
    and two of its own for a scaling filter."""
    out = [("+", "Capacity"), f.capacity_total(), ("+", "Size"), f.size(),
           ("+", "Number of filters"), f.filters(), ("+", "Number of items inserted"),
           len(f.items), ("+", "Error rate"), f.error_rate, ("+", "Expansion rate"),
           f.expansion or None]
    if f.expansion:
        out += [("+", "Tightening ratio"), 0.5, ("+", "Max scaled capacity"), 26214300]
    return out


class FakeBloom:
    """One filter of FakeBFServer: an exact set (no false positives), sized as a scaling
    chain so that BF.INFO's capacity and filter count move as a module's do."""

    def __init__(self, capacity: int, error_rate: float, expansion: int) -> None:
        self.capacity, self.error_rate, self.expansion = capacity, error_rate, expansion
        self.items: set = set()

    def filters(self) -> int:
        n, cap, total = 1, self.capacity, self.capacity
        while self.expansion and len(self.items) > total:
            cap *= self.expansion
            total += cap
            n += 1
        return n

    def capacity_total(self) -> int:
        return sum(self.capacity * (self.expansion or 1) ** i for i in range(self.filters()))

    def size(self) -> int:
        return 200 + 2 * self.capacity_total()

    def add(self, item: bytes) -> Union[int, tuple]:
        if item in self.items:
            return 0
        if not self.expansion and len(self.items) >= self.capacity:
            return ("-", "ERR non scaling filter is full")
        self.items.add(item)
        return 1


class FakeBFServer(ScriptedServer):
    """A server whose BF.* commands are not RedisBloom 2.x's, scripted in Python: the
    commands RedisBloomFilter sends, kept in memory (one process, every connection), with
    what another implementation lacks or says otherwise:

    - ``missing``: BF.* commands it does not have (answered "unknown command", as a server
      answers a command no module registered): valkey-bloom has no BF.SCANDUMP nor
      BF.LOADCHUNK; an old module no BF.CARD; a server with a few BF.* commands no BF.INFO.
    - ``info``: BF.INFO's reply of a filter, as a list of name/value pairs
      (``redisbloom_info``, ``valkey_bloom_info``, or any other naming).
    - ``nocreate``: False: BF.INSERT answers ``nocreate_error`` to NOCREATE (an
      implementation without that option).
    - ``type_name``: what TYPE answers for a filter (valkey-bloom: "bloomfltr").
    """

    def __init__(self, missing=(), info: Callable[[FakeBloom], list] = redisbloom_info,
                 nocreate: bool = True, nocreate_error: str = "ERR syntax error",
                 type_name: str = "MBbloom--") -> None:
        self.filters: Dict[bytes, FakeBloom] = {}
        self.others: Dict[bytes, bytes] = {}  # keys of other types (TYPE, DEL)
        self.lock = threading.Lock()
        self.info_pairs, self.nocreate, self.nocreate_error = info, nocreate, nocreate_error
        self.type_name = type_name
        cmds = {"BF.INFO": self._info, "BF.INSERT": self._insert, "BF.EXISTS": self._exists,
                "BF.MEXISTS": self._mexists, "BF.RESERVE": self._reserve, "BF.CARD": self._card,
                "BF.SCANDUMP": self._scandump, "BF.LOADCHUNK": self._loadchunk,
                "TYPE": self._type, "DEL": self._del, "INFO": self._server_info,
                "PEXPIRE": lambda a: 1, "RENAME": self._rename,
                "EXISTS": lambda a: sum(k in self.filters or k in self.others for k in a[1:]),
                # GET/GETRANGE of a key that holds no string (RedisFilter.open's look for
                # its meta key, as `ling_bloom inspect` makes it): nil, an empty string
                "GET": lambda a: None, "GETRANGE": lambda a: b"",
                "PTTL": lambda a: -1 if a[1] in self.filters or a[1] in self.others else -2}
        missing = {m.upper() for m in missing}
        super().__init__({k: self._locked(v) for k, v in cmds.items() if k not in missing})

    def _locked(self, fn):
        def run(args):
            with self.lock:
                return _resp(fn(args))
        return run

    def _info(self, a):
        f = self.filters.get(a[1])
        return ("-", "ERR not found") if f is None else self.info_pairs(f)

    def _insert(self, a):
        i = a.index(b"ITEMS")
        opts = [x.upper() for x in a[2:i]]
        if b"NOCREATE" in opts and not self.nocreate:
            return ("-", self.nocreate_error)
        f = self.filters.get(a[1])
        if f is None:
            if b"NOCREATE" in opts:
                return ("-", "ERR not found")
            o = dict(zip(opts[::2], a[3:i:2]))
            f = self.filters[a[1]] = FakeBloom(
                int(o.get(b"CAPACITY", 100)), float(o.get(b"ERROR", 0.01)),
                0 if b"NONSCALING" in opts else int(o.get(b"EXPANSION", 2)))
        out = []
        for item in a[i + 1:]:
            out.append(f.add(item))
            if isinstance(out[-1], tuple):
                break
        return out

    def _exists(self, a):
        f = self.filters.get(a[1])
        return int(f is not None and a[2] in f.items)

    def _mexists(self, a):
        f = self.filters.get(a[1])
        return [int(f is not None and x in f.items) for x in a[2:]]

    def _reserve(self, a):
        if a[1] in self.filters:
            return ("-", "ERR item exists")
        nonscaling = b"NONSCALING" in [x.upper() for x in a[4:]]
        self.filters[a[1]] = FakeBloom(int(a[3]), float(a[2]),
                                       0 if nonscaling else int(a[5]) if len(a) > 5 else 2)
        return ("+", "OK")

    def _card(self, a):
        f = self.filters.get(a[1])
        return 0 if f is None else len(f.items)

    def _scandump(self, a):
        f = self.filters.get(a[1])
        if f is None:
            return ("-", "ERR not found")
        if a[2] == b"0":
            return [1, b"\n".join(sorted(f.items))]
        return [0, b""]

    def _loadchunk(self, a):
        self.filters[a[1]] = f = FakeBloom(100, 0.01, 2)
        f.items = set(a[3].split(b"\n")) - {b""}
        return ("+", "OK")

    def _type(self, a):
        if a[1] in self.filters:
            return ("+", self.type_name)
        return ("+", "string" if a[1] in self.others else "none")

    def _del(self, a):
        n = sum(1 for k in a[1:] if self.filters.pop(k, None) or self.others.pop(k, None))
        return n

    def _rename(self, a):
        if a[1] not in self.filters:
            return ("-", "ERR no such key")
        self.filters[a[2]] = self.filters.pop(a[1])
        return ("+", "OK")

    def _server_info(self, a):
        return b"# Memory\r\nused_memory:1000000\r\nmaxmemory:0\r\n"
