"""Regenerate the results page (`nbs/results.ipynb`) from the results index of a results folder.

    .venv/bin/python tools/results_page.py [RESULTS]   # default: results/ (the README's main job writes there)

Executes the page in place (tools/run_nbs.py): its first table lists every complete run folder under RESULTS as
`cwm-nb index` does. Commit the page afterwards; the docs site (tools/docs.py) renders it.
"""
import os, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/"tools"))
from run_nbs import clean, execute  # noqa: E402


def main():
    results = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT/"results").resolve()
    if not results.is_dir(): sys.exit(f"results folder {results} not found: run the README's main job first, or name the folder")
    os.environ["CWM_NB_RESULTS"] = str(results)
    page = ROOT/"nbs"/"results.ipynb"
    execute(page, page); clean([page])
    print(f"results page regenerated from {results}: {page.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
