"""Django: BloomGuardMiddleware, which rejects requests for keys the filter has never
seen before their view runs (ROUTES: URL names or patterns, METHODS), and the URL name
look-ups its checks use.  Public through ``ling_bloom.contrib.django``."""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from django.core.exceptions import ImproperlyConfigured
from django.http import Http404, HttpResponse
from django.utils.module_loading import import_string

from ._django_guards import (_NOT_A_VALUE, _config, _key, _missed, _row_exists, _url_value,
                             get_guard, log)


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
