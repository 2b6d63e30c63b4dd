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
still answers 404 is counted as an observed false positive
(``middleware.get_guard("products").stats()``, or the ``guards`` dict you pass in).

A filter that running processes keep current from a saved file (the warm-up writes it):
``filters={"products": ling_bloom.warmup.FileFilter(path, check_every=2.0)}`` -- reloaded
when the file changes; before the file exists requests are served unguarded (logged).

It is a pure ASGI middleware (no BaseHTTPMiddleware): streaming responses, websockets and
lifespan events pass through untouched.
"""
from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

try:
    from starlette.responses import JSONResponse, Response
    from starlette.routing import compile_path
except ImportError as exc:  # name the extra, not the first missing dependency
    raise ImportError(f"ling_bloom.contrib.asgi needs Starlette: pip install 'ling_bloom[asgi]' "
                      f"({exc})", name=exc.name) from exc

from ling_bloom._keys import route_key
from ling_bloom.guard import AsyncGuard, Guard
from ling_bloom.filefilter import warn_unshared

__all__ = ["BloomGuardMiddleware", "BloomRoute"]

_DEFAULT = "default"

from starlette.types import Message, Receive, Scope, Send  # noqa: E402


_INVALID = object()
_AUTO_TYPES = (int, float)


class BloomRoute:
    """A guarded path: ``BloomRoute("/products/{product_id:int}", "product_id",
    filter="products", prefix="", methods=("GET", "HEAD"), convert=None)`` (methods=None:
    all).

    The key is the value the app would look up: the path convertor's (``{id:int}``:
    "007" -> 7 -> "7"), then ``convert`` (e.g. ``int``) when given.  For a plain ``{id}``
    path the middleware takes ``convert`` from the app's own route of the same path when it
    can: a FastAPI route's declared parameter type (or an endpoint function annotated with
    that parameter), when it is int or float; otherwise pass ``convert=``.  A value that does not convert (``/products/abc`` for an int) is not
    guarded: the app answers it as it would (FastAPI: 422)."""

    def __init__(self, path: str, param: str, filter: str = _DEFAULT, prefix: str = "",
                 methods: Optional[Iterable[str]] = ("GET", "HEAD"),
                 convert: Optional[Callable[[Any], Any]] = None):
        self.path = path
        self.param = param
        self.filter = filter
        self.prefix = prefix
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        self.regex, self.path_format, self.convertors = compile_path(path)
        if param not in self.convertors:
            raise ValueError(f"the path {path!r} has no parameter {param!r}")
        self.convert = convert
        self._resolved = convert is not None

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
                   filter backend lets requests through, "open")
    """

    def __init__(self, app: Callable[..., Any],
                 routes: Union[Dict[str, RouteSpec], Sequence[BloomRoute]],
                 filters: Optional[Dict[str, Any]] = None, *, filter: Any = None,
                 reject_status: int = 404,
                 reject: Optional[Callable[..., Any]] = None,
                 metrics: Any = None,
                 guards: Optional[Dict[str, Union[Guard, AsyncGuard]]] = None,
                 guard_options: Optional[Dict[str, Any]] = None):
        self.app = app
        self.routes = _routes(routes)
        filters = dict(filters or {})
        if filter is not None:
            filters[_DEFAULT] = filter
        self.guards: Dict[str, Union[Guard, AsyncGuard]] = dict(guards or {})
        for name, f in filters.items():
            warn_unshared(name, f, "a ling_bloom.warmup.FileFilter", stacklevel=3)
            if name not in self.guards:
                self.guards[name] = AsyncGuard(f, name=name, metrics=metrics,
                                               **(guard_options or {}))
        for r in self.routes:
            if r.filter not in self.guards:
                raise ValueError(f"{r!r}: no filter named {r.filter!r} (known: "
                                 f"{', '.join(sorted(self.guards)) or 'none'})")
        self.reject_status = reject_status
        self.reject = reject

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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.routes:
            await self.app(scope, receive, send)
            return
        method, path = scope.get("method", "GET"), _route_path(scope)
        for route in self.routes:
            if not route._resolved and "app" in scope:
                route.resolve(scope["app"])
            value = route.match(method, path)
            if value is None:
                continue
            if value is _INVALID:  # the app answers it (FastAPI: 422), unguarded
                break
            key = route_key(value)
            if route.prefix:
                key = route.prefix + (key if isinstance(key, str) else bytes(key).decode("utf-8", "surrogateescape"))
            guard = self.guards[route.filter]
            flt = guard.filter
            if getattr(flt, "warmed", True) is False and getattr(flt, "unwarmed", "") == "serve":
                break  # a FileFilter before its first file (logged): unguarded, not counted
            if isinstance(guard, AsyncGuard):
                passed = await guard.acheck(key)
            else:
                passed = guard.check(key)  # a Guard of yours: called as it is
            if not passed:
                response = await self._rejection(scope, key, route.filter)
                await response(scope, receive, send)
                return
            await self._observed(guard, scope, receive, send, key)
            return
        await self.app(scope, receive, send)

    async def _observed(self, guard: Union[Guard, AsyncGuard], scope: Scope, receive: Receive,
                        send: Send, key: Any = None) -> None:
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
        guard.record(None if code >= 500 else code != 404, key)
