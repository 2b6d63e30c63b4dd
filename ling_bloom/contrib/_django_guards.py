"""Django: the filters and guards made from the settings (LING_BLOOM), Django's cache
for a guard (DjangoCache, guard_for), the model a filter's keys come from, and the state
the save hooks share with the middleware (the keys a failed add missed).  Public through
``ling_bloom.contrib.django``."""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Type

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

import ling_bloom as lb
from ling_bloom._keys import as_key
from ling_bloom.guard import AsyncGuard, Guard

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


# Keys a save hook could not add (the filter's backend failed): this process still lets
# them pass, and adds them with the next add that succeeds.  Bounded; the filter is
# "stale" (stale_filters()) until a warm-up or that add.
_MISSED_MAX = 10_000
_missed: Dict[str, Set[Any]] = {}
_stale: Dict[str, float] = {}
