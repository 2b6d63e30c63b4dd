"""The notebook summary of every filter: ``f._repr_html_()`` calls ``html(f)``.

A small table: type, geometry, fill, the estimated false-positive rate now, memory.  It
never raises: a closed filter says so, and a value that cannot be read (a Redis server
that went away) is shown as unavailable.  Every text is HTML-escaped.
"""
from __future__ import annotations

from html import escape
from typing import Any, Callable, List, Tuple

_UNAVAILABLE = "unavailable"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _get(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a display must not raise
        return _Failed(exc)


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __str__(self) -> str:
        return f"{_UNAVAILABLE} ({type(self.exc).__name__})"


def _fmt_int(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def _fmt_rate(v: Any) -> str:
    if isinstance(v, float):
        return f"{v * 100:.4g}%" if v >= 1e-4 or v == 0 else f"{v:.3g}"
    return str(v)


def rows(f: Any) -> List[Tuple[str, str]]:
    """The (label, value) pairs that html() shows, as plain text (also used by tests)."""
    out: List[Tuple[str, str]] = []
    closed = bool(_get(lambda: f.closed) is True)
    out.append(("state", "closed" if closed else "open"))
    hash_name = _get(lambda: f.hash)
    out.append(("hash", str(hash_name)))

    if hasattr(f, "stages"):  # ScalableFilter: a chain of stages
        out.append(("initial capacity", _fmt_int(_get(lambda: f.initial_capacity))))
        out.append(("target error rate", _fmt_rate(_get(lambda: f.error_rate))))
        out.append(("growth ratio", str(_get(lambda: f.growth_ratio))))
        if closed:
            return out
        out.append(("stages", _fmt_int(_get(lambda: f.num_sub_filters))))
        out.append(("capacity now", _fmt_int(_get(lambda: f.capacity))))
        out.append(("keys (approx.)", _fmt_int(_get(lambda: f.approximate_count()))))
    else:
        if hasattr(type(f), "m"):
            out.append(("m (bits)", _fmt_int(_get(lambda: f.m))))
            out.append(("k (hashes)", _fmt_int(_get(lambda: f.k))))
        cap = _get(lambda: f.capacity)
        if cap is not None:
            out.append(("capacity", _fmt_int(cap)))
        rate = _get(lambda: f.error_rate)
        if rate is not None:
            out.append(("target error rate", _fmt_rate(rate)))
        key = getattr(type(f), "key", None)
        if key is not None:
            out.append(("Redis key", str(_get(lambda: f.key))))
        if closed:
            return out
        if hasattr(f, "fill_ratio"):
            fill = _get(lambda: f.fill_ratio())
            out.append(("fill", f"{fill:.2%}" if isinstance(fill, float) else str(fill)))
        out.append(("keys (approx.)", _fmt_int(_get(lambda: f.approximate_count()))))
    out.append(("estimated rate now", _fmt_rate(_get(lambda: f.current_error_rate()))))
    nbytes = _get(lambda: f.nbytes)
    out.append(("memory", _human_bytes(nbytes) if isinstance(nbytes, int) else str(nbytes)))
    return out


def html(f: Any) -> str:
    """An HTML table summarising filter f (its ``_repr_html_``)."""
    name = type(f).__name__
    body = "".join(
        f"<tr><th style=\"text-align:left\">{escape(label)}</th>"
        f"<td style=\"text-align:left\">{escape(value)}</td></tr>"
        for label, value in rows(f)
    )
    return (
        f"<div class=\"ling-bloom\"><strong>{escape(name)}</strong>"
        f"<table>{body}</table></div>"
    )
