"""Run examples/fpr.ipynb from top to bottom in a fresh kernel and save it with its outputs,
so that its tables and plots show wherever notebooks are rendered.

    .venv/bin/python examples/run_notebook.py            # needs the test extra (nbclient,
                                                         # ipykernel, matplotlib)

tests/docs/test_notebook.py runs it again the same way and compares with what is saved here.
"""
from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NOTEBOOK = os.path.join(HERE, "fpr.ipynb")


def execute(path: str = NOTEBOOK, workdir: "str | None" = None):
    """The notebook at path, run in a fresh kernel (cwd: workdir, a temporary directory by
    default, with this checkout first on PYTHONPATH); CellExecutionError on the first cell
    that fails."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.environ.pop("MPLBACKEND", None)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("MPLCONFIGDIR", os.path.join(tmp, "mpl"))
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": workdir or tmp}})
        client.execute()
    return nb


def main() -> int:
    import nbformat

    nb = execute()
    for cell in nb.cells:  # no run-specific noise in the file
        cell.get("metadata", {}).pop("execution", None)
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, NOTEBOOK)
    print(f"saved {NOTEBOOK} with its outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
