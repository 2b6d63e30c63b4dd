"""examples/fpr.ipynb is committed with its outputs (so its plots show where notebooks are
rendered), and running it again from top to bottom in a fresh kernel gives the same
notebook: the same code cells, each without an error and with outputs of the same kinds
(streams, tables, HTML summaries, PNG plots of the same size), and the same text with its
numbers within a small tolerance (the keys are deterministic, so they are equal here; the
tolerance is for another platform's last digits).  After changing the notebook:
`.venv/bin/python examples/run_notebook.py` saves it with its new outputs."""
from __future__ import annotations

import base64
import os
import re
import struct
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "examples", "fpr.ipynb")
sys.path.insert(0, os.path.join(ROOT, "examples"))

pytestmark = pytest.mark.slow  # runs the notebook in a kernel

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _text(output):
    if output.get("output_type") == "stream":
        return {"stream:" + output["name"]: output["text"]}
    return {k: v for k, v in output.get("data", {}).items() if k.startswith("text/")}


def _png_size(b64):
    raw = base64.b64decode(b64)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", raw[16:24])


def _kinds(output):
    """What an output is, without its contents: its type, stream name, mime types, and the
    pixel size of its image."""
    kind = [output.get("output_type"), output.get("name")]
    data = output.get("data", {})
    kind.append(tuple(sorted(data)))
    if "image/png" in data:
        kind.append(_png_size(data["image/png"]))
    return tuple(kind)


def _numbers_close(saved, rerun, version):
    saved, rerun = saved.replace(version, "<version>"), rerun.replace(version, "<version>")
    # matplotlib's text reprs name an object's address: not part of what the cell shows
    saved, rerun = (re.sub(r" at 0x[0-9a-f]+", "", t) for t in (saved, rerun))
    if _NUMBER.sub("#", saved) != _NUMBER.sub("#", rerun):
        return False
    for a, b in zip(_NUMBER.findall(saved), _NUMBER.findall(rerun)):
        x, y = float(a.replace(",", "")), float(b.replace(",", ""))
        if abs(x - y) > 0.02 * max(abs(x), abs(y)) + 1e-9:
            return False
    return True


def _coalesce(outputs):
    """Consecutive stream outputs of one stream joined: how a cell's prints are cut into
    messages depends on timing, not on what the cell printed."""
    out = []
    for o in outputs:
        if (o.get("output_type") == "stream" and out and out[-1].get("output_type") == "stream"
                and out[-1]["name"] == o["name"]):
            out[-1] = dict(out[-1], text=out[-1]["text"] + o["text"])
        else:
            out.append(o)
    return out


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_committed_notebook_has_its_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = code_cells(nb)
    assert all(c.get("execution_count") for c in cells), "saved without running"
    outputs = [o for c in cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    data = [o.get("data", {}) for o in outputs]
    assert len([d for d in data if "image/png" in d]) >= 3  # theory, ling-base, growth
    htmls = [d["text/html"] for d in data if "text/html" in d]
    for what in ("<strong>MemoryFilter</strong>", "<strong>CountingFilter</strong>",
                 "<strong>ScalableFilter</strong>", "closed", "keys added"):
        assert any(what in h for h in htmls), what


def test_running_it_again_gives_the_same_notebook(tmp_path, monkeypatch):
    import ling_bloom
    from run_notebook import execute

    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    saved = nbformat.read(NOTEBOOK, as_version=4)
    rerun = execute(NOTEBOOK, str(tmp_path))  # raises on the first cell that fails

    assert [c.source for c in code_cells(rerun)] == [c.source for c in code_cells(saved)]
    assert [c.source for c in rerun.cells] == [c.source for c in saved.cells]
    for i, (a, b) in enumerate(zip(code_cells(saved), code_cells(rerun))):
        where = f"code cell {i}: {a.source.splitlines()[0]!r}"
        outs_a, outs_b = _coalesce(a.outputs), _coalesce(b.outputs)
        assert [_kinds(o) for o in outs_b] == [_kinds(o) for o in outs_a], where
        for oa, ob in zip(outs_a, outs_b):
            for mime, text in _text(oa).items():
                assert _numbers_close(text, _text(ob)[mime], ling_bloom.__version__), \
                    f"{where}, {mime}:\nsaved:\n{text}\nnow:\n{_text(ob)[mime]}"
