"""False-positive-rate experiments, for notebooks and the command line.

    >>> from ling_bloom import analysis
    >>> exp = analysis.run_experiment("memory", n=100_000, p=0.01, keys="uuid")
    >>> print(exp.to_markdown())          # keys added, fill, measured rate, theory, memory
    >>> analysis.plot_fpr(exp)            # measured against theory as the filter fills

An experiment fills one filter in steps (checkpoints) with keys of a chosen shape and, at each
checkpoint, tests the same set of keys that were never added: the share of them that test
present is the measured false-positive rate, set beside what the arithmetic promises for the
filter's geometry at that fill.  Keys go in and are tested with the batch calls (``update``,
``test_many``), so the filter's C code does the work, not a Python loop.

Key shapes (deterministic for a given ``seed``):

- ``sequential``: ``"id:0"``, ``"id:1"``, ... (the never-added keys carry on the numbering,
  as a client probing ids past the last one would);
- ``uuid``: random version-4 UUIDs as text;
- ``url``: ``"https://shop.example.com/products/<n>/<slug>"``;
- ``random``: 16 random bytes.

Plots need matplotlib (``pip install 'ling_bloom[plot]'``); it is imported only when a plot
is drawn.
"""
from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from html import escape
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

import ling_bloom as lb
from .theory import false_positive_rate, ideal_false_positive_rate

__all__ = [
    "KEY_SHAPES",
    "FILTER_KINDS",
    "Experiment",
    "ManyFilters",
    "Row",
    "fpr_over_filters",
    "make_keys",
    "run_experiment",
    "plot_fpr",
    "plot_scalable_growth",
    "theoretical_rate",
]

KEY_SHAPES: Tuple[str, ...] = ("sequential", "uuid", "url", "random")

FILTER_KINDS: Dict[str, type] = {
    "memory": lb.MemoryFilter,
    "counting": lb.CountingFilter,
    "scalable": lb.ScalableFilter,
    "blocked": lb.BlockedFilter,
}

Key = Union[str, bytes]
FilterSpec = Union[str, type, Callable[[], Any]]


# --------------------------------------------------------------------------------------
# Keys


def make_keys(shape: str, count: int, *, seed: int = 0, start: int = 0) -> List[Key]:
    """``count`` keys of one shape, the same for the same (shape, seed, start).

    ``start`` offsets the stream: ``make_keys(s, n, seed=x)`` and
    ``make_keys(s, m, seed=x, start=n)`` never share a key for the sequential and url shapes
    (their keys carry a running number); uuid and random keys are 122 and 128 random bits, so
    two streams sharing one is too unlikely to matter.
    """
    if shape not in KEY_SHAPES:
        raise ValueError(f"unknown key shape {shape!r}; choose one of {', '.join(KEY_SHAPES)}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a non-negative int, not {count!r}")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be a non-negative int, not {start!r}")
    if shape == "sequential":
        return [f"id:{i}" for i in range(start, start + count)]
    # One random stream per (shape, seed, start): distinct starts give distinct streams.
    rng = random.Random(f"ling_bloom:{shape}:{seed}:{start}")
    if shape == "random":
        blob = rng.randbytes(16 * count)
        return [blob[i:i + 16] for i in range(0, 16 * count, 16)]
    if shape == "uuid":
        h = rng.randbytes(16 * count).hex()
        return [
            f"{h[j:j + 8]}-{h[j + 8:j + 12]}-4{h[j + 13:j + 16]}-"
            f"{'89ab'[int(h[j + 16], 16) & 3]}{h[j + 17:j + 20]}-{h[j + 20:j + 32]}"
            for j in range(0, 32 * count, 32)
        ]
    # url: a running product number and a random slug
    h = rng.randbytes(6 * count).hex()
    return [
        f"https://shop.example.com/products/{start + i}/{h[12 * i:12 * i + 12]}"
        for i in range(count)
    ]


# --------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Row:
    """One checkpoint of an experiment."""

    keys_added: int
    """keys in the filter at this checkpoint"""
    load: float
    """keys_added / the capacity the filter was sized for (initial capacity for scalable)"""
    fill: Optional[float]
    """fraction of bits (counters) set, None where the filter cannot tell (scalable: whole chain)"""
    false_positives: int
    """never-added keys that tested present"""
    probes: int
    """never-added keys tested"""
    measured_rate: float
    """false_positives / probes"""
    theoretical_rate: float
    """the rate of ideal hashing for the geometry and keys at this checkpoint (exact, see
    ling_bloom.ideal_false_positive_rate; per stage, combined, for a scalable filter); NaN
    where the filter does not expose its geometry"""
    nbytes: int
    """memory of the filter's bits or counters"""
    stages: Optional[int] = None
    """stages of a scalable filter, None for the others"""

    @property
    def ratio(self) -> float:
        """measured / theoretical (NaN when theory is 0 or unknown)."""
        t = self.theoretical_rate
        if not t or math.isnan(t):
            return math.nan
        return self.measured_rate / t


def _fmt_rate(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if v == 0:
        return "0"
    return f"{v * 100:.4g}%" if v >= 1e-5 else f"{v:.3g}"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


@dataclass
class Experiment:
    """The result of run_experiment(): its parameters and one Row per checkpoint.

    It behaves as a list of rows (``len``, iteration, indexing); ``to_dicts()`` gives plain
    dicts (what ``pandas.DataFrame`` takes, if you have pandas), ``to_markdown()`` a table.
    """

    filter_type: str
    hash: str
    key_shape: str
    capacity: int
    error_rate: Optional[float]
    seed: int
    m: Optional[int] = None
    k: Optional[int] = None
    rows: List[Row] = field(default_factory=list)
    label: Optional[str] = None
    stage_info: List[Dict[str, Any]] = field(default_factory=list)
    """a scalable filter's stages() at the end (capacity, count, m, k, error_rate each)"""

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    @overload
    def __getitem__(self, i: int) -> Row: ...

    @overload
    def __getitem__(self, i: slice) -> List[Row]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[Row, List[Row]]:
        return self.rows[i]

    @property
    def title(self) -> str:
        """A one-line description, used as the plots' label."""
        if self.label:
            return self.label
        geo = f"m={self.m:,} k={self.k}" if self.m is not None else ""
        rate = f" p={self.error_rate:g}" if self.error_rate is not None else ""
        return (f"{self.filter_type} n={self.capacity:,}{rate} {geo} hash={self.hash} "
                f"keys={self.key_shape}").replace("  ", " ").strip()

    @property
    def final(self) -> Row:
        """The last checkpoint."""
        return self.rows[-1]

    def to_dicts(self) -> List[Dict[str, Any]]:
        """The rows as dicts (keys as Row's fields, plus ``ratio``)."""
        out = []
        for r in self.rows:
            d = asdict(r)
            d["ratio"] = r.ratio
            out.append(d)
        return out

    def _table(self) -> Tuple[List[str], List[List[str]]]:
        scal = any(r.stages is not None for r in self.rows)
        head = ["keys added", "load", "fill", "measured", "theory", "measured / theory",
                "false positives", "memory"]
        if scal:
            head.append("stages")
        body = []
        for r in self.rows:
            ratio = r.ratio
            line = [
                f"{r.keys_added:,}",
                f"{r.load:.2f}",
                "n/a" if r.fill is None else f"{r.fill:.3f}",
                _fmt_rate(r.measured_rate),
                _fmt_rate(r.theoretical_rate),
                "n/a" if math.isnan(ratio) else "-" if not r.false_positives else f"{ratio:.2f}",
                f"{r.false_positives:,} / {r.probes:,}",
                _fmt_bytes(r.nbytes),
            ]
            if scal:
                line.append("" if r.stages is None else str(r.stages))
            body.append(line)
        return head, body

    def to_markdown(self) -> str:
        """A Markdown table, one line per checkpoint, under a line naming the experiment."""
        head, body = self._table()
        right = {0, 1, 2, 3, 4, 5, 6, 7, 8}
        lines = [
            f"{self.title}",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines) + "\n"

    def _repr_html_(self) -> str:
        head, body = self._table()
        th = "".join(f"<th>{escape(h)}</th>" for h in head)
        trs = "".join(
            "<tr>" + "".join(f"<td style=\"text-align:right\">{escape(c)}</td>" for c in row)
            + "</tr>"
            for row in body
        )
        return (f"<div><strong>{escape(self.title)}</strong>"
                f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table></div>")

    def __str__(self) -> str:
        return self.to_markdown()

    def __repr__(self) -> str:
        last = self.rows[-1] if self.rows else None
        tail = (f", final: {last.keys_added:,} keys, measured {_fmt_rate(last.measured_rate)}, "
                f"theory {_fmt_rate(last.theoretical_rate)}") if last else ""
        return f"<Experiment {self.title}: {len(self.rows)} rows{tail}>"


# --------------------------------------------------------------------------------------
# Running


def theoretical_rate(f: Any, keys_added: Optional[int] = None) -> float:
    """The rate ideal hashing gives for filter f now: what its measured rate should match.

    Fixed filters: the exact expected rate of m bits and k independent uniform indices after
    n keys (:func:`ling_bloom.ideal_false_positive_rate`), n = keys_added (or, without it, the
    filter's own approximate_count(); a BlockedFilter's is that of its blocks,
    ``BlockedFilter.ideal_false_positive_rate``).  For large m it equals (1 - e^(-kn/m))^k; for small m
    that formula undershoots (it ignores a key's repeated indices).  Scalable filters:
    1 - prod(1 - rate of each stage), each stage with its own m, k and count.  NaN when f
    exposes neither geometry nor stages.
    """
    stages = getattr(f, "stages", None)
    if callable(stages):
        ok = 1.0
        for s in stages():
            ok *= 1.0 - ideal_false_positive_rate(s["m"], s["k"], s["count"])
        return 1.0 - ok
    m = getattr(f, "m", None)
    k = getattr(f, "k", None)
    if isinstance(m, int) and isinstance(k, int):
        n = keys_added if keys_added is not None else f.approximate_count()
        if isinstance(f, lb.BlockedFilter):  # one 512-bit block per key: its own theory
            return lb.BlockedFilter.ideal_false_positive_rate(m, k, n)
        return ideal_false_positive_rate(m, k, n)
    return math.nan


@dataclass(frozen=True)
class ManyFilters:
    """The false-positive rate of many independent filters of one geometry, against ideal
    hashing (:func:`fpr_over_filters`)."""

    filter_type: str
    hash: str
    n: int
    """keys added to each filter"""
    m: int
    k: int
    filters: int
    probes: int
    """never-added keys tested per filter"""
    false_positives: int
    """over all filters"""
    measured_rate: float
    """false_positives / (filters * probes)"""
    ideal_rate: float
    """ling_bloom.ideal_false_positive_rate(m, k, n): the expected rate of ideal hashing"""
    stderr: float
    """standard error of measured_rate, from the spread between filters"""

    @property
    def ratio(self) -> float:
        """measured / ideal (NaN when ideal is 0)."""
        return self.measured_rate / self.ideal_rate if self.ideal_rate else math.nan

    @property
    def ratio_stderr(self) -> float:
        """standard error of ratio."""
        return self.stderr / self.ideal_rate if self.ideal_rate else math.nan

    def z(self) -> float:
        """(measured - ideal) / stderr: how many standard errors the filters are off."""
        return (self.measured_rate - self.ideal_rate) / self.stderr if self.stderr else math.nan

    def __str__(self) -> str:
        return (f"{self.filter_type} hash={self.hash} n={self.n:,} m={self.m:,} k={self.k}: "
                f"{self.filters:,} filters x {self.probes:,} probes, measured "
                f"{_fmt_rate(self.measured_rate)}, ideal {_fmt_rate(self.ideal_rate)}, "
                f"ratio {self.ratio:.3f} +- {self.ratio_stderr:.3f}")


def fpr_over_filters(
    n: int,
    p: Optional[float] = None,
    *,
    m: Optional[int] = None,
    k: Optional[int] = None,
    kind: str = "memory",
    hash: str = "xxh3-mix",
    filters: int = 1000,
    probes: int = 1000,
    seed: int = 0,
) -> ManyFilters:
    """Build ``filters`` independent filters, add n keys to each and test ``probes`` keys that
    were never added, then compare the rate over all of them with ideal hashing.

    One filter of a small geometry says little: its rate depends on which few bits its keys
    happened to set.  Averaged over many, the rate must match the exact expected rate of k
    independent uniform indices per key (``ideal_rate``); ``stderr`` comes from the spread of
    the filters' own counts, so ``z()`` of a few means the hashing behaves as ideal.  The
    geometry is ``geometry(n, p)`` when p is given (what ``MemoryFilter(n, p)`` builds), or
    m and k.  kind: "memory", "counting" or "blocked" (BlockedFilter: its own geometry,
    ``BlockedFilter.geometry(n, p)``, and its own ideal rate,
    ``BlockedFilter.ideal_false_positive_rate``).  Keys are distinct str per filter and seed.
    """
    cls = {"memory": lb.MemoryFilter, "counting": lb.CountingFilter,
           "blocked": lb.BlockedFilter}.get(kind)
    if cls is None:
        raise ValueError(f"kind must be 'memory', 'counting' or 'blocked', not {kind!r}")
    blocked = cls is lb.BlockedFilter
    if blocked and hash != "xxh3-mix":
        raise ValueError("a blocked filter has one hash (XXH3-64, the split-block walk)")
    if (m is None) != (k is None):
        raise ValueError("give both m and k, or neither")
    if m is None:
        p_ = 0.01 if p is None else p
        m, k = lb.BlockedFilter.geometry(n, p_) if blocked else lb.geometry(n, p_, hash=hash)
    assert k is not None
    if n < 1 or filters < 2 or probes < 1:
        raise ValueError("n and probes must be at least 1, filters at least 2")
    counts = []
    for i in range(filters):
        f = cls(m=m, k=k) if blocked else cls(m=m, k=k, hash=hash)
        tag = f"{seed}:{i}:"
        f.update([f"{tag}a{j}" for j in range(n)])
        counts.append(sum(f.test_many([f"{tag}z{j}" for j in range(probes)])))
    total = sum(counts)
    mean = total / filters
    var = sum((c - mean) ** 2 for c in counts) / (filters - 1)
    return ManyFilters(
        filter_type=cls.__name__, hash="xxh3-block" if blocked else hash, n=n, m=m, k=k, filters=filters, probes=probes,
        false_positives=total, measured_rate=total / (filters * probes),
        ideal_rate=(lb.BlockedFilter.ideal_false_positive_rate(m, k, n) if blocked
                    else ideal_false_positive_rate(m, k, n)),
        stderr=math.sqrt(var / filters) / probes)


def _checkpoints(total: int, checkpoints: Union[int, Sequence[int]], spacing: str) -> List[int]:
    if isinstance(checkpoints, bool):
        raise ValueError("checkpoints must be a count or a list of key counts")
    if isinstance(checkpoints, int):
        if checkpoints < 1:
            raise ValueError(f"checkpoints must be at least 1, not {checkpoints}")
        c = min(checkpoints, total)
        if spacing == "linear":
            pts = {round(total * (i + 1) / c) for i in range(c)}
        elif spacing == "log":
            lo = max(1.0, total / 1000.0) if c > 1 else float(total)
            pts = {round(lo * (total / lo) ** (i / max(1, c - 1))) for i in range(c)}
        else:
            raise ValueError(f"spacing must be 'linear' or 'log', not {spacing!r}")
        pts.add(total)
        return sorted(p for p in pts if p >= 1)
    pts_list = sorted({int(p) for p in checkpoints})
    if not pts_list or pts_list[0] < 1:
        raise ValueError("checkpoints must be positive key counts")
    return pts_list


def _make_filter(kind: FilterSpec, n: int, p: Optional[float], m: Optional[int],
                 k: Optional[int], hash: str, kwargs: Dict[str, Any]) -> Tuple[Any, str]:
    if isinstance(kind, str):
        cls = FILTER_KINDS.get(kind.lower())
        if cls is None:
            raise ValueError(f"unknown filter type {kind!r}; choose one of "
                             f"{', '.join(FILTER_KINDS)} (or pass a class or a factory)")
    elif isinstance(kind, type):
        cls = kind
    elif callable(kind):
        f = kind()
        return f, type(f).__name__
    else:
        raise TypeError(f"filter type must be a name, a class or a factory, not {kind!r}")
    name = cls.__name__
    if cls is lb.BlockedFilter:
        # one hashing scheme of its own ("xxh3-block"): the hash argument does not apply
        if hash not in ("xxh3-mix", "xxh3-block"):
            raise ValueError(f"a BlockedFilter hashes with xxh3-block only, not {hash!r}")
        if m is not None or k is not None:
            if m is None or k is None:
                raise ValueError("give both m and k, or neither")
            return cls(m=m, k=k, **kwargs), name
        return cls(n, 0.01 if p is None else p, **kwargs), name
    if cls is lb.ScalableFilter:
        if m is not None or k is not None:
            raise ValueError("a ScalableFilter is sized by n and p, not m and k")
        return cls(n, 0.01 if p is None else p, hash=hash, **kwargs), name
    if m is not None or k is not None:
        if m is None or k is None:
            raise ValueError("give both m and k, or neither")
        return cls(m=m, k=k, hash=hash, **kwargs), name
    return cls(n, 0.01 if p is None else p, hash=hash, **kwargs), name


def default_probes(p: Optional[float]) -> int:
    """Never-added keys to test: enough for about 200 false positives at rate p
    (so the measured rate is within about 15% of the truth, two standard deviations),
    between 20,000 and 1,000,000."""
    if p is None or not (0 < p < 1):
        return 100_000
    return int(min(1_000_000, max(20_000, math.ceil(200 / p))))


def run_experiment(
    filter_type: FilterSpec = "memory",
    n: int = 100_000,
    p: Optional[float] = 0.01,
    *,
    keys: str = "sequential",
    probe_keys: Optional[str] = None,
    hash: str = "xxh3-mix",
    m: Optional[int] = None,
    k: Optional[int] = None,
    checkpoints: Union[int, Sequence[int]] = 10,
    spacing: str = "linear",
    load: float = 1.0,
    probes: Optional[int] = None,
    seed: int = 0,
    label: Optional[str] = None,
    **filter_kwargs: Any,
) -> Experiment:
    """Fill a filter in steps and measure its false-positive rate at each step.

    filter_type: ``"memory"``, ``"counting"``, ``"scalable"``, a filter class taking
        ``(capacity, error_rate, hash=...)`` / ``(m=, k=, hash=)``, or a factory: a callable
        with no arguments returning an empty filter (how to measure a RedisFilter, e.g.
        ``lambda: RedisFilter(url, "exp", 100_000, 0.01)``; hash, m, k then are its own).
    n, p: the capacity and rate the filter is sized for (initial capacity for scalable); or
        give ``m`` and ``k`` for a fixed geometry (n still sets the load scale).
    keys: the shape of the added keys (see KEY_SHAPES); probe_keys: the shape of the
        never-added ones (the same by default).
    checkpoints: how many measurements (spread by ``spacing``, "linear" or "log") or the list
        of key counts at which to measure.
    load: how far to fill, as a multiple of n (2.0 overfills to twice the capacity; a
        scalable filter grows over it).
    probes: never-added keys tested at each checkpoint (default: default_probes(p)).
    seed: the key streams' seed; the same arguments give the same rows.
    Extra keyword arguments go to the filter's constructor (growth_ratio=, fpr_ratio=...).
    """
    for name, v in (("n", n),):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, not {v!r}")
    if not (isinstance(load, (int, float)) and math.isfinite(load) and load > 0):
        raise ValueError(f"load must be a positive number, not {load!r}")
    if probe_keys is None:
        probe_keys = keys
    for s in (keys, probe_keys):
        if s not in KEY_SHAPES:
            raise ValueError(f"unknown key shape {s!r}; choose one of {', '.join(KEY_SHAPES)}")
    total = max(1, round(n * load))
    if probes is None:
        probes = default_probes(p)
    if isinstance(probes, bool) or not isinstance(probes, int) or probes < 1:
        raise ValueError(f"probes must be a positive int, not {probes!r}")
    points = _checkpoints(total, checkpoints, spacing)
    total = points[-1]

    f, type_name = _make_filter(filter_type, n, p, m, k, hash, filter_kwargs)
    try:
        added = make_keys(keys, total, seed=seed)
        # Never-added keys: the sequential/url shapes carry on the numbering past the added
        # keys; the random shapes come from another stream (start offsets it).
        absent = make_keys(probe_keys, probes, seed=seed, start=total)
        exp = Experiment(
            filter_type=type_name,
            hash=str(getattr(f, "hash", hash)),
            key_shape=keys if probe_keys == keys else f"{keys} / {probe_keys}",
            capacity=n,
            error_rate=getattr(f, "error_rate", p),
            seed=seed,
            m=getattr(f, "m", None) if not hasattr(f, "stages") else None,
            k=getattr(f, "k", None) if not hasattr(f, "stages") else None,
            label=label,
        )
        done = 0
        has_fill = callable(getattr(f, "fill_ratio", None))
        has_stages = callable(getattr(f, "stages", None))
        for point in points:
            if point > done:
                f.update(added[done:point])
                done = point
            fp = sum(f.test_many(absent))
            exp.rows.append(Row(
                keys_added=done,
                load=done / n,
                fill=f.fill_ratio() if has_fill else None,
                false_positives=fp,
                probes=probes,
                measured_rate=fp / probes,
                theoretical_rate=theoretical_rate(f, done),
                nbytes=int(f.nbytes),
                stages=int(f.num_sub_filters) if has_stages else None,
            ))
        if has_stages:
            exp.stage_info = [dict(s) for s in f.stages()]
        return exp
    finally:
        close = getattr(f, "close", None)
        if callable(close):
            close()


# --------------------------------------------------------------------------------------
# Plots


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            "plotting needs matplotlib, an optional extra: pip install 'ling_bloom[plot]' "
            "(or pip install matplotlib)"
        ) from exc
    import os

    if not os.environ.get("DISPLAY") and not os.environ.get("MPLBACKEND"):
        # Headless (a script, CI, the command line): draw to files.  Inside a notebook the
        # kernel has already chosen its inline backend, which this does not change.
        try:
            import sys

            if "ipykernel" not in sys.modules:
                matplotlib.use("Agg")
        except Exception:  # pragma: no cover
            pass
    import matplotlib.pyplot as plt

    return plt


def _axes(ax: Any, figsize: Tuple[float, float]) -> Any:
    if ax is not None:
        return ax
    plt = _pyplot()
    _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def plot_fpr(
    experiments: Union[Experiment, Sequence[Experiment]],
    ax: Any = None,
    *,
    x: str = "keys",
    log: bool = True,
    title: Optional[str] = None,
    figsize: Tuple[float, float] = (7.0, 4.2),
) -> Any:
    """Measured false-positive rate (markers) against theory (line) as filters fill.

    experiments: one Experiment or several (one colour each).  x: ``"keys"`` (keys added) or
    ``"load"`` (keys added / capacity).  Each experiment's target rate is a dotted line.
    Returns the matplotlib Axes (``ax.figure.savefig(path)`` writes it to a file).
    """
    exps = [experiments] if isinstance(experiments, Experiment) else list(experiments)
    if not exps:
        raise ValueError("nothing to plot: no experiments")
    if x not in ("keys", "load"):
        raise ValueError(f"x must be 'keys' or 'load', not {x!r}")
    ax = _axes(ax, figsize)
    targets = set()
    floor = 1.0
    # Experiments on the same geometry share one theory curve: draw it once.
    curves = [([r.keys_added if x == "keys" else r.load for r in e.rows],
               [r.theoretical_rate for r in e.rows]) for e in exps]
    shared = len(exps) > 1 and all(c == curves[0] for c in curves)
    if shared:
        ax.plot(*curves[0], "-", color="0.2", alpha=0.8, label="theory (same m, k for all)")
    for i, e in enumerate(exps):
        color = f"C{i % 10}"
        xs, theory = curves[i]
        if not shared:
            ax.plot(xs, theory, "-", color=color, alpha=0.8, label=f"theory: {e.title}")
        # Measured, with two binomial standard deviations; checkpoints with no false
        # positive at all are below what the probes can see, and left out.
        pts = [(xv, r) for xv, r in zip(xs, e.rows) if r.false_positives]
        if pts:
            ys = [r.measured_rate for _, r in pts]
            err = [2 * math.sqrt(r.false_positives * (1 - r.measured_rate)) / r.probes
                   for _, r in pts]
            lo = [min(err_i, y * 0.999) for err_i, y in zip(err, ys)]
            ax.errorbar([xv for xv, _ in pts], ys, yerr=[lo, err], fmt="o", color=color, ms=4,
                        capsize=2, lw=1, label=f"measured: {e.title}")
        floor = min(floor, 0.5 / max(1, min(r.probes for r in e.rows)))
        if e.error_rate is not None and e.error_rate not in targets:
            targets.add(e.error_rate)
            ax.axhline(e.error_rate, color="0.4", ls=":", lw=1)
            ax.annotate(f"target {e.error_rate:g}", xy=(0.005, e.error_rate),
                        xycoords=("axes fraction", "data"), va="bottom", fontsize=8,
                        color="0.3")
    if log:
        ax.set_yscale("log")
        ax.set_ylim(bottom=floor)
    ax.set_xlabel("keys added" if x == "keys" else "keys added / capacity")
    ax.set_ylabel("false-positive rate")
    if x == "keys":
        ax.xaxis.set_major_formatter(_thousands())
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7.5, loc="lower right")
    ax.set_title(title or "False-positive rate as the filter fills: measured vs theory",
                 fontsize=10)
    return ax


def _thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    def fmt(v: float, _pos: int) -> str:
        if abs(v) >= 1e6:
            return f"{v / 1e6:g}M"
        if abs(v) >= 1e3:
            return f"{v / 1e3:g}k"
        return f"{v:g}"

    return FuncFormatter(fmt)


def plot_scalable_growth(
    experiment: Experiment,
    ax: Any = None,
    *,
    title: Optional[str] = None,
    figsize: Tuple[float, float] = (7.0, 4.2),
) -> Any:
    """A scalable filter's false-positive rate as it grows, each new stage marked.

    Plots the measured rate, the rate its stages promise together (theory), and the bound
    ``error_rate`` the whole chain keeps; a dashed vertical line where each stage was
    added, and the memory on a second axis.  Returns the Axes.
    """
    rows = experiment.rows
    if not rows or rows[0].stages is None:
        raise ValueError("plot_scalable_growth needs an experiment on a ScalableFilter "
                         "(its rows carry stage counts)")
    ax = _axes(ax, figsize)
    xs = [r.keys_added for r in rows]
    ax.plot(xs, [r.theoretical_rate for r in rows], "-", color="C0", label="theory (all stages)")
    ax.plot(xs, [r.measured_rate if r.false_positives else math.nan for r in rows], "o",
            color="C0", ms=4, label="measured")
    if experiment.error_rate is not None:
        ax.axhline(experiment.error_rate, color="C3", ls=":", lw=1.2,
                   label=f"bound error_rate = {experiment.error_rate:g}")
    # Stage j starts once the stages before it hold their keys: at the sum of their counts.
    start = 0
    for j, st in enumerate(experiment.stage_info):
        if j > 0:
            ax.axvline(start, color="0.5", ls="--", lw=0.8,
                       label="a new stage starts" if j == 1 else None)
            ax.annotate(f"{j + 1}", xy=(start, 1.0), xycoords=("data", "axes fraction"),
                        ha="center", va="bottom", fontsize=7, color="0.3")
        start += int(st["count"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("keys added")
    ax.set_ylabel("false-positive rate")
    ax.xaxis.set_major_formatter(_thousands())
    ax.grid(True, which="both", alpha=0.25)
    mem = ax.twinx()
    mem.plot(xs, [r.nbytes / 1024 for r in rows], "-", color="C2", alpha=0.6, lw=1)
    mem.set_yscale("log")
    mem.set_ylabel("memory (KiB)", color="C2")
    mem.tick_params(axis="y", colors="C2")
    lines, labels = ax.get_legend_handles_labels()
    lines += mem.get_lines()[:1]
    labels += ["memory (right axis)"]
    ax.legend(lines, labels, fontsize=7.5, loc="lower right")
    ax.set_title(title or f"ScalableFilter growing from {experiment.capacity:,} keys "
                 f"(numbers on top: stages)", fontsize=10, pad=16)
    return ax
