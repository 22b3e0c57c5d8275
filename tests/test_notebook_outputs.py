"""The gate of test_notebooks.py, tested on notebooks made for the purpose: `tools/run_nbs.py --check` compares what a
reader sees of each figure by its pixels (with a small tolerance for anti-aliasing), replaces a stale output, names a
failing cell, runs `#| slow` cells only when asked, and never keeps their outputs."""
import subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _png(draw) -> str:
    "A figure drawn by `draw(ax)`, as the base64 PNG a notebook stores."
    import base64, io
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(3, 2), dpi=80)
    draw(ax)
    buf = io.BytesIO(); fig.savefig(buf, format="png"); plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def test_the_gate_compares_what_a_figure_shows():
    sys.path.insert(0, str(ROOT/"tools"))
    try: from run_nbs import Image
    finally: sys.path.remove(str(ROOT/"tools"))
    import base64, io
    import numpy as np
    from PIL import Image as PILImage
    curve = _png(lambda ax: ax.plot([0, 1, 2, 3], [0, 1, 4, 9]))
    assert Image(curve) == Image(_png(lambda ax: ax.plot([0, 1, 2, 3], [0, 1, 4, 9])))    # drawn again: the same
    assert Image(curve) != Image(_png(lambda ax: ax.plot([0, 1, 2, 3], [0, 1, 4, 7])))    # one point moved
    assert Image(curve) != Image(_png(lambda ax: None))                                   # an empty plot, same size
    px = np.asarray(PILImage.open(io.BytesIO(base64.b64decode(curve))).convert("RGBA")).copy()
    px[5, 5, :3] = 255 - px[5, 5, :3]                                                     # one pixel of anti-aliasing
    buf = io.BytesIO(); PILImage.fromarray(px).save(buf, format="PNG")
    assert Image(curve) == Image(base64.b64encode(buf.getvalue()).decode())


def test_a_stale_output_is_replaced_and_caught(tmp_path):
    "A cell that no longer shows anything loses its old output on execution, and --check reports the stale one."
    import nbformat
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x = 1")   # shows nothing ...
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "'an old value'"})]   # ... but kept one
    nb.cells = [cell]
    p = tmp_path/"stale.ipynb"; nbformat.write(nb, p)
    run = lambda *a: subprocess.run([sys.executable, str(ROOT/"tools"/"run_nbs.py"), *a, str(p)], capture_output=True,
                                    text=True, cwd=ROOT, timeout=300)
    assert run("--check").returncode == 1                     # the committed output is not what a run shows
    assert run().returncode == 0
    assert nbformat.read(p, as_version=4).cells[0].outputs == []
    assert run("--check").returncode == 0


def test_a_failing_cell_is_named(tmp_path):
    "When a cell fails, run_nbs says which one (the traceback alone only says <ipython-input-...>)."
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("assert x == 2, 'x is not 2'")]
    p = tmp_path/"fails.ipynb"; nbformat.write(nb, p)
    r = subprocess.run([sys.executable, str(ROOT/"tools"/"run_nbs.py"), str(p)], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 1 and "code cell 1 (counted from 0, code cells only) failed" in r.stderr, r.stderr[-2000:]


def test_slow_cells_run_only_when_asked_and_keep_no_outputs(tmp_path):
    """A `#| slow` cell is skipped by default and run with `--slow`; a failing slow cell fails only that run, named;
    what a slow cell shows is never kept, so `--check --slow` compares the same outputs as `--check`."""
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1\nx"),
                nbformat.v4.new_code_cell("#| slow\nprint('slow ran')\nx = 2"),
                nbformat.v4.new_code_cell("x")]
    p = tmp_path/"slow.ipynb"; nbformat.write(nb, p)
    run = lambda *a: subprocess.run([sys.executable, str(ROOT/"tools"/"run_nbs.py"), *a, str(p)], capture_output=True,
                                    text=True, cwd=ROOT, timeout=300)
    assert run().returncode == 0
    shown = lambda: [[o.get("data", {}).get("text/plain", o.get("text")) for o in c.outputs]
                     for c in nbformat.read(p, as_version=4).cells]
    assert shown() == [["1"], [], ["1"]]                         # skipped: x stays 1
    assert run("--slow").returncode == 0
    assert shown() == [["1"], [], ["2"]]                         # run (x = 2), its print not kept
    assert run("--check", "--slow").returncode == 0 and run("--check").returncode == 1
    nb = nbformat.read(p, as_version=4); nb.cells[1].source = "#| slow\nassert x == 3, 'x is not 3'"
    nbformat.write(nb, p)
    assert run("--check").returncode == 1                        # the last cell shows 1, the file 2
    r = run("--check", "--slow")
    assert r.returncode == 1 and "code cell 1 (counted from 0, code cells only) failed" in r.stderr, r.stderr[-2000:]
