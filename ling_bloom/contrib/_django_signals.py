"""Django: where a filter's keys come from after the warm-up: the sources of
``bloom_warmup --incremental`` (incremental_settings, model_position, model_fetch) and
the save and delete hooks (connect_model, connect_signals, after_migrate) that keep a
filter in step with its model, with the stale filters a failed add leaves.  Public
through ``ling_bloom.contrib.django``."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from django.core.exceptions import ImproperlyConfigured

from ling_bloom.guard import Guard

from ._django_guards import (_MISSED_MAX, DjangoCache, _config, _full_guards, _key, _lock,
                             _missed, _model, _stale, filter_settings, get_guard, log)


# ------------------------------------------------------- warm-up sources


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
