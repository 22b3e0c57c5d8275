"""Write the `parameters` cell of each experiment notebook from its suite's settings (`definition.parameters_cell`).

Run after adding or changing a field of `CWMBSettings` or `AppsSettings` (nbs/50_run_definition.ipynb) or of
`AgentSettings` (nbs/52_agent_experiments.ipynb);
tests/test_experiments.py fails while a cell differs. `--check` only reports.
"""
import sys
from pathlib import Path

import nbformat

from cwm_nb.experiments.definition import parameters_cell
from cwm_nb.experiments.agent import AgentSettings

ROOT = Path(__file__).resolve().parents[1]
# a suite's name, or its settings dataclass -> its notebook
NOTEBOOKS = {"cwmb": ROOT/"nbs"/"experiments"/"cwmb.ipynb", "apps": ROOT/"nbs"/"experiments"/"apps.ipynb",
             AgentSettings: ROOT/"nbs"/"experiments"/"worldcoder.ipynb"}


def stale() -> list[Path]:
    "The notebooks whose `parameters` cell differs from the one their suite's settings make."
    out = []
    for suite, path in NOTEBOOKS.items():
        cell = next(c for c in nbformat.read(path, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
        if cell.source != parameters_cell(suite): out.append(path)
    return out


def main(check: bool = False) -> int:
    for suite, path in NOTEBOOKS.items():
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        if cell.source == parameters_cell(suite): continue
        print(f"{'stale' if check else 'rewrote'}: {path.relative_to(ROOT)}")
        if not check:
            cell.source = parameters_cell(suite)
            nbformat.write(nb, path)
    return 1 if check and stale() else 0


if __name__ == "__main__": sys.exit(main("--check" in sys.argv[1:]))
