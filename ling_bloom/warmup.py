"""Fill a filter before traffic arrives, and keep it in step with the database.

``warmup(filter, keys)`` adds the keys of any iterable (a queryset's ``iterator()``, a DB
cursor, the lines of a file) in batches through ``filter.update``, with a progress bar
on a terminal and a summary at the end.

``sync(filter, fetch, state)`` is the incremental sync of a RedisBloom cache-penetration
article (its ``SyncFromDB`` loop): it asks ``fetch(after, limit)`` for the rows with an id
greater than the last one seen, adds their keys, and remembers the last id (in a file, or
through your own callbacks) so the next run resumes where this one stopped.

``publish(filter, path)`` saves a warmed filter over the file that worker processes serve
(``FileFilter``), with every key they added since the last publish folded in, so no add
is lost to the warm-up that replaces the file (``ling_bloom._addlog`` says how).

Keys are converted as the guard converts them (``ling_bloom.guard.as_key``), which is how
the filters key them: ``str`` and bytes as they are, an ``int`` id (or an int subclass,
numpy's integer scalars) as its decimal text, one-column rows unpacked.  A row of more
columns and a number that is not an integer (``3.0``) are a TypeError that names ``key=``,
the function that picks each row's key.
"""
from __future__ import annotations

import json
import numbers
import os
import sys
import tempfile
import threading
import time
import types
from collections import abc as _abc
from itertools import islice
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    TextIO,
    Tuple,
    Union,
)

from ._core import ClosedError, FilterLostError
from ._keys import as_key

__all__ = [
    "CallbackState",
    "FileFilter",
    "FileState",
    "HeldState",
    "SyncResult",
    "WarmupConflictError",
    "WarmupSummary",
    "begin",
    "keys_from_file",
    "publish",
    "sync",
    "sync_forever",
    "warmup",
]


# --------------------------------------------------------------------- summary


class WarmupSummary(NamedTuple):
    keys: int
    seconds: float
    fill_ratio: Optional[float]
    approximate_count: Optional[int]
    estimated_error_rate: Optional[float]

    @property
    def keys_per_second(self) -> float:
        return self.keys / self.seconds if self.seconds > 0 else float("inf")

    def __str__(self) -> str:
        out = f"{self.keys:,} keys in {self.seconds:.2f} s ({self.keys_per_second:,.0f} keys/s)"
        details = []
        if self.fill_ratio is not None:
            details.append(f"filter fill {self.fill_ratio:.1%}")
        if self.approximate_count is not None:
            details.append(f"~{self.approximate_count:,} keys held")
        if self.estimated_error_rate is not None:
            details.append(f"estimated false-positive rate {self.estimated_error_rate:.3g}")
        return out + ("; " + ", ".join(details) if details else "")


def _attr(flt: Any, name: str) -> Any:
    try:
        value = getattr(flt, name)
        return value() if callable(value) else value
    except Exception:
        return None


def _summary(flt: Any, keys: int, seconds: float) -> WarmupSummary:
    fill = _attr(flt, "fill_ratio")
    count = _attr(flt, "approximate_count")
    rate = _attr(flt, "current_error_rate")
    return WarmupSummary(
        keys, seconds,
        float(fill) if fill is not None else None,
        int(count) if count is not None else None,
        float(rate) if rate is not None else None)


# ------------------------------------------------------------------- progress


class _PlainBar:
    """A one-line progress bar redrawn in place (at most ten times a second)."""

    def __init__(self, total: Optional[int], desc: str, stream: TextIO):
        self.total, self.desc, self.stream = total, desc, stream
        self.n = 0
        self.t0 = time.monotonic()
        self.last = 0.0

    def update(self, n: int) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= 0.1 or (self.total is not None and self.n >= self.total):
            self.last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.n / max(now - self.t0, 1e-9)
        if self.total:
            frac = min(1.0, self.n / self.total)
            bar = "#" * int(frac * 30)
            line = (f"{self.desc}: [{bar:<30}] {self.n:,}/{self.total:,} keys "
                    f"({frac:.0%}) {rate:,.0f} keys/s")
        else:
            line = f"{self.desc}: {self.n:,} keys {rate:,.0f} keys/s"
        self.stream.write("\r" + line)
        self.stream.flush()

    def close(self) -> None:
        self._draw(time.monotonic())
        self.stream.write("\n")
        self.stream.flush()


class _TqdmBar:
    def __init__(self, total: Optional[int], desc: str, stream: TextIO):
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="keys", unit_scale=True, file=stream)

    def update(self, n: int) -> None:
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def _make_bar(progress: Union[bool, str, None], total: Optional[int], desc: str,
              stream: TextIO) -> Any:
    """progress: None = a bar only when stream is a terminal; True = always; False = never;
    "plain" / "tqdm" = always, that kind."""
    if progress is None:
        progress = _isatty(stream)
    if not progress:
        return _NoBar()
    if progress == "plain":
        return _PlainBar(total, desc, stream)
    try:
        return _TqdmBar(total, desc, stream)
    except ImportError:
        if progress == "tqdm":
            raise
        return _PlainBar(total, desc, stream)


# --------------------------------------------------------------------- warm-up


def _known_length(keys: Any) -> Optional[int]:
    # Only containers whose len() costs nothing: len() of a Django queryset would load it.
    if isinstance(keys, (list, tuple, range, set, frozenset, dict)):
        return len(keys)
    return None


def _key_of(item: Any, key: Optional[Callable[[Any], Any]]) -> Any:
    """The filter's key of one item (``key(item)`` when given), or a TypeError that says
    how ``key=`` picks it."""
    value = key(item) if key is not None else item
    try:
        return as_key(value)
    except TypeError as e:
        if isinstance(value, (_abc.Sequence, _abc.Mapping)):
            hint = " (key=lambda row: row[0] for a row's first column)"
        elif isinstance(value, numbers.Number):
            hint = " (key=int for ids read as floats)"
        else:
            hint = ""
        raise TypeError(f"warmup: {e}; pass key= to give each item's key as a str, bytes "
                        f"or int{hint}") from None


def _batches(keys: Iterable[Any], size: int, key: Optional[Callable[[Any], Any]]) -> Iterator[list]:
    it = iter(keys)
    while True:
        batch = [_key_of(k, key) for k in islice(it, size)]
        if not batch:
            return
        yield batch


def warmup(
    filter: Any,
    keys: Iterable[Any],
    *,
    batch_size: int = 10_000,
    key: Optional[Callable[[Any], Any]] = None,
    total: Optional[int] = None,
    progress: Union[bool, str, None] = None,
    desc: str = "warm-up",
    stream: Optional[TextIO] = None,
    summary: Optional[bool] = None,
) -> WarmupSummary:
    """Add every key of ``keys`` to ``filter`` in batches of ``batch_size`` (one
    ``update`` call each: one round trip per batch for the Redis filters).

    key        a function from each item to its key (``lambda row: row.sku``); default:
               the item itself (one-column rows unpacked, ints as their decimal text; a
               row of more columns is a TypeError)
    total      the number of keys, for the bar's percentage (known for lists, ranges, ...)
    progress   None: a bar when ``stream`` is a terminal; True / False: always / never;
               "plain" or "tqdm": always, that kind (tqdm is used when installed)
    stream     where the bar and summary go (default: sys.stderr)
    summary    print the summary line at the end (default: when a bar was shown)

    A Redis filter the server lost (FilterLostError on the first batch) is reset, then
    filled: the warm-up rebuilds it.  Lost after the first batch, the error is raised.

    Returns a WarmupSummary: keys, seconds, keys_per_second, fill_ratio,
    approximate_count, estimated_error_rate.
    """
    if batch_size <= 0:
        raise ValueError("batch_size must be positive")
    stream = stream if stream is not None else sys.stderr
    if total is None:
        total = _known_length(keys)
    bar = _make_bar(progress, total, desc, stream)
    shown = not isinstance(bar, _NoBar)
    n = 0
    t0 = time.perf_counter()
    try:
        for batch in _batches(keys, batch_size, key):
            try:
                filter.update(batch)
            except FilterLostError:
                # A Redis filter the server lost: a warm-up is what rebuilds it, from
                # empty.  Lost after some batches went in, those are gone: raised.
                if n:
                    raise
                filter.reset()
                filter.update(batch)
            n += len(batch)
            bar.update(len(batch))
    finally:
        bar.close()
    result = _summary(filter, n, time.perf_counter() - t0)
    if summary if summary is not None else shown:
        print(f"{desc}: {result}", file=stream, flush=True)
    return result


def keys_from_file(path: Union[str, "os.PathLike[str]"], encoding: str = "utf-8") -> Iterator[str]:
    """The keys of a text file, one a line (surrounding whitespace and empty lines are
    skipped)."""
    with open(path, encoding=encoding) as f:
        for line in f:
            k = line.strip()
            if k:
                yield k


# ------------------------------------------------------------------------ sync


def _encode_position(value: Any) -> Dict[str, Any]:
    """A position as JSON: numbers and text as they are; a UUID, a date or time, a Decimal
    or bytes as text with its type, so that it loads back as what it was."""
    import datetime
    import decimal
    import uuid

    if value is None or isinstance(value, (bool, int, float, str)):
        return {"last_id": value}
    if isinstance(value, uuid.UUID):
        return {"last_id": str(value), "type": "uuid"}
    if isinstance(value, datetime.datetime):
        return {"last_id": value.isoformat(), "type": "datetime"}
    if isinstance(value, datetime.date):
        return {"last_id": value.isoformat(), "type": "date"}
    if isinstance(value, decimal.Decimal):
        return {"last_id": str(value), "type": "decimal"}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"last_id": bytes(value).hex(), "type": "bytes"}
    raise TypeError(f"a position is a number, text, UUID, date, datetime, Decimal or bytes, "
                    f"not {type(value).__name__} ({value!r})")


def _decode_position(data: Dict[str, Any]) -> Any:
    import datetime
    import decimal
    import uuid

    value, kind = data.get("last_id"), data.get("type")
    if value is None or kind is None:
        return value
    decoders: Dict[str, Callable[[str], Any]] = {
        "uuid": uuid.UUID, "datetime": datetime.datetime.fromisoformat,
        "date": datetime.date.fromisoformat, "decimal": decimal.Decimal,
        "bytes": bytes.fromhex}
    decode = decoders.get(kind)
    if decode is None:
        raise ValueError(f"a position of an unknown type {kind!r}")
    return decode(value)


class FileState:
    """The last id seen, kept in a small JSON file (written atomically: a crash leaves
    the old or the new id, never half of one).  Any primary key type: numbers and text as
    they are, a UUID, date, datetime, Decimal or bytes with its type (loaded back as it)."""

    def __init__(self, path: Union[str, "os.PathLike[str]"]):
        self.path = os.fspath(path)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def load(self) -> Any:
        try:
            with open(self.path, encoding="utf-8") as f:
                return _decode_position(json.load(f))
        except FileNotFoundError:
            return None

    def save(self, last_id: Any) -> None:
        data = _encode_position(last_id)  # before anything is written: a TypeError leaves
        d = os.path.dirname(os.path.abspath(self.path))  # the old position
        fd, tmp = tempfile.mkstemp(prefix=".bloom-sync-", dir=d)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


class HeldState:
    """A position held in memory until ``commit()`` writes it to ``state``: a warm-up that
    publishes its filter at the end saves its position only once the filter is published
    (a failed publish must not move the position past rows the served filter lacks)."""

    def __init__(self, state: Any, start: Any = None):
        self.state = state
        self.value = state.load() if state is not None else None
        if start is not None:
            self.value = start
        self.changed = False

    def load(self) -> Any:
        return self.value

    def save(self, last_id: Any) -> None:
        self.value = last_id
        self.changed = True

    def commit(self) -> None:
        if self.state is not None and self.changed:
            self.state.save(self.value)


class CallbackState:
    """The last id seen, kept by your own functions (a database row, a Redis key ...)."""

    def __init__(self, load: Callable[[], Any], save: Callable[[Any], None]):
        self.load = load
        self.save = save


class SyncResult(NamedTuple):
    keys: int
    batches: int
    last_id: Any


def _split(row: Any) -> Tuple[Any, Any]:
    """(id, key) of a fetched row: a pair, or a plain id that is its own key."""
    if isinstance(row, (tuple, list)):
        if len(row) == 2:
            return row[0], row[1]
        if len(row) == 1:
            return row[0], row[0]
        raise ValueError(f"a fetched row is an id or an (id, key) pair, not {row!r}")
    return row, row


def sync(
    filter: Any,
    fetch: Callable[[Any, int], Sequence[Any]],
    state: Any = None,
    *,
    batch_size: int = 1000,
    start: Any = None,
) -> SyncResult:
    """One incremental pass, as a RedisBloom cache-penetration article's SyncFromDB, repeatedly:
    ``rows = fetch(after, batch_size)`` (the rows with id > after, in id order; ``after``
    is None the first time), add their keys, remember the last id, until a batch comes
    back shorter than ``batch_size``.

    Rows are ids (each its own key) or ``(id, key)`` pairs.  ``state`` (FileState,
    CallbackState, or anything with load()/save(id)) is read at the start and saved after
    every batch, so an interrupted run resumes after the last batch it finished.
    ``start`` is the id to start after when the state holds none.
    """
    if batch_size <= 0:
        raise ValueError("batch_size must be positive")
    after = state.load() if state is not None else None
    if after is None:
        after = start
    keys = batches = 0
    while True:
        rows = list(fetch(after, batch_size))
        if not rows:
            break
        pairs = [_split(r) for r in rows]
        filter.update([as_key(k) for _, k in pairs])
        after = pairs[-1][0]
        if state is not None:
            state.save(after)
        keys += len(pairs)
        batches += 1
        if len(rows) < batch_size:
            break
    return SyncResult(keys, batches, after)


def sync_forever(
    filter: Any,
    fetch: Callable[[Any, int], Sequence[Any]],
    state: Any = None,
    *,
    interval: float = 300.0,
    stop: Optional[threading.Event] = None,
    batch_size: int = 1000,
    on_error: Optional[Callable[[BaseException], None]] = None,
) -> None:
    """``sync`` every ``interval`` seconds until ``stop`` is set (run it in a thread).
    Errors go to ``on_error`` (default: logged) and the next pass retries."""
    import logging

    stop = stop or threading.Event()
    log = logging.getLogger("ling_bloom.warmup")
    after = None
    while not stop.is_set():
        try:
            # Without a state, keep the position in memory between passes.
            res = sync(filter, fetch, state, batch_size=batch_size, start=after)
            after = res.last_id
        except Exception as e:  # noqa: BLE001 - a sync loop must outlive one bad pass
            if on_error is not None:
                on_error(e)
            else:
                log.exception("ling_bloom sync pass failed; retrying in %s s", interval)
        stop.wait(interval)


# ------------------------------------------------------------- the served file

from ._addlog import WarmupConflictError, begin, publish  # noqa: E402
from .filefilter import FileFilter  # noqa: E402


class _CallableModule(types.ModuleType):
    """``ling_bloom.warmup`` is both this module and its ``warmup`` function: importing the
    module (``from ling_bloom.warmup import FileState``) sets the package's attribute
    ``warmup`` to the module, so the module calls the function (``lb.warmup(f, keys)``
    works either way)."""

    def __call__(self, *args: Any, **kwargs: Any) -> WarmupSummary:
        return warmup(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
