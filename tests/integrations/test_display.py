"""_repr_html_ of the filters: ling_bloom._display.html."""
import re

import pytest

import ling_bloom as lb
from ling_bloom import _display


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


@pytest.mark.parametrize("cls", [lb.MemoryFilter, lb.CountingFilter])
def test_fixed_filters_show_geometry_fill_rate_memory(cls):
    f = cls(1000, 0.01)
    f.update([f"k{i}" for i in range(500)])
    html = f._repr_html_()
    assert html == _display.html(f)
    text = _text(html)
    assert cls.__name__ in text
    assert f"{f.m:,}" in text and str(f.k) in text
    labels = dict(_display.rows(f))
    assert labels["fill"] == f"{f.fill_ratio():.2%}"
    assert labels["state"] == "open"
    assert labels["keys (approx.)"] == f"{f.approximate_count():,}"
    assert "estimated rate now" in labels and "memory" in labels
    assert labels["capacity"] == "1,000"


def test_scalable_shows_stages():
    s = lb.ScalableFilter(initial_capacity=100, error_rate=0.01)
    s.update([str(i) for i in range(1000)])
    labels = dict(_display.rows(s))
    assert labels["stages"] == str(s.num_sub_filters)
    assert s.num_sub_filters > 1
    assert labels["capacity now"] == f"{s.capacity:,}"


@pytest.mark.parametrize("make", [
    lambda: lb.MemoryFilter(100, 0.01),
    lambda: lb.CountingFilter(100, 0.01),
    lambda: lb.ScalableFilter(100, 0.01),
])
def test_closed_filter_renders(make):
    f = make()
    f.close()
    labels = dict(_display.rows(f))
    assert labels["state"] == "closed"
    assert "fill" not in labels and "estimated rate now" not in labels
    assert "<table>" in f._repr_html_()


def test_text_is_escaped():
    class Fake:
        closed = False
        hash = "<script>alert(1)</script>"
        m = 8
        k = 1
        capacity = None
        error_rate = None
        nbytes = 1

        def fill_ratio(self):
            return 0.5

        def approximate_count(self):
            return 1

        def current_error_rate(self):
            raise RuntimeError("server went away")

    html = _display.html(Fake())
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert "unavailable (RuntimeError)" in html
