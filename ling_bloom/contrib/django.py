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
            },
        },
        "ROUTES": [
            # the URL name (or "namespace:name") and the URL kwarg carrying the key
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

``python manage.py bloom_warmup products`` fills the filter from MODEL.FIELD (and saves it
to FILE); ``--incremental`` reads only rows newer than the last run's.
``guard_for("products", cache="default")`` decorates a loader with the full flow (filter,
Django's cache with null caching, one loader call per key at a time).
"""
from __future__ import annotations

import re
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

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
    return spec


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
    cls = getattr(lb, cls_name, None) if "." not in cls_name else import_string(cls_name)
    if cls is None and cls_name == "RedisFilter":
        cls = lb._core.RedisFilter
    if cls is None:
        raise ImproperlyConfigured(f"no filter class {cls_name!r} in ling_bloom")
    return cls(*spec.get("ARGS", ()), **spec.get("OPTIONS", {}))


def get_filter(name: str) -> Any:
    """The process's filter ``name``, made at first use."""
    f = _filters.get(name)
    if f is None:
        with _lock:
            f = _filters.get(name)
            if f is None:
                f = _filters[name] = _live_filter(name)
    return f


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
                                       f"'serve' or 'reject', not {unwarmed!r}")
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
                g = _guards[name] = Guard(get_filter(name), name=name,
                                          **spec.get("GUARD_OPTIONS", {}))
    return g


def reset() -> None:
    """Forget every filter and guard made from settings (the next use makes them again).
    Runs when a test changes LING_BLOOM (override_settings)."""
    with _lock:
        _filters.clear()
        _guards.clear()
        _full_guards.clear()


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
        options.setdefault("key_prefix", f"ling_bloom:{name}:")
        options.setdefault("name", name)
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


class _Route:
    __slots__ = ("filter", "kwarg", "pattern")

    def __init__(self, filter_name: str, kwarg: Optional[str], pattern: Optional["re.Pattern[str]"]):
        self.filter = filter_name
        self.kwarg = kwarg
        self.pattern = pattern


def _routes() -> Tuple[Dict[str, _Route], List[_Route]]:
    by_name: Dict[str, _Route] = {}
    patterns: List[_Route] = []
    filters = _config().get("FILTERS") or {}
    for i, r in enumerate(_config().get("ROUTES") or ()):
        where = f"LING_BLOOM['ROUTES'][{i}]"
        if not isinstance(r, dict):
            raise ImproperlyConfigured(f"{where} must be a dict")
        fname = r.get("FILTER")
        if fname not in filters:
            raise ImproperlyConfigured(f"{where}: FILTER {fname!r} is not in LING_BLOOM['FILTERS']")
        kwarg = r.get("KWARG")
        if "URL_NAME" in r:
            if not kwarg:
                raise ImproperlyConfigured(f"{where}: KWARG names the URL kwarg holding the key")
            names = r["URL_NAME"]
            for n in [names] if isinstance(names, str) else names:
                by_name[n] = _Route(str(fname), kwarg, None)
        elif "PATTERN" in r:
            patterns.append(_Route(str(fname), kwarg, re.compile(r["PATTERN"])))
        else:
            raise ImproperlyConfigured(f"{where} needs URL_NAME or PATTERN")
    return by_name, patterns


class BloomGuardMiddleware:
    """Rejects requests whose URL carries a key the filter has never seen, before the
    view (and its queries) run.  Configured by settings.LING_BLOOM (see the module)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[Any], Any]):
        self.get_response = get_response
        self.by_name, self.patterns = _routes()
        reject = _config().get("REJECT", 404)
        if isinstance(reject, str):
            reject = import_string(reject)
        self.reject_with = reject

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

    def _route(self, request: Any, view_kwargs: Dict[str, Any]) -> Optional[Tuple[_Route, Any]]:
        match = getattr(request, "resolver_match", None)
        if match is not None and self.by_name:
            route = self.by_name.get(match.view_name) or self.by_name.get(match.url_name or "")
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
        guard = get_guard(route.filter)
        if getattr(guard.filter, "warmed", True) is False and guard.filter.unwarmed == "serve":
            return None  # no FILE yet (logged once): unguarded, and not evidence for the stats
        value = _url_value(route.filter, value)
        if value is _NOT_A_VALUE:
            return None  # not a value of the field: the view answers it, as without a guard
        key = _key(route.filter, value)
        if guard.check(key):
            request._ling_bloom_passed = (guard, key, route.filter, value)
            return None
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


def model_fetch(name: str) -> Callable[[Any, int], List[Tuple[Any, Any]]]:
    """fetch(after, limit) for ``ling_bloom.warmup.sync``: (pk, key) rows with pk > after."""
    model, field = _model(name)
    prefix = filter_settings(name).get("PREFIX", "")

    def fetch(after: Any, limit: int) -> List[Tuple[Any, Any]]:
        qs = model._default_manager.order_by("pk")
        if after is not None:
            qs = qs.filter(pk__gt=after)
        rows = list(qs.values_list("pk", field)[:limit])
        return [(pk, prefix + str(v)) for pk, v in rows] if prefix else rows

    return fetch


def connect_model(name: str, model: Any = None, field: Optional[str] = None) -> Callable[..., None]:
    """Connect a post_save hook: every saved row of ``model`` has its key added to filter
    ``name`` (and any null marker a guard_for() guard cached for it dropped); and a
    post_delete hook: a deleted row's key is reported to the guards (``Guard.deleted``:
    removed from a CountingFilter, else remembered, so its lookups are not counted as
    false positives) and its cached value dropped.  Defaults
    come from the filter's MODEL / FIELD settings.  The app config calls it for every
    filter with a MODEL (unless SIGNALS is False)."""
    from django.db.models.signals import post_delete, post_save

    if model is None or field is None:
        m, f = _model(name)
        model = model or m
        field = field or f
    if isinstance(model, str):
        from django.apps import apps

        model = apps.get_model(model)

    def on_save(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
        if raw:  # loaddata: fixtures are added by the warm-up
            return
        value = instance.pk if field == "pk" else getattr(instance, str(field))
        if value is None:
            return
        key = _key(name, value)
        get_filter(name).add(key)
        for g in list(_full_guards.get(name, ())):
            if isinstance(g, Guard):
                g.invalidate(key)
            # AsyncGuard caches are dropped by its own add(); a sync signal cannot await

    def on_delete(sender: Any, instance: Any, **kwargs: Any) -> None:
        # a deleted row's later lookups are deletes, not false positives (Guard.deleted:
        # removed from a CountingFilter, else remembered for a while)
        value = instance.pk if field == "pk" else getattr(instance, str(field), None)
        if value is None:
            return
        key = _key(name, value)
        get_guard(name).deleted(key)
        for g in list(_full_guards.get(name, ())):
            if g.filter is not get_guard(name).filter or not hasattr(g.filter, "remove"):
                g.deleted(key)
            if isinstance(g, Guard):
                g.invalidate(key)

    post_save.connect(on_save, sender=model, weak=False,
                      dispatch_uid=f"ling_bloom:{name}:{model._meta.label}:{field}")
    post_delete.connect(on_delete, sender=model, weak=False,
                        dispatch_uid=f"ling_bloom:{name}:{model._meta.label}:{field}:delete")
    return on_save


def connect_signals() -> None:
    """post_save hooks for every filter with a MODEL and SIGNALS not False."""
    for name, spec in (_config().get("FILTERS") or {}).items():
        if isinstance(spec, dict) and spec.get("MODEL") and spec.get("SIGNALS", True):
            connect_model(name)
