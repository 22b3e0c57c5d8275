"""Execute notebooks in place so that they are committed with their outputs, deterministically.

    .venv/bin/python tools/run_nbs.py nbs/14_cwm.ipynb [more notebooks ...]   # or: --all
    .venv/bin/python tools/run_nbs.py --check nbs/14_cwm.ipynb                 # exit 1 if a re-execution changes outputs
    .venv/bin/python tools/run_nbs.py --check --slow nbs/14_cwm.ipynb          # the same, `#| slow` cells run too

Cells run in order in one in-process IPython shell (execnb, as nbdev_test does), with the notebook's folder as the
working directory; cells flagged `#| slow` are skipped (run with `--slow`, as the test suite does) and keep no
outputs either way; progress bars are switched off
(TQDM_DISABLE=1) and matplotlib draws with the Agg backend. Then `nbdev_clean` strips what changes from run to run
(execution counts, metadata). `--check` executes a copy and compares the outputs a reader sees (text, markdown,
HTML, and each image's pixels, with a small tolerance for anti-aliasing) with the committed ones.
"""
import argparse, base64, io, os, struct, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW = ("#| slow", "#|slow")
# every notebook `--all` runs and the suite checks (tests/test_notebooks.py): the library's, index and guide
NOTEBOOKS = sorted((ROOT/"nbs").glob("[0-9][0-9]*_*.ipynb")) + [ROOT/"nbs"/"index.ipynb", ROOT/"nbs"/"guide.ipynb"]


def is_slow(cell) -> bool:
    return cell.cell_type == "code" and any(l.strip() in SLOW for l in cell.source.splitlines())


def execute(src: Path, dest: Path, slow: bool = False) -> None:
    """Run `src`'s cells afresh (old outputs cleared; slow ones skipped unless `slow`) and write the result to `dest`,
    slow cells without outputs. Raises on a failing cell."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
    from execnb.nbio import read_nb, write_nb
    from execnb.shell import CaptureShell
    nb = read_nb(src)
    for c in nb.cells:   # every output is made afresh: execnb leaves a cell's old output when the cell shows nothing
        if c.cell_type == "code": c.outputs = []
    cwd = os.getcwd()
    os.chdir(src.parent)
    try:
        CaptureShell(path=src.parent).run_all(nb, exc_stop=True, preproc=(lambda c: False) if slow else is_slow)
    except Exception:
        code = [c for c in nb.cells if c.cell_type == "code"]
        for i, c in enumerate(code):   # name the cell that failed: the traceback only says <ipython-input-...>
            if any(o.get("output_type") == "error" for o in c.get("outputs", [])):
                print(f"{src.name}: code cell {i} (counted from 0, code cells only) failed; it begins: "
                      f"{c.source.splitlines()[0] if c.source else ''!r}", file=sys.stderr)
                break
        raise
    finally:
        os.chdir(cwd)
    for c in nb.cells:   # what a slow cell shows is not committed: a run without it shows the same notebook
        if is_slow(c): c.outputs = []
    write_nb(nb, dest)


def clean(paths: list[Path]) -> None:
    nbdev_clean = Path(sys.executable).parent/"nbdev_clean"
    for p in paths: subprocess.run([str(nbdev_clean), "--fname", str(p)], check=True, cwd=ROOT, capture_output=True)


class Image:
    """A PNG output as a reader sees it: equal to another when both have the same pixel size and at most
    `TOLERANCE` of their pixels differ by more than a quarter of the colour range in some channel (anti-aliasing
    and font hinting differ slightly between library builds; a changed curve, bar or frame does not pass)."""
    TOLERANCE = 0.001

    def __init__(self, b64: str):
        self.raw = base64.b64decode(b64)
        self.size = struct.unpack(">II", self.raw[16:24]) if self.raw[:8] == b"\x89PNG\r\n\x1a\n" else None

    def pixels(self):
        import numpy as np
        from PIL import Image as PILImage
        return np.asarray(PILImage.open(io.BytesIO(self.raw)).convert("RGBA"), dtype=np.int16)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Image) or self.size != other.size: return False
        if self.raw == other.raw: return True
        a, b = self.pixels(), other.pixels()
        return a.shape == b.shape and float((abs(a - b).max(axis=-1) > 64).mean()) <= self.TOLERANCE

    def __repr__(self): return f"Image(size={self.size})"


def visible(nb_path: Path) -> list:
    "What a reader sees of each code cell's outputs: texts as they are, images as `Image`s (compared by their pixels)."
    import nbformat
    nb = nbformat.read(nb_path, as_version=4)
    out = []
    for c in nb.cells:
        if c.cell_type != "code": continue
        cell = []
        for o in c.get("outputs", []):
            if o.output_type == "stream": cell.append((o.name, o.text))
            elif o.output_type == "error": cell.append(("error", o.ename, o.evalue))
            else:
                d = o.get("data", {})
                for k in ("text/markdown", "text/html", "text/plain"):
                    if k in d: cell.append((k, d[k] if isinstance(d[k], str) else "".join(d[k]))); break
                if "image/png" in d: cell.append(("image/png", Image(d["image/png"])))
        out.append(cell)
    return out


def _rel(p: Path) -> str: return str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--all", action="store_true", help="every library notebook (nbs/NN_*.ipynb), index.ipynb and guide.ipynb")
    ap.add_argument("--check", action="store_true", help="execute copies and compare their outputs with the committed ones")
    ap.add_argument("--slow", action="store_true", help="run the cells flagged `#| slow` too (their outputs are not kept)")
    a = ap.parse_args()
    paths = [p.resolve() for p in a.notebooks]
    if a.all: paths += NOTEBOOKS
    if not paths: ap.error("name the notebooks, or pass --all")
    if len(paths) > 1:   # one process per notebook, as the tests run them: matplotlib's and pandas' settings do not leak
        flags = ["--check"]*a.check + ["--slow"]*a.slow
        bad = [p for p in paths if subprocess.run([sys.executable, __file__, *flags, str(p)]).returncode != 0]
        if bad: print("failed or differ from the committed outputs: " + ", ".join(_rel(p) for p in bad), file=sys.stderr)
        sys.exit(1 if bad else 0)
    bad = []
    for p in paths:
        if a.check:
            tmp = p.parent/f".{p.stem}.check.ipynb"
            try:
                execute(p, tmp, a.slow); clean([tmp])
                new, old = visible(tmp), visible(p)
                if new != old:
                    bad.append(p)
                    cells = [i for i, (n, o) in enumerate(zip(new, old)) if n != o] or ["(a different number of code cells)"]
                    print(f"{_rel(p)}: outputs differ in code cell(s) {', '.join(map(str, cells[:10]))} "
                          "(counted from 0, code cells only)", file=sys.stderr)
            finally: tmp.unlink(missing_ok=True)
        else:
            execute(p, p, a.slow); clean([p])
        print(("checked " if a.check else "executed ") + _rel(p), file=sys.stderr)
    if bad:
        print("outputs differ from the committed ones (run tools/run_nbs.py on them and commit): "
              + ", ".join(_rel(p) for p in bad), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
