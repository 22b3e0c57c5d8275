"""The package's layout, measured from its source: modules and subpackages, the import graph (imports at the top of a
module and inside functions apart), its cycles, imports of the test doubles, module sizes, and names written in
strings (`"cwm_nb.bench.plan_driver:plan_driver"`). `tests/test_nbdev_gates.py` checks the layout with these;
`python tools/layout.py` prints the measures."""
import ast, functools, importlib.util, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT/"cwm_nb"
TESTING = "cwm_nb.testing"

def module_name(path: Path) -> str:
    "`cwm_nb/bench/cwm.py` -> `cwm_nb.bench.cwm`; a package's `__init__.py` -> the package."
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

@functools.cache
def modules() -> dict[str, Path]:
    "Every module of the package but nbdev's generated index, by dotted name (read once per process)."
    return {module_name(p): p for p in sorted(PKG.rglob("*.py")) if p.name != "_modidx.py"}

def subpackages() -> list[str]:
    return sorted(module_name(p) for p in PKG.rglob("__init__.py") if p.parent != PKG)

def _resolve(mod: str, node: ast.ImportFrom | ast.Import, known: set[str]) -> list[str]:
    "The package's modules an import statement in `mod` loads (a name that is a submodule counts as that module)."
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    base = node.module or ""
    if node.level:
        pkg = mod.split(".") if modules()[mod].name == "__init__.py" else mod.split(".")[:-1]
        pkg = pkg[:len(pkg) - node.level + 1]
        base = ".".join(pkg + ([base] if base else []))
    if not base.startswith("cwm_nb"): return []
    out = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
    if len(out) < len(node.names) and base in known: out.append(base)
    return out

def imports(mods: dict[str, Path] | None = None) -> list[tuple[str, str, bool, int, str]]:
    "Every import of a package module: (importer, imported, inside a function, line, the line's text)."
    mods = mods or modules()
    known = set(mods)
    out = []
    for mod, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)): continue
            for dep in _resolve(mod, node, known):
                if dep != mod and not mod.startswith(dep + ".") and dep != "cwm_nb":
                    out.append((mod, dep, id(node) not in top, node.lineno, lines[node.lineno - 1]))
    return out

def cycles(edges) -> list[list[str]]:
    "The strongly connected components of more than one module (Tarjan), each sorted: every one is a cycle."
    graph: dict[str, set[str]] = {}
    for a, b, *_ in edges: graph.setdefault(a, set()).add(b); graph.setdefault(b, set())
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index: visit(v)
    return sorted(out)

def lazy_imports(edges) -> list[tuple[str, str, int, str]]:
    "Imports of the package's own modules inside functions: (importer, imported, line, text)."
    return [(a, b, line, text) for a, b, inner, line, text in edges if inner]

def uses_of_doubles(edges) -> list[tuple[str, str, int]]:
    "Imports of `cwm_nb.testing` by a module outside it (at the top or inside a function)."
    return [(a, b, line) for a, b, _, line, _ in edges
            if (b == TESTING or b.startswith(TESTING + ".")) and not a.startswith(TESTING)]

def sizes() -> dict[str, int]:
    return {m: len(p.read_text().splitlines()) for m, p in modules().items()}

STRING_NAME = re.compile(r"""["'](cwm_nb(?:\.\w+)+)(?::(\w+))?\\?["']""")

def named_in_strings(paths) -> list[tuple[str, str, str | None]]:
    "Modules (and `module:attr` names) written in strings: (where, module, attr or None)."
    out = []
    for p in paths:
        text = p.read_text()
        for m in STRING_NAME.finditer(text): out.append((str(p.relative_to(ROOT)), m.group(1), m.group(2)))
    return out

def _defines(mod: str, attr: str) -> bool:
    return attr in _top_names(mod)

@functools.cache
def _top_names(mod: str) -> frozenset:
    "The names `mod` binds at its top (definitions, assignments, imports); empty if there is no such module."
    path = modules().get(mod)
    if path is None: return frozenset()
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)

def unresolved(found) -> list[tuple[str, str]]:
    """The names in strings that do not resolve: a module that is not there, or a `module:attr` whose module does not
    define `attr` at its top. A dotted name may end in an attribute (`cwm_nb.bench.cwm.evaluate_program`)."""
    mods, bad = modules(), []
    compiled = {m.rsplit(".", 1)[0] + "._fast_mcts" for m in mods if m.endswith(".fast_mcts")}
    for where, mod, attr in found:
        if mod in compiled: continue
        if attr is not None:
            if mod not in mods or not _defines(mod, attr): bad.append((where, f"{mod}:{attr}"))
            continue
        parts = mod.split(".")
        k = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in mods), default=0)
        if k == len(parts) or (k and _defines(".".join(parts[:k]), parts[k])): continue
        bad.append((where, mod))
    return bad

def string_sources() -> list[Path]:
    "Where names are written in strings: the package, its notebooks, tests, benchmarks, tools and packaging."
    return [*sorted(p for p in PKG.rglob("*.py") if p.name != "_modidx.py"), *sorted((ROOT/"nbs").rglob("*.ipynb")), *sorted((ROOT/"tests").glob("*.py")),
            *sorted((ROOT/"benchmarks").glob("*.py")), *sorted((ROOT/"tools").glob("*.py")),
            ROOT/"pyproject.toml", ROOT/"settings.ini", ROOT/"setup.py"]

def measures() -> dict:
    edges = imports()
    sz = sizes()
    big = max((m for m in sz if not m.endswith("_modidx")), key=sz.get)
    return {"modules": len([m for m, p in modules().items() if p.name != "__init__.py"]),
            "subpackages": len(subpackages()), "cycles": cycles(edges), "lazy imports": len(lazy_imports(edges)),
            "imports of test doubles": len(uses_of_doubles(edges)), "largest module": f"{big} ({sz[big]} lines)"}

if __name__ == "__main__":
    for k, v in measures().items(): print(f"{k}: {v}")
    if "-v" in sys.argv:
        for a, b, line, text in lazy_imports(imports()): print(f"  {a}:{line}  {text.strip()}")
