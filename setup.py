"""Builds the compiled MCTS loop; everything else about the package is in pyproject.toml.

cwm_nb/bench/fast_mcts.py (exported from nbs/15c_fast_mcts.ipynb) is compiled by Cython as the extension cwm_nb.bench._fast_mcts.
The copy that is compiled ends with the SHA-256 of the source it came from and of planning.py (the UCT rule it compiles), so
that fast_mcts.compiled_search refuses a build that no longer matches them. The extension is optional: without a C compiler the package installs
without it, and planning uses the generic search (nbs/15_planning.ipynb)."""
import hashlib
from pathlib import Path
from setuptools import Extension, setup


ROOT = Path(__file__).resolve().parent


def extensions() -> list:
    src = ROOT/"cwm_nb"/"bench"/"fast_mcts.py"
    if not src.exists(): return []
    from Cython.Build import cythonize
    out = ROOT/"build"/"cython"/"cwm_nb"/"bench"
    out.mkdir(parents=True, exist_ok=True)
    for d in (out, out.parent): (d/"__init__.py").touch()
    # fast_mcts.source_digest: the loop's source and the planner's rule (planning.uct) that its _uct computes
    digest = hashlib.sha256(b"".join((src.parent/n).read_bytes() for n in ("fast_mcts.py", "planning.py"))).hexdigest()
    text = src.read_text() + f"\n__source_sha256__ = {digest!r}\n"
    copy = out/"_fast_mcts.py"
    if not copy.exists() or copy.read_text() != text: copy.write_text(text)   # unchanged: Cython skips it
    ext = Extension("cwm_nb.bench._fast_mcts", [str(copy.relative_to(ROOT))],
                    extra_compile_args=["-O2", "-ffp-contract=off"])   # no fused multiply-add: the generic search's doubles
    exts = cythonize([ext], build_dir="build/cython-c", quiet=True, compiler_directives={"language_level": 3})
    for e in exts: e.optional = True   # cythonize makes new Extensions without it: a failed compile must not fail the install
    return exts


setup(ext_modules=extensions())
