"""ASGI (Starlette, FastAPI): keep lookups of ids that do not exist away from the database.

    from ling_bloom.contrib.asgi import BloomGuardMiddleware

    app.add_middleware(
        BloomGuardMiddleware,
        filters={"products": products_filter},
        routes={"/products/{product_id:int}": ("product_id", "products")},
        reject_status=404,
    )

``routes`` maps a path in Starlette's syntax (``{name}``, ``{name:int}``, ``{name:path}``
...) to the path parameter carrying the key and the filter's name (a bare parameter name
means the filter "default", which ``filter=`` sets); or give ``BloomRoute`` objects, which
also take a key prefix and the HTTP methods to guard.  A request whose key the filter has
never seen is answered (404, ``{"detail": "Not Found"}``, or your ``reject``) before
routing, so no endpoint, dependency or query runs.  A guarded request that passes and
still answers 404 is counted as an observed false positive when ``exists`` says its row is
missing (``middleware.get_guard("products").stats()``, or the ``guards`` dict you pass
in); the endpoint's own 404s for other reasons are not.

In a Starlette or FastAPI app a route is the app's own: each request is resolved with the
app's router (route order, Mount, Host, APIRouter prefixes) and guarded when it resolves
to a guarded route, keyed by the path parameter the endpoint gets (see BloomRoute).  In a
plain ASGI app without a router, the patterns are matched against the request's path.

A filter that running processes keep current from a saved file (the warm-up writes it):
``filters={"products": ling_bloom.warmup.FileFilter(path, check_every=2.0)}`` -- reloaded
when the file changes; before the file exists requests are served unguarded (logged).

A filter its server lost (``FilterLostError``: a Redis filter made without a ttl, after a
restart, FLUSHALL or eviction) lets requests through (see ling_bloom.guard); with
``sources={"products": product_ids}`` (a function giving the keys: an iterable, an async
iterable, or an awaitable of one) the guard rebuilds it from there once per loss, as a task
of the event loop (a blocking filter's calls in threads), and uses it again when done.

At start-up (the lifespan's startup, or the first request when the server runs no
lifespan) it says what would otherwise go unnoticed: a guarded path that matches no route
of the app (a Starlette or FastAPI app, whose routes it lists) is logged as a warning naming
the routes close to it (that endpoint is not guarded), and a stored filter whose geometry
is not the code's (``GeometryMismatchError``) is logged as a configuration error with how to
migrate (each filter is asked one test).

It is a pure ASGI middleware (no BaseHTTPMiddleware): streaming responses, websockets and
lifespan events pass through untouched.
"""
from __future__ import annotations

import difflib
import inspect
import logging
import re
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

try:
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Host, Match, Mount, compile_path
except ImportError as exc:  # name the extra, not the first missing dependency
    raise ImportError(f"ling_bloom.contrib.asgi needs Starlette: pip install 'ling_bloom[asgi]' "
                      f"({exc})", name=exc.name) from exc

from ling_bloom._keys import route_key
from ling_bloom.guard import AsyncGuard, Guard, arefill, _asetup_problem
from ling_bloom.filefilter import warn_unshared

__all__ = ["BloomGuardMiddleware", "BloomRoute"]

_DEFAULT = "default"
_log = logging.getLogger("ling_bloom.contrib.asgi")

from starlette.types import Message, Receive, Scope, Send  # noqa: E402


log = logging.getLogger("ling_bloom.guard")

_INVALID = object()
_AUTO_TYPES = (int, float)


class BloomRoute:
    """A guarded route: ``BloomRoute("/products/{product_id:int}", "product_id",
    filter="products", prefix="", methods=("GET", "HEAD"), convert=None, host=None)``
    (methods=None: all).

    In a Starlette or FastAPI app the path names a route of the app: the middleware
    resolves each request with the app's own router (Mount, Host, APIRouter prefixes
    included) and guards it when the route it resolves to has this path -- the path as
    the route is written, with the prefixes of the Mounts above it (``/v1/products/{id}``
    for ``/products/{id}`` in an app mounted at ``/v1``); ``{id}`` and ``{id:int}`` name
    the same route.  A route inside a ``Host`` is guarded by a BloomRoute with that
    ``host`` (the Host's pattern, ``"admin.example.com"``); one without ``host`` guards
    routes outside any Host only.  So ``/users/me`` declared before ``/users/{username}``
    is never checked as a user name, and each host's routes have their own filter.

    The key is the value the app's endpoint gets: after the route's convertor
    (``{id:int}``: "007" -> 7 -> "7"), then ``convert`` (e.g. ``int``) when given, else,
    for a plain ``{id}``, a FastAPI route's declared parameter type (or an endpoint
    annotated with that parameter) when it is int or float.  A value that does not
    convert (``/products/abc`` for an int) is not guarded: the app answers it as it
    would (FastAPI: 422).

    In a plain ASGI app without a router (nothing the middleware can resolve with), the
    path is matched against the request's path itself."""

    def __init__(self, path: str, param: str, filter: str = _DEFAULT, prefix: str = "",
                 methods: Optional[Iterable[str]] = ("GET", "HEAD"),
                 convert: Optional[Callable[[Any], Any]] = None,
                 host: Optional[str] = None):
        self.path = path
        self.param = param
        self.filter = filter
        self.prefix = prefix
        self.host = host
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        self.regex, self.path_format, self.convertors = compile_path(path)
        if param not in self.convertors:
            raise ValueError(f"the path {path!r} has no parameter {param!r}")
        self.convert = convert
        self._resolved = convert is not None
        # id(an app's route) -> (the route, its declared int/float or None)
        self._types: Dict[int, Tuple[Any, Any]] = {}

    def accepts(self, method: str) -> bool:
        return self.methods is None or method in self.methods

    def match(self, method: str, path: str) -> Optional[Any]:
        if self.methods is not None and method not in self.methods:
            return None
        m = self.regex.match(path)
        if m is None:
            return None
        try:
            value = self.convertors[self.param].convert(m.group(self.param))
            return self.convert(value) if self.convert is not None else value
        except (ValueError, TypeError, ArithmeticError):
            return _INVALID

    def value_of(self, resolved: "_Resolved") -> Any:
        """The key's value in a request resolved to one of the app's routes (the path
        parameter after the app's convertor, then ``convert`` or the endpoint's declared
        int/float), or _INVALID when it does not convert."""
        value = resolved.params[self.param]
        conv = self.convert
        if conv is None and isinstance(value, str):
            route = resolved.route
            seen = self._types.get(id(route))
            if seen is not None and seen[0] is route:
                conv = seen[1]
            else:  # (the route is held, so its id is not another's while it is here)
                t = _param_type(route, self.param)
                conv = t if t in _AUTO_TYPES else None
                if len(self._types) < 10_000:
                    self._types[id(route)] = (route, conv)
        try:
            return conv(value) if conv is not None else value
        except (ValueError, TypeError, ArithmeticError):
            return _INVALID

    def resolve(self, app: Any) -> None:
        """Take ``convert`` from the app's route of the same path (once)."""
        if self._resolved:
            return
        self._resolved = True
        if type(self.convertors[self.param]).__name__ != "StringConvertor":
            return  # {id:int} etc. convert already
        for r in getattr(getattr(app, "router", app), "routes", None) or ():
            if getattr(r, "path_format", None) != self.path_format:
                continue
            t = _param_type(r, self.param)
            if t in _AUTO_TYPES:
                self.convert = t
            return

    def __repr__(self) -> str:
        return f"BloomRoute({self.path!r}, {self.param!r}, filter={self.filter!r})"


def _param_type(route: Any, param: str) -> Any:
    dependant = getattr(route, "dependant", None)  # FastAPI's APIRoute
    for field in getattr(dependant, "path_params", None) or ():
        if getattr(field, "name", None) == param or getattr(field, "alias", None) == param:
            info = getattr(field, "field_info", None)
            return getattr(info, "annotation", None) or getattr(field, "type_", None)
    endpoint = getattr(route, "endpoint", None)
    if endpoint is None:
        return None
    try:
        import typing

        return typing.get_type_hints(endpoint).get(param)
    except Exception:
        return None


RouteSpec = Union[str, Tuple[str, ...]]


def _routes(routes: Union[Dict[str, RouteSpec], Sequence[BloomRoute]]) -> List[BloomRoute]:
    if isinstance(routes, dict):
        out = []
        for path, spec in routes.items():
            if isinstance(spec, str):
                out.append(BloomRoute(path, spec))
            else:
                out.append(BloomRoute(path, *spec))
        return out
    return list(routes)


def _route_path(scope: Scope) -> str:
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    # As Starlette's router sees it: without the root_path the app is mounted at.
    if root and path.startswith(root):
        if path == root:
            return ""
        if path[len(root)] == "/":
            return path[len(root):]
    return path


class _Resolved:
    """The endpoint route a request resolves to in the app's router: the route, its full
    path (with the Mount prefixes above it), the Host pattern above it, the path
    parameters after the app's convertors."""

    __slots__ = ("route", "path_format", "host", "params")

    def __init__(self, route: Any, path_format: str, host: Optional[str], params: Dict[str, Any]):
        self.route = route
        self.path_format = path_format
        self.host = host
        self.params = params


_FORMATS: Dict[str, str] = {}


def _path_format(path: str) -> str:
    fmt = _FORMATS.get(path)
    if fmt is None:
        fmt = compile_path(path)[1]
        if len(_FORMATS) < 10_000:  # an app's routes: a bounded set
            _FORMATS[path] = fmt
    return fmt


def _app_routes(app: Any) -> Optional[Sequence[Any]]:
    """The routes of a Starlette/FastAPI app or router (also behind other middleware
    wrapping it, through their ``app``), or None (a plain ASGI app)."""
    for _ in range(16):
        if app is None:
            return None
        routes = getattr(app, "routes", None)
        if isinstance(routes, (list, tuple)) and all(hasattr(r, "matches") for r in routes):
            return routes
        app = getattr(app, "app", None)
    return None


def _resolve(routes: Sequence[Any], scope: Scope, prefix: str = "",
             host: Optional[str] = None, depth: int = 0) -> Optional[_Resolved]:
    """The endpoint route Starlette's router would run for ``scope`` (its first full
    match, into Mounts and Hosts), or None."""
    if depth > 32:
        return None
    for route in routes:
        try:
            match, child = route.matches(scope)
        except Exception:  # a route that cannot match this scope
            continue
        if match is not Match.FULL:
            continue
        sub = {**scope, **child}
        if hasattr(route, "_match") and hasattr(route, "effective_candidates"):
            return _resolve_included(route, sub, prefix, host, depth)
        if isinstance(route, Mount):
            inner = _app_routes(route)
            return None if inner is None else _resolve(inner, sub, prefix + route.path, host, depth + 1)
        if isinstance(route, Host):
            inner = _app_routes(route)
            return None if inner is None else _resolve(inner, sub, prefix, route.host, depth + 1)
        path = getattr(route, "path", None)
        if path is None:
            return None
        return _Resolved(route, _path_format(prefix + path), host, sub.get("path_params") or {})
    return None


def _resolve_included(router: Any, scope: Scope, prefix: str, host: Optional[str],
                      depth: int) -> Optional[_Resolved]:
    """FastAPI's included router (``include_router`` of an APIRouter, resolved lazily in
    recent FastAPI): its own match gives the route and the effective route with the
    router's prefix and the endpoint's declared parameters."""
    try:
        match, child, route, context = router._match(scope)
    except Exception:
        return None
    if match is not Match.FULL or route is None:
        return None
    sub = {**scope, **child}
    if hasattr(route, "_match") and hasattr(route, "effective_candidates"):
        return _resolve_included(route, sub, prefix, host, depth + 1)
    if context is not None and getattr(context, "path_format", None):
        return _Resolved(context, _path_format(prefix + context.path_format), host,
                         sub.get("path_params") or {})
    return _resolve([route], sub, prefix, host, depth + 1)


class BloomGuardMiddleware:
    """``BloomGuardMiddleware(app, routes, filters=None, *, filter=None, reject_status=404,
    reject=None, metrics=None, guards=None)``

    routes         {path: param | (param, filter_name[, prefix])} or [BloomRoute, ...]
    filters        {name: filter}; ``filter=`` is the one named "default"
    reject_status  the status of a rejection (JSON body {"detail": ...})
    reject         or a function ``(scope, key, filter_name) -> Response`` (may be async)
    guards         {name: AsyncGuard} to use instead of making one per filter (to share
                   counters with your own code); ``metrics`` is passed to those it makes.
                   The guards it makes are AsyncGuards: the event loop never waits on the
                   filter (an AsyncRedisFilter is awaited, a blocking RedisFilter runs in a
                   thread); a plain Guard you pass is called as it is
    guard_options  keywords for the guards it makes, e.g. ``{"on_filter_error": "closed",
                   "breaker_seconds": 10}`` (see ling_bloom.guard: by default a failing
                   filter backend lets requests through, "open"; ``"normalize": str.lower``
                   for a case-insensitive key column)
    sources        {name: function giving every key of that filter} (an iterable, an async
                   iterable, or an awaitable of one): a filter its server lost is rebuilt
                   from it (``ling_bloom.guard.arefill``), once per loss, on the event loop
    exists         {name: exists(value) -> bool} (a coroutine function, or a plain one run
                   in a thread): does the row of this value exist?  Asked only when a
                   request passed filter ``name`` and the app answered 404: a missing row is
                   an observed false positive; an existing one is the endpoint's own 404 (a
                   product off sale), not counted against the filter.  Without it such
                   404s are not counted (the middleware cannot tell them apart)
    """

    def __init__(self, app: Callable[..., Any],
                 routes: Union[Dict[str, RouteSpec], Sequence[BloomRoute]],
                 filters: Optional[Dict[str, Any]] = None, *, filter: Any = None,
                 reject_status: int = 404,
                 reject: Optional[Callable[..., Any]] = None,
                 metrics: Any = None,
                 guards: Optional[Dict[str, Union[Guard, AsyncGuard]]] = None,
                 guard_options: Optional[Dict[str, Any]] = None,
                 sources: Optional[Dict[str, Callable[[], Any]]] = None,
                 exists: Optional[Dict[str, Callable[[Any], Any]]] = None):
        self.app = app
        self.sources: Dict[str, Callable[[], Any]] = dict(sources or {})
        self.exists: Dict[str, Callable[[Any], Any]] = dict(exists or {})
        self.routes = _routes(routes)
        filters = dict(filters or {})
        if filter is not None:
            filters[_DEFAULT] = filter
        self.guards: Dict[str, Union[Guard, AsyncGuard]] = dict(guards or {})
        for name, f in filters.items():
            warn_unshared(name, f, "a ling_bloom.warmup.FileFilter", stacklevel=3)
            if hasattr(f, "reload_in_thread"):  # a FileFilter: loads a new file in a thread
                f.reload_in_thread = True
            if name not in self.guards:
                options = dict(guard_options or {})
                if name in self.sources:
                    options.setdefault("rebuild", _rebuild_from(self.sources[name]))
                self.guards[name] = AsyncGuard(f, name=name, metrics=metrics, **options)
        for r in self.routes:
            if r.filter not in self.guards:
                raise ValueError(f"{r!r}: no filter named {r.filter!r} (known: "
                                 f"{', '.join(sorted(self.guards)) or 'none'})")
        for name, source in self.sources.items():
            if name not in self.guards:
                raise ValueError(f"sources: no filter named {name!r} (known: "
                                 f"{', '.join(sorted(self.guards)) or 'none'})")
            g = self.guards[name]
            if g.rebuild is None:
                g.rebuild = _rebuild_from(source) if isinstance(g, AsyncGuard) else (
                    lambda flt, source=source: _refill_blocking(flt, source))
        self.reject_status = reject_status
        self.reject = reject
        self._started = False
        self._tasks: set = set()

    def get_guard(self, name: str = _DEFAULT) -> Union[Guard, AsyncGuard]:
        return self.guards[name]

    async def _rejection(self, scope: Scope, key: Any, name: str) -> Response:
        if self.reject is None:
            from http import HTTPStatus

            try:
                detail = HTTPStatus(self.reject_status).phrase
            except ValueError:
                detail = "Rejected"
            return JSONResponse({"detail": detail}, status_code=self.reject_status)
        out = self.reject(scope, key, name)
        if inspect.isawaitable(out):
            out = await out
        return out

    async def startup_checks(self, app: Any = None, wait: bool = True) -> None:
        """The set-up checks (once): guarded paths that match no route of the app, stored
        filters of another geometry; logged.  Run at the lifespan's startup, else at the
        first request (which does not wait for the filters' answers: they are asked in a
        task)."""
        if self._started:
            return
        self._started = True
        app = app if app is not None else self.app
        for route, close in unmatched_routes(self.routes, app):
            log.warning(
                "ling_bloom: the guarded path %r matches no route of the app: requests to "
                "it are never guarded (a typo, or the app's route changed); the app's "
                "routes closest to it: %s", route.path,
                ", ".join(map(repr, close)) or "none")
        if wait:
            await self._probe_filters()
        else:
            import asyncio

            task = asyncio.get_running_loop().create_task(self._probe_filters())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _probe_filters(self) -> None:
        for guard in self.guards.values():
            problem = await _asetup_problem(guard.filter)
            if problem is not None:
                guard._note_geometry(problem)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and not self._started:
            app = scope.get("app")

            async def receive_startup() -> Message:
                message = await receive()
                if message.get("type") == "lifespan.startup":
                    try:
                        await self.startup_checks(app)
                    except Exception:  # noqa: BLE001 - checks never stop the app
                        log.exception("ling_bloom: the start-up checks failed")
                return message

            await self.app(scope, receive_startup, send)
            return
        if scope["type"] != "http" or not self.routes:
            await self.app(scope, receive, send)
            return
        if not self._started:
            try:
                await self.startup_checks(scope.get("app"), wait=False)
            except Exception:  # noqa: BLE001
                log.exception("ling_bloom: the start-up checks failed")
        method = scope.get("method", "GET")
        candidates = [r for r in self.routes if r.accepts(method)]
        if not candidates:
            await self.app(scope, receive, send)
            return
        app_routes = _app_routes(scope.get("app")) or _app_routes(self.app)
        if app_routes is not None:
            # the route the app itself resolves (Mounts, Hosts, routers, route order)
            resolved = _resolve(app_routes, dict(scope))
            if resolved is not None:
                for route in candidates:
                    if (route.path_format == resolved.path_format and route.host == resolved.host
                            and route.param in resolved.params):
                        await self._guard(route, route.value_of(resolved), scope, receive, send)
                        return
            await self.app(scope, receive, send)
            return
        path = _route_path(scope)  # a plain ASGI app: the patterns against the path
        for route in candidates:
            if not route._resolved and "app" in scope:
                route.resolve(scope["app"])
            value = route.match(method, path)
            if value is None:
                continue
            await self._guard(route, value, scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _guard(self, route: BloomRoute, value: Any, scope: Scope, receive: Receive,
                     send: Send) -> None:
        if value is _INVALID:  # the app answers it (FastAPI: 422), unguarded
            await self.app(scope, receive, send)
            return
        key = route_key(value)
        if route.prefix:
            key = route.prefix + (key if isinstance(key, str) else bytes(key).decode("utf-8", "surrogateescape"))
        guard = self.guards[route.filter]
        flt = guard.filter
        if getattr(flt, "warmed", True) is False and getattr(flt, "unwarmed", "") == "serve":
            # a FileFilter before its first file (logged): unguarded, not counted
            await self.app(scope, receive, send)
            return
        if isinstance(guard, AsyncGuard):
            passed = await guard.acheck(key)
        else:
            passed = guard.check(key)  # a Guard of yours: called as it is
        if not passed:
            response = await self._rejection(scope, key, route.filter)
            await response(scope, receive, send)
            return
        await self._observed(guard, scope, receive, send, key, route.filter, value)

    async def _observed(self, guard: Union[Guard, AsyncGuard], scope: Scope, receive: Receive,
                        send: Send, key: Any = None, name: str = _DEFAULT, value: Any = None) -> None:
        status: List[int] = []

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except Exception:
            guard.record(None)
            raise
        code = status[0] if status else 500
        if code >= 500:
            guard.record(None)
        elif code != 404:
            guard.record(True, key)
        else:
            # a 404 is a false positive of the filter only when the row is missing; the
            # endpoint's own 404 (a product off sale) is not
            exists = self.exists.get(name)
            if exists is None:
                return  # the middleware cannot tell which: not counted against the filter
            try:
                if inspect.iscoroutinefunction(exists):
                    there = await exists(value)
                else:
                    import asyncio

                    there = await asyncio.get_running_loop().run_in_executor(None, exists, value)
                    if inspect.isawaitable(there):
                        there = await there
            except Exception as e:  # the check must not fail the request
                _log.warning("ling_bloom: exists[%r] failed (%s: %s): the 404 is not counted",
                             name, type(e).__name__, e)
                return
            guard.record(bool(there), key)


def _rebuild_from(source: Callable[[], Any]) -> Callable[[Any], Any]:
    async def rebuild(flt: Any) -> None:
        await arefill(flt, source())

    return rebuild


def _refill_blocking(flt: Any, source: Callable[[], Any]) -> None:
    # a plain Guard of yours: its rebuild runs in a thread, an async source in its own loop
    import asyncio

    from ling_bloom.guard import refill

    keys = source()
    if inspect.isawaitable(keys) or hasattr(keys, "__aiter__"):
        async def collect() -> List[Any]:
            k = await keys if inspect.isawaitable(keys) else keys
            if hasattr(k, "__aiter__"):
                return [x async for x in k]
            return list(k)

        keys = asyncio.run(collect())
    refill(flt, keys)


# ------------------------------------------------------------ start-up: the app's routes

_PARAM = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(?::([a-zA-Z_][a-zA-Z0-9_]*))?}")
_SAMPLES = {"int": "1", "float": "1", "path": "a/b",
            "uuid": "00000000-0000-0000-0000-000000000000"}


def _sample(path: str) -> str:
    """A path that BloomRoute ``path`` matches (each parameter a value of its type)."""
    return _PARAM.sub(lambda m: _SAMPLES.get(m.group(2) or "str", "x"), path)


def app_paths(app: Any) -> Optional[List[str]]:
    """The paths of an app's routes, mounts flattened ("/api" + "/items/{id}"); None when
    the app's routes cannot be listed (not a Starlette or FastAPI app)."""
    routes = getattr(app, "routes", None)
    if routes is None:
        routes = getattr(getattr(app, "router", None), "routes", None)
    if routes is None:
        return None
    out: List[str] = []

    class Unlisted(Exception):
        pass

    def walk(rs: Any, prefix: str) -> None:
        for r in rs:
            path = getattr(r, "path", None)
            if not isinstance(path, str):
                raise Unlisted  # a Host route, or something else: cannot say
            children = getattr(r, "routes", None)
            if type(r).__name__ == "Mount":
                if children:
                    walk(children, prefix + path.rstrip("/"))
                else:  # a mounted app of its own: every path under it
                    out.append(prefix + path.rstrip("/") + "/{rest:path}")
            elif children is None:
                out.append(prefix + path)

    try:
        walk(routes, "")
    except Unlisted:
        return None
    return out


def unmatched_routes(routes: Sequence[BloomRoute], app: Any) -> List[Tuple[BloomRoute, List[str]]]:
    """The guarded routes that match none of the app's routes, each with the app's paths
    closest to it; [] when the app's routes cannot be listed."""
    paths = app_paths(app)
    if paths is None:
        return []
    regexes = []
    for p in paths:
        try:
            regexes.append(compile_path(p)[0])
        except Exception:  # noqa: BLE001 - a path Starlette takes but we cannot compile
            continue
    out = []
    for route in routes:
        sample = _sample(route.path)
        if any(rx.match(sample) for rx in regexes):
            continue
        close = difflib.get_close_matches(route.path, paths, n=3, cutoff=0.4)
        out.append((route, close))
    return out
