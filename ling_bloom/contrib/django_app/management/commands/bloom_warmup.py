"""python manage.py bloom_warmup NAME [NAME ...]

Fill the filters of settings.LING_BLOOM["FILTERS"] from their MODEL.FIELD, then publish each
to its FILE (when it has one; a Redis filter is shared already): the keys running workers
added since the last warm-up (their add log) are folded into the new file, so none is lost
to the replacement (ling_bloom.warmup.publish).  Two warm-ups of one FILE never overlap:
the second waits for the first.

  --incremental     only rows with a primary key above the last run's (kept in
                    --state, default FILE + ".sync.json"); adds to the saved filter
  --fresh           start from an empty filter built from CLASS / OPTIONS instead of the
                    saved FILE (a new geometry after a capacity change)
  --batch-size N    keys per filter.update (one Redis round trip each); default 10000
  --no-progress     no progress bar (there is none anyway when stderr is not a terminal)
"""
from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ling_bloom.contrib import django as lbd
from ling_bloom._addlog import AddLog
from ling_bloom.warmup import FileState, begin, publish, sync, warmup


class Command(BaseCommand):
    help = "Fill ling_bloom filters from their models (settings.LING_BLOOM['FILTERS'])."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME",
                            help="filters to fill (default: every filter with a MODEL)")
        parser.add_argument("--batch-size", type=int, default=10_000)
        parser.add_argument("--incremental", action="store_true",
                            help="only rows newer than the last run's (by primary key)")
        parser.add_argument("--state", help="the incremental position file "
                            "(default: the filter's FILE + '.sync.json')")
        parser.add_argument("--fresh", action="store_true",
                            help="an empty filter from CLASS/OPTIONS, not the saved FILE")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        from django.core.exceptions import ImproperlyConfigured

        filters = (lbd._config().get("FILTERS") or {})
        names = opts["names"] or [n for n, s in filters.items()
                                  if isinstance(s, dict) and s.get("MODEL")]
        if not names:
            raise CommandError("no filter to fill: name one, or give a filter a MODEL in "
                               "settings.LING_BLOOM['FILTERS']")
        if opts["batch_size"] <= 0:
            raise CommandError("--batch-size must be positive")
        for name in names:
            try:
                self._one(name, opts)
            except ImproperlyConfigured as e:
                raise CommandError(str(e)) from e

    def _one(self, name: str, opts: Any) -> None:
        path = lbd.filter_settings(name).get("FILE")
        if not path:
            return self._fill(name, opts, None, None)
        with AddLog(os.fspath(path)).warmup_lock():
            # The add log's generation before the snapshot: publish refuses if another
            # warm-up replaced FILE in between (it cannot, while this one holds the lock).
            return self._fill(name, opts, path, begin(path))

    def _fill(self, name: str, opts: Any, path: Any, since: Any) -> None:
        flt = lbd.build_filter(name, fresh=opts["fresh"])
        err = getattr(self.stderr, "_out", self.stderr)
        progress = False if opts["no_progress"] else None
        if opts["incremental"]:
            state_path = opts["state"] or (os.fspath(path) + ".sync.json" if path else None)
            if not state_path:
                raise CommandError(f"{name}: --incremental needs --state (the filter has no FILE)")
            res = sync(flt, lbd.model_fetch(name), FileState(state_path),
                       batch_size=opts["batch_size"])
            self.stdout.write(f"{name}: {res.keys:,} new keys in {res.batches} batches, "
                              f"last id {res.last_id}")
        else:
            # The position for later incremental runs, read first: rows saved while the
            # warm-up runs are read again by the next run (adding a key twice is harmless).
            model, _ = lbd._model(name)
            last = model._default_manager.order_by("-pk").values_list("pk", flat=True).first()
            summary = warmup(flt, lbd.model_keys(name, chunk_size=opts["batch_size"]),
                             batch_size=opts["batch_size"], progress=progress, stream=err,
                             desc=name, summary=False)
            self.stdout.write(f"{name}: {summary}")
            state_path = opts["state"] or (os.fspath(path) + ".sync.json" if path else None)
            if state_path and last is not None:
                FileState(state_path).save(last)
        if path and hasattr(flt, "save"):
            carried = publish(flt, os.fspath(path), since)
            self.stdout.write(f"{name}: saved to {os.fspath(path)}"
                              + (f" ({carried:,} keys added by running workers carried over)"
                                 if carried else ""))
        # This process's own filter is now the filled one.
        with lbd._lock:
            live = lbd._filters.get(name)
            if hasattr(live, "swap"):  # a FileFilter: other processes reload FILE themselves
                live.swap()
                return
            lbd._filters[name] = flt
            for g in [lbd._guards.get(name), *lbd._full_guards.get(name, ())]:
                if g is not None:
                    g.filter = flt
