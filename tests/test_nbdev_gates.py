"""The nbdev-ci gates, inside the test suite: notebooks clean, library in sync with notebooks, README in sync with
nbs/index.ipynb, and .ci/run calling the README's test command."""
import re, shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

def _copy_project(tmp: Path) -> Path:
    dst = tmp/"proj"
    dst.mkdir()
    for name in ("settings.ini", "pyproject.toml"): shutil.copy(ROOT/name, dst/name)
    shutil.copytree(ROOT/"nbs", dst/"nbs", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(ROOT/"cwm_nb", dst/"cwm_nb", ignore=shutil.ignore_patterns("__pycache__"))
    return dst

def _snapshot(d: Path, pattern: str) -> dict:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.glob(pattern))}

def test_notebooks_are_clean(tmp_path):
    proj = _copy_project(tmp_path)
    before = _snapshot(proj, "nbs/**/*.ipynb")
    subprocess.run([str(BIN/"nbdev_clean")], cwd=proj, check=True, capture_output=True)
    after = _snapshot(proj, "nbs/**/*.ipynb")
    dirty = [k for k in before if before[k] != after.get(k)]
    assert not dirty, f"notebooks not clean (run nbdev_clean and commit): {dirty}"

def test_library_in_sync_with_notebooks(tmp_path):
    proj = _copy_project(tmp_path)
    before = _snapshot(proj, "cwm_nb/**/*.py")
    subprocess.run([str(BIN/"nbdev_export")], cwd=proj, check=True, capture_output=True)
    after = _snapshot(proj, "cwm_nb/**/*.py")
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"cwm_nb/ out of sync with nbs/ (run nbdev_export and commit): {changed}"

def test_readme_in_sync_with_index():
    r = subprocess.run([sys.executable, str(ROOT/"tools"/"readme.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

def _readme_commands() -> list[str]:
    text = (ROOT/"README.md").read_text()
    block = re.search(r"## Set up.*?```(?:bash|sh)\n(.*?)```", text, re.S)
    assert block, "README.md needs a '## Set up' section with a bash block"
    return [l for l in block.group(1).splitlines() if l.strip() and not l.lstrip().startswith("#")]

def test_readme_has_exactly_two_setup_commands():
    cmds = _readme_commands()
    assert len(cmds) == 2, cmds
    assert "cwm-nb run cwmb" in cmds[0] and "pytest" in cmds[1]

def test_ci_runs_the_readme_test_command():
    ci = (ROOT/".ci"/"run").read_text()
    assert _readme_commands()[1] in ci


# ---------------------------------------------------------------- how the notebooks read (issue "The method reads first")
sys.path.insert(0, str(ROOT/"tools"))
import nb_stats   # tools/nb_stats.py

def test_no_library_notebook_imports_its_own_module():
    "A notebook defines before it uses: re-run from the top after an edit, it shows the edit without nbdev_export."
    import nbformat
    offenders = {p.stem: n for p in sorted((ROOT/"nbs").glob("[0-9][0-9]*_*.ipynb"))
                 if (n := nb_stats.self_imports(nbformat.read(p, as_version=4)))}
    assert not offenders, f"notebooks importing their own module: {offenders}"

# ---------------------------------------------------------------- the layout (issue "The house shows its plan")
import layout   # tools/layout.py

EDGES = layout.imports()

def _notebook_of() -> dict[str, str]:
    "Each exported module's notebook stem, read from nbdev's header."
    out = {}
    for mod, p in layout.modules().items():
        if m := re.search(r"File to edit: (?:\.\./)+nbs/(\S+)\.ipynb", p.read_text()[:400]): out[mod] = m.group(1)
    return out

def test_subpackages_follow_the_notebook_groups():
    "Each group of notebooks (tens digit) exports into one subpackage (foundations: core, llm, sandbox)."
    groups = {"0": {"cwm_nb.core", "cwm_nb.llm", "cwm_nb.sandbox"}, "1": {"cwm_nb.bench"}, "2": {"cwm_nb.search"},
              "3": {"cwm_nb.agent"}, "4": {"cwm_nb.apps"}, "5": {"cwm_nb.experiments"}, "9": {"cwm_nb.testing"}}
    wrong = {mod: nb for mod, nb in _notebook_of().items()
             if not any(mod == g or mod.startswith(g + ".") for g in groups[nb[0]])}
    assert not wrong, f"modules outside their group's subpackage: {wrong}"
    assert [m for m, p in layout.modules().items() if p.parent == layout.PKG and p.name != "__init__.py"] == ["cwm_nb.core"]

def test_a_module_imports_only_modules_of_earlier_notebooks():
    """The numbering shows the architecture: a module imports, at its top or inside a function, only the modules of
    earlier notebooks (so lower groups never import higher ones, and no import closes a cycle)."""
    nb = _notebook_of()
    late = sorted({(a, b) for a, b, *_ in EDGES if a in nb and b in nb and nb[b] > nb[a]})
    assert not late, f"(module, a later notebook's module it imports): {late}"

def test_no_import_cycles():
    "Counting imports inside functions."
    assert not layout.cycles(EDGES), layout.cycles(EDGES)

def test_production_never_imports_a_test_double():
    "The doubles live in cwm_nb.testing; nothing outside it imports them (a demonstration model is named as one)."
    assert not layout.uses_of_doubles(EDGES), layout.uses_of_doubles(EDGES)

def test_few_imports_inside_functions_each_with_its_reason():
    """The package's own modules are imported inside a function only where an optional heavy dependency or the command
    line's start-up time requires it, each with a comment (on its line or the one above) saying why."""
    lazy = layout.lazy_imports(EDGES)
    assert len(lazy) <= 30, f"{len(lazy)} imports inside functions: {lazy}"
    def reason(mod, line, text):
        above = layout.modules()[mod].read_text().splitlines()[line - 2].strip()
        return "#" in text or above.startswith("#")
    silent = [(a, line, text.strip()) for a, b, line, text in lazy if not reason(a, line, text)]
    assert not silent, f"imports inside functions without a comment saying why: {silent}"

def test_no_module_over_1000_lines():
    big = {m: n for m, n in layout.sizes().items() if n > 1000 and not m.endswith("_modidx")}
    assert not big, big

def test_no_module_getattr_shims():
    "Names are served by the module that defines them: no module-level __getattr__ tables of old names."
    shims = [m for m, p in layout.modules().items() if re.search(r"^def __getattr__\(", p.read_text(), re.M)]
    assert not shims, shims

# Names in strings that are meant not to resolve: the error checks of missing modules and drivers, a file name.
UNRESOLVED_ON_PURPOSE = {"cwm_nb.no_such_module:f", "cwm_nb.sandbox.jobs:no_such_driver", "cwm_nb.bench.cwm.html",
                         "cwm_nb.bench._fast_mcts_as_python"}

def test_names_in_strings_resolve():
    "Sandbox drivers (`module:function`), `python -m` targets, the CLI's module list, patched names: each exists."
    bad = [(w, n) for w, n in layout.unresolved(layout.named_in_strings(layout.string_sources()))
           if n not in UNRESOLVED_ON_PURPOSE]
    assert not bad, bad

def test_the_console_script_and_packages_resolve():
    import tomllib
    proj = tomllib.loads((ROOT/"pyproject.toml").read_text())
    mod, _, fn = proj["project"]["scripts"]["cwm-nb"].partition(":")
    assert mod in layout.modules() and layout._defines(mod, fn), mod
    assert f"cwm-nb={mod}:{fn}" in (ROOT/"settings.ini").read_text()
    assert proj["tool"]["setuptools"]["packages"]["find"]["include"] == ["cwm_nb", "cwm_nb.*"]


# ---------------------------------------------------------------- checks and showcases apart
LIBRARY_NOTEBOOKS = sorted((ROOT/"nbs").glob("[0-9][0-9]*_*.ipynb"))

def test_few_examples_echo_what_they_just_asserted():
    "An example shows something new: at most 5 % of example cells end by echoing a value their checks asserted."
    echo, cells = nb_stats.echo_share(LIBRARY_NOTEBOOKS)
    assert echo <= 0.05 * cells, f"{echo} of {cells} example cells echo a value they just asserted"

def test_method_notebooks_fit_the_docs_page():
    "The method notebooks' code lines are at most 100 characters: the docs page shows them without scrolling."
    import nbformat
    wide = {stem: len(lines) for stem in nb_stats.METHODS
            if (lines := nb_stats.long_lines(nbformat.read(ROOT/"nbs"/f"{stem}.ipynb", as_version=4)))}
    assert not wide, f"code lines over 100 characters: {wide}"
