"""Build the docs site offline: every notebook rendered with its stored outputs and figures, the experiment
notebooks (their executed copies from a run folder when there is one), and an API reference from the docstrings
and docments, as static HTML with a search page.

    .venv/bin/python tools/docs.py                          # -> _site/index.html (open it in a browser)
    .venv/bin/python tools/docs.py --runs results figures --out _site

Why Sphinx with MyST-NB (not nbdev_docs, MkDocs or Jupyter Book): nbdev_docs needs Quarto, which cannot be
installed here; MyST-NB renders notebooks from their stored outputs without executing them
(`nb_execution_mode = "off"`), Sphinx's autodoc documents the exported API from the checkout's own modules (a
small extension, docs/_ext/cwm_docments.py, adds the docments as parameter lists), and Sphinx writes an offline
search index; all of them install from PyPI and are actively maintained. Jupyter Book 1 is the same stack
behind a wrapper and Jupyter Book 2 is a Node program; MkDocs would need mkdocs-jupyter for the notebooks and
mkdocstrings, with its own docments hook, for the API.

Nothing in `nbs/` is changed: the notebooks are staged in a temporary folder, with nbdev's `#|` directive lines
and `#| hide` cells left out, a sidebar table of contents and links added to the landing page, and widget
outputs (which need JavaScript from the internet) left out; then `sphinx-build -c docs` renders them.
"""
import argparse, ast, json, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT/"nbs"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

def library_notebooks() -> list[Path]:
    "The numbered notebooks that define cwm_nb's modules, in order."
    return sorted(NBS.glob("[0-9][0-9]*_*.ipynb"))

def experiment_notebooks() -> list[Path]:
    "The parameterized notebooks papermill runs (`nbs/experiments/*.ipynb`)."
    return sorted((NBS/"experiments").glob("*.ipynb"))

def library_modules() -> list[str]:
    "cwm_nb's modules (`cwm_nb.core`, `cwm_nb.bench.cwm`, ...), in file order, without nbdev's index or `__init__`s."
    def notebook(p: Path) -> str:   # nbdev's header names the notebook: modules come in the notebooks' order
        m = re.search(r"File to edit: (?:\.\./)+nbs/(\S+)\.ipynb", p.read_text(encoding="utf-8")[:400])
        return m.group(1) if m else p.stem
    paths = sorted((p for p in (ROOT/"cwm_nb").rglob("*.py") if not p.stem.startswith("_")), key=notebook)
    return [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in paths]

def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in node.decorator_list)

def module_page(module: str) -> str:
    """The API page of `module` (`cwm_nb.x`): its docstring, then each name of its `__all__` in order, read from
    the module's source (nothing is imported here). A dataclass's fields are left out of its members: the
    docments extension lists them, with their comments, as its parameters."""
    tree = ast.parse((ROOT/Path(*module.split("."))).with_suffix(".py").read_text(encoding="utf-8"))
    names = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)), [])
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    assigned = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    moved = [n for n in names if n not in defs and n not in assigned]   # re-exported from the module that defines it
    title = f"``{module}``"
    out = [title, "=" * len(title), "", f".. automodule:: {module}", ""]
    if moved: out += ["Also importable from here (documented where they are defined): "
                      + ", ".join(f"``{n}``" for n in moved) + ".", ""]
    for name in names:
        if name in moved: continue
        node = defs.get(name)
        if isinstance(node, ast.ClassDef):
            out += [f".. autoclass:: {module}.{name}", "   :members:", "   :undoc-members:"]
            fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                      and "ClassVar" not in ast.unparse(s.annotation)] if _is_dataclass(node) else []
            if fields: out.append(f"   :exclude-members: {', '.join(fields)}")
        elif node is not None: out.append(f".. autofunction:: {module}.{name}")
        else: out.append(f".. autodata:: {module}.{name}")
        out.append("")
    return "\n".join(out)

def _read(p: Path) -> dict: return json.loads(p.read_text(encoding="utf-8"))

def find_executed(run_dirs: list[Path]) -> dict[str, Path]:
    """The newest complete executed copy of each experiment notebook under `run_dirs`: a notebook whose papermill
    metadata names `nbs/experiments/<name>.ipynb` as its input and records no exception. Returns {name: path}."""
    found = {}
    for d in run_dirs:
        if not d.is_dir(): continue
        for p in d.rglob("*.ipynb"):
            if p.name.startswith(".") or ".ipynb_checkpoints" in p.parts: continue   # partial copies, Jupyter's
            try: pm = _read(p).get("metadata", {}).get("papermill", {})
            except (OSError, ValueError): continue
            src = Path(str(pm.get("input_path") or ""))
            if src.parent.name != "experiments" or pm.get("exception") or not pm.get("end_time"): continue
            if src.stem not in found or pm["end_time"] > found[src.stem][0]: found[src.stem] = (pm["end_time"], p)
    return {k: p for k, (_, p) in found.items()}

def _stage_cells(nb: dict) -> dict:
    "The notebook as the site shows it: no `#| hide` cells, no `#|` lines, no widget outputs or widget state."
    cells = []
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            lines = "".join(c["source"]).split("\n")
            if any(l.strip().replace(" ", "") == "#|hide" for l in lines): continue
            src = "\n".join(l for l in lines if not l.lstrip().startswith("#|")).strip("\n")
            if not src and not c.get("outputs"): continue
            c = {**c, "source": src}
            for o in c.get("outputs", []):
                if WIDGET_MIME in o.get("data", {}):
                    o["data"] = {k: v for k, v in o["data"].items() if k != WIDGET_MIME}
            c["outputs"] = [o for o in c.get("outputs", []) if o.get("output_type") not in ("display_data", "execute_result") or o["data"]]
        elif c["cell_type"] == "markdown":   # Jupyter's heading anchors keep case (#Collection-times), MyST's are lower case
            c = {**c, "source": re.sub(r"\]\(#([^)\s]+)\)", lambda m: f"](#{m.group(1).lower()})", "".join(c["source"]))}
        cells.append(c)
    nb["cells"] = cells
    nb.get("metadata", {}).pop("widgets", None)
    return nb

def _add_to_title_cell(nb: dict, text: str) -> None:
    "Append `text` to the first markdown cell (the title and summary), so it shows under the page title."
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            c["source"] = "".join(c["source"]).rstrip("\n") + "\n\n" + text
            return

def _default_exp(nb: dict) -> str | None:
    for c in nb["cells"]:
        if c["cell_type"] == "code" and (m := re.search(r"^#\|\s*default_exp\s+(\S+)", "".join(c["source"]), re.M)):
            return m.group(1)
    return None

def _write_nb(nb: dict, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb, ensure_ascii=False, indent=1), encoding="utf-8")

def _toctree(caption: str, entries: list[str]) -> str:
    return "```{toctree}\n:hidden:\n:maxdepth: 1\n:caption: " + caption + "\n\n" + "\n".join(entries) + "\n```"

PAGES = ("guide", "results")   # notebooks of prose beside the landing page (nbs/guide.ipynb, nbs/results.ipynb)

# The library notebooks come in groups, numbered by tens; the sidebar shows one section per group.
GROUPS = {"0": "Foundations", "1": "The benchmark", "2": "Search methods", "3": "WorldCoder", "4": "APPS",
          "5": "Experiments and figures", "9": "Test doubles"}

def notebook_groups(libs: list[Path]) -> list[tuple[str, list[str]]]:
    "The library notebooks by group, in order: [(caption, [stem, ...]), ...]; an unknown tens digit is its own group."
    out: dict[str, list[str]] = {}
    for p in libs: out.setdefault(GROUPS.get(p.stem[0], f"Notebooks {p.stem[0]}x"), []).append(p.stem)
    return list(out.items())

def _site_links(md: str) -> str:
    "Links written for the repository (README at the root, notebooks in nbs/) as links between the site's pages."
    md = re.sub(r"\]\(nbs/((?:%s|\d\d[a-z]?_\w+|experiments/\w+)\.ipynb[^)]*)\)" % "|".join(PAGES), r"](\1)", md)
    return md.replace("](../README.md)", "](index.ipynb)")

def _linkify_index(md: str) -> str:
    "In the landing page's table of notebooks, link each notebook and module name to its page."
    md = re.sub(r"^\| `(\d\d[a-z]?_\w+)` \| `([\w.]+)` \|", r"| [`\1`](\1.ipynb) | [`\2`](api/cwm_nb.\2.rst) |", md, flags=re.M)
    md = re.sub(r"^\| `((?:%s))\.ipynb` \|" % "|".join(PAGES), r"| [`\1.ipynb`](\1.ipynb) |", md, flags=re.M)
    md = re.sub(r"^\| `experiments/(\w+)\.ipynb` \|", r"| [`experiments/\1.ipynb`](experiments/\1.ipynb) |", md, flags=re.M)
    return _site_links(md)

SUBPACKAGES = {"cwm_nb.core": "Foundations", "cwm_nb.llm": "Foundations: the LLM interface",
               "cwm_nb.sandbox": "Foundations: the sandbox", "cwm_nb.bench": "The benchmark",
               "cwm_nb.search": "Search methods", "cwm_nb.agent": "WorldCoder", "cwm_nb.apps": "APPS",
               "cwm_nb.experiments": "Experiments and figures", "cwm_nb.testing": "Test doubles"}

def api_index(mods: list[str]) -> str:
    "The API reference's index page: one section per subpackage (as the notebook groups), its modules in order."
    out = ["API reference\n=============\n\nThe exported names of each module of ``cwm_nb`` (its ``__all__``), from "
           "the docstrings and the docments (the comment after each parameter) of the notebook that defines it.\n"]
    for pkg, caption in SUBPACKAGES.items():
        inside = [m for m in mods if m == pkg or m.startswith(pkg + ".")]
        if inside: out.append(f"{caption} (``{pkg}``)\n{'-' * (len(caption) + len(pkg) + 7)}\n\n.. toctree::\n"
                              "   :maxdepth: 1\n\n" + "".join(f"   {m}\n" for m in inside))
    rest = [m for m in mods if not any(m == k or m.startswith(k + ".") for k in SUBPACKAGES)]
    if rest: out.append("Other modules\n-------------\n\n.. toctree::\n   :maxdepth: 1\n\n" + "".join(f"   {m}\n" for m in rest))
    return "\n".join(out)

def stage(src: Path, run_dirs: list[Path]) -> dict:
    "Write the site's sources into `src`. Returns what went in: {'notebooks', 'experiments', 'executed', 'modules'}."
    libs, exps, mods = library_notebooks(), experiment_notebooks(), library_modules()
    executed = find_executed(run_dirs)
    for p in libs:
        nb = _stage_cells(_read(p))
        if (mod := _default_exp(_read(p))) and f"cwm_nb.{mod}" in mods:
            _add_to_title_cell(nb, f"API reference: [`cwm_nb.{mod}`](api/cwm_nb.{mod}.rst) · source: `nbs/{p.name}`")
        _write_nb(nb, src/p.name)
    for p in exps:
        if p.stem in executed:
            run = executed[p.stem]
            nb, pm = _stage_cells(_read(run)), _read(run)["metadata"]["papermill"]
            where = run.relative_to(ROOT) if run.is_relative_to(ROOT) else Path(*run.parts[-6:])
            note = (f"*Executed copy* of `nbs/experiments/{p.name}` from the run folder `{where.parent}`, run by papermill "
                    f"(finished {pm['end_time'][:19].replace('T', ' ')} UTC in {pm.get('duration') or 0:.0f} s; its parameters "
                    f"are in the cell marked *injected parameters*).")
        else:
            nb = _stage_cells(_read(p))
            note = (f"*As stored* in `nbs/experiments/{p.name}` (no executed copy was found in a run folder: "
                    f"`cwm-nb run` or `cwm-nb figures` makes one, then `tools/docs.py --runs results figures`).")
        _add_to_title_cell(nb, note)
        _write_nb(nb, src/"experiments"/p.name)
    (src/"api").mkdir(parents=True, exist_ok=True)
    for m in mods: (src/"api"/f"{m}.rst").write_text(module_page(m), encoding="utf-8")
    (src/"api"/"index.rst").write_text(api_index(mods), encoding="utf-8")
    pages = [p for p in PAGES if (NBS/f"{p}.ipynb").exists()]
    for p in pages:
        nb = _stage_cells(_read(NBS/f"{p}.ipynb"))
        for c in nb["cells"]:
            if c["cell_type"] == "markdown": c["source"] = _site_links("".join(c["source"]))
        _write_nb(nb, src/f"{p}.ipynb")
    index = _stage_cells(_read(NBS/"index.ipynb"))
    for c in index["cells"]:
        if c["cell_type"] == "markdown": c["source"] = _linkify_index("".join(c["source"]))
    toc = "\n\n".join([_toctree("Guide", pages), *(_toctree(cap, stems) for cap, stems in notebook_groups(libs)),
                       _toctree("Experiment notebooks", [f"experiments/{p.stem}" for p in exps]),
                       _toctree("Reference", ["api/index"])])
    index["cells"].append({"cell_type": "markdown", "metadata": {}, "source": toc})
    _write_nb(index, src/"index.ipynb")
    return dict(notebooks=[p.stem for p in libs], experiments=[p.stem for p in exps],
                executed={k: str(v) for k, v in executed.items()}, modules=mods)

def _safe_to_replace(out: Path) -> bool:
    "Only an empty folder or an earlier build of this site is deleted before a build."
    return not out.exists() or not any(out.iterdir()) or ((out/"index.html").exists() and (out/"searchindex.js").exists())

def build(out: Path = ROOT/"_site", run_dirs: list[Path] | None = None, jobs: int = 1, quiet: bool = True) -> dict:
    """Stage the sources and run Sphinx into `out` (replaced). Returns {'seconds', 'pages', 'warnings', ...}.
    Raises RuntimeError with Sphinx's output if the build fails, ValueError if `out` is a folder that is not a site."""
    out = Path(out).resolve()
    run_dirs = [Path(d) for d in (run_dirs if run_dirs is not None else [ROOT/"results", ROOT/"figures"])]
    if not _safe_to_replace(out): raise ValueError(f"{out} is not empty and not a docs build; choose another --out")
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    # Everything is built in a temporary folder beside `out` (MyST-NB writes its `jupyter_execute` folder beside
    # the site folder), then moved into place: a failed build leaves the previous site as it was.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-build-") as tmp:
        src, site, warn = Path(tmp)/"src", Path(tmp)/"site", Path(tmp)/"warnings.txt"
        info = stage(src, run_dirs)
        cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(ROOT/"docs"), "-d", str(Path(tmp)/"doctrees"),
               "-j", str(jobs), "-w", str(warn), *(["-q"] if quiet else []), str(src), str(site)]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=quiet, text=True)
        warnings = [l for l in warn.read_text().splitlines() if "WARNING" in l or "ERROR" in l] if warn.exists() else []
        if r.returncode != 0:
            raise RuntimeError(f"sphinx-build failed ({r.returncode}):\n{(r.stdout or '')[-3000:]}{(r.stderr or '')[-5000:]}")
        if out.exists(): shutil.rmtree(out)
        site.rename(out)
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html") if "_static" not in p.parts)
    return dict(info, seconds=time.perf_counter() - t0, pages=pages, warnings=warnings, out=str(out))

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT/"_site", help="site folder (replaced)")
    ap.add_argument("--runs", type=Path, nargs="*", default=None,
                    help="folders searched for executed copies of the experiment notebooks (default: results figures)")
    ap.add_argument("--jobs", "-j", default="1", help="Sphinx worker processes ('auto' for one per core)")
    ap.add_argument("--verbose", action="store_true", help="show Sphinx's progress")
    a = ap.parse_args(argv)
    try: res = build(a.out, a.runs, a.jobs, quiet=not a.verbose)
    except (RuntimeError, ValueError) as e: sys.exit(f"docs: {e}")
    for w in res["warnings"][:20]: print(w, file=sys.stderr)
    if len(res["warnings"]) > 20: print(f"... {len(res['warnings']) - 20} more warnings", file=sys.stderr)
    ex = ", ".join(f"{k} <- {v}" for k, v in res["executed"].items()) or "none (notebooks as stored)"
    print(f"docs: {len(res['pages'])} pages in {res['out']} in {res['seconds']:.1f} s; {len(res['warnings'])} warnings; "
          f"executed copies: {ex}\nopen {Path(res['out'])/'index.html'}")

if __name__ == "__main__":
    main()
