"""Author a notebook from a percent-format script: `python tools/py2nb.py nbs/src.py nbs/00_core.ipynb`.

A convenience for writing notebooks in an editor; the committed source is always the `.ipynb`.
Cells start with `# %%` (code) or `# %% [markdown]` (markdown; each line prefixed with `# `).
A code cell whose first line is `# %% tags=["parameters"]` gets that tag.
"""
import json, re, sys
import nbformat

def convert(src: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "cwm-nb", "language": "python", "name": "cwm-nb"}}   # the project's kernel
    cells, cur, kind, tags = [], [], None, []
    def flush():
        if kind is None: return
        text = "\n".join(cur).strip("\n")
        if kind == "md":
            text = "\n".join(l[2:] if l.startswith("# ") else l.lstrip("#") for l in text.split("\n"))
            cells.append(nbformat.v4.new_markdown_cell(text))
        else:
            c = nbformat.v4.new_code_cell(text)
            if tags: c.metadata["tags"] = tags
            cells.append(c)
    for line in src.split("\n"):
        m = re.match(r"^# %%(.*)$", line)
        if m:
            flush(); cur = []
            rest = m.group(1).strip()
            kind = "md" if rest.startswith("[markdown]") else "code"
            t = re.search(r"tags=(\[.*\])", rest)
            tags = json.loads(t.group(1)) if t else []
        else:
            cur.append(line)
    flush()
    nb.cells = cells
    return nb

def keep_ids(nb, dst: str):
    "Reuse the cell ids (position by position) and the metadata of an existing notebook, so regenerating it does not churn diffs."
    import os
    if not os.path.exists(dst): return nb
    old = nbformat.read(dst, as_version=4)
    nb.metadata = old.metadata
    for new_c, old_c in zip(nb.cells, old.cells):
        if "id" in old_c: new_c["id"] = old_c["id"]
    return nb

if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2]
    nbformat.write(keep_ids(convert(open(src).read()), dst), dst)
