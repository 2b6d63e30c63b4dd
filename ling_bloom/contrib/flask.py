"""Flask: keep lookups of ids that do not exist away from the database.

    from ling_bloom.contrib.flask import BloomGuard

    bloom = BloomGuard(app, filters={"products": products_filter})   # or bloom.init_app(app)

    @app.get("/products/<int:product_id>")
    @bloom.guard("product_id", filter="products")     # 404 before the view runs
    def product(product_id): ...

    @bloom.source("products")                         # for `flask bloom-warmup products`
    def product_ids():
        return db.execute("SELECT id FROM product")

Instead of the decorator, endpoints can be guarded from the app's configuration:
``app.config["LING_BLOOM_ROUTES"] = {"product": ("product_id", "products")}`` (endpoint ->
URL parameter, filter name).  Mistakes are errors at set-up, never a guard silently off:
``@bloom.guard`` raises TypeError for a parameter the view does not have and ValueError for
an unknown filter name (when the filters are known; else at ``init_app``);
``bloom.check(app)`` (run by itself before the first request; call it at the end of an app
factory to fail at start-up) raises ValueError for a LING_BLOOM_ROUTES endpoint the app does
not have or a URL parameter its rule does not have.  ``LING_BLOOM_REJECT_STATUS`` (default 404) is the answer to
a rejected key.  A guarded request that passes the filter and still answers 404 is
counted as an observed false positive (``bloom.get_guard("products").stats()``).

A filter its server lost (``FilterLostError``: a Redis filter made without a ttl, after a
restart, FLUSHALL or eviction) lets requests through (see ling_bloom.guard), and when the
filter has a ``@bloom.source`` (and no file), the guard rebuilds it from the source once, in
a thread inside an app context (``LING_BLOOM_REBUILD = False``: never).  A stored filter
whose geometry is not the code's (``GeometryMismatchError``) is logged as a configuration
error, with how to migrate, at ``init_app`` for filters given made and by ``check()`` for
the others (each is asked one test).

``flask bloom-warmup NAME`` fills the filter from its source and, for a filter in
``files`` (LING_BLOOM_FILES), saves it there: running servers reload it within
LING_BLOOM_CHECK_EVERY seconds.  An in-memory filter without a file lives in the
command's own process, which exits: the command warns (``--save FILE`` writes it
somewhere).  ``--incremental --state FILE`` with a ``@bloom.fetcher(NAME)`` reads only
rows newer than the last run's (adding to the saved file).
"""
from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
import warnings
import weakref
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

try:
    import click
    from flask import Flask, abort, current_app, g, has_app_context, request
    from flask.cli import with_appcontext
    from werkzeug.exceptions import HTTPException
except ImportError as exc:  # name the extra, not the first missing dependency
    raise ImportError(f"ling_bloom.contrib.flask needs Flask: pip install 'ling_bloom[flask]' "
                      f"({exc})", name=exc.name) from exc

from ling_bloom._keys import as_key, route_key
from ling_bloom.guard import Guard
import ling_bloom as lb
from ling_bloom._addlog import AddLog
from ling_bloom.filefilter import warn_unshared
from ling_bloom.warmup import FileFilter, FileState, HeldState, begin, publish, sync, warmup
from ling_bloom.warmup import _split

__all__ = ["BloomGuard", "UnresolvedAnnotationWarning", "bloom_warmup_command"]

_DEFAULT = "default"


_ALL_DEFAULT_METHODS = ("GET", "HEAD")
_FROM_CONFIG: Any = object()  # methods=: LING_BLOOM_METHODS (default GET and HEAD)

log = logging.getLogger("ling_bloom.contrib.flask")


class UnresolvedAnnotationWarning(UserWarning):
    """A guarded view's annotation of its key parameter does not resolve at set-up: the
    key is the URL's text as it is (``"007"``, not the ``7`` an ``int`` view reads)."""


class _AppState:
    """What one app makes of the extension: its filters, files, options and guards (one
    BloomGuard may serve several apps, the app-factory pattern)."""

    def __init__(self, ext: "BloomGuard", app: Optional[Flask]):
        self.ext = ext
        self.app = app
        cfg = app.config if app is not None else {}
        self.filters: Dict[str, Any] = dict(ext._filters)
        for name, f in (cfg.get("LING_BLOOM_FILTERS") or {}).items():
            self.filters.setdefault(name, f)
        self.files: Dict[str, Any] = dict(ext._files)
        for name, path in (cfg.get("LING_BLOOM_FILES") or {}).items():
            self.files.setdefault(name, path)
        self.guard_options: Dict[str, Any] = dict(ext._guard_options)
        for option, value in (cfg.get("LING_BLOOM_GUARD_OPTIONS") or {}).items():
            self.guard_options.setdefault(option, value)
        self.normalize: Dict[str, Callable[[Any], Any]] = {}
        for name, fn in {**(cfg.get("LING_BLOOM_NORMALIZE") or {}), **ext._normalize}.items():
            if isinstance(fn, str):
                from werkzeug.utils import import_string

                fn = import_string(fn)
            if not callable(fn):
                raise ValueError(f"LING_BLOOM_NORMALIZE[{name!r}]: a function of a key "
                                 f"(e.g. str.lower), not {fn!r}")
            self.normalize[name] = fn
        self.check_every = (float(ext._check_every) if ext._check_every is not None
                            else float(cfg.get("LING_BLOOM_CHECK_EVERY", 2.0)))
        self.unwarmed = ext._unwarmed if ext._unwarmed is not None else cfg.get(
            "LING_BLOOM_UNWARMED", "serve")
        if self.unwarmed not in ("serve", "reject"):
            raise ValueError(f"LING_BLOOM_UNWARMED must be 'serve' or 'reject', not {self.unwarmed!r}")
        self.mapped = bool(cfg.get("LING_BLOOM_MAPPED", False))
        self.rebuild = bool(cfg.get("LING_BLOOM_REBUILD", True))  # a lost filter, from its source
        self.probed: "set[str]" = set()  # filters asked one test for their geometry
        self.guards: Dict[str, Guard] = {}
        self.lock = threading.Lock()
        self.checked = False


class BloomGuard:
    """The Flask extension: filters by name, a guard (counters) per filter, the view
    decorator, configured routes, and warm-up sources for the CLI.

    filters   {name: filter} (a filter, or a function returning one at first use)
    filter    a single filter, named "default"
    metrics   passed to each Guard (None: Prometheus' default registry when installed)
    files     {name: path}: running processes serve filter ``name`` from this saved file
              (also app.config["LING_BLOOM_FILES"]), reloaded at most every
              ``check_every`` seconds (LING_BLOOM_CHECK_EVERY, 2.0) when
              ``flask bloom-warmup NAME`` (another process) replaces it; until the file
              exists, ``unwarmed`` (LING_BLOOM_UNWARMED): "serve" (default: requests pass
              unguarded, logged once) or "reject".  The filter given in ``filters`` is then
              only the empty filter the warm-up fills.  LING_BLOOM_MAPPED = True: each
              worker maps a MemoryFilter file (MemoryFilter.open) instead of reading it,
              so all workers share one copy of its bits.
    guard_options  keywords for each Guard (also app.config["LING_BLOOM_GUARD_OPTIONS"]),
              e.g. {"on_filter_error": "closed"}; by default a failing filter backend lets
              requests through ("open", see ling_bloom.guard)
    normalize {name: function} (also app.config["LING_BLOOM_NORMALIZE"], functions or
              dotted paths): the key filter ``name`` sees, in lookups, adds and the
              warm-up alike -- ``str.lower`` for a case-insensitive key column (MySQL's
              default collation, SQLite's NOCASE), where ``/products/Item-2`` finds the
              row of ``item-2``

    One BloomGuard may serve several apps (``init_app`` in an app factory): each app has
    its own settings, filters (a filter given as a function is made once per app),
    files and guards; ``get_guard``/``get_filter`` answer for the current app (in an app
    context), the only app, or ``app=``.
    """

    def __init__(self, app: Optional[Flask] = None, filters: Optional[Dict[str, Any]] = None,
                 *, filter: Any = None, metrics: Any = None,
                 guard_options: Optional[Dict[str, Any]] = None,
                 files: Optional[Dict[str, Any]] = None, check_every: Optional[float] = None,
                 unwarmed: Optional[str] = None,
                 normalize: Optional[Dict[str, Callable[[Any], Any]]] = None):
        self._filters: Dict[str, Any] = dict(filters or {})
        if filter is not None:
            self._filters[_DEFAULT] = filter
        self.metrics = metrics
        self._guard_options: Dict[str, Any] = dict(guard_options or {})
        self._files: Dict[str, Any] = dict(files or {})
        self._check_every = check_every
        if unwarmed is not None and unwarmed not in ("serve", "reject"):
            raise ValueError(f"unwarmed must be 'serve' or 'reject', not {unwarmed!r}")
        self._unwarmed = unwarmed
        self._normalize: Dict[str, Callable[[Any], Any]] = dict(normalize or {})
        self.sources: Dict[str, Callable[[], Iterable[Any]]] = {}
        self.fetchers: Dict[str, Callable[[Any, int], Any]] = {}
        self.existence: Dict[str, Callable[[Any], bool]] = {}
        # (filter name, where) of every @guard, checked when the filters are known
        self._wanted: list = []
        self._lock = threading.Lock()
        self._apps: list = []
        self._detached: Optional[_AppState] = None
        # converters read from a view's annotation: view -> {(method, arg): int/float/None}
        self._converters: "weakref.WeakKeyDictionary[Any, Dict[Tuple[str, str], Any]]" = \
            weakref.WeakKeyDictionary()
        # the views given to @bloom.guard (the function, not its guarded wrapper): one the
        # app registered itself means the decorator order put the guard off
        self._guarded_views: list = []
        if app is not None:
            self.init_app(app)

    # -- the app's state
    def _state(self, app: Optional[Flask] = None) -> _AppState:
        if app is None and has_app_context():
            app = current_app._get_current_object()  # type: ignore[attr-defined]
            st = app.extensions.get("ling_bloom_state")
            if st is not None and st.ext is self:
                return st
            app = None
        if app is not None:
            st = app.extensions.get("ling_bloom_state")
            if st is None or st.ext is not self:
                raise RuntimeError("this BloomGuard was not set up on this app: "
                                   "bloom.init_app(app)")
            return st
        if len(self._apps) == 1:
            return self._apps[0].extensions["ling_bloom_state"]
        if self._apps:
            raise RuntimeError("this BloomGuard serves several apps: call it in an app "
                               "context (with app.app_context(): ...) or pass app=")
        with self._lock:
            if self._detached is None:
                self._detached = _AppState(self, None)
            return self._detached

    @property
    def files(self) -> Dict[str, Any]:
        return self._state().files

    @property
    def check_every(self) -> float:
        return self._state().check_every

    @property
    def unwarmed(self) -> str:
        return self._state().unwarmed

    @property
    def mapped(self) -> bool:
        return self._state().mapped

    @property
    def guard_options(self) -> Dict[str, Any]:
        return self._state().guard_options

    # -- set-up
    def init_app(self, app: Flask) -> None:
        app.config.setdefault("LING_BLOOM_REJECT_STATUS", 404)
        app.config.setdefault("LING_BLOOM_ROUTES", {})
        app.config.setdefault("LING_BLOOM_METHODS", _ALL_DEFAULT_METHODS)
        st = _AppState(self, app)
        for name in st.files:
            self._require_filter(st, name, "LING_BLOOM_FILES")
        for name in st.normalize:
            self._require_filter(st, name, "LING_BLOOM_NORMALIZE")
        for name, f in st.filters.items():  # made ones; a factory's filter at first use
            if name not in st.files and hasattr(f, "test"):
                warn_unshared(name, f, "LING_BLOOM_FILES", stacklevel=4)
        app.extensions["ling_bloom"] = self
        app.extensions["ling_bloom_state"] = st
        self._apps.append(app)
        for view, where in self._guarded_views:
            self._check_unguarded(app, view, where)
        for name, where in self._wanted:
            self._require_filter(st, name, where)
        for endpoint, spec in (app.config.get("LING_BLOOM_ROUTES") or {}).items():
            self._check_route(app, st, endpoint, spec, registered_only=True)
        self._probe_geometry(st, made_only=True)
        app.before_request(self._before_request)
        app.after_request(self._after_request)
        if "bloom-warmup" not in app.cli.commands:
            app.cli.add_command(bloom_warmup_command)

    def add_filter(self, name: str, filter: Any) -> None:
        """Add or replace filter ``name`` (in every app this extension serves)."""
        with self._lock:
            self._filters[name] = filter
            states = [a.extensions["ling_bloom_state"] for a in self._apps]
            if self._detached is not None:
                states.append(self._detached)
        for st in states:
            with st.lock:
                st.filters[name] = filter
                guard = st.guards.get(name)
                if guard is not None:
                    guard.filter = filter if not callable(filter) or hasattr(filter, "test") else filter()

    def get_filter(self, name: str = _DEFAULT, app: Optional[Flask] = None) -> Any:
        return self.get_guard(name, app).filter

    def get_guard(self, name: str = _DEFAULT, app: Optional[Flask] = None) -> Guard:
        st = self._state(app)
        guard = st.guards.get(name)
        if guard is None:
            with st.lock:
                guard = st.guards.get(name)
                if guard is None:
                    try:
                        f = st.filters[name]
                    except KeyError:
                        raise KeyError(f"no ling_bloom filter named {name!r} (known: "
                                       f"{', '.join(sorted(st.filters)) or 'none'})") from None
                    if name in st.files:
                        f = FileFilter(st.files[name], check_every=st.check_every,
                                       unwarmed=st.unwarmed, mapped=st.mapped)
                    elif callable(f) and not hasattr(f, "test"):
                        # a factory's filter, made now (a made one was checked at init_app)
                        f = st.filters[name] = f()
                        warn_unshared(name, f, "LING_BLOOM_FILES", stacklevel=4)
                    options = dict(st.guard_options)
                    options.setdefault("rebuild", self._rebuild_for(st, name))
                    guard = st.guards[name] = Guard(f, name=name, metrics=self.metrics,
                                                    normalize=st.normalize.get(name),
                                                    **options)
        return guard

    def _rebuild_for(self, st: _AppState, name: str) -> Optional[Callable[[Any], None]]:
        """How the guard of filter ``name`` (of one app) builds it again when its server
        lost it: its ``@bloom.source`` read in that app's context, each key through the
        app's normaliser; None without a source, for a served file (never lost), or with
        LING_BLOOM_REBUILD False."""
        if not st.rebuild or name in st.files or name not in self.sources:
            return None

        def rebuild(flt: Any) -> None:
            from contextlib import nullcontext

            from ling_bloom.guard import refill

            normalize = st.normalize.get(name)
            with st.app.app_context() if st.app is not None else nullcontext():
                keys = self.sources[name]()
                if normalize is not None:
                    keys = (normalize(as_key(k)) for k in keys)
                refill(flt, keys)

        return rebuild

    def _probe_geometry(self, st: _AppState, made_only: bool) -> None:
        """Ask each filter (not a served file) one test: a GeometryMismatchError is logged
        once, as a configuration error with how to migrate (see ling_bloom.guard)."""
        from ling_bloom.guard import _setup_problem

        for name, f in list(st.filters.items()):
            if name in st.files or name in st.probed:
                continue
            if made_only and not hasattr(f, "test"):
                continue  # a factory's filter: made and probed by check()
            st.probed.add(name)
            guard = self.get_guard(name, st.app)
            problem = _setup_problem(guard.filter)
            if problem is not None:
                guard._note_geometry(problem)

    def source(self, name: str = _DEFAULT) -> Callable[[Callable[[], Iterable[Any]]], Callable[[], Iterable[Any]]]:
        """Register the function giving every key of filter ``name`` (for the warm-up, and
        the rebuild of a filter its server lost)."""
        def register(fn: Callable[[], Iterable[Any]]) -> Callable[[], Iterable[Any]]:
            self.sources[name] = fn
            for app in self._apps:
                st = app.extensions.get("ling_bloom_state")
                guard = st.guards.get(name) if st is not None else None
                if guard is not None and guard.rebuild is None:
                    guard.rebuild = self._rebuild_for(st, name)
            return fn
        return register

    def fetcher(self, name: str = _DEFAULT) -> Callable[[Callable[[Any, int], Any]], Callable[[Any, int], Any]]:
        """Register ``fetch(after, limit)`` of filter ``name`` for incremental warm-ups:
        rows with an id above ``after`` in id order, as ids or (id, key) pairs."""
        def register(fn: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
            self.fetchers[name] = fn
            return fn
        return register

    def exists(self, name: str = _DEFAULT) -> Callable[[Callable[[Any], bool]], Callable[[Any], bool]]:
        """Register ``exists(value) -> bool`` of filter ``name``: does the row of this URL
        value (as the view reads it: ``7`` for an int parameter) exist?  Asked only when a
        guarded request passed the filter and the view answered 404: a missing row is an
        observed false positive of the filter; an existing one is the view's own 404 (a
        product off sale), not counted against the filter.  Without it such 404s are not
        counted at all (the guard cannot tell them apart)."""
        def register(fn: Callable[[Any], bool]) -> Callable[[Any], bool]:
            self.existence[name] = fn
            return fn
        return register

    # -- set-up checks: a typo must not silently turn a guard off
    def _require_filter(self, st: _AppState, name: str, where: str) -> None:
        if name not in st.filters:
            raise ValueError(f"{where}: no ling_bloom filter named {name!r} (known: "
                             f"{', '.join(sorted(st.filters)) or 'none'})")

    def _check_route(self, app: Flask, st: _AppState, endpoint: str, spec: Any,
                     registered_only: bool) -> None:
        where = f"LING_BLOOM_ROUTES[{endpoint!r}]"
        if isinstance(spec, str) or not isinstance(spec, (tuple, list)) or not 1 <= len(spec) <= 4:
            raise ValueError(f"{where}: expected (url_parameter, filter_name[, prefix"
                             f"[, methods]]), not {spec!r}")
        self._require_filter(st, spec[1] if len(spec) > 1 else _DEFAULT, where)
        if len(spec) > 3:
            _methods(spec[3], where)
        if endpoint not in app.view_functions:
            if registered_only:
                return  # the route may be added after init_app: checked by check()
            raise ValueError(f"{where}: the app has no endpoint {endpoint!r} (endpoints: "
                             f"{', '.join(sorted(app.view_functions))})")
        for rule in app.url_map.iter_rules(endpoint):
            if spec[0] not in rule.arguments:
                raise ValueError(f"{where}: the URL rule {rule.rule!r} has no parameter "
                                 f"{spec[0]!r} (it has: {', '.join(sorted(rule.arguments)) or 'none'})")
        if not registered_only:  # say now when the view's annotation of the key does not resolve
            view = app.view_functions[endpoint]
            for rule in app.url_map.iter_rules(endpoint):
                for method in sorted(rule.methods or ()):
                    self._converter(view, spec[0], method, where)

    def _check_unguarded(self, app: Flask, view: Any, where: str) -> None:
        for endpoint, registered in app.view_functions.items():
            if registered is view:
                raise ValueError(
                    f"{where}: the app registered endpoint {endpoint!r} with the view "
                    f"unguarded -- @bloom.guard is written above the route decorator; put "
                    f"it below (@app.get(...) first, then @bloom.guard(...))")

    def check(self, app: Optional[Flask] = None) -> None:
        """Check the configuration: every LING_BLOOM_ROUTES endpoint exists and has the URL
        parameter, every filter name used is known, no view given to ``@bloom.guard`` was
        registered without it (the decorator above the route's); a guarded view whose
        annotation of its key does not resolve is an UnresolvedAnnotationWarning.  Raises
        ValueError.  Runs by itself before the app's first request (and in part at
        init_app and at each ``@bloom.guard``); call it at the end of an app factory to
        fail at start-up."""
        app = app or current_app._get_current_object()  # type: ignore[attr-defined]
        st = self._state(app)
        for name, where in self._wanted:
            self._require_filter(st, name, where)
        for view, where in self._guarded_views:
            self._check_unguarded(app, view, where)
        for endpoint, spec in (app.config.get("LING_BLOOM_ROUTES") or {}).items():
            self._check_route(app, st, endpoint, spec, registered_only=False)
        for view in app.view_functions.values():  # MethodViews with @bloom.guard
            spec = getattr(view, "bloom_guarded", None)
            view_class = getattr(view, "view_class", None)
            if isinstance(spec, tuple) and view_class is not None:
                for method in sorted(getattr(view_class, "methods", None) or ("GET",)):
                    self._converter(view, spec[0], method, spec[1])
        st.checked = True
        self._probe_geometry(st, made_only=False)

    # -- keys: what the view reads
    def _converter(self, view: Any, arg: str, method: str, where: str) -> Any:
        """int or float when the view (a MethodView's method for ``method``) reads ``arg``
        with that annotation, else None."""
        try:
            known = self._converters.setdefault(view, {})
        except TypeError:  # not weakly referenceable: not cached
            known = {}
        ck = (method, arg)
        if ck in known:
            return known[ck]
        cls = getattr(view, "view_class", None)
        fn = view
        if cls is not None:
            fn = getattr(cls, method.lower(), None)
            if fn is None and method == "HEAD":
                fn = getattr(cls, "get", None)
            if fn is None:
                fn = getattr(cls, "dispatch_request", None)
        conv = _annotated_converter(fn, arg, where) if fn is not None else None
        known[ck] = conv
        return conv

    # -- the check
    def _reject(self) -> Any:
        abort(current_app.config.get("LING_BLOOM_REJECT_STATUS", 404))

    def deleted(self, name: str, key: Any, prefix: str = "") -> None:
        """Call when the row of ``key`` is deleted: lookups of it are then counted as
        deletes, not false positives (``Guard.deleted``; a CountingFilter forgets it)."""
        k = route_key(key)
        if prefix:
            k = prefix + (k if isinstance(k, str) else bytes(k).decode("utf-8", "surrogateescape"))
        self.get_guard(name).deleted(k)

    def warmup_filter(self, name: str, incremental: bool = False) -> Any:
        """The filter ``flask bloom-warmup`` fills: for a name in ``files``, the saved file
        (``incremental``, when it exists) or a new empty filter from ``filters``; else the
        app's filter itself."""
        st = self._state()
        if name not in st.files:
            return self.get_filter(name)
        import os

        if incremental and os.path.exists(st.files[name]):
            return lb.load(os.fspath(st.files[name]))
        try:
            f = st.filters[name]
        except KeyError:
            raise KeyError(f"no ling_bloom filter named {name!r}") from None
        return f() if callable(f) and not hasattr(f, "test") else f

    def _check(self, name: str, value: Any, prefix: str) -> Optional[Tuple[Guard, Any, Any]]:
        """The filter step of a guarded request: None (unguarded: no file yet, "serve"),
        or (guard, key, value) when it passed; a rejection aborts."""
        guard = self.get_guard(name)
        flt = guard.filter
        if isinstance(flt, FileFilter) and flt.unwarmed == "serve" and not flt.warmed:
            return None  # no file yet (logged once): unguarded, not evidence for the stats
        key = route_key(value)
        if prefix:
            key = prefix + (key if isinstance(key, str) else bytes(key).decode("utf-8", "surrogateescape"))
        if not guard.check(key):
            self._reject()
        g._ling_bloom_key = key
        return guard, key, value

    def _record(self, name: str, passed: Tuple[Guard, Any, Any], status: int) -> None:
        """The outcome of a request that passed the filter.  A 404 is an observed false
        positive only when the row is missing (``@bloom.exists``); not the view's own 404."""
        guard, key, value = passed
        if status >= 500:
            guard.record(None)
        elif status != 404:
            guard.record(True, key)
        else:
            exists = self.existence.get(name)
            if exists is None:
                return  # a 404 the guard cannot attribute: not counted against the filter
            try:
                there = bool(exists(value))
            except Exception as e:  # the check must not fail the request
                log.warning("ling_bloom: @bloom.exists(%r) failed (%s: %s): the 404 is not "
                            "counted", name, type(e).__name__, e)
                return
            guard.record(there, key)

    def guard(self, arg: str, filter: str = _DEFAULT, prefix: str = "",
              methods: Any = _FROM_CONFIG) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A view decorator: the URL parameter ``arg`` is the key; a key that filter
        ``filter`` has never seen gets LING_BLOOM_REJECT_STATUS (404) before the view runs.
        ``methods``: the HTTP methods guarded (default LING_BLOOM_METHODS, GET and HEAD: a
        PUT that creates the row, or an OPTIONS preflight, is not turned away); None: all.
        The view may be a coroutine function (``async def``, Flask's async views)."""
        guarded_methods = methods if methods is _FROM_CONFIG else _methods(methods, "methods")

        def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
            where = f"@bloom.guard({arg!r}, filter={filter!r}) on {getattr(view, '__qualname__', view)}"
            try:
                params = inspect.signature(view).parameters
            except (TypeError, ValueError):  # pragma: no cover - builtins
                params = None
            if params is not None and arg not in params and not any(
                    p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                raise TypeError(f"{where}: the view has no parameter {arg!r} (it has: "
                                f"{', '.join(params) or 'none'})")
            self._wanted.append((filter, where))
            known = set(self._filters)
            for app in self._apps:
                known.update(app.extensions["ling_bloom_state"].filters)
            if known and filter not in known:  # else checked at init_app / before the first request
                raise ValueError(f"{where}: no ling_bloom filter named {filter!r} (known: "
                                 f"{', '.join(sorted(known))})")
            for app in self._apps:  # registered already: the route decorator came first
                self._check_unguarded(app, view, where)
            self._guarded_views.append((view, where))
            convert = _annotated_converter(view, arg, where) if params is not None and arg in params else None

            def before(kwargs: Dict[str, Any]) -> Optional[Tuple[Guard, Any, Any]]:
                if arg not in kwargs:
                    raise TypeError(f"the view has no URL parameter {arg!r} to guard")
                if not _method_guarded(guarded_methods):
                    return None
                value = kwargs[arg]
                conv = convert
                if conv is None and getattr(guarded, "view_class", None) is not None:
                    conv = self._converter(guarded, arg, request.method, where)  # a MethodView
                if conv is not None and isinstance(value, str):
                    try:
                        value = conv(value)
                    except ValueError:
                        return None  # not a value the view reads: the view's to answer
                return self._check(filter, value, prefix)

            if inspect.iscoroutinefunction(view):
                @functools.wraps(view)
                async def guarded(*args: Any, **kwargs: Any) -> Any:
                    passed = before(kwargs)
                    if passed is None:
                        return await view(*args, **kwargs)
                    try:
                        rv = current_app.make_response(await view(*args, **kwargs))
                    except HTTPException as e:
                        self._record(filter, passed, e.code or 500)
                        raise
                    except Exception:
                        passed[0].record(None)
                        raise
                    self._record(filter, passed, rv.status_code)
                    return rv
            else:
                @functools.wraps(view)
                def guarded(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                    passed = before(kwargs)
                    if passed is None:
                        return view(*args, **kwargs)
                    try:
                        rv = current_app.make_response(view(*args, **kwargs))
                    except HTTPException as e:
                        self._record(filter, passed, e.code or 500)
                        raise
                    except Exception:
                        passed[0].record(None)
                        raise
                    self._record(filter, passed, rv.status_code)
                    return rv
            guarded.bloom_guarded = (arg, where)  # type: ignore[attr-defined]
            return guarded
        return decorate

    def _before_request(self) -> Any:
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        st = app.extensions.get("ling_bloom_state")
        if st is not None and st.ext is self and not st.checked:
            self.check(app)
        routes: Dict[str, Tuple[Any, ...]] = current_app.config.get("LING_BLOOM_ROUTES") or {}
        if not routes or request.endpoint not in routes:
            return None
        view = current_app.view_functions.get(request.endpoint)
        if getattr(view, "bloom_guarded", False):
            return None  # the decorator does it
        spec = routes[request.endpoint]
        arg, name = spec[0], (spec[1] if len(spec) > 1 else _DEFAULT)
        prefix = spec[2] if len(spec) > 2 else ""
        if not _method_guarded(_methods(spec[3], "methods") if len(spec) > 3 else _FROM_CONFIG):
            return None
        value = (request.view_args or {}).get(arg)
        if value is None:
            return None
        convert = self._converter(view, arg, request.method, f"LING_BLOOM_ROUTES[{request.endpoint!r}]")
        if convert is not None and isinstance(value, str):
            try:
                value = convert(value)
            except ValueError:
                return None  # the view's to answer, unguarded (as @bloom.guard does)
        passed = self._check(name, value, prefix)
        if passed is not None:
            g._ling_bloom_passed = (name, passed)
        return None

    def _after_request(self, response: Any) -> Any:
        passed = g.pop("_ling_bloom_passed", None)
        if passed is not None:
            self._record(passed[0], passed[1], response.status_code)
        return response


def _methods(methods: Any, where: str) -> Optional[frozenset]:
    if methods is None:
        return None
    if isinstance(methods, str) or not all(isinstance(m, str) for m in methods):
        raise ValueError(f"{where}: HTTP methods are a list of names such as ['GET', 'HEAD'] "
                         f"(None: every method), not {methods!r}")
    return frozenset(m.upper() for m in methods)


def _method_guarded(methods: Any) -> bool:
    if methods is _FROM_CONFIG:
        methods = _methods(current_app.config.get("LING_BLOOM_METHODS", _ALL_DEFAULT_METHODS),
                           "LING_BLOOM_METHODS")
    return methods is None or request.method in methods


def _annotated_converter(view: Any, arg: str, where: str = "") -> Optional[Callable[[str], Any]]:
    """int or float when the view reads ``arg`` with that annotation, else None.

    A plain <id> (string converter) with a view annotated ``id: int``: the key is what the
    view reads, int("007") -> "7"; a value that does not convert is the view's to answer
    (unguarded).  <int:id> converts already (the value is no str then).  Only this
    parameter's annotation is read (another that does not resolve, such as a return type
    imported under TYPE_CHECKING, does not matter); when it does not resolve, an
    UnresolvedAnnotationWarning says so and the key is the URL's text."""
    try:
        p = inspect.signature(view).parameters.get(arg)
    except (TypeError, ValueError):
        return None
    if p is None or p.annotation is inspect.Parameter.empty:
        return None
    annotated = p.annotation
    if isinstance(annotated, str):  # from __future__ import annotations
        namespace = getattr(inspect.unwrap(view), "__globals__", None) or {}
        try:
            annotated = eval(annotated, namespace)  # noqa: S307 - the view's own annotation
        except Exception as e:
            warnings.warn(
                f"{where or getattr(view, '__qualname__', view)}: the annotation "
                f"{p.annotation!r} of {arg!r} does not resolve ({type(e).__name__}: {e}); the "
                f"key is the URL's text as it is (\"007\", not 7) -- annotate it with a name "
                f"the view's module defines at run time, or use a URL converter "
                f"(<int:{arg}>)", UnresolvedAnnotationWarning, stacklevel=4)
            return None
    return annotated if annotated in (int, float) else None


@click.command("bloom-warmup")
@click.argument("names", nargs=-1)
@click.option("--batch-size", default=10_000, show_default=True, type=click.IntRange(min=1),
              help="keys per filter.update (one Redis round trip each)")
@click.option("--save", "save_path", type=click.Path(dir_okay=False),
              help="save the filled filter to this file (in-memory filters)")
@click.option("--incremental", is_flag=True,
              help="only rows newer than the last run's (needs @bloom.fetcher and --state)")
@click.option("--state", "state_path", type=click.Path(dir_okay=False),
              help="where the incremental position is kept")
@click.option("--progress/--no-progress", default=None,
              help="a progress bar (default: when stderr is a terminal)")
@with_appcontext
def bloom_warmup_command(names: Tuple[str, ...], batch_size: int, save_path: Optional[str],
                         incremental: bool, state_path: Optional[str],
                         progress: Optional[bool]) -> None:
    """Fill ling_bloom filters from their registered sources (default: all of them)."""
    ext: BloomGuard = current_app.extensions["ling_bloom"]
    todo = list(names) or sorted(ext.fetchers if incremental else ext.sources)
    if not todo:
        raise click.UsageError("no filter to fill: register a source with @bloom.source(name)")
    if save_path and len(todo) > 1:
        raise click.UsageError("--save takes one filter name")
    for name in todo:
        if name in ext.files and not save_path:
            import os

            path = os.fspath(ext.files[name])
            with AddLog(path).warmup_lock():  # one warm-up of a file at a time
                _fill(ext, name, incremental, state_path, batch_size, progress, None,
                      path, begin(path))
        else:
            _fill(ext, name, incremental, state_path, batch_size, progress, save_path,
                  None, None)


def _fill(ext: BloomGuard, name: str, incremental: bool, state_path: Optional[str],
          batch_size: int, progress: Optional[bool], save_path: Optional[str],
          served: Optional[str], since: Any) -> None:
    """Fill one filter; save it to ``save_path``, or publish it to ``served`` (a file the
    running workers serve: the keys they added since the last warm-up are folded in)."""
    import os

    try:
        flt = ext.warmup_filter(name, incremental)
    except KeyError as e:
        raise click.UsageError(str(e.args[0])) from None
    if served is None and save_path is None and isinstance(
            flt, (lb.MemoryFilter, lb.BlockedFilter, lb.CountingFilter, lb.ScalableFilter)):
        click.echo(f"warning: {name} is an in-memory filter of this process: a running "
                   f"server does not see what this command adds (it exits). Give the "
                   f"filter a file (LING_BLOOM_FILES / BloomGuard(files=...)), which running "
                   f"servers reload, or use a Redis filter.", err=True)
    held = None
    if incremental and served is not None and not os.path.exists(served):
        # the rows before the position are in no filter: adding only the new ones would
        # publish a filter that answers every older row 404
        if name not in ext.sources:
            raise click.UsageError(f"{name}: {served} does not exist, and --incremental would "
                                   f"publish a filter of only the new rows: register "
                                   f"@bloom.source({name!r}) and run a full warm-up")
        click.echo(f"{name}: {served} does not exist: a full warm-up instead of --incremental")
        incremental = False
    normalize = ext._state().normalize.get(name)  # the guard's keys: the same function
    if incremental:
        if name not in ext.fetchers:
            raise click.UsageError(f"{name}: --incremental needs a @bloom.fetcher({name!r})")
        if not state_path:
            raise click.UsageError("--incremental needs --state FILE")
        fetch = ext.fetchers[name]
        if normalize is not None:
            inner = fetch

            def fetch(after: Any, limit: int) -> Any:  # type: ignore[misc]
                return [(i, normalize(as_key(k))) for i, k in map(_split, inner(after, limit))]
        # the position is saved once the filter is saved or published (held.commit())
        held = HeldState(FileState(state_path))
        res = sync(flt, fetch, held, batch_size=batch_size)
        click.echo(f"{name}: {res.keys:,} new keys in {res.batches} batches, "
                   f"last id {res.last_id}")
    else:
        if name not in ext.sources:
            raise click.UsageError(f"{name}: no source: register one with "
                                   f"@bloom.source({name!r})")
        summary = warmup(flt, ext.sources[name](), batch_size=batch_size,
                         key=None if normalize is None else (lambda row: normalize(as_key(row))),
                         progress=progress, stream=sys.stderr,
                         desc=name, summary=False)
        click.echo(f"{name}: {summary}")
    if save_path:
        import os

        flt.save(os.fspath(save_path))
        click.echo(f"{name}: saved to {os.fspath(save_path)}")
    elif served is not None:
        carried = publish(flt, served, since)
        click.echo(f"{name}: saved to {served} (running servers reload it within "
                   f"{ext.check_every:g} s"
                   + (f"; {carried:,} keys they added carried over)" if carried else ")"))
    if held is not None:
        held.commit()
