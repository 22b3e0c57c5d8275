"""Render `nbs/index.ipynb` to `README.md` offline (Quarto, which `nbdev_readme` needs, cannot be installed here).

    python tools/readme.py          # write README.md
    python tools/readme.py --check  # exit 1 if README.md is not the rendering of nbs/index.ipynb

Markdown cells are copied, with links to other notebooks (written relative to `nbs/`, so that they work in
JupyterLab and on the docs site) made relative to the repository root; code cells become ```python blocks without their `#|` directives (cells marked
`#| hide` are left out); text outputs follow as plain blocks. tests/test_nbdev_gates.py runs the check.
"""
import re, sys
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parents[1]

def render(nb_path: Path = ROOT/"nbs"/"index.ipynb") -> str:
    nb = nbformat.read(nb_path, as_version=4)
    parts = ["<!-- Generated from nbs/index.ipynb by tools/readme.py: edit the notebook, not this file. -->"]
    for c in nb.cells:
        src = c.source.strip("\n")
        if c.cell_type == "markdown":
            parts.append(re.sub(r"\]\((?![a-z]+:|/|#|nbs/|\.\./)([^)\s]+\.ipynb(?:#[^)]*)?)\)", r"](nbs/\1)", src))
        elif c.cell_type == "code":
            lines = src.split("\n")
            if any(l.strip() in ("#| hide", "#|hide") for l in lines): continue
            code = "\n".join(l for l in lines if not l.lstrip().startswith("#|")).strip("\n")
            if code: parts.append(f"```python\n{code}\n```")
            for o in c.get("outputs", []):
                txt = o.get("text") or o.get("data", {}).get("text/plain")
                if txt: parts.append("```\n" + "".join(txt).rstrip("\n") + "\n```")
    return "\n\n".join(parts) + "\n"

if __name__ == "__main__":
    text, readme = render(), ROOT/"README.md"
    if "--check" in sys.argv:
        if not readme.exists() or readme.read_text() != text:
            print("README.md is out of date: run `python tools/readme.py`", file=sys.stderr); sys.exit(1)
    else:
        readme.write_text(text)
