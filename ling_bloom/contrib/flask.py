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
import sys
import threading
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

try:
    import click
    from flask import Flask, abort, current_app, g, request
    from flask.cli import with_appcontext
    from werkzeug.exceptions import HTTPException
except ImportError as exc:  # name the extra, not the first missing dependency
    raise ImportError(f"ling_bloom.contrib.flask needs Flask: pip install 'ling_bloom[flask]' "
                      f"({exc})", name=exc.name) from exc

from ling_bloom._keys import route_key
from ling_bloom.guard import Guard
import ling_bloom as lb
from ling_bloom._addlog import AddLog
from ling_bloom.filefilter import warn_unshared
from ling_bloom.warmup import FileFilter, FileState, HeldState, begin, publish, sync, warmup

__all__ = ["BloomGuard", "bloom_warmup_command"]

_DEFAULT = "default"


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
    """

    def __init__(self, app: Optional[Flask] = None, filters: Optional[Dict[str, Any]] = None,
                 *, filter: Any = None, metrics: Any = None,
                 guard_options: Optional[Dict[str, Any]] = None,
                 files: Optional[Dict[str, Any]] = None, check_every: Optional[float] = None,
                 unwarmed: Optional[str] = None):
        self._filters: Dict[str, Any] = dict(filters or {})
        if filter is not None:
            self._filters[_DEFAULT] = filter
        self._guards: Dict[str, Guard] = {}
        self._lock = threading.Lock()
        self.metrics = metrics
        self.guard_options: Dict[str, Any] = dict(guard_options or {})
        self.sources: Dict[str, Callable[[], Iterable[Any]]] = {}
        self.fetchers: Dict[str, Callable[[Any, int], Any]] = {}
        # (filter name, where) of every @guard, checked when the filters are known
        self._wanted: list = []
        self.files: Dict[str, Any] = dict(files or {})
        self.check_every = check_every
        self.unwarmed = unwarmed
        self.mapped = False  # LING_BLOOM_MAPPED
        self.rebuild = True  # LING_BLOOM_REBUILD: rebuild a lost filter from its source
        self._probed: "set[str]" = set()
        self._checked: "set[int]" = set()
        self._apps: list = []
        # the views given to @bloom.guard (the function, not its guarded wrapper): one the
        # app registered itself means the decorator order put the guard off
        self._guarded_views: list = []
        if app is not None:
            self.init_app(app)

    # -- set-up
    def init_app(self, app: Flask) -> None:
        app.config.setdefault("LING_BLOOM_REJECT_STATUS", 404)
        app.config.setdefault("LING_BLOOM_ROUTES", {})
        for option, value in (app.config.get("LING_BLOOM_GUARD_OPTIONS") or {}).items():
            self.guard_options.setdefault(option, value)
        for name, f in (app.config.get("LING_BLOOM_FILTERS") or {}).items():
            self._filters.setdefault(name, f)
        for name, path in (app.config.get("LING_BLOOM_FILES") or {}).items():
            self.files.setdefault(name, path)
        if self.check_every is None:
            self.check_every = float(app.config.get("LING_BLOOM_CHECK_EVERY", 2.0))
        if self.unwarmed is None:
            self.unwarmed = app.config.get("LING_BLOOM_UNWARMED", "serve")
        self.mapped = bool(app.config.get("LING_BLOOM_MAPPED", self.mapped))
        self.rebuild = bool(app.config.get("LING_BLOOM_REBUILD", True))
        if self.unwarmed not in ("serve", "reject"):
            raise ValueError(f"LING_BLOOM_UNWARMED must be 'serve' or 'reject', not {self.unwarmed!r}")
        for name in self.files:
            self._require_filter(name, "LING_BLOOM_FILES")
        for name, f in self._filters.items():  # made ones; a factory's filter at first use
            if name not in self.files and hasattr(f, "test"):
                warn_unshared(name, f, "LING_BLOOM_FILES", stacklevel=4)
        app.extensions["ling_bloom"] = self
        self._apps.append(app)
        for view, where in self._guarded_views:
            self._check_unguarded(app, view, where)
        for name, where in self._wanted:
            self._require_filter(name, where)
        for endpoint, spec in (app.config.get("LING_BLOOM_ROUTES") or {}).items():
            self._check_route(app, endpoint, spec, registered_only=True)
        self._probe_geometry(made_only=True)
        app.before_request(self._before_request)
        app.after_request(self._after_request)
        if "bloom-warmup" not in app.cli.commands:
            app.cli.add_command(bloom_warmup_command)

    def add_filter(self, name: str, filter: Any) -> None:
        with self._lock:
            self._filters[name] = filter
            guard = self._guards.get(name)
            if guard is not None:
                guard.filter = filter if not callable(filter) or hasattr(filter, "test") else filter()

    def get_filter(self, name: str = _DEFAULT) -> Any:
        return self.get_guard(name).filter

    def get_guard(self, name: str = _DEFAULT) -> Guard:
        guard = self._guards.get(name)
        if guard is None:
            with self._lock:
                guard = self._guards.get(name)
                if guard is None:
                    try:
                        f = self._filters[name]
                    except KeyError:
                        raise KeyError(f"no ling_bloom filter named {name!r} (known: "
                                       f"{', '.join(sorted(self._filters)) or 'none'})") from None
                    if name in self.files:
                        every = 2.0 if self.check_every is None else self.check_every
                        f = FileFilter(self.files[name], check_every=every,
                                       unwarmed=self.unwarmed or "serve",
                                       mapped=self.mapped)
                    elif callable(f) and not hasattr(f, "test"):
                        # a factory's filter, made now (a made one was checked at init_app)
                        f = self._filters[name] = f()
                        warn_unshared(name, f, "LING_BLOOM_FILES", stacklevel=4)
                    options = dict(self.guard_options)
                    options.setdefault("rebuild", self._rebuild_for(name))
                    guard = self._guards[name] = Guard(f, name=name, metrics=self.metrics,
                                                       **options)
        return guard

    def _rebuild_for(self, name: str) -> Optional[Callable[[Any], None]]:
        """How the guard of filter ``name`` builds it again when its server lost it: its
        ``@bloom.source`` read in an app context, after reset(); None without a source, for
        a served file (never lost), or with LING_BLOOM_REBUILD False."""
        if not self.rebuild or name in self.files or name not in self.sources:
            return None

        def rebuild(flt: Any) -> None:
            from contextlib import nullcontext

            from ling_bloom.guard import refill

            app = self._apps[-1] if self._apps else None
            with app.app_context() if app is not None else nullcontext():
                refill(flt, self.sources[name]())

        return rebuild

    def _probe_geometry(self, made_only: bool) -> None:
        """Ask each filter (not a served file) one test: a GeometryMismatchError is logged
        once, as a configuration error with how to migrate (see ling_bloom.guard)."""
        from ling_bloom.guard import _setup_problem

        for name, f in list(self._filters.items()):
            if name in self.files or name in self._probed:
                continue
            if made_only and not hasattr(f, "test"):
                continue  # a factory's filter: made and probed by check()
            self._probed.add(name)
            guard = self.get_guard(name)
            problem = _setup_problem(guard.filter)
            if problem is not None:
                guard._note_geometry(problem)

    def source(self, name: str = _DEFAULT) -> Callable[[Callable[[], Iterable[Any]]], Callable[[], Iterable[Any]]]:
        """Register the function giving every key of filter ``name`` (for the warm-up)."""
        def register(fn: Callable[[], Iterable[Any]]) -> Callable[[], Iterable[Any]]:
            self.sources[name] = fn
            guard = self._guards.get(name)
            if guard is not None and guard.rebuild is None:
                guard.rebuild = self._rebuild_for(name)
            return fn
        return register

    def fetcher(self, name: str = _DEFAULT) -> Callable[[Callable[[Any, int], Any]], Callable[[Any, int], Any]]:
        """Register ``fetch(after, limit)`` of filter ``name`` for incremental warm-ups:
        rows with an id above ``after`` in id order, as ids or (id, key) pairs."""
        def register(fn: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
            self.fetchers[name] = fn
            return fn
        return register

    # -- set-up checks: a typo must not silently turn a guard off
    def _require_filter(self, name: str, where: str) -> None:
        if name not in self._filters:
            raise ValueError(f"{where}: no ling_bloom filter named {name!r} (known: "
                             f"{', '.join(sorted(self._filters)) or 'none'})")

    def _check_route(self, app: Flask, endpoint: str, spec: Any, registered_only: bool) -> None:
        where = f"LING_BLOOM_ROUTES[{endpoint!r}]"
        if isinstance(spec, str) or not isinstance(spec, (tuple, list)) or not 1 <= len(spec) <= 3:
            raise ValueError(f"{where}: expected (url_parameter, filter_name[, prefix]), not {spec!r}")
        self._require_filter(spec[1] if len(spec) > 1 else _DEFAULT, where)
        if endpoint not in app.view_functions:
            if registered_only:
                return  # the route may be added after init_app: checked by check()
            raise ValueError(f"{where}: the app has no endpoint {endpoint!r} (endpoints: "
                             f"{', '.join(sorted(app.view_functions))})")
        for rule in app.url_map.iter_rules(endpoint):
            if spec[0] not in rule.arguments:
                raise ValueError(f"{where}: the URL rule {rule.rule!r} has no parameter "
                                 f"{spec[0]!r} (it has: {', '.join(sorted(rule.arguments)) or 'none'})")

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
        registered without it (the decorator above the route's).  Raises ValueError.  Runs
        by itself before the app's first request (and in part at init_app and at each
        ``@bloom.guard``); call it at the end of an app factory to fail at start-up."""
        app = app or current_app
        for name, where in self._wanted:
            self._require_filter(name, where)
        for view, where in self._guarded_views:
            self._check_unguarded(app, view, where)
        for endpoint, spec in (app.config.get("LING_BLOOM_ROUTES") or {}).items():
            self._check_route(app, endpoint, spec, registered_only=False)
        self._checked.add(id(app))
        self._probe_geometry(made_only=False)

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
        if name not in self.files:
            return self.get_filter(name)
        import os

        if incremental and os.path.exists(self.files[name]):
            return lb.load(os.fspath(self.files[name]))
        f = self._filters[name]
        return f() if callable(f) and not hasattr(f, "test") else f

    def _check(self, name: str, value: Any, prefix: str) -> Optional[Guard]:
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
        return guard

    def guard(self, arg: str, filter: str = _DEFAULT, prefix: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A view decorator: the URL parameter ``arg`` is the key; a key that filter
        ``filter`` has never seen gets LING_BLOOM_REJECT_STATUS (404) before the view runs."""
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
            if self._filters:  # else checked at init_app / before the first request
                self._require_filter(filter, where)
            for app in self._apps:  # registered already: the route decorator came first
                self._check_unguarded(app, view, where)
            self._guarded_views.append((view, where))
            convert = _annotated_converter(view, arg)

            @functools.wraps(view)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                if arg not in kwargs:
                    raise TypeError(f"the view has no URL parameter {arg!r} to guard")
                value = kwargs[arg]
                if convert is not None and isinstance(value, str):
                    try:
                        value = convert(value)
                    except ValueError:
                        return view(*args, **kwargs)
                guard = self._check(filter, value, prefix)
                if guard is None:
                    return view(*args, **kwargs)
                try:
                    rv = current_app.make_response(view(*args, **kwargs))
                except HTTPException as e:
                    guard.record(None if (e.code or 500) >= 500 else e.code != 404,
                                 g.get("_ling_bloom_key"))
                    raise
                except Exception:
                    guard.record(None)
                    raise
                guard.record(None if rv.status_code >= 500 else rv.status_code != 404,
                             g.get("_ling_bloom_key"))
                return rv
            guarded.bloom_guarded = True  # type: ignore[attr-defined]
            return guarded
        return decorate

    def _before_request(self) -> Any:
        if id(current_app._get_current_object()) not in self._checked:  # type: ignore[attr-defined]
            self.check(current_app._get_current_object())  # type: ignore[attr-defined]
        routes: Dict[str, Tuple[Any, ...]] = current_app.config.get("LING_BLOOM_ROUTES") or {}
        if not routes or request.endpoint not in routes:
            return None
        view = current_app.view_functions.get(request.endpoint)
        if getattr(view, "bloom_guarded", False):
            return None  # the decorator does it
        spec = routes[request.endpoint]
        arg, name = spec[0], (spec[1] if len(spec) > 1 else _DEFAULT)
        prefix = spec[2] if len(spec) > 2 else ""
        value = (request.view_args or {}).get(arg)
        if value is None:
            return None
        convert = _annotated_converter(view, arg)
        if convert is not None and isinstance(value, str):
            try:
                value = convert(value)
            except ValueError:
                return None  # the view's to answer, unguarded (as @bloom.guard does)
        guard = self._check(name, value, prefix)
        if guard is not None:
            g._ling_bloom_guard = guard
        return None

    def _after_request(self, response: Any) -> Any:
        guard = g.pop("_ling_bloom_guard", None)
        if guard is not None:
            status = response.status_code
            guard.record(None if status >= 500 else status != 404, g.get("_ling_bloom_key"))
        return response


def _annotated_converter(view: Any, arg: str) -> Optional[Callable[[str], Any]]:
    """int or float when the view reads ``arg`` with that annotation, else None.

    A plain <id> (string converter) with a view annotated ``id: int``: the key is what the
    view reads, int("007") -> "7"; a value that does not convert is the view's to answer
    (unguarded).  <int:id> converts already (the value is no str then)."""
    try:
        import typing

        annotated = typing.get_type_hints(view).get(arg)
    except Exception:
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
    if incremental:
        if name not in ext.fetchers:
            raise click.UsageError(f"{name}: --incremental needs a @bloom.fetcher({name!r})")
        if not state_path:
            raise click.UsageError("--incremental needs --state FILE")
        # the position is saved once the filter is saved or published (held.commit())
        held = HeldState(FileState(state_path))
        res = sync(flt, ext.fetchers[name], held, batch_size=batch_size)
        click.echo(f"{name}: {res.keys:,} new keys in {res.batches} batches, "
                   f"last id {res.last_id}")
    else:
        if name not in ext.sources:
            raise click.UsageError(f"{name}: no source: register one with "
                                   f"@bloom.source({name!r})")
        summary = warmup(flt, ext.sources[name](), batch_size=batch_size,
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
