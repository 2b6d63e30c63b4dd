"""python manage.py bloom_warmup NAME [NAME ...]

Fill the filters of settings.LING_BLOOM["FILTERS"] from their MODEL.FIELD, then publish each
to its FILE (when it has one; a Redis filter is shared already): the keys running workers
added since the last warm-up (their add log) are folded into the new file, so none is lost
to the replacement (ling_bloom.warmup.publish).  Two warm-ups of one FILE never overlap:
the second waits for the first.  The position for --incremental is saved only once the
filter is published.

  --incremental     only the rows written since the last run (kept in --state, default
                    FILE + ".sync.json"), adding to the saved filter: by the filter's
                    INCREMENTAL SINCE column, re-reading LAG seconds behind the newest
                    value seen; else by primary key, re-reading the OVERLAP ids below the
                    highest one seen (a row committed after a higher-numbered one).  When
                    FILE is missing (or with --fresh) it is a full warm-up instead.
  --fresh           start from an empty filter built from CLASS / OPTIONS instead of the
                    saved FILE (a new geometry after a capacity change)
  --batch-size N    keys per filter.update (one Redis round trip each); default 10000
  --no-progress     no progress bar (there is none anyway when stderr is not a terminal)

Run from the command line, it refuses a filter that lives in each process's memory (no
FILE, not Redis): it would fill a filter no server process sees.
"""
from __future__ import annotations

import datetime
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ling_bloom.contrib import django as lbd
from ling_bloom._addlog import AddLog
from ling_bloom.filefilter import shares_adds, unshared_message
from ling_bloom.warmup import FileState, HeldState, begin, publish, sync, warmup

_ORDERED_PK = ("AutoField", "BigAutoField", "SmallAutoField", "IntegerField",
               "BigIntegerField", "SmallIntegerField", "PositiveIntegerField",
               "PositiveBigIntegerField", "PositiveSmallIntegerField")


class Command(BaseCommand):
    help = "Fill ling_bloom filters from their models (settings.LING_BLOOM['FILTERS'])."

    from_command_line = False

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME",
                            help="filters to fill (default: every filter with a MODEL)")
        parser.add_argument("--batch-size", type=int, default=10_000)
        parser.add_argument("--incremental", action="store_true",
                            help="only rows written since the last run's (INCREMENTAL "
                                 "settings: SINCE/LAG, or the primary key with OVERLAP)")
        parser.add_argument("--state", help="the incremental position file "
                            "(default: the filter's FILE + '.sync.json')")
        parser.add_argument("--fresh", action="store_true",
                            help="an empty filter from CLASS/OPTIONS, not the saved FILE")
        parser.add_argument("--no-progress", action="store_true")

    def run_from_argv(self, argv: Any) -> None:
        self.from_command_line = True
        super().run_from_argv(argv)

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
        path = lbd.filter_file(name)
        if not path:
            return self._fill(name, opts, None, None)
        with AddLog(path).warmup_lock():
            # The add log's generation before the snapshot: publish refuses if another
            # warm-up replaced FILE in between (it cannot, while this one holds the lock).
            return self._fill(name, opts, path, begin(path))

    def _fill(self, name: str, opts: Any, path: Any, since: Any) -> None:
        flt = lbd.build_filter(name, fresh=opts["fresh"])
        err = getattr(self.stderr, "_out", self.stderr)
        progress = False if opts["no_progress"] else None
        if not path and not shares_adds(flt):
            message = (unshared_message(name, type(flt).__name__, "a FILE") + " This command "
                       "fills its own process's copy, which no server process sees.")
            if self.from_command_line:
                raise CommandError(message)
            self.stderr.write(f"warning: {message}")
        state_path = opts["state"] or (os.fspath(path) + ".sync.json" if path else None)
        inc = lbd.incremental_settings(name)
        incremental = opts["incremental"]
        if incremental and not state_path:
            raise CommandError(f"{name}: --incremental needs --state (the filter has no FILE)")
        if incremental and path and (opts["fresh"] or not os.path.exists(path)):
            # the rows before the position are in no filter: adding only the new ones
            # would publish a filter that answers every older row 404
            self.stdout.write(f"{name}: {'--fresh' if opts['fresh'] else path + ' does not exist'}"
                              f": a full warm-up instead of --incremental")
            incremental = False
        state = FileState(state_path) if state_path else None
        if incremental:
            held = self._incremental(name, flt, state, inc, opts)
        else:
            # The position for later incremental runs, read first: rows saved while the
            # warm-up runs are read again by the next run (adding a key twice is harmless).
            held = HeldState(state)
            mark = lbd.model_position(name)
            summary = warmup(flt, lbd.model_keys(name, chunk_size=opts["batch_size"]),
                             batch_size=opts["batch_size"], progress=progress, stream=err,
                             desc=name, summary=False)
            self.stdout.write(f"{name}: {summary}")
            if mark is not None:
                held.save(mark)
        if path and hasattr(flt, "save"):
            carried = publish(flt, os.fspath(path), since)
            self.stdout.write(f"{name}: saved to {os.fspath(path)}"
                              + (f" ({carried:,} keys added by running workers carried over)"
                                 if carried else ""))
        held.commit()  # only now: a failed publish leaves the last position
        lbd._clear_stale(name)
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

    def _incremental(self, name: str, flt: Any, state: Any, inc: Any, opts: Any) -> HeldState:
        model, _ = lbd._model(name)
        held = HeldState(state)
        last = held.load()
        if inc["SINCE"]:
            # every row whose SINCE column is at most LAG seconds older than the newest
            # value the last run saw: a transaction that wrote it before that run read and
            # committed after (within LAG) is read now
            if last is not None and not isinstance(last, (datetime.datetime, datetime.date)):
                self.stdout.write(f"{name}: the saved position {last!r} is not a time of "
                                  f"{inc['SINCE']}: reading every row")
                last = None
            mark = lbd.model_position(name)
            start = None if last is None else last - datetime.timedelta(seconds=inc["LAG"])
            res = sync(flt, lbd.model_fetch(name, since=start) if start is not None
                       else lbd.model_fetch(name), None, batch_size=opts["batch_size"])
            if mark is not None:
                held.save(mark)
            self.stdout.write(f"{name}: {res.keys:,} keys read in {res.batches} batches "
                              f"({inc['SINCE']} from {start if start is not None else 'the start'})")
            return held
        pk = model._meta.pk
        if pk.get_internal_type() not in _ORDERED_PK:
            raise CommandError(
                f"{name}: the primary key of {model._meta.label} is a {pk.get_internal_type()}, "
                f"whose values are not in the order rows are written: --incremental by "
                f"primary key would skip rows. Give the filter a column every write sets: "
                f"\"INCREMENTAL\": {{\"SINCE\": \"updated_at\"}} (a DateTimeField with auto_now)")
        if last is not None and not isinstance(last, int):
            self.stdout.write(f"{name}: the saved position {last!r} is not a primary key: "
                              f"reading every row")
            last = None
        # re-read the OVERLAP ids below the highest one seen: a row whose id was taken
        # before that run read and committed after it is read now
        start = None if last is None else max(0, last - inc["OVERLAP"])
        res = sync(flt, lbd.model_fetch(name), None, batch_size=opts["batch_size"], start=start)
        new = res.last_id if last is None or (res.last_id is not None and res.last_id > last) else last
        if new is not None:
            held.save(new)
        self.stdout.write(f"{name}: {res.keys:,} keys read in {res.batches} batches "
                          f"(ids above {start if start is not None else 'none'}), last id {new}")
        return held
