"""Execute notebooks in place so that they are committed with their outputs, deterministically.

    .venv/bin/python tools/run_nbs.py nbs/06_cwm.ipynb [more notebooks ...]   # or: --all
    .venv/bin/python tools/run_nbs.py --check nbs/06_cwm.ipynb                 # exit 1 if a re-execution changes outputs

Cells run in order in one in-process IPython shell (execnb, as nbdev_test does), with the notebook's folder as the
working directory; cells flagged `#| slow` are skipped and keep no outputs; progress bars are switched off
(TQDM_DISABLE=1) and matplotlib draws with the Agg backend. Then `nbdev_clean` strips what changes from run to run
(execution counts, metadata). `--check` executes a copy and compares the outputs a reader sees (text, markdown,
HTML, and the size of each image) with the committed ones.
"""
import argparse, base64, copy, io, os, struct, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW = ("#| slow", "#|slow")


def is_slow(cell) -> bool:
    return cell.cell_type == "code" and any(l.strip() in SLOW for l in cell.source.splitlines())


def execute(src: Path, dest: Path) -> None:
    "Run `src`'s cells (slow ones skipped, their outputs cleared) and write the result to `dest`. Raises on a failing cell."
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
    from execnb.nbio import read_nb, write_nb
    from execnb.shell import CaptureShell
    nb = read_nb(src)
    for c in nb.cells:
        if is_slow(c): c.outputs = []
    cwd = os.getcwd()
    os.chdir(src.parent)
    try:
        CaptureShell(path=src.parent).run_all(nb, exc_stop=True, preproc=is_slow)
    finally:
        os.chdir(cwd)
    write_nb(nb, dest)


def clean(paths: list[Path]) -> None:
    nbdev_clean = Path(sys.executable).parent/"nbdev_clean"
    for p in paths: subprocess.run([str(nbdev_clean), "--fname", str(p)], check=True, cwd=ROOT, capture_output=True)


def _png_size(b64: str) -> tuple[int, int] | None:
    raw = base64.b64decode(b64)
    return struct.unpack(">II", raw[16:24]) if raw[:8] == b"\x89PNG\r\n\x1a\n" else None


def visible(nb_path: Path) -> list:
    "What a reader sees of each code cell's outputs: texts as they are, images by their pixel size."
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
                if "image/png" in d: cell.append(("image/png", _png_size(d["image/png"])))
        out.append(cell)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--all", action="store_true", help="every library notebook (nbs/NN_*.ipynb) and index.ipynb")
    ap.add_argument("--check", action="store_true", help="execute copies and compare their outputs with the committed ones")
    a = ap.parse_args()
    paths = [p.resolve() for p in a.notebooks]
    if a.all: paths += sorted((ROOT/"nbs").glob("[0-9][0-9]*_*.ipynb")) + [ROOT/"nbs"/"index.ipynb"]
    if not paths: ap.error("name the notebooks, or pass --all")
    bad = []
    for p in paths:
        if a.check:
            with tempfile.TemporaryDirectory() as d:
                tmp = p.parent/f".{p.stem}.check.ipynb"
                try:
                    execute(p, tmp); clean([tmp])
                    if visible(tmp) != visible(p): bad.append(p)
                finally: tmp.unlink(missing_ok=True)
        else:
            execute(p, p); clean([p])
        print(("checked " if a.check else "executed ") + str(p.relative_to(ROOT)), file=sys.stderr)
    if bad:
        print("outputs differ from the committed ones (run tools/run_nbs.py on them and commit): "
              + ", ".join(str(p.relative_to(ROOT)) for p in bad), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
