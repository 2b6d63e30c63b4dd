"""Redis filters for asyncio: ``AsyncRedisFilter`` and ``AsyncRedisBloomFilter``, the
awaitable twins of ``RedisFilter`` and ``RedisBloomFilter``.

    f = AsyncRedisFilter.from_url("redis://localhost:6379/0", "bf:users", 1_000_000, 0.01)
    await f.add("user:42")                  # True: it was new
    await f.test("user:42")                 # True
    await f.test_many(["user:42", "x"])     # [True, False]
    await f.aclose()                        # or: async with f: ...

The Redis protocol is the C client's (csrc/redis), and every operation is the same step
machine the blocking ``RedisFilter`` runs (csrc/redis/op.h: it names each request and checks
its replies, and does no I/O): the handshake of a new connection, the meta-key look and claim,
the BITFIELD/SETBIT pipelines, the reply reader with its bounds, and every check of a reply
against what was sent (for RedisBloom, the BF.INFO check before the first write on a
connection and the TYPE question after an all-false test).  ``_wire_begin`` starts the
operation, ``_wire_next`` gives its next request, ``_wire_feed`` hands over the bytes that
arrive and ``_wire_done`` lets the machine check them.  This file is
only the transport: asyncio sockets (TCP, unix, TLS through asyncio's ``ssl``), timeouts,
a small pool of connections, and the rules that keep a connection in step:

- a round trip that does not finish (cancelled, timed out, the connection lost, a reply
  that does not fit) drops its connection: a reply is never left unread for the next
  call;
- input that arrives when no call waits for it (a late reply, the server's EOF) marks
  the connection out of step: it is dropped before anything else is sent on it;
- a kept connection that turns out dead before any reply byte arrived (a server restart)
  is replaced and the call sent once more (every RedisFilter command is idempotent), after
  the new connection had its meta key checked;
- a forked child never uses its parent's connections.

Calls wait for an idle connection of the pool (``max_connections``, 4 by default; each is
opened on first need and checks the filter's meta key once), so many tasks may share one
filter.  ``key in f`` cannot be awaited: use ``await f.test(key)``.
"""
from __future__ import annotations

import asyncio
import os
import ssl
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Type, TypeVar

from ._core import (
    ClosedError,
    FilterFullError,
    RedisBloomFilter,
    RedisConnectionError,
    RedisFilter,
    RedisTimeoutError,
)
from ._redis_client import connection_kwargs

__all__ = ["AsyncRedisFilter", "AsyncRedisBloomFilter"]

_ADD, _TEST, _RESET = 1, 2, 3
_A = TypeVar("_A", bound="_AsyncRedis")


def _where(cfg: Dict[str, Any]) -> str:
    if cfg["unix_socket_path"]:
        return f"unix:{cfg['unix_socket_path']}"
    host = cfg["host"]
    return f"[{host}]:{cfg['port']}" if ":" in host else f"{host}:{cfg['port']}"


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


class _Wire(asyncio.Protocol):
    """One asyncio connection.  Bytes that arrive go straight to the C reply reader of the
    round trip waiting for them (``feed``); bytes nobody waits for mark it out of step."""

    def __init__(self, where: str):
        self.where = where
        self.transport: Optional[asyncio.Transport] = None
        self.feed: Any = None
        self.waiter: Optional["asyncio.Future[None]"] = None
        self.received = 0
        self.stray = False   # input nobody asked for, EOF or loss: never send on it again
        self.pid = os.getpid()
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        w = self.waiter
        if w is None or w.done():
            self.stray = True
            return
        self.received += len(data)
        try:
            complete = self.feed(data)
        except BaseException as e:  # a reply that does not fit: the stream is out of step
            self.stray = True
            w.set_exception(e)
            return
        if complete:
            w.set_result(None)

    def eof_received(self) -> bool:
        self._lost(None)
        return False

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._lost(exc)

    def _lost(self, exc: Optional[BaseException]) -> None:
        self.stray = True
        w = self.waiter
        if w is not None and not w.done():
            why = f"lost: {exc}" if exc else "closed by the server"
            w.set_exception(RedisConnectionError(f"connection to Redis at {self.where} {why}"))

    def close(self) -> None:
        self.stray = True
        if self.transport is None or self.pid != os.getpid():
            return  # a forked child leaves its parent's socket alone
        try:
            self.transport.abort()  # nothing more is read or written on it
        except RuntimeError:  # its event loop is closed (asyncio.run ended): close the socket
            sock = getattr(self.transport, "_sock", None)
            if sock is not None:
                sock.close()


class _Slot:
    """A connection of the pool and the filter object whose C state speaks on it."""

    def __init__(self, f: Any):
        self.f = f
        self.wire: Optional[_Wire] = None

    def drop(self) -> None:
        if self.wire is not None:
            if self.wire.pid == os.getpid():
                self.wire.close()
            self.wire = None
        self.f._wire_closed()


class _AsyncRedis:
    """What the two async filters share: the pool, the transport, the operations."""

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
        if getattr(first, "shards", 1) != 1:
            from ._core import NotSupportedError

            first.close()
            raise NotSupportedError("the asyncio filters do not carry a sharded filter yet: "
                                    "use RedisFilter(..., shards=N) (blocking)")
        self._cfg = first._wire_config()
        self._where = _where(self._cfg)
        self._chunk = int(self._cfg["chunk_size"])
        self._idle: List[_Slot] = [_Slot(first)]
        self._slots: List[_Slot] = [self._idle[0]]
        self._max = max_connections
        self._waiters: "List[asyncio.Future[_Slot]]" = []
        self._closed = False
        self._ssl: Optional[ssl.SSLContext] = None

    # -- construction, as RedisFilter
    @classmethod
    def from_url(cls: Type[_A], url: str, key: Any, *args: Any, **kwargs: Any) -> _A:
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        return cls(key, *args, url=url, **kwargs)

    @classmethod
    def from_redis(cls: Type[_A], client: Any, key: Any, *args: Any, **kwargs: Any) -> _A:
        """The connection settings of a redis-py client (``redis.asyncio.Redis`` or
        ``redis.Redis``); its own connections are not used."""
        return cls(key, *args, **{**connection_kwargs(client), **kwargs})

    # -- the facts of the filter (no round trip)
    def __getattr__(self, name: str) -> Any:
        if name in self._facts:
            return getattr(self._slots[0].f, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_connections(self) -> int:
        return self._max

    def __repr__(self) -> str:
        inner = repr(self._slots[0].f).strip("<>").split(" ", 1)[1].replace(" closed", "")
        return f"<{type(self).__name__} {inner}{' closed' if self._closed else ''}>"

    def __contains__(self, key: Any) -> bool:
        raise TypeError("'in' cannot wait for Redis: use 'await f.test(key)'")

    # -- operations
    async def add(self, key: Any) -> bool:
        return (await self._run(_ADD, [key]))[0]

    async def test(self, key: Any) -> bool:
        return (await self._run(_TEST, [key]))[0]

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
        for w in self._waiters:
            if not w.done():
                w.set_exception(ClosedError("the filter is closed"))
        self._waiters.clear()
        for slot in self._slots:
            if slot in self._idle:
                slot.drop()
                slot.f.close()

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- the pool
    async def _take(self) -> _Slot:
        if self._closed:
            raise ClosedError("the filter is closed")
        if self._idle:
            return self._idle.pop()
        if len(self._slots) < self._max:
            slot = _Slot(self._sync(*self._args, **self._kwargs))
            self._slots.append(slot)
            return slot
        w: "asyncio.Future[_Slot]" = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        try:
            return await w
        except asyncio.CancelledError:
            if w.done() and not w.cancelled() and w.exception() is None:
                self._give(w.result())  # handed over as we were cancelled: pass it on
            raise
        finally:
            if w in self._waiters:
                self._waiters.remove(w)

    def _give(self, slot: _Slot) -> None:
        if self._closed:
            slot.drop()
            slot.f.close()
            return
        while self._waiters:
            w = self._waiters.pop(0)
            if not w.done():
                w.set_result(slot)
                return
        self._idle.append(slot)

    # -- one operation: requests from the core, carried here
    async def _batch(self, kind: int, keys: Iterable[Any]) -> List[bool]:
        if not isinstance(keys, (list, tuple)):
            if isinstance(keys, (str, bytes)):
                raise TypeError("keys must be an iterable of keys, not a single "
                                f"{type(keys).__name__}")
            keys = list(keys)
        if not keys:
            if self._closed:
                raise ClosedError("the filter is closed")
            return []
        # every key is checked before anything is sent (a bad key changes nothing)
        self._slots[0].f._wire_check(keys)
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

    async def _run(self, kind: int, keys: Optional[Sequence[Any]]) -> List[bool]:
        slot = await self._take()
        try:
            return await self._on(slot, kind, keys)
        finally:
            self._give(slot)

    async def _on(self, slot: _Slot, kind: int, keys: Optional[Sequence[Any]]) -> List[bool]:
        f = slot.f
        for attempt in (0, 1):
            f._wire_begin(kind, keys)
            fresh = await self._connect(slot)
            try:
                while True:
                    req = f._wire_next()
                    if req is None:
                        result: List[bool] = f._wire_result()
                        return result
                    received = await self._roundtrip(slot, req)
                    f._wire_done()
                    if not f._wire_connected:  # the core dropped it (a reply that did not fit)
                        slot.drop()
            except RedisConnectionError:
                stale = not fresh and received_nothing(slot)
                slot.drop()
                if stale and attempt == 0:
                    continue  # a kept connection was dead (a restart): once more, anew
                raise
            except BaseException:
                if slot.wire is not None and (slot.wire.waiter is not None or slot.wire.stray):
                    slot.drop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connect(self, slot: _Slot) -> bool:
        """An open, in-step connection for slot; True when this call opened it."""
        w = slot.wire
        if w is not None and (w.pid != os.getpid() or w.stray
                              or w.loop is not asyncio.get_running_loop()):
            slot.drop()  # forked, input nobody asked for (out of step), or another loop
        elif w is not None and slot.f._wire_connected:
            return False
        elif w is not None:
            slot.drop()
        cfg = self._cfg
        loop = asyncio.get_running_loop()
        wire = _Wire(self._where)
        try:
            if cfg["unix_socket_path"]:
                coro = loop.create_unix_connection(lambda: wire, cfg["unix_socket_path"])
            else:
                kw: Dict[str, Any] = {}
                if cfg["ssl"]:
                    if self._ssl is None:
                        self._ssl = _ssl_context(cfg)
                    kw = {"ssl": self._ssl, "server_hostname": cfg["host"]}
                    if cfg["socket_connect_timeout"]:
                        kw["ssl_handshake_timeout"] = cfg["socket_connect_timeout"]
                coro = loop.create_connection(lambda: wire, cfg["host"], cfg["port"], **kw)
            await asyncio.wait_for(coro, cfg["socket_connect_timeout"])
        except asyncio.TimeoutError:
            wire.close()
            raise RedisTimeoutError(f"timeout connecting to Redis at {self._where}") from None
        except ssl.SSLError as e:
            wire.close()
            raise RedisConnectionError(
                f"TLS handshake with Redis at {self._where} failed: {e}") from None
        except OSError as e:
            wire.close()
            raise RedisConnectionError(
                f"error connecting to Redis at {self._where}: {e.strerror or e}") from None
        slot.wire = wire
        wire.feed = slot.f._wire_feed
        slot.f._wire_opened()
        return True

    async def _roundtrip(self, slot: _Slot, req: bytes) -> int:
        """Send req and wait until the core has every reply; the socket timeout is one of
        inactivity (no byte for that long), as the blocking filter's."""
        wire = slot.wire
        assert wire is not None and wire.transport is not None
        fut: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        wire.waiter, wire.received = fut, 0
        try:
            wire.transport.write(req)
            timeout = self._cfg["socket_timeout"]
            while True:
                seen = wire.received
                done, _ = await asyncio.wait({fut}, timeout=timeout)
                if done:
                    fut.result()
                    wire.waiter = None
                    return wire.received
                if wire.received == seen:
                    raise RedisTimeoutError(
                        f"timeout: Redis at {self._where} did not answer within "
                        f"{timeout * 1000:.0f} ms")
        except BaseException:
            if not fut.done():
                fut.cancel()
            raise


def received_nothing(slot: _Slot) -> bool:
    return slot.wire is not None and slot.wire.received == 0


class AsyncRedisFilter(_AsyncRedis):
    """``AsyncRedisFilter(key, capacity, error_rate=0.01, *, ..., max_connections=4)``:
    the arguments, options, results and errors of ``RedisFilter``, awaitable.  Both classes
    read and write the same bitmap and meta key, so blocking and async processes share a
    filter."""

    _sync = RedisFilter
    _facts = ("key", "m", "k", "hash", "capacity", "error_rate", "ttl", "nparts", "nbytes",
              "layout")


class AsyncRedisBloomFilter(_AsyncRedis):
    """``AsyncRedisBloomFilter(key, capacity=1000, error_rate=0.001, *, ...,
    max_connections=4)``: the arguments, options, results and errors of
    ``RedisBloomFilter`` for add, test, their batches and reset, awaitable (a full
    non-scaling filter raises ``FilterFullError`` with ``processed`` and ``added`` counted
    over the whole batch).  ``info()``, ``card()``, ``dump()`` and ``restore()`` are only
    on the blocking class."""

    _sync = RedisBloomFilter
    _facts = ("key", "capacity", "error_rate", "expansion", "non_scaling", "no_create", "ttl",
              "chunk_size")
