"""The notebooks are committed with their outputs, and a re-execution leaves those outputs unchanged: each
notebook is executed again (tools/run_nbs.py --check: in one process, `#| slow` cells skipped, progress bars off)
and what a reader sees of its outputs (texts, tables, the pixel size of each figure) is compared with the file."""
import subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT/"nbs").glob("[0-9][0-9]*_*.ipynb")) + [ROOT/"nbs"/"index.ipynb"]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_reexecution_leaves_the_committed_outputs_unchanged(nb):
    r = subprocess.run([sys.executable, str(ROOT/"tools"/"run_nbs.py"), "--check", str(nb)],
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, (f"{nb.name}: a re-execution changes its outputs or fails; run "
                               f"`.venv/bin/python tools/run_nbs.py {nb.relative_to(ROOT)}` and commit\n{r.stderr[-3000:]}")


def test_every_library_notebook_shows_some_outputs():
    import nbformat
    bare = [p.stem for p in NOTEBOOKS if not any(c.get("outputs") for c in nbformat.read(p, as_version=4).cells
                                                  if c.cell_type == "code")]
    assert not bare, f"notebooks committed without any output: {bare}"
