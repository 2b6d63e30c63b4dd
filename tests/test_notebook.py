"""examples/fpr.ipynb runs from top to bottom in a fresh kernel (headless), every cell
without an error, and shows what it promises: tables, plots, filters' HTML summaries."""
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "examples", "fpr.ipynb")


def test_example_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first cell that fails

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    data = [o.get("data", {}) for o in outputs]
    pngs = [d for d in data if "image/png" in d]
    assert len(pngs) >= 3  # measured vs theory, xxh3 vs ling-base, scalable growth
    htmls = [d["text/html"] for d in data if "text/html" in d]
    assert any("<strong>MemoryFilter</strong>" in h for h in htmls)
    assert any("<strong>CountingFilter</strong>" in h for h in htmls)
    assert any("<strong>ScalableFilter</strong>" in h for h in htmls)
    assert any("closed" in h for h in htmls)
    assert any("keys added" in h for h in htmls)  # the experiment's table
