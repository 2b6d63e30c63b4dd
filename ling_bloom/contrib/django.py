"""Django: keep lookups of ids that do not exist away from the database.

settings.py::

    INSTALLED_APPS = [..., "ling_bloom.contrib.django_app"]   # command + post_save hook
    MIDDLEWARE = [..., "ling_bloom.contrib.django.BloomGuardMiddleware"]

    LING_BLOOM = {
        "FILTERS": {
            "products": {
                # how the filter is made -- one of:
                "CLASS": "MemoryFilter",                     # a ling_bloom class or dotted path
                "OPTIONS": {"capacity": 1_000_000, "error_rate": 0.001},
                "FILE": BASE_DIR / "products.bloom",         # the warm-up command saves
                                                             # it; running processes reload
                                                             # it when it changes:
                "CHECK_EVERY": 2.0,                          # seconds between stat()s
                "UNWARMED": "serve",                         # no FILE yet: serve unguarded
                                                             # (logged), or "reject"
                "MAPPED": False,                             # True: every worker maps FILE
                                                             # (one copy of the bits for all)
                # "FILTER": "myproject.bloom.products",      # or: a dotted path to a filter
                #                                            # (or a function returning one)
                # where its keys come from (warm-up command, post_save hook):
                "MODEL": "shop.Product", "FIELD": "pk",
                "PREFIX": "",                                # prepended to every key
                "SIGNALS": True,                             # add keys of saved rows
                "REBUILD": True,                             # a Redis filter its server
                                                             # lost is rebuilt from MODEL
                                                             # (once per loss, a thread)
                # how --incremental finds new rows: by primary key, re-reading OVERLAP
                # ids below the last run's highest; or by a column every write sets,
                # re-reading LAG seconds behind the newest value the last run saw
                "INCREMENTAL": {"OVERLAP": 1000},            # or {"SINCE": "updated_at",
                                                             #     "LAG": 300}
                # "TEST_FILE": ...,   # under Django's test database (default FILE + ".test")
                # "GUARD_OPTIONS": {"on_filter_error": "open"},   # Guard(...) keywords
            },
        },
        "METHODS": ["GET", "HEAD"],   # the methods guarded (the default; "*": all; per route too)
        "ROUTES": [
            # the full URL name ("namespace:name"; a bare name when no other URL has it)
            # and the URL kwarg carrying the key
            {"URL_NAME": "product-detail", "KWARG": "pk", "FILTER": "products"},
            # or a regular expression on request.path_info with a named group
            {"PATTERN": r"^/legacy/product/(?P<pk>\\d+)/$", "KWARG": "pk", "FILTER": "products"},
        ],
        "REJECT": 404,   # default: raise Http404 (your 404 page); another status code; or a
                         # dotted path to a view ``reject(request, key, filter_name)``
    }

A rejected request never reaches its view: no query runs.  A request that passes and
still answers 404 is counted as an observed false positive of the filter when MODEL has no
row with that FIELD (one ``exists()`` query, on 404s only); the view's own 404 for a row
that exists (a product off sale) is not (``get_guard("products").stats()``; exported to
Prometheus when installed).

A filter its server lost (``FilterLostError``) lets requests through to their views, under
every policy, and is rebuilt from MODEL.FIELD (see ling_bloom.guard); ``manage.py check``
warns (``ling_bloom.W004``) of a stored filter whose geometry is not the settings'.

``python manage.py bloom_warmup products`` fills the filter from MODEL.FIELD (and saves it
to FILE); ``--incremental`` reads only the rows written since the last run (INCREMENTAL).
A filter that cannot be made (its backend down, a set-up mistake) never fails a request:
the guard's failure policy answers, or the route is served unguarded (logged); a save hook
that fails is logged and the write stands (``stale_filters()``).
``guard_for("products", cache="default")`` decorates a loader with the full flow (filter,
Django's cache with null caching, one loader call per key at a time).
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Type

try:
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.signals import setting_changed
    from django.http import Http404, HttpResponse
    from django.utils.module_loading import import_string
except ImportError as exc:  # name the extra, not the first missing dependency
    raise ImportError(f"ling_bloom.contrib.django needs Django: pip install 'ling_bloom[django]' "
                      f"({exc})", name=exc.name) from exc

import ling_bloom as lb
from ling_bloom._keys import as_key
from ling_bloom.guard import AsyncGuard, Guard, NULL, is_null  # noqa: F401

__all__ = [
    "BloomGuardMiddleware",
    "DjangoCache",
    "connect_model",
    "filter_settings",
    "get_filter",
    "get_guard",
    "guard_for",
    "model_fetch",
    "model_keys",
    "reset",
]

log = logging.getLogger("ling_bloom.django")

_lock = threading.RLock()
_filters: Dict[str, Any] = {}
_guards: Dict[str, Guard] = {}
_full_guards: Dict[str, List[Any]] = {}


# ---------------------------------------------------------------------- settings


def _config() -> Dict[str, Any]:
    conf = getattr(settings, "LING_BLOOM", None) or {}
    if not isinstance(conf, dict):
        raise ImproperlyConfigured("settings.LING_BLOOM must be a dict")
    return conf


def filter_settings(name: str) -> Dict[str, Any]:
    """The settings of filter ``name`` (LING_BLOOM["FILTERS"][name])."""
    filters = _config().get("FILTERS") or {}
    try:
        spec = filters[name]
    except KeyError:
        raise ImproperlyConfigured(
            f"LING_BLOOM['FILTERS'] has no filter named {name!r} "
            f"(it has: {', '.join(sorted(filters)) or 'none'})") from None
    if isinstance(spec, str):
        spec = {"FILTER": spec}
    if not isinstance(spec, dict):
        raise ImproperlyConfigured(f"LING_BLOOM['FILTERS'][{name!r}] must be a dict or a dotted path")
    if spec.get("FILE") and _test_database():
        # A test run (its database is Django's test database) never writes the deployed
        # FILE or its position: it serves and warms a file of its own.
        spec = dict(spec, FILE=spec.get("TEST_FILE") or os.fspath(spec["FILE"]) + ".test")
    return spec


def _test_database() -> bool:
    """Whether the default database is one Django's test runner made (``manage.py test``,
    a TestCase, pytest-django): its NAME is its TEST NAME setting, else the in-memory
    SQLite test database, else (other databases) the default test name, "test_" + NAME."""
    try:
        from django.db import DEFAULT_DB_ALIAS, connections

        if DEFAULT_DB_ALIAS not in settings.DATABASES:
            return False
        conn = connections[DEFAULT_DB_ALIAS]
        name = str(conn.settings_dict.get("NAME") or "")
        test_name = (conn.settings_dict.get("TEST") or {}).get("NAME")
        if not name:
            return False
        if test_name:
            return name == str(test_name)
        if conn.vendor == "sqlite":
            return name.startswith("file:memorydb_") or name == conn.creation._get_test_db_name()
        return name.startswith("test_")  # create_test_db has already renamed NAME
    except Exception:  # no database configured, a backend without a test name ...
        return False


def filter_file(name: str) -> Optional[str]:
    """The file filter ``name`` is served from and warmed into (None: it has no FILE).
    Under Django's test database it is the test run's own file: TEST_FILE, else FILE
    with ".test" appended."""
    path = filter_settings(name).get("FILE")
    return os.fspath(path) if path else None


_FILTER_CLASSES = ("MemoryFilter", "BlockedFilter", "CountingFilter", "ScalableFilter",
                   "RedisFilter", "RedisBlockedFilter", "RedisCountingFilter",
                   "RedisScalableFilter", "RedisBloomFilter")


def _filter_class(name: str, cls_name: Any) -> Any:
    """CLASS: a ling_bloom class name or a dotted path; a misspelt one is an
    ImproperlyConfigured naming the closest class."""
    if not isinstance(cls_name, str):
        return cls_name
    if "." in cls_name:
        try:
            return import_string(cls_name)
        except ImportError as e:
            raise ImproperlyConfigured(f"LING_BLOOM['FILTERS'][{name!r}]['CLASS']: cannot "
                                       f"import {cls_name!r} ({e})") from None
    cls = getattr(lb, cls_name, None)
    if cls is None and cls_name == "RedisFilter":
        cls = lb._core.RedisFilter
    if not isinstance(cls, type):
        import difflib

        known = [c for c in _FILTER_CLASSES if isinstance(getattr(lb, c, None), type)
                 or c == "RedisFilter"]
        close = difflib.get_close_matches(cls_name, known, n=1, cutoff=0.5)
        raise ImproperlyConfigured(
            f"LING_BLOOM['FILTERS'][{name!r}]['CLASS']: no filter class {cls_name!r} in "
            f"ling_bloom" + (f"; did you mean {close[0]!r}?" if close else
                             f" (it has: {', '.join(known)})"))
    return cls


def build_filter(name: str, *, fresh: bool = False) -> Any:
    """A new filter object for ``name`` from its settings: FILTER (dotted path), else FILE
    when it exists (unless ``fresh``), else CLASS(**OPTIONS)."""
    spec = filter_settings(name)
    if "FILTER" in spec:
        obj = import_string(spec["FILTER"]) if isinstance(spec["FILTER"], str) else spec["FILTER"]
        return obj() if callable(obj) and not hasattr(obj, "test") else obj
    path = spec.get("FILE")
    if path and not fresh:
        import os

        if os.path.exists(path):
            return lb.load(os.fspath(path))
    cls_name = spec.get("CLASS")
    if not cls_name:
        raise ImproperlyConfigured(
            f"LING_BLOOM['FILTERS'][{name!r}] needs FILTER (a dotted path) or CLASS and OPTIONS")
    cls = _filter_class(name, cls_name)
    args, options = tuple(spec.get("ARGS", ())), dict(spec.get("OPTIONS", {}))
    if getattr(cls, "__name__", "").startswith("Redis") and not args and "key" not in options:
        raise ImproperlyConfigured(
            f"LING_BLOOM['FILTERS'][{name!r}]: a {cls.__name__} needs its Redis key: "
            f"\"OPTIONS\": {{\"key\": \"bloom:{name}\", ...}}")
    return cls(*args, **options)


def get_filter(name: str) -> Any:
    """The process's filter ``name``, made at first use.  When making it fails on its
    backend (Redis down while a RedisFilter adopts the stored geometry), a stand-in is
    returned that tries again at its next use (at most every few seconds) and, until
    then, raises that error: the guard's ``on_filter_error`` policy answers lookups, and
    a save hook logs the missed add."""
    f = _filters.get(name)
    if f is None:
        with _lock:
            f = _filters.get(name)
            if f is None:
                try:
                    f = _live_filter(name)
                except _backend_errors(name) as e:
                    log.warning("ling_bloom filter %r could not be made (%s: %s); trying "
                                "again in %g s", name, type(e).__name__, e, _Unbuilt.retry)
                    f = _Unbuilt(name, e)
                _filters[name] = f
    return f


def _backend_errors(name: str) -> Tuple[Type[BaseException], ...]:
    from ling_bloom._breaker import _default_filter_errors

    errors = (filter_settings(name).get("GUARD_OPTIONS") or {}).get("filter_errors")
    return tuple(errors) if errors else _default_filter_errors()


class _Unbuilt:
    """Stands for filter ``name`` while making it fails on its backend: each use makes it
    again (at most every ``retry`` seconds; in between the last error is raised at once),
    and the first success takes its place everywhere."""

    retry = 5.0

    def __init__(self, name: str, error: BaseException):
        self.name = name
        self.error = error
        self.next_try = time.monotonic() + self.retry

    def _real(self) -> Any:
        with _lock:
            live = _filters.get(self.name)
            if live is not None and live is not self:
                return live
            if time.monotonic() < self.next_try:
                raise self.error
            try:
                f = _live_filter(self.name)
            except _backend_errors(self.name) as e:
                self.error, self.next_try = e, time.monotonic() + self.retry
                raise
            _filters[self.name] = f
            for g in [_guards.get(self.name), *_full_guards.get(self.name, ())]:
                if g is not None and g.filter is self:
                    g.filter = f
            log.info("ling_bloom filter %r is made", self.name)
            return f

    def test(self, key: Any) -> bool:
        return bool(self._real().test(key))

    def __contains__(self, key: Any) -> bool:
        return self.test(key)

    def add(self, key: Any) -> Any:
        return self._real().add(key)

    def update(self, keys: Any) -> Any:
        return self._real().update(keys)


def _live_filter(name: str) -> Any:
    # A FILE filter in a running process is a FileFilter: it reloads FILE (at most every
    # CHECK_EVERY seconds) when bloom_warmup, in another process, replaces it; before the
    # first warm-up it follows UNWARMED ("serve": every key passes, logged; "reject").
    spec = filter_settings(name)
    if "FILTER" not in spec and spec.get("FILE"):
        from ling_bloom.warmup import FileFilter

        unwarmed = spec.get("UNWARMED", "serve")
        if unwarmed not in ("serve", "reject"):
            raise ImproperlyConfigured(f"LING_BLOOM['FILTERS'][{name!r}]['UNWARMED'] must be "
                                       f"'serve' or 'reject', not {unwarmed!r} (manage.py "
                                       f"check: ling_bloom.E006)")
        return FileFilter(spec["FILE"], check_every=float(spec.get("CHECK_EVERY", 2.0)),
                          unwarmed=unwarmed, mapped=bool(spec.get("MAPPED", False)))
    return build_filter(name)


def get_guard(name: str) -> Guard:
    """The guard (counters, metrics, drift warning) the middleware uses for filter ``name``."""
    g = _guards.get(name)
    if g is None:
        with _lock:
            g = _guards.get(name)
            if g is None:
                spec = filter_settings(name)
                options = dict(spec.get("GUARD_OPTIONS", {}))
                options.setdefault("rebuild", _rebuild_for(name))
                g = _guards[name] = Guard(get_filter(name), name=name, **options)
    return g


def _rebuild_for(name: str) -> Optional[Callable[[Any], None]]:
    """How a guard of filter ``name`` builds it again when its server lost it
    (FilterLostError): reset() and the keys of MODEL.FIELD, in a thread; None without a
    MODEL, with REBUILD False, or for a FILE (a served file is never lost)."""
    spec = filter_settings(name)
    if not spec.get("MODEL") or spec.get("REBUILD", True) is False:
        return None
    if spec.get("FILE") and "FILTER" not in spec:
        return None

    def rebuild(flt: Any) -> None:
        from django.db import connections

        from ling_bloom.guard import refill

        try:
            refill(flt, model_keys(name))
        finally:
            connections.close_all()  # this thread's connections

    return rebuild


def reset() -> None:
    """Forget every filter and guard made from settings (the next use makes them again).
    Runs when a test changes LING_BLOOM (override_settings)."""
    with _lock:
        _filters.clear()
        _guards.clear()
        _full_guards.clear()
        _stale.clear()
        _missed.clear()


def _on_setting_changed(setting: str, **kwargs: Any) -> None:
    if setting == "LING_BLOOM":
        reset()


setting_changed.connect(_on_setting_changed, dispatch_uid="ling_bloom.contrib.django.reset")


def _key(name: str, value: Any) -> Any:
    prefix = filter_settings(name).get("PREFIX", "")
    k = as_key(value)
    if prefix:
        return prefix + (k if isinstance(k, str) else bytes(k).decode("utf-8", "surrogateescape"))
    return k


_NOT_A_VALUE = object()


def _url_value(name: str, value: Any) -> Any:
    """A URL kwarg as the model field would read it (``to_python``: "007" -> 7 for an
    integer primary key), so that a plain ``<pk>`` (str converter) route has the key the
    view would look up; _NOT_A_VALUE when the field refuses it (the view answers it)."""
    if not isinstance(value, str):
        return value  # a converter (<int:pk>) did it already
    spec = filter_settings(name)
    if "MODEL" not in spec:
        return value
    from django.core.exceptions import ValidationError

    try:
        model, field = _model(name)
        f = model._meta.pk if field == "pk" else model._meta.get_field(field)
    except Exception:
        return value
    try:
        return f.to_python(value)
    except ValidationError:
        return _NOT_A_VALUE


def _row_exists(name: str, value: Any) -> Optional[bool]:
    """Does MODEL have a row whose FIELD is ``value``?  None when the filter has no
    MODEL, or the query fails: a 404 the guard cannot attribute, not counted."""
    if "MODEL" not in filter_settings(name):
        return None
    try:
        model, field = _model(name)
        return bool(model._default_manager.filter(**{field: value}).exists())
    except Exception:
        return None


# ------------------------------------------------------------------------- cache


class DjangoCache:
    """The guard's cache protocol over Django's cache framework (``caches[alias]``, or a
    cache object).  ``asynchronous=True`` gives coroutine methods (aget/aset/adelete) for
    AsyncGuard.  The null marker pickles as a reference, so every backend returns it."""

    def __init__(self, alias: Any = "default", asynchronous: bool = False):
        if isinstance(alias, str):
            from django.core.cache import caches

            self.alias: Optional[str] = alias
            self._cache = None
            self._caches = caches
        else:
            self.alias = None
            self._cache = alias
        if asynchronous:
            self.get = self._aget  # type: ignore[method-assign,assignment]
            self.set = self._aset  # type: ignore[method-assign,assignment]
            self.delete = self._adelete  # type: ignore[method-assign,assignment]

    @property
    def cache(self) -> Any:
        # caches[alias] is per thread; look it up at each use.
        return self._cache if self._cache is not None else self._caches[self.alias]

    def get(self, key: str) -> Any:
        return self.cache.get(key)

    def set(self, key: str, value: Any, ttl: Optional[float] = None) -> None:
        self.cache.set(key, value, timeout=ttl)

    def delete(self, key: str) -> None:
        self.cache.delete(key)

    async def _aget(self, key: str) -> Any:
        return await self.cache.aget(key)

    async def _aset(self, key: str, value: Any, ttl: Optional[float] = None) -> None:
        await self.cache.aset(key, value, timeout=ttl)

    async def _adelete(self, key: str) -> None:
        await self.cache.adelete(key)


def _warn_local_cache(name: str, alias: str) -> None:
    backend = (getattr(settings, "CACHES", {}).get(alias) or {}).get("BACKEND", "")
    if backend.endswith(("LocMemCache", "DummyCache")):
        import warnings

        from ling_bloom.filefilter import UnsharedFilterWarning

        warnings.warn(
            f"guard_for({name!r}) caches in Django's {alias!r} cache, a "
            f"{backend.rsplit('.', 1)[-1]} of each process: a \"not found\" it caches in one "
            f"worker process is not dropped when another worker saves the row, which then "
            f"answers 404 there for null_ttl. Under several worker processes use a shared "
            f"cache (Redis, Memcached, the database cache)", UnsharedFilterWarning, stacklevel=4)


def guard_for(name: str, loader: Optional[Callable[..., Any]] = None, *,
              cache: Any = "default", **options: Any) -> Any:
    """A Guard (AsyncGuard for a coroutine loader) over the settings' filter ``name`` and
    Django's cache ``cache`` (an alias, a cache object, or None), keys prefixed with
    ``ling_bloom:<name>:``.  Use it as a decorator, ``@guard_for("products")``, or pass
    the loader.  The post_save hook tells it about new rows (it drops their null markers)."""
    import inspect

    def make(fn: Optional[Callable[..., Any]]) -> Any:
        is_async = fn is not None and inspect.iscoroutinefunction(fn)
        c: Any
        if cache is None or isinstance(cache, DjangoCache):
            c = cache
        elif isinstance(cache, str) or hasattr(cache, "get_many"):  # an alias, a Django cache
            c = DjangoCache(cache, asynchronous=is_async)
        else:  # any object with the guard's cache protocol (MemoryCache, RedisCache ...)
            c = cache
        if isinstance(c, DjangoCache) and c.alias is not None:
            _warn_local_cache(name, c.alias)
        options.setdefault("key_prefix", f"ling_bloom:{name}:")
        options.setdefault("name", name)
        options.setdefault("rebuild", _rebuild_for(name))  # (run in a thread)
        cls = AsyncGuard if is_async else Guard
        g = cls(get_filter(name), c, None, **options)
        with _lock:
            _full_guards.setdefault(name, []).append(g)
        return g(fn) if fn is not None else g

    if loader is not None:
        return make(loader)

    def decorate(fn: Callable[..., Any]) -> Any:
        return make(fn)

    return decorate


# --------------------------------------------------------------------- middleware


DEFAULT_METHODS = ("GET", "HEAD")


def _methods(value: Any, where: str) -> Optional[frozenset]:
    """METHODS: the HTTP methods guarded (default GET and HEAD: a PUT that creates the row,
    a CORS preflight's OPTIONS pass); "*" every method."""
    if value is None:
        return frozenset(DEFAULT_METHODS)
    if value == "*":
        return None
    if isinstance(value, str) or not all(isinstance(m, str) for m in value):
        raise ImproperlyConfigured(f"{where}: METHODS is a list of HTTP methods "
                                   f"(e.g. [\"GET\", \"HEAD\"]) or \"*\", not {value!r}")
    return frozenset(m.upper() for m in value)


class _Route:
    __slots__ = ("filter", "kwarg", "pattern", "methods")

    def __init__(self, filter_name: str, kwarg: Optional[str], pattern: Optional["re.Pattern[str]"],
                 methods: Optional[frozenset] = frozenset(DEFAULT_METHODS)):
        self.filter = filter_name
        self.kwarg = kwarg
        self.pattern = pattern
        self.methods = methods


def _routes() -> Tuple[Dict[str, _Route], List[_Route]]:
    by_name: Dict[str, _Route] = {}
    patterns: List[_Route] = []
    filters = _config().get("FILTERS") or {}
    default_methods = _methods(_config().get("METHODS"), "LING_BLOOM")
    for i, r in enumerate(_config().get("ROUTES") or ()):
        where = f"LING_BLOOM['ROUTES'][{i}]"
        if not isinstance(r, dict):
            raise ImproperlyConfigured(f"{where} must be a dict")
        fname = r.get("FILTER")
        if fname not in filters:
            raise ImproperlyConfigured(f"{where}: FILTER {fname!r} is not in LING_BLOOM['FILTERS']")
        kwarg = r.get("KWARG")
        methods = _methods(r["METHODS"], where) if "METHODS" in r else default_methods
        if "URL_NAME" in r:
            if not kwarg:
                raise ImproperlyConfigured(f"{where}: KWARG names the URL kwarg holding the key")
            names = r["URL_NAME"]
            for n in [names] if isinstance(names, str) else names:
                by_name[n] = _Route(str(fname), kwarg, None, methods)
        elif "PATTERN" in r:
            patterns.append(_Route(str(fname), kwarg, re.compile(r["PATTERN"]), methods))
        else:
            raise ImproperlyConfigured(f"{where} needs URL_NAME or PATTERN")
    return by_name, patterns


def url_names(urlconf: Any = None) -> Dict[str, List[Set[str]]]:
    """{"name" or "namespace:name": [the kwargs of each URL pattern of that name]}"""
    from django.urls import URLPattern, URLResolver, get_resolver

    out: Dict[str, List[Set[str]]] = {}

    def walk(patterns: Any, namespaces: List[str], inherited: Set[str]) -> None:
        for p in patterns:
            here = set(p.pattern.regex.groupindex) | inherited
            if isinstance(p, URLResolver):
                walk(p.url_patterns, namespaces + [p.namespace] if p.namespace else namespaces,
                     here | set(p.default_kwargs))
            elif isinstance(p, URLPattern) and p.name:
                out.setdefault(":".join(namespaces + [p.name]), []).append(
                    here | set(p.default_args))

    walk(get_resolver(urlconf).url_patterns, [], set())
    return out


def resolve_url_name(name: str, names: Any) -> List[str]:
    """The full URL names a route's URL_NAME stands for: itself when it is one; else, for a
    bare name, the namespaced ones ending in it (the route guards them only when there is
    exactly one: "detail" must not guard both products:detail and orders:detail)."""
    if name in names:
        return [name]
    if ":" in name:
        return []
    return sorted(n for n in names if n.rsplit(":", 1)[-1] == name)


_warned: Set[str] = set()


def _warn_once(what: str, message: str, *args: Any) -> None:
    if what not in _warned:
        _warned.add(what)
        log.error(message, *args)


class BloomGuardMiddleware:
    """Rejects requests whose URL carries a key the filter has never seen, before the
    view (and its queries) run.  Configured by settings.LING_BLOOM (see the module)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[Any], Any]):
        from django.apps import apps

        self.get_response = get_response
        self.by_name, self.patterns = _routes()
        reject = _config().get("REJECT", 404)
        if isinstance(reject, str):
            reject = import_string(reject)
        self.reject_with = reject
        self._full_names: Dict[Any, Dict[str, Optional[_Route]]] = {}
        if not apps.is_installed("ling_bloom.contrib.django_app"):
            _warn_once("app", 'ling_bloom: "ling_bloom.contrib.django_app" is not in '
                       "INSTALLED_APPS: saved rows are not added to the filters (no post_save "
                       "hooks; they answer 404 until a warm-up), there is no bloom_warmup "
                       "command and manage.py check does not check LING_BLOOM")

    def __call__(self, request: Any) -> Any:
        response = self.get_response(request)
        passed = getattr(request, "_ling_bloom_passed", None)
        if passed is not None:
            status = response.status_code
            if status != 404:
                passed[0].record(None if status >= 500 else True, passed[1])
            else:  # a false positive only when the row is missing, not the view's own 404
                there = _row_exists(passed[2], passed[3])
                if there is not None:
                    passed[0].record(there, passed[1])
        return response

    def _by_view_name(self, request: Any, match: Any) -> Optional[_Route]:
        """The route of a resolved URL: by its full name ("products:detail"), or by a bare
        URL_NAME that names this URL alone in the URLconf."""
        urlconf = getattr(request, "urlconf", None)
        table = self._full_names.get(urlconf)
        if table is None:
            table = {}
            try:
                names = url_names(urlconf)
            except Exception:
                names = {}
            for n, route in self.by_name.items():
                full = resolve_url_name(n, names)
                if len(full) == 1:
                    table.setdefault(full[0], route)
                elif len(full) > 1:
                    _warn_once(f"ambiguous:{n}", "ling_bloom: URL_NAME %r names several URLs "
                               "(%s): it guards none of them; name the one meant", n,
                               ", ".join(full))
            for n, route in self.by_name.items():  # an exact full name wins
                if n in names:
                    table[n] = route
            self._full_names[urlconf] = table
        return table.get(match.view_name)

    def _route(self, request: Any, view_kwargs: Dict[str, Any]) -> Optional[Tuple[_Route, Any]]:
        match = getattr(request, "resolver_match", None)
        if match is not None and self.by_name:
            route = self._by_view_name(request, match)
            if route is not None and route.kwarg in view_kwargs:
                return route, view_kwargs[route.kwarg]
        for route in self.patterns:
            m = route.pattern.search(request.path_info)  # type: ignore[union-attr]
            if m is not None:
                value = m.group(route.kwarg) if route.kwarg else m.group(1)
                if value is not None:
                    return route, value
        return None

    def process_view(self, request: Any, view_func: Any, view_args: Any, view_kwargs: Dict[str, Any]) -> Any:
        found = self._route(request, view_kwargs)
        if found is None:
            return None
        route, value = found
        if route.methods is not None and request.method not in route.methods:
            return None  # PUT that creates the row, a CORS preflight, ...: not guarded
        try:
            guard = get_guard(route.filter)
            if getattr(guard.filter, "warmed", True) is False and guard.filter.unwarmed == "serve":
                return None  # no FILE yet (logged once): unguarded, and not evidence for the stats
            value = _url_value(route.filter, value)
            if value is _NOT_A_VALUE:
                return None  # not a value of the field: the view answers it, as without a guard
            key = _key(route.filter, value)
        except ImproperlyConfigured as e:
            # a set-up mistake (manage.py check reports it): serve unguarded, never a 500
            _warn_once(f"conf:{route.filter}", "ling_bloom filter %r is not set up (%s): its "
                       "routes are served unguarded", route.filter, e)
            return None
        if guard.check(key):
            request._ling_bloom_passed = (guard, key, route.filter, value)
            return None
        if key in _missed.get(route.filter, ()):
            return None  # a saved row whose add failed: the filter does not know it yet
        return self.reject(request, key, route.filter)

    def reject(self, request: Any, key: Any, filter_name: str) -> Any:
        r = self.reject_with
        if r is None or r == 404:
            raise Http404("not found")
        if isinstance(r, int):
            return HttpResponse(status=r)
        return r(request, key, filter_name)


# ------------------------------------------------------------------ model helpers


def _model(name: str) -> Tuple[Any, str]:
    from django.apps import apps

    spec = filter_settings(name)
    if "MODEL" not in spec:
        raise ImproperlyConfigured(f"LING_BLOOM['FILTERS'][{name!r}] has no MODEL")
    model = spec["MODEL"]
    if isinstance(model, str):
        model = apps.get_model(model)
    return model, spec.get("FIELD", "pk")


def model_keys(name: str, chunk_size: int = 10_000) -> Any:
    """An iterator over the keys of filter ``name``'s MODEL.FIELD (PREFIX applied),
    streamed from the database (``QuerySet.iterator``)."""
    model, field = _model(name)
    qs = model._default_manager.order_by("pk").values_list(field, flat=True)
    prefix = filter_settings(name).get("PREFIX", "")
    it = qs.iterator(chunk_size=chunk_size)
    return (prefix + str(v) for v in it) if prefix else it


def incremental_settings(name: str) -> Dict[str, Any]:
    """How ``bloom_warmup --incremental`` finds the rows of filter ``name`` it has not
    read (INCREMENTAL): {"SINCE": a column every write sets (a DateTimeField with
    auto_now), "LAG": seconds re-read behind the newest value seen (default 300)}, or by
    primary key {"OVERLAP": ids re-read behind the highest one seen (default 1000)}."""
    inc = filter_settings(name).get("INCREMENTAL") or {}
    if not isinstance(inc, dict):
        raise ImproperlyConfigured(f"LING_BLOOM['FILTERS'][{name!r}]['INCREMENTAL'] must be a dict")
    unknown = set(inc) - {"SINCE", "LAG", "OVERLAP"}
    if unknown:
        raise ImproperlyConfigured(f"LING_BLOOM['FILTERS'][{name!r}]['INCREMENTAL']: unknown "
                                   f"{', '.join(sorted(unknown))} (SINCE, LAG, OVERLAP)")
    lag, overlap = float(inc.get("LAG", 300)), int(inc.get("OVERLAP", 1000))
    out: Dict[str, Any] = {"SINCE": inc.get("SINCE"), "LAG": lag, "OVERLAP": overlap}
    if lag < 0 or overlap < 0:
        raise ImproperlyConfigured(f"LING_BLOOM['FILTERS'][{name!r}]['INCREMENTAL']: LAG and "
                                   f"OVERLAP are >= 0")
    return out


def model_position(name: str) -> Any:
    """The incremental position of filter ``name``'s table now: the newest SINCE value
    (INCREMENTAL SINCE), else the highest primary key; None for an empty table."""
    from django.db.models import Max

    model, _ = _model(name)
    column = incremental_settings(name)["SINCE"] or "pk"
    return model._default_manager.aggregate(m=Max(column))["m"]


def model_fetch(name: str, since: Any = None) -> Callable[[Any, int], List[Tuple[Any, Any]]]:
    """fetch(after, limit) for ``ling_bloom.warmup.sync``: (pk, key) rows with pk > after,
    in pk order; with ``since``, only rows whose INCREMENTAL SINCE column is >= since."""
    model, field = _model(name)
    prefix = filter_settings(name).get("PREFIX", "")
    column = incremental_settings(name)["SINCE"]

    def fetch(after: Any, limit: int) -> List[Tuple[Any, Any]]:
        qs = model._default_manager.order_by("pk")
        if since is not None:
            qs = qs.filter(**{f"{column}__gte": since})
        if after is not None:
            qs = qs.filter(pk__gt=after)
        rows = list(qs.values_list("pk", field)[:limit])
        return [(pk, prefix + str(v)) for pk, v in rows] if prefix else rows

    return fetch


def _field_attname(model: Any, field: str) -> str:
    """The attribute of an instance that holds FIELD's value as the database has it: the
    column (``category_id``) of a ForeignKey, as the warm-up reads it, not the related
    object (whose str() is "Category object (2)")."""
    if field == "pk":
        return model._meta.pk.attname
    try:
        return model._meta.get_field(field).attname
    except Exception:
        return field


# Keys a save hook could not add (the filter's backend failed): this process still lets
# them pass, and adds them with the next add that succeeds.  Bounded; the filter is
# "stale" (stale_filters()) until a warm-up or that add.
_MISSED_MAX = 10_000
_missed: Dict[str, Set[Any]] = {}
_stale: Dict[str, float] = {}


def stale_filters() -> Dict[str, float]:
    """{filter name: time.time() of the first add a save hook could not make} for the
    filters of this process that lack keys of rows saved since (their backend failed).
    The hook's next add that succeeds (it adds the missed keys too), or a warm-up run in
    this process, clears it; a warm-up run elsewhere brings the keys back to the filter
    but this process learns it only at its next successful add."""
    with _lock:
        return dict(_stale)


def _mark_stale(name: str, key: Any, error: BaseException) -> None:
    with _lock:
        first = name not in _stale
        _stale.setdefault(name, time.time())
        missed = _missed.setdefault(name, set())
        if len(missed) < _MISSED_MAX:
            missed.add(key)
    (log.error if first else log.warning)(
        "ling_bloom filter %r: the key of a saved row could not be added (%s: %s); the row "
        "is saved; the filter lacks it until this process's next add succeeds or "
        "bloom_warmup runs",
        name, type(error).__name__, error)


def _clear_stale(name: str) -> None:
    with _lock:
        _stale.pop(name, None)
        _missed.pop(name, None)


def _add_key(name: str, key: Any) -> None:
    """Add a saved row's key (and any the hook missed before) to the filter, through the
    guard: a lost filter (or, under "open", a stored geometry that is not the code's) does
    not fail the save; it is logged, counted and handed to the rebuild."""
    guard = get_guard(name)
    missed = _missed.get(name)
    if missed:
        with _lock:
            todo = list(_missed.get(name, ()))
        for k in [key, *todo]:
            guard.add(k)
        with _lock:
            rest = _missed.get(name, set()).difference(todo)
            if rest:
                _missed[name] = rest
            else:
                _clear_stale(name)
        return
    guard.add(key)


def _drop_cached(name: str, key: Any) -> None:
    """Drop what every guard_for() guard of ``name`` caches for key (a null marker, a
    value), sync and async guards alike."""
    for g in list(_full_guards.get(name, ())):
        try:
            if isinstance(g, Guard):
                g.invalidate(key)
            else:
                _drop_async(g, key)
        except Exception as e:  # a cache that is down must not fail the write
            log.warning("ling_bloom filter %r: dropping the cached value of key %r failed "
                        "(%s: %s)", name, key, type(e).__name__, e)


def _drop_async(g: Any, key: Any) -> None:
    """An AsyncGuard's cache entry, dropped from a (sync) signal handler."""
    import asyncio
    import inspect

    cache, ck = g.cache, g.cache_key(key)
    if isinstance(cache, DjangoCache):
        cache.cache.delete(ck)  # Django's caches have both APIs
        return
    result = cache.delete(ck)
    if inspect.isawaitable(result):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(_awaited(result))
        else:  # a handler run on the event loop's thread (a sync save in an async view)
            loop.create_task(_awaited(result))


async def _awaited(aw: Any) -> Any:
    return await aw


def connect_model(name: str, model: Any = None, field: Optional[str] = None) -> Callable[..., None]:
    """Connect a post_save hook: every saved row of ``model`` has its key added to filter
    ``name``, and any value or null marker a guard_for() guard (sync or async) cached for
    it dropped -- at once and again when the transaction commits (a lookup made before
    the commit cannot cache "absent" for the new row); and a post_delete hook: a deleted
    row's key is reported to the guards (``Guard.deleted``: removed from a CountingFilter,
    else remembered, so its lookups are not counted as false positives) and its cached
    value dropped.  A hook whose filter or cache fails logs it and lets the write stand
    (the filter is then stale: ``stale_filters()``).  Defaults come from the filter's
    MODEL / FIELD settings; a ForeignKey FIELD's key is the related id.  The app config
    calls it for every filter with a MODEL (unless SIGNALS is False)."""
    from django.db import transaction
    from django.db.models.signals import post_delete, post_save

    if model is None or field is None:
        m, f = _model(name)
        model = model or m
        field = field or f
    if isinstance(model, str):
        from django.apps import apps

        model = apps.get_model(model)
    attname = _field_attname(model, str(field))

    def on_save(sender: Any, instance: Any, raw: bool = False, using: Optional[str] = None,
                **kwargs: Any) -> None:
        # raw: loaddata's rows (their key column is set; related rows may not be yet)
        value = getattr(instance, attname, None)
        if value is None:
            return
        try:
            key = _key(name, value)
        except Exception as e:  # noqa: BLE001 - a hook never fails the write
            log.error("ling_bloom filter %r: no key for %r (%s: %s)", name, value,
                      type(e).__name__, e)
            return
        try:
            _add_key(name, key)
        except Exception as e:  # noqa: BLE001 - the row is saved: the write stands
            _mark_stale(name, key, e)
        _drop_cached(name, key)
        try:
            # on_commit runs it at once outside a transaction
            transaction.on_commit(lambda: _drop_cached(name, key), using=using)
        except Exception as e:  # noqa: BLE001
            log.warning("ling_bloom filter %r: %s", name, e)

    def on_delete(sender: Any, instance: Any, using: Optional[str] = None, **kwargs: Any) -> None:
        # a deleted row's later lookups are deletes, not false positives (Guard.deleted:
        # removed from a CountingFilter, else remembered for a while)
        value = getattr(instance, attname, None)
        if value is None:
            return
        try:
            key = _key(name, value)
            main = get_guard(name)
            main.deleted(key)
            for g in list(_full_guards.get(name, ())):
                if g.filter is not main.filter or not hasattr(g.filter, "remove"):
                    g.deleted(key)
        except Exception as e:  # noqa: BLE001 - the row is deleted: the write stands
            log.error("ling_bloom filter %r: reporting a deleted row failed (%s: %s)",
                      name, type(e).__name__, e)
            return
        _drop_cached(name, key)
        try:
            transaction.on_commit(lambda: _drop_cached(name, key), using=using)
        except Exception as e:  # noqa: BLE001
            log.warning("ling_bloom filter %r: %s", name, e)

    on_save.__doc__ = f"post_save hook of ling_bloom filter {name!r}"
    post_save.connect(on_save, sender=model, weak=False,
                      dispatch_uid=f"ling_bloom:{name}:{model._meta.label}:{field}")
    post_delete.connect(on_delete, sender=model, weak=False,
                        dispatch_uid=f"ling_bloom:{name}:{model._meta.label}:{field}:delete")
    return on_save


def connect_signals() -> None:
    """post_save hooks for every filter with a MODEL and SIGNALS not False, and the note
    after ``migrate`` (post_migrate) that rows migrations wrote are not in the filters."""
    from django.db.models.signals import post_migrate

    for name, spec in (_config().get("FILTERS") or {}).items():
        if isinstance(spec, dict) and spec.get("MODEL") and spec.get("SIGNALS", True):
            connect_model(name)
    post_migrate.connect(after_migrate, dispatch_uid="ling_bloom.contrib.django.after_migrate")


def after_migrate(sender: Any = None, app_config: Any = None, verbosity: int = 1,
                  plan: Any = None, **kwargs: Any) -> List[str]:
    """post_migrate: a data migration (RunPython, bulk_create, SQL) writes rows no save
    hook sees (a migration's historical models send their signals to themselves): say so,
    for each filter whose MODEL is in an app whose migrations just ran.  Returns the lines."""
    lines: List[str] = []
    if app_config is None or not plan:
        return lines
    labels = {m.app_label for m, backwards in plan if not backwards}
    if app_config.label not in labels:
        return lines
    for name, spec in (_config().get("FILTERS") or {}).items():
        model = spec.get("MODEL") if isinstance(spec, dict) else None
        label = model.split(".")[0] if isinstance(model, str) else \
            getattr(getattr(model, "_meta", None), "app_label", None)
        if label == app_config.label:
            lines.append(f"ling_bloom: migrations of {label!r} ran: rows they wrote are not in "
                         f"filter {name!r} until `manage.py bloom_warmup {name}` (or its "
                         f"--incremental) runs")
    for line in lines:
        log.info("%s", line)
        if verbosity >= 1 and kwargs.get("stdout") is not None:
            kwargs["stdout"].write(line)
    return lines
