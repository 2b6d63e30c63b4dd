"""A misbehaving Redis for the wire tests: a RESP server on 127.0.0.1 that puts a script
between the client and a real server.

    with HostileServer(script, upstream_port=redis.port) as srv:
        f = lb.RedisFilter.from_url(srv.url, "bf", ...)

For every command a client sends, ``script(ctx, args)`` is called with the command as a
list of bytes and returns the raw bytes to answer (or ``None`` to pass on the upstream
server's own reply).  ``ctx`` is the client connection:

    ctx.forward(args)        send args upstream, return its reply's raw bytes
    ctx.send(data)           write raw bytes to the client now
    ctx.send_later(data, s)  write raw bytes to the client s seconds from now (a late reply;
                             the server's late_sent counts those written)
    ctx.index                0 for the first client connection, 1 for the next, ...
    srv.send_to(i, data)     (from the test) write raw bytes to client connection i now
    srv.unread_by_client(i)  bytes written to client connection i that the client has not
                             read yet, srv.read_by_client(i): all of them delivered and read
                             (what a test waits for after send_to)
    ctx.close()              drop the client connection

Without an upstream port, ``script`` must answer every command itself.  ``connections``
counts accepted client connections, ``commands`` records (connection index, args).
Everything listens on 127.0.0.1, on a port the kernel picked, and is stopped by stop() /
the context manager.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Callable, List, Optional, Tuple

HOST = "127.0.0.1"


def encode(*args) -> bytes:
    """A command (or any array of bulk strings) in RESP."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def integer(v: int) -> bytes:
    return b":%d\r\n" % v


def array(*items: bytes) -> bytes:
    """An array of already encoded replies."""
    return b"*%d\r\n" % len(items) + b"".join(items)


def bulk(data: Optional[bytes]) -> bytes:
    return b"$-1\r\n" if data is None else b"$%d\r\n%s\r\n" % (len(data), data)


def read_command(f) -> Optional[List[bytes]]:
    line = f.readline()
    if not line:
        return None
    if not line.startswith(b"*"):  # inline command (PING\r\n)
        return line.strip().split()
    n = int(line[1:].strip())
    args = []
    for _ in range(n):
        head = f.readline()
        size = int(head[1:].strip())
        args.append(f.read(size + 2)[:-2])
    return args


def read_raw_reply(f) -> bytes:
    """One reply, as the raw bytes that carried it."""
    line = f.readline()
    if not line:
        raise ConnectionError("upstream closed")
    kind = line[:1]
    if kind == b"$":
        n = int(line[1:].strip())
        return line + (f.read(n + 2) if n >= 0 else b"")
    if kind == b"*":
        n = int(line[1:].strip())
        return line + b"".join(read_raw_reply(f) for _ in range(max(n, 0)))
    return line


Script = Callable[["Conn", List[bytes]], Optional[bytes]]


class Conn:
    def __init__(self, server: "HostileServer", sock: socket.socket, index: int) -> None:
        self.server = server
        self.sock = sock
        self.index = index
        self.lock = threading.Lock()
        self.up: Optional[socket.socket] = None
        self.upf = None
        if server.upstream_port:
            self.up = socket.create_connection((HOST, server.upstream_port), timeout=10)
            self.upf = self.up.makefile("rb")

    def forward(self, args: List[bytes]) -> bytes:
        if self.up is None:
            raise RuntimeError("no upstream server")
        self.up.sendall(encode(*args))
        return read_raw_reply(self.upf)

    def send(self, data: bytes) -> None:
        with self.lock:
            try:
                self.sock.sendall(data)
            except OSError:
                pass

    def send_later(self, data: bytes, delay: float) -> None:
        def later() -> None:
            self.send(data)
            with self.server._count_lock:
                self.server.late_sent += 1

        t = threading.Timer(delay, later)
        t.daemon = True
        t.start()
        self.server._timers.append(t)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _finish(self) -> None:
        for s in (self.upf, self.up, self.sock):
            try:
                if s is not None:
                    s.close()
            except OSError:
                pass


class HostileServer:
    def __init__(self, script: Script, upstream_port: int = 0) -> None:
        self.script = script
        self.upstream_port = upstream_port
        self.commands: List[Tuple[int, List[bytes]]] = []
        self.connections = 0
        self.late_sent = 0  # late writes done by send_later
        self._count_lock = threading.Lock()
        self._timers: List[threading.Timer] = []
        self._conns: List[Conn] = []
        self._stop = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def send_to(self, index: int, data: bytes) -> None:
        """Write raw bytes to client connection `index` now (from the test's thread: a reply
        nobody asked for, after the call that the test made returned)."""
        self._conns[index].send(data)

    def _queues(self, index: int) -> Tuple[int, int]:
        """(bytes the server's socket of client connection `index` has sent and the client's
        kernel has not acknowledged yet, bytes in the client's socket the client has not
        read yet), from /proc/net/tcp."""
        client_port = self._conns[index].sock.getpeername()[1]
        sent = unread = 0
        mark = f":{client_port:04X} "  # in both lines wanted: split only those
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                if mark not in line:
                    continue
                cols = line.split()
                local = int(cols[1].rsplit(":", 1)[1], 16)
                remote = int(cols[2].rsplit(":", 1)[1], 16)
                tx, rx = (int(q, 16) for q in cols[4].split(":"))
                if (local, remote) == (self.port, client_port):
                    sent = tx
                elif (local, remote) == (client_port, self.port):
                    unread = rx
        return sent, unread

    def unread_by_client(self, index: int) -> int:
        """Bytes that reached client connection `index`'s socket and the client has not
        read yet (its receive queue): a test that wrote a late reply to a client that reads
        only when called waits for them to be there, instead of sleeping."""
        return self._queues(index)[1]

    def read_by_client(self, index: int) -> bool:
        """Everything written to client connection `index` has reached the client and the
        client has read it (an asyncio client's reader takes in what arrives while its
        connection is idle)."""
        return self._queues(index) == (0, 0)

    def names(self, index: Optional[int] = None) -> List[str]:
        return [a[0].decode().upper() for i, a in self.commands if index is None or i == index]

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                s, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            s.settimeout(None)
            c = Conn(self, s, self.connections)
            self.connections += 1
            self._conns.append(c)
            threading.Thread(target=self._handle, args=(c,), daemon=True).start()

    def _handle(self, c: Conn) -> None:
        f = c.sock.makefile("rb")
        try:
            while not self._stop.is_set():
                args = read_command(f)
                if args is None:
                    return
                self.commands.append((c.index, args))
                out = self.script(c, args)
                if out is None:
                    out = c.forward(args)
                if out:
                    c.send(out)
        except (OSError, ValueError, ConnectionError):
            return
        finally:
            f.close()
            c._finish()

    def stop(self) -> None:
        self._stop.set()
        for t in self._timers:
            t.cancel()
        try:  # wakes the accept() waiting in _serve now, not at its next 0.1 s timeout
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for c in self._conns:
            c.close()
        self._thread.join(5)

    def __enter__(self) -> "HostileServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll cond until it holds (True) or timeout seconds passed (False): for waiting on a
    late reply to have been written, never as a timed assertion."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()
