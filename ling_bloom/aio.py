"""Redis filters for asyncio: ``AsyncRedisFilter`` and ``AsyncRedisBloomFilter``, the
awaitable twins of ``RedisFilter`` and ``RedisBloomFilter``.

    f = AsyncRedisFilter.from_url("redis://localhost:6379/0", "bf:users", 1_000_000, 0.01)
    await f.add("user:42")                  # True: it was new
    await f.test("user:42")                 # True
    await f.test_many(["user:42", "x"])     # [True, False]
    await f.aclose()                        # or: async with f: ...

Every URL and keyword of the blocking filters works here with the same results, errors and
guarantees: one server, ``redis+sentinel://`` (the sentinels asked, ROLE checked, a demoted
primary left), ``redis+cluster://`` (slot routing, MOVED, ASK, TRYAGAIN and CLUSTERDOWN
back-off, failover, ``read_from_replicas``), ``wait_replicas``, TLS, and ``shards=N`` with the
shards' round trips in flight at once on the event loop.

Nothing of it is written twice.  Every operation is the step machine the blocking filter
runs (csrc/redis/op.h), and so is every round trip under it: a wire client's (csrc/redis/wire.h:
connect, AUTH/SELECT, the sentinels, WAIT, the retries of a stale connection) and a cluster's
route (csrc/redis/cluster.h).  C says what to do next (``_wire_step``: connect, send these
bytes on that connection, pause); this file only does it, with asyncio sockets (TCP, unix,
TLS through asyncio's ``ssl``) and timeouts, and tells C what came of it, so a refused
connection, a timeout or a reset is handled by the same code as in the blocking filter.  The
rules that keep a connection in step:

- a round trip that does not finish (cancelled, timed out, the connection lost, a reply
  that does not fit) drops its connection: a reply is never left unread for the next
  call;
- input that arrives when no call waits for it (a late reply, the server's EOF) marks
  the connection out of step: it is dropped before anything else is sent on it;
- a forked child never uses its parent's connections, nor an event loop another loop's.

Calls wait for an idle connection of the pool (``max_connections``, 4 by default; each is
opened on first need and checks the filter's meta key once), so many tasks may share one
filter.  Each event loop that calls the filter has a pool of its own, so one filter serves
several loops as the blocking filter serves several threads: threads each running a loop at
once (a loop's calls never wait on another loop's connections, and every future is completed
on its own loop), or one loop after another (``asyncio.run()`` twice: a closed loop's idle
members go to the next loop's pool).  ``key in f`` cannot be awaited: use
``await f.test(key)``.

The calls that read or write a whole filter, or ask the server one question about it
(``snapshot``, ``load``, ``bits_set``, ``info``, ``dump``, ``restore``...), are the blocking
filter's own, awaited on a worker thread: they are not on the request path, and the loop
goes on meanwhile.
"""
from __future__ import annotations

import asyncio
import functools
import os
import select
import socket
import ssl
import threading
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Type, TypeVar,
                    Union)

from ._core import (
    ClosedError,
    FilterFullError,
    RedisBloomFilter,
    RedisConnectionError,
    RedisFilter,
    _key as _key_form,
)
from ._redis_client import connection_kwargs

__all__ = ["AsyncRedisFilter", "AsyncRedisBloomFilter"]

_ADD, _TEST, _RESET = 1, 2, 3
_A = TypeVar("_A", bound="_AsyncRedis")


def _ssl_context(cfg: Dict[str, Any]) -> ssl.SSLContext:
    """The same verification as the C transport: certificates and host names checked by
    default; ``ssl_cert_reqs="none"`` checks neither."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cfg["ssl_cert_reqs"] == "none":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = bool(cfg["ssl_check_hostname"])
        ctx.verify_mode = ssl.CERT_REQUIRED
        try:
            if cfg["ssl_ca_certs"] or cfg["ssl_ca_path"]:
                ctx.load_verify_locations(cafile=cfg["ssl_ca_certs"], capath=cfg["ssl_ca_path"])
            else:
                ctx.load_default_certs()
        except (OSError, ssl.SSLError) as e:
            raise RedisConnectionError(f"cannot load the CA certificates: {e}") from None
    if cfg["ssl_certfile"]:
        try:
            ctx.load_cert_chain(cfg["ssl_certfile"], cfg["ssl_keyfile"])
        except (OSError, ssl.SSLError) as e:
            raise RedisConnectionError(
                f"cannot load the client certificate {cfg['ssl_certfile']}: {e}") from None
    return ctx


def _input_waiting(transport: asyncio.BaseTransport) -> bool:
    """Whether bytes wait in the connection's socket that the loop has not read yet (a poll
    with no wait; False where the transport has no socket to ask)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        p = select.poll()
        p.register(sock.fileno(), select.POLLIN)
        return bool(p.poll(0))
    except (OSError, ValueError):
        return False


def _reason(e: OSError) -> str:
    """Why a connect failed, as the blocking client says it: the system's text for the
    error number ("Connection refused"; asyncio's own text is "Connect call failed
    (address)"), the resolver's for a name it could not resolve."""
    if e.errno and e.errno > 0 and not isinstance(e, socket.gaierror):
        return os.strerror(e.errno)
    return e.strerror or str(e)


# The most bytes a new connection keeps from before its first request (a server's banner
# or error); more, and the connection is out of step.
_EARLY_MAX = 1 << 20

def _tls_reason(e: ssl.SSLError) -> str:
    """Why a TLS handshake failed, as the blocking transport says it: "certificate verify
    failed: <OpenSSL's reason>" for a certificate, else OpenSSL's text of the error
    (without Python's "[SSL: CODE]" and "(_ssl.c:N)")."""
    if isinstance(e, ssl.SSLCertVerificationError) and e.verify_message:
        return f"certificate verify failed: {e.verify_message}"
    text = str(e.args[1]) if len(e.args) > 1 else str(e)
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    if text.endswith(")") and " (_ssl.c:" in text:
        text = text.rsplit(" (_ssl.c:", 1)[0]
    if any(m in text for m in ("wrong version number", "packet length too long",
                               "record layer failure")):
        text += " (the server does not speak TLS on this port?)"
    return text


def _loss_reason(exc: BaseException) -> str:
    """Why a connection was lost, as the blocking transport says it ("Connection reset by
    peer", not Python's "[Errno 104] Connection reset by peer")."""
    if isinstance(exc, ssl.SSLError):
        return _tls_reason(exc)
    if isinstance(exc, OSError):
        return _reason(exc)
    return str(exc)


class _Wire(asyncio.Protocol):
    """One asyncio connection.  Bytes that arrive go straight to the C reply reader of the
    round trip waiting for them (``feed``); bytes nobody waits for, or the server's EOF
    between round trips, mark it out of step (``on_idle_loss``: C forgets it at once)."""

    def __init__(self, where: str):
        self.where = where
        self.transport: Optional[asyncio.Transport] = None
        self.feed: Any = None
        self.on_idle_loss: Any = None
        self.waiter: Optional["asyncio.Future[int]"] = None
        self.timer: Optional[asyncio.TimerHandle] = None
        self.received = 0
        self.stray = False   # input nobody asked for, EOF or loss: never send on it again
        self.kept = False    # open before the operation now running (from an earlier one)
        # What came before the first request (a banner, or an error and the end, as a
        # server at its maxclients writes): read by the first round trip as its replies,
        # as the blocking client reads them
        self.sent = False
        self.early = bytearray()
        self.early_end: Optional[Tuple[Optional[BaseException]]] = None
        self.pid = os.getpid()
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        w = self.waiter
        if w is None or w.done():
            if not self.sent and not self.stray and self.early_end is None \
                    and len(self.early) + len(data) <= _EARLY_MAX:
                self.early += data
                return
            self._idle_loss(True)
            return
        self.received += len(data)
        got = self.feed(data)
        if got < 0:  # a reply that does not fit: the stream is out of step
            self.stray = True
            w.set_result(_FEED_FAILED)
        elif got:
            w.set_result(_OK)

    def watch(self, timeout: float) -> None:
        """A timer that ends the round trip waiting here with _TIMEOUT once no byte came for
        timeout seconds (one of inactivity: each byte that arrives starts it again)."""
        seen = self.received

        def tick() -> None:
            nonlocal seen
            w = self.waiter
            if w is None or w.done():
                return
            if self.received == seen:
                w.set_result(_TIMEOUT)
            else:
                seen = self.received
                self.timer = self.loop.call_later(timeout, tick)

        self.timer = self.loop.call_later(timeout, tick)

    def unwatch(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def eof_received(self) -> bool:
        self._lost(None)
        return False

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._lost(exc)

    def _lost(self, exc: Optional[BaseException]) -> None:
        w = self.waiter
        if (w is None or w.done()) and not self.sent and not self.stray:
            if self.early_end is None:
                self.early_end = (exc,)  # after the early bytes, for the first round trip
            return
        if w is not None and not w.done():
            self.stray = True
            # the server's EOF: no text, C says it with the replies read (as the blocking
            # transport does)
            w.set_exception(_Broken(f"connection to Redis at {self.where} lost: "
                                    f"{_loss_reason(exc)}" if exc else None))
        else:
            self._idle_loss(False)

    def _idle_loss(self, stray: bool) -> None:
        if self.stray:
            return
        self.stray = True
        if self.on_idle_loss is not None:
            self.on_idle_loss(stray)

    def send(self, req: bytes) -> None:
        """Write a request (the waiter set); the first one reads what came before it."""
        assert self.transport is not None
        self.transport.write(req)
        if self.sent:
            return
        self.sent = True
        if self.early:
            data, self.early = bytes(self.early), bytearray()
            self.data_received(data)
        if self.early_end is not None:
            w = self.waiter
            if w is not None and not w.done():
                self._lost(self.early_end[0])
            else:  # every reply came before the end: never sent on again (C is told
                self.stray = True  # when this round trip's step says so, or by sweep)

    def close(self) -> None:
        self.stray = True
        self.on_idle_loss = None
        if self.transport is None or self.pid != os.getpid():
            return  # a forked child leaves its parent's socket alone
        try:
            self.transport.abort()  # nothing more is read or written on it
        except RuntimeError:  # its event loop is closed (asyncio.run ended): close the socket
            sock = getattr(self.transport, "_sock", None)
            if sock is not None:
                sock.close()


class _Broken(Exception):
    """A connection that broke in the middle of a round trip (reported to C as IO)."""


# The outcomes of a step, as csrc/py/redis_wire.c's _wire_connected / _wire_sent take them.
_OK, _REFUSED, _TIMEOUT, _BROKEN, _FEED_FAILED = 0, 1, 2, 3, 4
_CONNECT, _SEND, _PAUSE = 1, 2, 3


async def _all(coros: Iterable[Any]) -> None:
    """Run the coroutines at once to their end.  A failure of one (a bug: the transport's
    failures go to the step machines) or a cancellation stops every other before it is
    raised, so no round trip goes on unwatched."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _where_of(host: str, port: int, unix_path: Optional[str]) -> str:
    if unix_path:
        return f"unix:{unix_path}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Slot:
    """One member of the pool: a filter object whose C state speaks the protocol, and the
    connections carrying it, by (shard, node, probe): one for a single server, one per node
    of a Redis Cluster, for each shard of a sharded filter, and the one-off ones to
    sentinels."""

    def __init__(self, f: Any):
        self.f = f
        self.wires: Dict[Tuple[int, int, int], _Wire] = {}
        self.drops = 0  # the nodes C had dropped when last looked

    def drop(self, key: Tuple[int, int, int], tell: bool = True) -> None:
        w = self.wires.pop(key, None)
        if w is not None:
            w.close()
        if tell and not key[2]:  # a sentinel probe is C's to forget
            self.f._wire_lost(key[0], key[1], 0)

    def drop_all(self) -> None:
        for key in list(self.wires):
            self.drop(key)

    def forget_dropped(self) -> None:
        """After an operation: the connections of the Redis Cluster nodes C dropped (its map
        names them no more, or a redirect's target it does not name) are closed."""
        drops = self.f._wire_drops()
        if drops != self.drops:
            self.drops = drops
            for key in [k for k in self.wires if not k[2] and not self.f._wire_live(k[0], k[1])]:
                self.drop(key, tell=False)

    def sweep(self) -> None:
        """Before an operation: connections of another process or event loop, or out of
        step, are dropped (C forgets them too)."""
        loop = asyncio.get_running_loop()
        pid = os.getpid()
        for key, w in list(self.wires.items()):
            if w.pid != pid or w.loop is not loop or w.stray:
                self.drop(key)


class _Pool:
    """One event loop's pool: its members (up to max_connections), the calls of that loop
    waiting for one, and its single calls queued to go as one batch.  Only its loop's
    thread touches it: a future is completed on its own loop, and a loop never waits for a
    connection another loop holds."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.pid = os.getpid()
        self.idle: List[_Slot] = []
        self.slots: List[_Slot] = []
        self.making = 0  # pool members being made on a worker thread
        self.waiters: "List[asyncio.Future[_Slot]]" = []
        # single calls waiting for a connection, by kind, to go as one batch
        self.queued: Dict[int, List[Tuple[Any, "asyncio.Future[bool]"]]] = {_ADD: [], _TEST: []}
        self.flushers: "set[asyncio.Task[None]]" = set()  # held: a task nobody holds may go

    def gone(self) -> bool:
        """Its loop is closed (asyncio.run() ended), or it is a parent process's."""
        return self.loop.is_closed() or self.pid != os.getpid()


class _AsyncRedis:
    """What the two async filters share: the pools, the transport, the operations."""

    _sync: Any = None                 # the blocking class whose C state speaks the protocol
    _facts: Tuple[str, ...] = ()      # attributes read from it (no round trip)

    def __init__(self, *args: Any, max_connections: int = 4, **kwargs: Any):
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) \
                or max_connections < 1:
            raise ValueError("max_connections must be an int >= 1")
        self._args, self._kwargs = args, kwargs
        try:
            first = self._sync(*args, **kwargs)  # checks every argument; sends nothing
        except TypeError as e:  # named as the class called ("AsyncRedisFilter: capacity ...")
            text, sync = str(e), self._sync.__name__
            if text.startswith(sync) and text[len(sync):len(sync) + 1] in (":", " ", "("):
                raise TypeError(type(self).__name__ + text[len(sync):]) from None
            raise
        self._adopts = self._adopting(args, kwargs)
        self._first = first  # the facts, and the key checks
        self._cfg = first._wire_config()
        self._chunk = int(self._cfg["chunk_size"])
        self._max = max_connections
        self._closed = False
        self._ssl: Optional[ssl.SSLContext] = None
        # one pool per event loop; the members of no loop's pool yet: the first, and the
        # idle ones of loops that are closed, taken by the next loop's pool
        self._pools: Dict[asyncio.AbstractEventLoop, _Pool] = {}
        self._spare: List[_Slot] = [_Slot(first)]
        self._pools_lock = threading.Lock()
        # the whole-filter calls' blocking filter (made on first need) and its calls running
        self._twin: Any = None
        self._twin_lock = threading.Lock()
        self._twin_calls: "set[asyncio.Future[Any]]" = set()

    @staticmethod
    def _adopting(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
        """Whether the blocking constructor reads the stored geometry (a round trip)."""
        return False

    # -- construction, as RedisFilter
    @classmethod
    def from_url(cls: Type[_A], url: str, key: Any, *args: Any, **kwargs: Any) -> _A:
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        return cls(key, *args, url=url, **kwargs)

    @classmethod
    def from_redis(cls: Type[_A], client: Any, key: Any, *args: Any, **kwargs: Any) -> _A:
        """The connection settings of a redis-py client (``redis.asyncio.Redis``,
        ``redis.asyncio.cluster.RedisCluster``, a Sentinel ``master_for`` client, or their
        blocking twins) or of their valkey-py twins (``valkey.asyncio.Valkey``, ...); its
        own connections are not used."""
        return cls(key, *args, **{**connection_kwargs(client), **kwargs})

    # -- the facts of the filter (no round trip)
    def __getattr__(self, name: str) -> Any:
        if name in self._facts:
            return getattr(self._first, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_connections(self) -> int:
        return self._max

    def __repr__(self) -> str:
        inner = repr(self._first).strip("<>").split(" ", 1)[1].replace(" closed", "")
        return f"<{type(self).__name__} {inner}{' closed' if self._closed else ''}>"

    def __contains__(self, key: Any) -> bool:
        raise TypeError("'in' cannot wait for Redis: use 'await f.test(key)'")

    # -- operations
    async def add(self, key: Any) -> bool:
        return await self._one(_ADD, key)

    async def test(self, key: Any) -> bool:
        return await self._one(_TEST, key)

    async def add_many(self, keys: Iterable[Any]) -> List[bool]:
        return await self._batch(_ADD, keys)

    async def update(self, keys: Iterable[Any]) -> None:
        await self._batch(_ADD, keys)

    async def test_many(self, keys: Iterable[Any]) -> List[bool]:
        return await self._batch(_TEST, keys)

    async def reset(self) -> None:
        await self._run(_RESET, None)

    async def aclose(self) -> None:
        """Close every connection; the data stays in Redis.  Calls waiting for a
        connection raise ClosedError; a call in a round trip finishes first."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        with self._pools_lock:
            pools, self._pools = list(self._pools.values()), {}
            spare, self._spare = self._spare, []
        for slot in spare:
            slot.drop_all()
            slot.f.close()
        for pool in pools:
            if pool.loop is loop or pool.gone():
                self._close_pool(pool)
                continue
            try:  # another thread's loop: its pool is closed there
                pool.loop.call_soon_threadsafe(self._close_pool, pool)
            except RuntimeError:  # that loop closed meanwhile
                self._close_pool(pool)
        running = [c for c in list(self._twin_calls) if c.get_loop() is loop]
        if running:  # a whole-filter call in its thread ends on its own timeouts
            await asyncio.gather(*running, return_exceptions=True)
        with self._twin_lock:
            twin, self._twin = self._twin, None
        if twin is not None:
            twin.close()

    def _close_pool(self, pool: _Pool) -> None:
        """On the pool's own loop (or once that loop is gone): calls waiting for a
        connection raise ClosedError, idle members close; busy ones close when given back."""
        waiters, pool.waiters = pool.waiters, []
        if not pool.gone():
            for w in waiters:
                if not w.done():
                    w.set_exception(ClosedError("the filter is closed"))
        idle, pool.idle = pool.idle, []
        for slot in idle:
            slot.drop_all()
            slot.f.close()

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- the whole-filter calls: the blocking filter's own, on a worker thread
    #
    # These read or write a whole filter (load, snapshot, dump, restore), or ask the server
    # one question about it (bits_set, info, card, remaining_ttl, reserve).  They run the
    # blocking filter's step machines with its blocking driver, in the loop's default
    # executor, so the event loop goes on meanwhile: same results, same errors, every
    # deployment.  One blocking filter of the same arguments (its own connection) serves
    # them, made on first need and closed by aclose().  A cancelled await leaves the call
    # to end in its thread (within its timeouts): a write is then done, or not, as the
    # blocking call's would be.

    def _twin_filter(self) -> Any:
        with self._twin_lock:
            if self._closed:
                raise ClosedError("the filter is closed")
            if self._twin is None:
                self._twin = self._blocking()
            return self._twin

    def _blocking(self) -> Any:
        """A new blocking filter of this one's arguments (a pool member, or the worker's)."""
        return self._sync(*self._args, **self._kwargs)

    async def _in_thread(self, name: Union[str, Callable[..., Any]], *args: Any,
                         **kwargs: Any) -> Any:
        """The twin's method name (or name(twin, ...)), on a worker thread."""
        if self._closed:
            raise ClosedError("the filter is closed")
        loop = asyncio.get_running_loop()

        def call() -> Any:
            twin = self._twin_filter()
            if callable(name):
                return name(twin, *args, **kwargs)
            return getattr(twin, name)(*args, **kwargs)

        fut = loop.run_in_executor(None, call)
        self._twin_calls.add(fut)
        fut.add_done_callback(self._twin_done)
        return await asyncio.shield(fut)  # cancelled: the call still ends in its thread

    def _twin_done(self, fut: "asyncio.Future[Any]") -> None:
        self._twin_calls.discard(fut)
        if not fut.cancelled():
            fut.exception()  # an await that was cancelled does not read it: read here

    async def remaining_ttl(self) -> Optional[float]:
        """Seconds until the key expires (PTTL), None when it has no expiry or does not
        exist."""
        return await self._in_thread("remaining_ttl")

    # -- the pools: one per event loop
    def _pool(self) -> _Pool:
        """The running loop's pool, made on its first call: several loops (threads each
        running one, or asyncio.run() after asyncio.run()) share the filter, never a
        connection nor a future.  A new pool takes the idle members of the pools whose
        loop is closed (their connections are dropped before use: _Slot.sweep)."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None:
            return pool
        with self._pools_lock:
            if self._closed:  # _take raises ClosedError
                return _Pool(loop)
            pool = self._pools.get(loop)
            if pool is None:
                pool = self._pools[loop] = _Pool(loop)
                for old in [p for p in self._pools.values() if p.gone()]:
                    del self._pools[old.loop]
                    self._spare += old.idle
                take, self._spare = self._spare[:self._max], self._spare[self._max:]
                pool.idle += take
                pool.slots += take
        return pool

    async def _take(self, pool: _Pool) -> _Slot:
        if self._closed:
            raise ClosedError("the filter is closed")
        if pool.idle:
            return pool.idle.pop()
        if len(pool.slots) + pool.making < self._max:
            if not self._adopts:  # sends nothing: made here
                slot = _Slot(self._blocking())
                pool.slots.append(slot)
                return slot
            # it reads the stored geometry (a round trip): on a worker thread
            pool.making += 1
            try:
                f = await pool.loop.run_in_executor(None, self._blocking)
            finally:
                pool.making -= 1
            slot = _Slot(f)
            pool.slots.append(slot)
            if self._closed:
                self._give(pool, slot)  # closes it
                raise ClosedError("the filter is closed")
            return slot
        w: "asyncio.Future[_Slot]" = pool.loop.create_future()
        pool.waiters.append(w)
        try:
            return await w
        except asyncio.CancelledError:
            if w.done() and not w.cancelled() and w.exception() is None:
                self._give(pool, w.result())  # handed over as we were cancelled: pass it on
            raise
        finally:
            if w in pool.waiters:
                pool.waiters.remove(w)

    def _give(self, pool: _Pool, slot: _Slot) -> None:
        if self._closed:
            slot.drop_all()
            slot.f.close()
            return
        while pool.waiters:
            w = pool.waiters.pop(0)
            if not w.done():
                w.set_result(slot)
                return
        pool.idle.append(slot)

    # -- single calls: one round trip each, or together when every connection is busy
    _coalesce: Tuple[int, ...] = (_ADD, _TEST)   # the kinds whose single calls may share one

    async def _one(self, kind: int, key: Any) -> bool:
        pool = self._pool()
        frozen = isinstance(key, (str, bytes, int))
        if not frozen:
            # the key as the filters read it, taken now: a caller that changes its bytearray
            # while the call waits changes neither its own call nor the others of its batch,
            # and an int-like (numpy's integer scalars) is the key of its int, not its bytes
            self._first._wire_check([key])
            key = _key_form(key)
        if pool.idle or len(pool.slots) < self._max or self._closed \
                or kind not in self._coalesce:
            return (await self._run(kind, [key], pool))[0]
        # Every connection of this loop's pool is busy: the call joins the next batch of
        # single calls of its kind, which takes a connection as any call does and answers
        # each of them (a bad key fails only its own call, before anything is queued).
        if frozen:
            self._first._wire_check([key])
        fut: "asyncio.Future[bool]" = pool.loop.create_future()
        queue = pool.queued[kind]
        queue.append((key, fut))
        if len(queue) == 1:
            self._flush_later(pool, kind)
        return await fut  # cancelled: this call's wait only; the batch goes on

    def _flush_later(self, pool: _Pool, kind: int) -> None:
        task = pool.loop.create_task(self._flush(pool, kind))
        pool.flushers.add(task)
        task.add_done_callback(pool.flushers.discard)

    async def _flush(self, pool: _Pool, kind: int) -> None:
        """Send the queued single calls of kind as one batch (up to chunk_size of them) on
        the next free connection, and answer each; the rest wait for the next one."""
        batch: List[Tuple[Any, "asyncio.Future[bool]"]] = []
        try:
            slot = await self._take(pool)
            try:
                queue = pool.queued[kind]
                batch, pool.queued[kind] = queue[:self._chunk], queue[self._chunk:]
                if pool.queued[kind]:
                    self._flush_later(pool, kind)
                batch = [(k, fut) for k, fut in batch if not fut.done()]  # cancelled: not sent
                results = await self._on(slot, kind, [k for k, _ in batch]) if batch else []
            finally:
                self._give(pool, slot)
        except BaseException as e:
            # the filter closed, the batch failed, or the loop is going away: every call
            # of the batch (or of the queue, when none was taken) ends with it
            if not batch:
                batch, pool.queued[kind] = pool.queued[kind], []
            for _, fut in batch:
                if fut.done():
                    continue
                if isinstance(e, Exception):
                    fut.set_exception(e)
                else:
                    fut.cancel()
            if not isinstance(e, Exception):
                raise
            return
        for (_, fut), r in zip(batch, results):
            if not fut.done():
                fut.set_result(r)

    # -- one operation: steps from the core, carried here
    async def _batch(self, kind: int, keys: Iterable[Any]) -> List[bool]:
        if isinstance(keys, (str, bytes, bytearray, memoryview)):
            raise TypeError("keys must be an iterable of keys, not a single "
                            f"{type(keys).__name__}")
        # a copy taken now, as the blocking call's: the caller's list may change while the
        # call waits (another task, or a key's own __index__ while the keys are checked)
        keys = tuple(keys)
        if not keys:
            if self._closed:
                raise ClosedError("the filter is closed")
            return []
        # every key is checked before anything is sent (a bad key changes nothing), and
        # frozen: an int-like or buffer is the bytes of its key as checked
        keys = self._first._wire_check(keys)
        out: List[bool] = []
        step = self._chunk
        for start in range(0, len(keys), step):
            try:
                out += await self._run(kind, keys[start:start + step])
            except FilterFullError as e:  # counts of the whole batch, as the blocking call's
                processed, added = e.processed, e.added
                if start and processed is not None and added is not None:
                    e.processed, e.added = processed + start, added + sum(out)
                raise
        return out

    async def _run(self, kind: int, keys: Optional[Sequence[Any]],
                   pool: Optional[_Pool] = None) -> List[bool]:
        if pool is None:
            pool = self._pool()
        slot = await self._take(pool)
        try:
            return await self._on(slot, kind, keys)
        finally:
            self._give(pool, slot)

    async def _on(self, slot: _Slot, kind: int, keys: Optional[Sequence[Any]]) -> List[bool]:
        f = slot.f
        slot.sweep()
        for w in slot.wires.values():
            w.kept = True  # checked for unread input before its first send (_send)
        lanes = f._wire_begin(kind, keys)
        while lanes:
            if lanes == 1:
                await self._lane(slot, 0)
            else:  # the shards' machines, their round trips in flight at once
                await _all(self._lane(slot, lane) for lane in range(lanes))
            lanes = f._wire_stage()
        for k in [k for k in slot.wires if k[2]]:
            slot.drop(k, tell=False)  # sentinel probes left open
        slot.forget_dropped()
        result: List[bool] = f._wire_result()
        return result

    async def _lane(self, slot: _Slot, lane: int) -> None:
        """Run one step machine to its end: each step a connect, a round trip or a pause;
        every failure of the transport goes to the machine, which decides (retry, another
        node, or the error the operation raises)."""
        f = slot.f
        key: Optional[Tuple[int, int, int]] = None
        try:
            while True:
                step = f._wire_step(lane)
                what = step[0]
                if what == _PAUSE:
                    await asyncio.sleep(step[1])
                    continue
                if what != _CONNECT and what != _SEND:
                    return
                key = (step[1], step[2], step[3])
                if what == _CONNECT:
                    kept = await self._connect(slot, lane, key, step[4], step[5], step[6],
                                               step[7], step[8])
                else:
                    kept = await self._send(slot, lane, key, step[4], step[5])
                if not kept and key in slot.wires:
                    slot.drop(key, tell=False)  # C dropped it (a failure)
                key = None
        except BaseException:
            # cancelled or failed mid-step: that connection is out of step for good
            if key is not None:
                slot.drop(key)
            raise

    async def _connect(self, slot: _Slot, lane: int, key: Tuple[int, int, int], host: str,
                       port: int, unix_path: Optional[str], tls: bool,
                       timeout: Optional[float]) -> bool:
        f = slot.f
        if key in slot.wires:
            slot.drop(key, tell=False)
        where = _where_of(host, port, unix_path)
        loop = asyncio.get_running_loop()
        wire = _Wire(where)
        handshake = False
        try:
            if unix_path:
                coro = loop.create_unix_connection(lambda: wire, unix_path)
            else:
                coro = loop.create_connection(lambda: wire, host, port)
            await asyncio.wait_for(coro, timeout)
            if tls:
                # the TLS handshake, within a timeout of its own after the connect (as the
                # blocking transport's), so that its timeout says what did not come
                if self._ssl is None:
                    self._ssl = _ssl_context(self._cfg)
                handshake = True
                assert wire.transport is not None
                if not wire.transport.is_closing():
                    wire.transport.pause_reading()  # until start_tls reads for TLS
                if wire.early or wire.early_end is not None or wire.transport.is_closing():
                    # the server wrote (or closed) before the client's hello: no TLS there
                    wire.close()
                    return f._wire_connected(
                        lane, _REFUSED,
                        f"error connecting to Redis at {where}: TLS handshake failed: the "
                        f"server {'wrote before' if wire.early else 'closed the connection at'}"
                        f" the handshake (does the server speak TLS on this port?)")
                wire.transport = await asyncio.wait_for(  # type: ignore[assignment]
                    loop.start_tls(wire.transport, wire, self._ssl, server_hostname=host),
                    timeout)
        except asyncio.TimeoutError:
            wire.close()
            if handshake:
                return f._wire_connected(
                    lane, _TIMEOUT,
                    f"timeout connecting to Redis at {where}: no TLS handshake within "
                    f"{(timeout or 0) * 1000:.0f} ms (does the server speak TLS on this port?)")
            return f._wire_connected(lane, _TIMEOUT, f"timeout connecting to Redis at {where}")
        except ssl.SSLError as e:
            wire.close()
            return f._wire_connected(lane, _REFUSED, f"error connecting to Redis at {where}: "
                                                     f"TLS handshake failed: {_tls_reason(e)}")
        except OSError as e:
            wire.close()
            return f._wire_connected(lane, _REFUSED,
                                     f"error connecting to Redis at {where}: {_reason(e)}")
        except BaseException:
            wire.close()
            raise
        slot.wires[key] = wire
        shard, node = key[0], key[1]
        if not key[2]:
            wire.on_idle_loss = lambda stray: f._wire_lost(shard, node, 1 if stray else 0)
        return f._wire_connected(lane, _OK)

    async def _send(self, slot: _Slot, lane: int, key: Tuple[int, int, int], req: bytes,
                    timeout: Optional[float]) -> bool:
        """Send req and wait until the core has every reply; the socket timeout is one of
        inactivity (no byte for that long), as the blocking filter's.  Whether C keeps the
        connection."""
        f = slot.f
        wire = slot.wires.get(key)
        if wire is not None and wire.kept:
            wire.kept = False
            if wire.transport is not None and not wire.stray \
                    and _input_waiting(wire.transport):
                # Bytes came on this connection, kept idle since an earlier operation,
                # that the loop has not read yet: a late reply (to a call that timed out
                # or was cancelled), or TLS records.  Let the transport read them first
                # (two turns of the loop: one polls, one reads), so that a reply is never
                # taken as this request's answer: data_received marks the connection
                # stray and C connects again, as the blocking client does with input
                # pending on a kept connection.  A new connection is not checked (nor by
                # the blocking client): what a server writes before any request (a
                # banner) is read as the first reply, a protocol error.
                for _ in range(2):
                    await asyncio.sleep(0)
                    if wire.stray:
                        break
        if wire is None or wire.transport is None or wire.stray:
            return f._wire_sent(lane, _BROKEN,
                                "the connection to Redis was lost before the request was sent")
        fut: "asyncio.Future[int]" = wire.loop.create_future()
        wire.waiter, wire.received = fut, 0
        wire.feed = functools.partial(f._wire_feed, lane)
        try:
            wire.send(req)
            if timeout is not None:
                wire.watch(timeout)
            outcome = await fut
        except _Broken as e:
            return f._wire_sent(lane, _BROKEN, e.args[0])
        except BaseException:
            if not fut.done():
                fut.cancel()
            raise
        finally:
            wire.waiter = None
            wire.unwatch()
        if outcome == _TIMEOUT and timeout is not None:
            wire.stray = True
            return f._wire_sent(lane, _TIMEOUT, None)  # worded by C, with the replies read
        return f._wire_sent(lane, outcome)


class AsyncRedisFilter(_AsyncRedis):
    """``AsyncRedisFilter(key, capacity, error_rate=0.01, *, ..., max_connections=4)``:
    the arguments, options, results and errors of ``RedisFilter``, awaitable.  Both classes
    read and write the same bitmap and meta key, so blocking and async processes share a
    filter."""

    _sync = RedisFilter
    _facts = ("key", "m", "k", "hash", "capacity", "error_rate", "ttl", "nparts", "nbytes",
              "layout", "shards", "key_names")

    @staticmethod
    def _adopting(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
        # RedisFilter(key, capacity=None, error_rate=None, m=None, ...): no capacity and no
        # m, and the geometry is read from the filter's meta key
        capacity = args[1] if len(args) > 1 else kwargs.get("capacity")
        m = args[3] if len(args) > 3 else kwargs.get("m")
        return capacity is None and m is None

    @classmethod
    async def open(cls, url: str, key: Any, **kwargs: Any) -> "AsyncRedisFilter":
        """``await AsyncRedisFilter.open(url, key, **options)``: the filter stored at key,
        its m, k, hash and layout read from its meta key (``RedisFilter.open``'s rules and
        errors), the read done on a worker thread."""
        for name in ("capacity", "error_rate", "m", "k"):
            if name in kwargs:
                raise TypeError(f"open() adopts the stored geometry; {name} cannot be given")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(cls.from_url, url, key,
                                                                  **kwargs))

    async def bits_set(self) -> int:
        """BITCOUNT over every part (every shard's)."""
        return await self._in_thread("bits_set")

    async def approximate_count(self) -> int:
        """Distinct keys, estimated from the bits set."""
        return await self._in_thread("approximate_count")

    async def fill_ratio(self) -> float:
        """The fraction of the m bits that are set."""
        return await self._in_thread("fill_ratio")

    async def current_error_rate(self) -> float:
        """(bits set / m) ** k, as ``RedisFilter.current_error_rate``."""
        return await self._in_thread("current_error_rate")

    async def snapshot(self) -> Any:
        """A local copy of the bitmap: a ``MemoryFilter`` (a ``BlockedFilter`` for
        layout="blocked")."""
        return await self._in_thread("snapshot")

    async def load(self, memory_filter: Any) -> None:
        """OR an in-memory filter of the same m, k and hash into the bitmap (other writers'
        bits are kept), as ``RedisFilter.load``."""
        await self._in_thread("load", memory_filter)


class AsyncRedisBloomFilter(_AsyncRedis):
    """``AsyncRedisBloomFilter(key, capacity=1000, error_rate=0.001, *, ...,
    max_connections=4)``: the arguments, options, results and errors of
    ``RedisBloomFilter``, awaitable (a full non-scaling filter raises ``FilterFullError``
    with ``processed`` and ``added`` counted over the whole batch)."""

    _sync = RedisBloomFilter
    _coalesce = (_TEST,)  # an add that fills a non-scaling filter reports its own counts
    _facts = ("key", "capacity", "error_rate", "expansion", "non_scaling", "no_create", "ttl",
              "chunk_size", "shards")

    async def info(self) -> Any:
        """BF.INFO as ``ling_bloom.redisbloom.RedisBloomInfo``; FilterNotFoundError when the
        key does not exist."""
        return await self._in_thread("info")

    async def card(self) -> int:
        """BF.CARD: items added (0 for a missing key; FilterLostError for a filter made
        without a ttl that this filter saw and that is gone)."""
        # The blocking twin that runs it is told which shards this filter's connections
        # saw the filter on, so that a lost one is not counted 0.
        with self._pools_lock:
            members = list(self._spare) + [s for p in self._pools.values() for s in p.slots]
        seen = [any(flags) for flags in zip(*(m.f._seen for m in members))]
        if any(seen):
            def count(twin: Any) -> int:
                twin._seen = seen
                return twin.card()
            return await self._in_thread(count)
        return await self._in_thread("card")

    async def reserve(self) -> bool:
        """BF.RESERVE now: True when it created the filter, False when a matching one was
        there; GeometryMismatchError when the one there has other parameters."""
        return await self._in_thread("reserve")

    async def dump(self) -> List[Tuple[int, bytes]]:
        """The filter as BF.SCANDUMP's (iterator, chunk) steps; do not write to it
        meanwhile."""
        return await self._in_thread("dump")

    async def restore(self, chunks: Any, *, replace: bool = False) -> None:
        """Replace the filter by a dump, in one step (readers never see half a filter)."""
        await self._in_thread("restore", chunks, replace=replace)
