"""Write a notebook back out as the percent-format script `tools/py2nb.py` reads: `python tools/nb2py.py nbs/11_envs.ipynb nbs_src/11_envs.py`.

The inverse of py2nb, for editing a committed notebook in a text editor (the `.ipynb` stays the source)."""
import json, sys
import nbformat

def convert(nb: nbformat.NotebookNode) -> str:
    out = []
    for c in nb.cells:
        if c.cell_type == "markdown":
            out.append("# %% [markdown]\n" + "\n".join(("# " + l) if l else "#" for l in c.source.split("\n")))
        elif c.cell_type == "code":
            tags = c.metadata.get("tags")
            head = "# %%" + (f" tags={json.dumps(tags)}" if tags else "")
            out.append(head + "\n" + c.source)
    return "\n\n".join(out) + "\n"

if __name__ == "__main__":
    src, dst = sys.argv[1:3]
    with open(dst, "w") as f: f.write(convert(nbformat.read(src, as_version=4)))
