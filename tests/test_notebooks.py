"""Run every library notebook's cells (exports and their checks) the way `nbdev_test` does, one test per notebook,
so that one `pytest` run counts everything. Cells flagged `#| slow` run too (set CWM_NB_SKIP_SLOW=1 to skip them)."""
import os
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT/"nbs").glob("[0-9][0-9]*_*.ipynb"))

@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook(nb, monkeypatch):
    from nbdev.test import test_nb
    skip = ["slow"] if os.environ.get("CWM_NB_SKIP_SLOW") else []
    monkeypatch.chdir(nb.parent)
    ok, secs = test_nb(nb, skip_flags=skip, do_print=False)
    assert ok, f"{nb.name} failed (run `nbdev_test --path {nb.relative_to(ROOT)} --flags slow` to see the cell)"
