"""Every notebook (the library's `nbs/NN_*.ipynb`, index and guide), executed afresh in a process of its own, one test
per notebook. One execution proves two things: every cell's checks pass, cells flagged `#| slow` included (set
CWM_NB_SKIP_SLOW=1 to skip them), and what a reader sees of the outputs (texts, tables, each figure's pixels with a
small tolerance for anti-aliasing) is what the committed file holds. It is `tools/run_nbs.py --check --slow`: cells run
in order in one in-process IPython shell, as `nbdev_test` runs them; a slow cell's outputs are not compared (they are
not committed). The mechanism's own tests are in test_notebook_outputs.py."""
import os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/"tools"))
try: from run_nbs import NOTEBOOKS   # the notebooks `run_nbs.py --all` runs
finally: sys.path.remove(str(ROOT/"tools"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook(nb):
    slow = [] if os.environ.get("CWM_NB_SKIP_SLOW") else ["--slow"]
    rel = nb.relative_to(ROOT)
    r = subprocess.run([sys.executable, str(ROOT/"tools"/"run_nbs.py"), "--check", *slow, str(nb)],
                       capture_output=True, text=True, cwd=ROOT, timeout=1500)
    assert r.returncode == 0, (f"{nb.name}: a cell fails, or a re-execution changes its outputs (the message below says "
                               f"which). If only outputs changed and the change is intended, run "
                               f"`.venv/bin/python tools/run_nbs.py {rel}` and commit\n{r.stderr[-3000:]}")


def test_every_library_notebook_shows_some_outputs():
    import nbformat
    bare = [p.stem for p in NOTEBOOKS if not any(c.get("outputs") for c in nbformat.read(p, as_version=4).cells
                                                  if c.cell_type == "code")]
    assert not bare, f"notebooks committed without any output: {bare}"
