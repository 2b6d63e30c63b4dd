"""Django system checks for settings.LING_BLOOM (``manage.py check``): a typo in a route's
URL_NAME or KWARG, or a FILE in a directory that does not exist, would otherwise turn a
guard off (or keep it unwarmed) without a word.

ling_bloom.E001  LING_BLOOM is malformed (what the middleware would raise at start-up)
ling_bloom.E002  a route's URL_NAME is not the name of any URL pattern, or a bare name that
                 several namespaced URLs have (the hint names the closest names)
ling_bloom.E003  a route's KWARG is not a keyword argument of that URL pattern
ling_bloom.E004  a PATTERN route's KWARG is not a named group of its regular expression
ling_bloom.E005  a key LING_BLOOM does not know ("ROUTE" for "ROUTES"): it is ignored
ling_bloom.E006  a filter's UNWARMED is neither "serve" nor "reject"
ling_bloom.E007  a filter's CLASS is not a filter class, or a Redis filter has no key
ling_bloom.W001  a filter's FILE is in a directory that does not exist (the warm-up cannot
                 save it; the filter stays unwarmed)
ling_bloom.W002  a filter lives in each process's memory (CLASS or FILTER): a worker's adds
                 are not seen by the others
ling_bloom.W003  LING_BLOOM has ROUTES but the middleware is not in MIDDLEWARE (nothing is
                 guarded)
ling_bloom.W004  the stored filter's geometry is not the settings' (GeometryMismatchError:
                 the capacity or error rate changed); the filter is asked one test
"""
from __future__ import annotations

import difflib
import os
import re
from typing import Any, Dict, List, Set

from django.core import checks
from django.core.exceptions import ImproperlyConfigured


def _url_kwargs_by_name() -> Dict[str, List[Set[str]]]:
    """{"name" or "namespace:name": [the kwargs of each pattern of that name]}"""
    from ling_bloom.contrib.django import url_names

    return url_names()


_IN_MEMORY = ("MemoryFilter", "BlockedFilter", "CountingFilter", "ScalableFilter",
              "ling_bloom.MemoryFilter", "ling_bloom.BlockedFilter",
              "ling_bloom.CountingFilter", "ling_bloom.ScalableFilter")

_TOP_KEYS = ("FILTERS", "ROUTES", "REJECT", "METHODS")
_FILTER_KEYS = ("CLASS", "OPTIONS", "ARGS", "FILE", "TEST_FILE", "CHECK_EVERY", "UNWARMED",
                "MAPPED", "FILTER", "MODEL", "FIELD", "PREFIX", "SIGNALS", "GUARD_OPTIONS",
                "INCREMENTAL")
_ROUTE_KEYS = ("URL_NAME", "PATTERN", "KWARG", "FILTER", "METHODS")
_MIDDLEWARE = "ling_bloom.contrib.django.BloomGuardMiddleware"


def _unknown(keys: Any, known: Any, where: str) -> List[checks.CheckMessage]:
    out = []
    for k in keys:
        if k not in known:
            close = difflib.get_close_matches(str(k), known, n=1, cutoff=0.6)
            out.append(checks.Error(
                f"{where}: unknown key {k!r}: it is ignored",
                hint=f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}",
                id="ling_bloom.E005"))
    return out


def _in_memory_target(spec: Dict[str, Any]) -> Any:
    """The in-memory filter a FILTER dotted path names (an object, not a factory: a
    factory is not called here), else None."""
    target = spec.get("FILTER")
    try:
        if isinstance(target, str):
            from django.utils.module_loading import import_string

            target = import_string(target)
    except Exception:
        return None
    from ling_bloom.filefilter import shares_adds

    if hasattr(target, "test") and not isinstance(target, type) and not shares_adds(target):
        return target
    return None


def _filter_messages(lbd: Any, name: str, spec: Dict[str, Any]) -> List[checks.CheckMessage]:
    errors: List[checks.CheckMessage] = []
    where = f"LING_BLOOM['FILTERS'][{name!r}]"
    errors += _unknown(spec, _FILTER_KEYS, where)
    unwarmed = spec.get("UNWARMED", "serve")
    if unwarmed not in ("serve", "reject"):
        errors.append(checks.Error(
            f"{where}['UNWARMED'] is {unwarmed!r}: the filter's routes are served unguarded",
            hint='"serve" (no FILE yet: every key passes) or "reject"', id="ling_bloom.E006"))
    if "FILTER" not in spec and spec.get("CLASS"):
        try:
            cls = lbd._filter_class(name, spec["CLASS"])
        except ImproperlyConfigured as e:
            errors.append(checks.Error(str(e), hint="a ling_bloom filter class name, or a "
                                       "dotted path to one", id="ling_bloom.E007"))
        else:
            options = spec.get("OPTIONS") or {}
            if (getattr(cls, "__name__", "").startswith("Redis") and not spec.get("ARGS")
                    and "key" not in options):
                errors.append(checks.Error(
                    f"{where}: a {cls.__name__} has no Redis key: its routes are served "
                    f"unguarded", hint=f'"OPTIONS": {{"key": "bloom:{name}", ...}}',
                    id="ling_bloom.E007"))
    path = spec.get("FILE")
    kind = None
    if not path and "FILTER" not in spec and spec.get("CLASS") in _IN_MEMORY:
        kind = spec["CLASS"].rsplit(".", 1)[-1]
    elif "FILTER" in spec:
        target = _in_memory_target(spec)
        kind = type(target).__name__ if target is not None else None
    if kind:
        from ling_bloom.filefilter import unshared_message

        errors.append(checks.Warning(
            unshared_message(name, kind, "a FILE"),
            hint="give the filter a FILE (each worker then serves it and sees every "
                 "worker's adds), or CLASS RedisFilter",
            id="ling_bloom.W002"))
    if path and "FILTER" not in spec:
        folder = os.path.dirname(os.path.abspath(os.fspath(path)))
        if not os.path.isdir(folder):
            errors.append(checks.Warning(
                f"{where}['FILE'] is in {folder}, which does not "
                f"exist: bloom_warmup cannot save it and the filter stays unwarmed",
                id="ling_bloom.W001"))
    return errors


@checks.register(checks.Tags.urls)
def check_ling_bloom(app_configs: Any = None, **kwargs: Any) -> List[checks.CheckMessage]:
    from django.conf import settings

    from ling_bloom.contrib import django as lbd

    errors: List[checks.CheckMessage] = []
    try:
        conf = lbd._config()
    except ImproperlyConfigured as e:
        return [checks.Error(str(e), id="ling_bloom.E001")]
    if not conf:
        return []
    errors += _unknown(conf, _TOP_KEYS, "LING_BLOOM")
    if conf.get("ROUTES") and _MIDDLEWARE not in (getattr(settings, "MIDDLEWARE", None) or ()):
        errors.append(checks.Warning(
            "LING_BLOOM has ROUTES but its middleware is not in MIDDLEWARE: nothing is guarded",
            hint=f'add "{_MIDDLEWARE}" to MIDDLEWARE', id="ling_bloom.W003"))
    for i, r in enumerate(conf.get("ROUTES") or ()):
        if isinstance(r, dict):
            errors += _unknown(r, _ROUTE_KEYS, f"LING_BLOOM['ROUTES'][{i}]")
    try:
        lbd._routes()
    except ImproperlyConfigured as e:
        return errors + [checks.Error(str(e), id="ling_bloom.E001")]
    for name in conf.get("FILTERS") or {}:
        try:
            spec = lbd.filter_settings(name)
        except ImproperlyConfigured as e:
            errors.append(checks.Error(str(e), id="ling_bloom.E001"))
            continue
        errors += _filter_messages(lbd, name, spec)
    errors.extend(_geometry_checks(conf))
    try:
        urls = _url_kwargs_by_name()
    except Exception:  # a broken URLconf is reported by Django's own checks
        return errors
    for i, r in enumerate(conf.get("ROUTES") or ()):
        where = f"LING_BLOOM['ROUTES'][{i}]"
        if "URL_NAME" in r:
            names = [r["URL_NAME"]] if isinstance(r["URL_NAME"], str) else list(r["URL_NAME"])
            for n in names:
                full = lbd.resolve_url_name(n, urls)
                if len(full) > 1:
                    errors.append(checks.Error(
                        f"{where}: URL_NAME {n!r} names several URLs ({', '.join(full)}): "
                        f"this route guards none of them", hint=f"name the one meant: "
                        f"{' or '.join(repr(f) for f in full)}", id="ling_bloom.E002"))
                    continue
                if not full:
                    close = difflib.get_close_matches(n, list(urls), n=3, cutoff=0.6)
                    errors.append(checks.Error(
                        f"{where}: URL_NAME {n!r} is not the name of any URL pattern: this "
                        f"route is never guarded",
                        hint=f"did you mean {' or '.join(repr(c) for c in close)}?" if close
                        else f"{len(urls)} URL names, none close to it",
                        id="ling_bloom.E002"))
                    continue
                for kw in urls[full[0]]:
                    if r.get("KWARG") not in kw:
                        errors.append(checks.Error(
                            f"{where}: KWARG {r.get('KWARG')!r} is not a keyword argument of "
                            f"the URL {full[0]!r}: this route is never guarded",
                            hint=f"its kwargs: {', '.join(sorted(kw)) or 'none'}",
                            id="ling_bloom.E003"))
                        break
        elif "PATTERN" in r and r.get("KWARG"):
            groups = re.compile(r["PATTERN"]).groupindex
            if r["KWARG"] not in groups:
                errors.append(checks.Error(
                    f"{where}: KWARG {r['KWARG']!r} is not a named group of PATTERN "
                    f"{r['PATTERN']!r}", id="ling_bloom.E004"))
    return errors


def _geometry_checks(conf: Dict[str, Any]) -> List[checks.CheckMessage]:
    """W004: a filter (not a FILE) whose stored geometry is not the settings'.  A warning,
    not an error, so that ``bloom_warmup`` (which runs the checks) can still be run to
    migrate; under the default "open" policy requests pass unfiltered meanwhile."""
    from ling_bloom.contrib import django as lbd
    from ling_bloom.guard import _geometry_message, _setup_problem

    out: List[checks.CheckMessage] = []
    for name in conf.get("FILTERS") or {}:
        try:
            spec = lbd.filter_settings(name)
            if spec.get("FILE") and "FILTER" not in spec:
                continue  # a served file: checked when it loads
            flt = lbd.get_filter(name)
        except Exception:  # noqa: BLE001 - reported by E001 or at first use
            continue
        problem = _setup_problem(flt)
        if problem is not None:
            out.append(checks.Warning(
                f"LING_BLOOM['FILTERS'][{name!r}]: {_geometry_message(flt, problem)}",
                hint="with a new key in OPTIONS, run `manage.py bloom_warmup "
                     f"{name}`; or delete the stored keys and run it",
                id="ling_bloom.W004"))
    return out
