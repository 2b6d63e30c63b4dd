"""Django system checks for settings.LING_BLOOM (``manage.py check``): a typo in a route's
URL_NAME or KWARG, or a FILE in a directory that does not exist, would otherwise turn a
guard off (or keep it unwarmed) without a word.

ling_bloom.E001  LING_BLOOM is malformed (what the middleware would raise at start-up)
ling_bloom.E002  a route's URL_NAME is not the name of any URL pattern
ling_bloom.E003  a route's KWARG is not a keyword argument of that URL pattern
ling_bloom.E004  a PATTERN route's KWARG is not a named group of its regular expression
ling_bloom.W001  a filter's FILE is in a directory that does not exist (the warm-up cannot
                 save it; the filter stays unwarmed)
ling_bloom.W003  the stored filter's geometry is not the settings' (GeometryMismatchError:
                 the capacity or error rate changed); the filter is asked one test
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Set

from django.core import checks
from django.core.exceptions import ImproperlyConfigured


def _url_kwargs_by_name() -> Dict[str, List[Set[str]]]:
    """{"name" or "namespace:name": [the kwargs of each pattern of that name]}"""
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

    walk(get_resolver().url_patterns, [], set())
    return out


_IN_MEMORY = ("MemoryFilter", "BlockedFilter", "CountingFilter", "ScalableFilter",
              "ling_bloom.MemoryFilter", "ling_bloom.BlockedFilter",
              "ling_bloom.CountingFilter", "ling_bloom.ScalableFilter")


@checks.register(checks.Tags.urls)
def check_ling_bloom(app_configs: Any = None, **kwargs: Any) -> List[checks.CheckMessage]:
    from ling_bloom.contrib import django as lbd

    errors: List[checks.CheckMessage] = []
    try:
        conf = lbd._config()
        lbd._routes()
    except ImproperlyConfigured as e:
        return [checks.Error(str(e), id="ling_bloom.E001")]
    for name in conf.get("FILTERS") or {}:
        try:
            spec = lbd.filter_settings(name)
        except ImproperlyConfigured as e:
            errors.append(checks.Error(str(e), id="ling_bloom.E001"))
            continue
        path = spec.get("FILE")
        if not path and "FILTER" not in spec and spec.get("CLASS") in _IN_MEMORY:
            from ling_bloom.filefilter import unshared_message

            errors.append(checks.Warning(
                unshared_message(name, spec["CLASS"].rsplit(".", 1)[-1], "a FILE"),
                hint="give the filter a FILE (each worker then serves it and sees every "
                     "worker's adds), or CLASS RedisFilter",
                id="ling_bloom.W002"))
        if path and "FILTER" not in spec:
            folder = os.path.dirname(os.path.abspath(os.fspath(path)))
            if not os.path.isdir(folder):
                errors.append(checks.Warning(
                    f"LING_BLOOM['FILTERS'][{name!r}]['FILE'] is in {folder}, which does not "
                    f"exist: bloom_warmup cannot save it and the filter stays unwarmed",
                    id="ling_bloom.W001"))
    errors.extend(_geometry_checks(conf))
    try:
        urls = _url_kwargs_by_name()
    except Exception as e:  # a broken URLconf is reported by Django's own checks
        return errors
    for i, r in enumerate(conf.get("ROUTES") or ()):
        where = f"LING_BLOOM['ROUTES'][{i}]"
        if "URL_NAME" in r:
            names = [r["URL_NAME"]] if isinstance(r["URL_NAME"], str) else list(r["URL_NAME"])
            for n in names:
                if n not in urls:
                    close = [u for u in sorted(urls) if u.split(":")[-1] == n.split(":")[-1]]
                    errors.append(checks.Error(
                        f"{where}: URL_NAME {n!r} is not the name of any URL pattern: this "
                        f"route is never guarded",
                        hint=f"did you mean {close[0]!r}?" if close else
                        f"URL names: {', '.join(sorted(urls)[:20]) or 'none'}",
                        id="ling_bloom.E002"))
                    continue
                for kw in urls[n]:
                    if r.get("KWARG") not in kw:
                        errors.append(checks.Error(
                            f"{where}: KWARG {r.get('KWARG')!r} is not a keyword argument of "
                            f"the URL {n!r}: this route is never guarded",
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
    """W003: a filter (not a FILE) whose stored geometry is not the settings'.  A warning,
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
                id="ling_bloom.W003"))
    return out
