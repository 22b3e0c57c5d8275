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
    before = _snapshot(proj, "cwm_nb/*.py")
    subprocess.run([str(BIN/"nbdev_export")], cwd=proj, check=True, capture_output=True)
    after = _snapshot(proj, "cwm_nb/*.py")
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

def _top_level_imports(path: Path) -> set[str]:
    "The cwm_nb modules a module imports at its top level (lazy imports inside functions are not counted)."
    import ast
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module: out.add(node.module.split(".")[0])
            elif node.level == 1: out.update(a.name for a in node.names)
            elif (node.module or "").startswith("cwm_nb."): out.add(node.module.split(".")[1])
            elif node.module == "cwm_nb": out.update(a.name for a in node.names)
    return out

def test_a_module_imports_only_modules_of_earlier_notebooks():
    "The numbering shows the architecture: a notebook's module imports (at top level) only earlier notebooks' modules."
    src = {}
    for p in (ROOT/"cwm_nb").glob("*.py"):
        if m := re.search(r"File to edit: \.\./nbs/(\S+)\.ipynb", p.read_text()[:400]): src[p.stem] = m.group(1)
    late = sorted((mod, dep) for mod in src for dep in _top_level_imports(ROOT/"cwm_nb"/f"{mod}.py")
                  if dep in src and src[dep] > src[mod])
    assert not late, f"(module, a later notebook's module it imports): {late}"
