"""Hostile programs that look for the data they are scored against on disk, in each kernel isolation mode
(bubblewrap, Landlock): the replay buffer's file, the project's `data/`, the checkout's git directories, the APPS
problem files; and the simulators it could answer with (gymnasium, MuJoCo, Box2D, MiniGrid, the project's own
environments). A job reads only the interpreter, its standard library, numpy, the sandbox's modules and the system's
files (`_needed_paths`, 03_sandbox), so each probe scores exactly what its fallback scores. The same probes in
`isolation="none"` (no file system isolation) find what they look for: that is what each test would catch if a path
became readable again.
"""
import json, os, shutil, subprocess, sys
from pathlib import Path

import pytest

from gaming_probes import FALLBACK, _COMMON
from test_gaming import LIMITS, buffer, sandbox   # the same three CartPole episodes and one Sandbox per mode
from cwm_nb.apps.harness import OUTPUT_CAP_BYTES, _git_dirs, evaluate_solution
from cwm_nb.apps.problems import AppsProblem, demo_problems
from cwm_nb.bench.cwm import evaluate_program
from cwm_nb.bench.replay import default_buffer_path
from cwm_nb.core import data_dir, project_root
from cwm_nb.sandbox.jobs import Sandbox

pytestmark = pytest.mark.timeout(600)

ROOT = project_root()
GIT = [str(g.resolve()) for g in _git_dirs(ROOT) if g.exists()]
CACHE = os.environ.get("CWM_NB_CACHE") or str(Path.home()/".cache"/"cwm-nb")
FORBIDDEN = [str(data_dir()), str(default_buffer_path("CartPole-v1")/"transitions.npz"), *GIT,
             *(str(ROOT/d) for d in ("nbs", "tests", "results", "benchmarks", "README.md", "settings.ini")),
             CACHE, str(Path.home())]


@pytest.fixture(scope="module")
def open_sandbox():
    "No file system isolation: where the probes below must find what they look for."
    with Sandbox(LIMITS, isolation="none") as sb: yield sb


# --- what a job can open ----------------------------------------------------------------------------------------------

OPENER = r'''
import os
def main(paths):
    "For each path: what this process can read of it (a listing, a file's first bytes), or the error."
    out = {}
    for p in paths:
        try: out[p] = ("dir", sorted(os.listdir(p))) if os.path.isdir(p) else ("file", open(p, "rb").read(16).hex())
        except OSError as e: out[p] = ("error", type(e).__name__)
    return out
'''


def _seen(sb, paths) -> dict:
    r = sb.run(OPENER, "cwm_nb.sandbox.programs:call_function", {"name": "main", "args": [paths]})
    assert r.ok, r.error
    return r.value


def _on_the_way(path: str, seen, read_paths) -> bool:
    "True when `path` is a folder whose every entry is a readable path or lies above one."
    kind, names = seen
    return kind == "dir" and all(any(r == f"{path}/{n}" or r.startswith(f"{path}/{n}/") for r in read_paths) for n in names)


def test_a_job_cannot_open_the_project_files(sandbox, open_sandbox):
    "The data, the checkout's git directories, notebooks, tests, results, caches and home: none opens in a job."
    paths = [p for p in FORBIDDEN if os.path.exists(p)]
    assert str(data_dir()) in paths and GIT, paths
    assert all(kind != "error" for kind, _ in _seen(open_sandbox, paths).values())   # they are there to be read
    seen, read = _seen(sandbox, paths), sandbox.protections["read_paths"]
    # a folder above a readable path (the home of a venv or pyenv) opens, showing only the way to that path
    assert {p: v for p, v in seen.items() if v[0] != "error" and not _on_the_way(p, v, read)} == {}
    # the checkout as a job sees it: this package's folder and, where the venv lies in it, `.venv` (nothing else)
    kind, names = _seen(sandbox, [str(ROOT)])[str(ROOT)]
    assert kind == "error" or set(names) <= {"cwm_nb", ".venv"}, names
    pkg = str(ROOT/"cwm_nb"/"__init__.py")
    assert _seen(sandbox, [pkg])[pkg][0] == "file"   # what a job needs stays readable
    assert not any(p == str(data_dir()) or str(data_dir()).startswith(p + "/")
                   for p in sandbox.protections["read_paths"]), sandbox.protections["read_paths"]


# --- the replay buffer's file ---------------------------------------------------------------------------------------

FILE_PROBE = _COMMON + r'''
import glob, os
ROOTS = %r

def search(f):
    "Every CartPole-shaped `obs` array in a transitions.npz under ROOTS, as consecutive rows."
    for r in ROOTS:
        for p in glob.glob(os.path.join(r, "**", "transitions.npz"), recursive=True) + glob.glob(os.path.join(r, "transitions.npz")):
            try:
                obs = np.load(p, allow_pickle=False)["obs"]
                if obs.ndim == 2 and obs.shape[1] == 4: f.add_sequence(list(obs))
            except Exception: pass

SEARCH = True
'''


def _scores(ev) -> tuple:
    return ev.accuracy, ev.exact_replay, ev.components, ev.bug, ev.error


def test_a_program_that_loads_the_buffer_file_scores_its_fallback(sandbox, open_sandbox, buffer):
    "np.load of data/buffers/*/transitions.npz: found without isolation, not in a job of either mode."
    roots = [str(data_dir()), str(data_dir()/"buffers"), str(default_buffer_path("CartPole-v1"))]
    probe = FILE_PROBE % (roots,)
    found = evaluate_program(probe, buffer, sandbox=open_sandbox)
    assert found.components["next_state"] == 1.0, found.error   # the probe works where the file is readable
    fallback = evaluate_program(FALLBACK, buffer, sandbox=sandbox, determinism=True, rollouts=True)
    ev = evaluate_program(probe, buffer, sandbox=sandbox, determinism=True, rollouts=True)
    assert fallback.components["next_state"] == 0.0, fallback.error
    assert _scores(ev) == _scores(fallback), ev.error
    assert ev.rollouts["horizons"] == fallback.rollouts["horizons"]


# --- APPS: the problem files, directly and through git -----------------------------------------------------------------

APPS_FILE_PROBE = r'''
import glob, json, os, subprocess, sys
SEARCH, ROOTS, GITS = %r, %r, %r

def from_files(given):
    for root in ROOTS:
        for p in glob.glob(os.path.join(root, "**", "input_output.json"), recursive=True):
            try: d = json.load(open(p))
            except Exception: continue
            if given in d.get("inputs", []): return d["outputs"][d["inputs"].index(given)]

def from_git(given):
    for g in GITS:
        try:
            names = subprocess.run(["git", "--git-dir", g, "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True,
                                   text=True, timeout=20).stdout.split()
            for n in names:
                if n.endswith("input_output.json"):
                    d = json.loads(subprocess.run(["git", "--git-dir", g, "show", "HEAD:" + n], capture_output=True,
                                                  text=True, timeout=20).stdout)
                    if given in d.get("inputs", []): return d["outputs"][d["inputs"].index(given)]
        except Exception: pass

given = sys.stdin.read()
if SEARCH:
    out = from_files(given)
    if out is None: out = from_git(given)
    if out is not None: print(out, end="")
'''


def _apps_probe(search: bool, git_only: bool = False) -> str:
    roots = [] if git_only else [str(data_dir())]
    return APPS_FILE_PROBE % (search, roots, GIT)


@pytest.mark.parametrize("how", ["files", "git"])
def test_an_apps_program_that_searches_for_the_outputs_passes_what_its_fallback_passes(sandbox, open_sandbox, how):
    "Reading input_output.json, or `git show` of it from the checkout's git directory: nothing in a job."
    if how == "git" and shutil.which("git") is None: pytest.skip("needs git")
    p = next(q for q in demo_problems() if q.kind == "stdin")
    probe, fallback = _apps_probe(True, git_only=how == "git"), _apps_probe(False)
    # where the files are readable (here, in this process) the probe finds every answer
    r = subprocess.run([sys.executable, "-c", probe], input=p.inputs[0], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == str(p.outputs[0]).strip(), r.stderr[-500:]
    ev, base = evaluate_solution(probe, p, sandbox=sandbox), evaluate_solution(fallback, p, sandbox=sandbox)
    assert [t.passed for t in ev.tests] == [t.passed for t in base.tests] == [False] * p.n_tests
    assert [t.output for t in ev.tests] == [""] * p.n_tests
    assert ev.data_hidden is True and ev.harness_error is None


APPS_MEMORY_PROBE = f"OUTPUT_CAP = {OUTPUT_CAP_BYTES}   # the harness's published allowance\n" + r"""
import gc, json, sys

def _leak(given):
    "Test i's expected output from what the job holds: a problem's outputs, or the length a cap on it tells (None)."
    f, spaces = sys._getframe(), []
    while f is not None: spaces += [f.f_locals, *(v for v in f.f_locals.values() if type(v) is dict)]; f = f.f_back
    for o in gc.get_objects():
        try: spaces.append(o if type(o) is dict else vars(o))
        except Exception: pass
    for d in spaces:
        ins = d.get("inputs")
        if not isinstance(ins, list) or given not in ins: continue
        i = ins.index(given)
        for k in ("outputs", "expected"):
            if isinstance(d.get(k), list) and len(d[k]) == len(ins): return "value", d[k][i]
        for k, v in d.items():
            if "cap" in str(k) and isinstance(v, list) and len(v) == len(ins): return "length", (v[i] - OUTPUT_CAP) // 2
    return None

def is_leap(year):
    got = _leak([year]) if SEARCH else None
    if got is None: return True
    kind, x = got
    return x[0] if kind == "value" else x == len(json.dumps([True]))
"""


def test_an_apps_program_that_reads_the_job_memory_passes_what_its_fallback_passes(sandbox):
    """The job's frames and objects (`sys._getframe`, `gc`): nothing there tells a test's expected output, its content
    or its length (the job was told each test's output cap, OUTPUT_CAP_BYTES + 2 * len(expected): 6/6 on 0003, both modes)."""
    p = next(q for q in demo_problems() if q.problem_id == "0003")
    probe, fallback = "SEARCH = True\n" + APPS_MEMORY_PROBE, "SEARCH = False\n" + APPS_MEMORY_PROBE
    # where a job holds the caps or the outputs, the probe answers every test from them
    for held in ({"output_caps": [OUTPUT_CAP_BYTES + 2 * len(json.dumps(o)) for o in p.outputs]}, {"outputs": p.outputs}):
        ns = {}
        exec(probe, ns)
        def _start_test(args, i): return ns["is_leap"](*args["inputs"][i])
        assert [_start_test({"inputs": p.inputs, **held}, i) == o[0] for i, o in enumerate(p.outputs)] == [True] * p.n_tests
    ev, base = evaluate_solution(probe, p, sandbox=sandbox), evaluate_solution(fallback, p, sandbox=sandbox)
    assert base.n_passed == 3 and p.n_tests == 6, base.summary()
    assert [t.passed for t in ev.tests] == [t.passed for t in base.tests], (ev.summary(), base.summary())
    assert [t.status for t in ev.tests] == [t.status for t in base.tests] and ev.harness_error is None


def test_apps_tests_whose_data_a_program_could_read_are_not_scored(sandbox):
    """A problem read from a file that jobs can read (here /etc/ld.so.cache, one of the system's files): where the
    test's process cannot hide it (landlock: no mount namespace), the evaluation is not scored, a right answer
    included; where it can (bwrap), the file is hidden and the tests count."""
    p = next(q for q in demo_problems() if q.kind == "stdin")
    exposed = AppsProblem(p.problem_id, p.question, p.inputs, p.outputs, data_path="/etc/ld.so.cache")
    ev = evaluate_solution(p.solutions[0], exposed, sandbox=sandbox)
    if sandbox.isolation == "landlock": assert ev.data_hidden is False
    if ev.data_hidden is False:
        assert ev.n_passed == 0 and ev.accuracy == 0.0 and not ev.perfect
        assert {t.status for t in ev.tests} == {"not_run"} and "not scored" in ev.harness_error
        assert "/etc/ld.so.cache" in ev.harness_error and ev.to_dict()["data_hidden"] is False
    else: assert ev.data_hidden is True and ev.perfect, ev.summary()
    assert evaluate_solution(p.solutions[0], p, sandbox=sandbox).perfect   # the shipped problem's data is hidden: scored


def test_a_package_below_tmp_is_bound_over_the_tmpfs(tmp_path):
    """bwrap gives the server an empty /tmp: a package (or a checkout, or a venv) that lies below /tmp is bound on top of
    it, not hidden by it, and its sibling files stay out of reach."""
    if shutil.which("bwrap") is None: pytest.skip("needs bubblewrap (not installed)")
    if not str(tmp_path).startswith("/tmp/"): pytest.skip("the test's folder is not below /tmp")
    shutil.copytree(ROOT/"cwm_nb", tmp_path/"cwm_nb", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (tmp_path/"secret.txt").write_text("logged transitions")
    probe = f"import os, cwm_nb; print(cwm_nb.__file__, os.path.exists({str(tmp_path/'secret.txt')!r}))"
    script = ("from cwm_nb.sandbox.jobs import Sandbox\n"
              "with Sandbox(isolation='bwrap') as sb:\n"
              f"    r = sb.run({probe!r})\n"
              "    print(r.ok, r.stdout.strip(), r.error)\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)})   # `-c` puts the folder first on sys.path
    assert p.stdout.split() == ["True", str(tmp_path/"cwm_nb"/"__init__.py"), "False", "None"], p.stdout + p.stderr[-2000:]


# --- what a job can import --------------------------------------------------------------------------------------------

SIMULATORS = ("gymnasium", "mujoco", "minigrid", "Box2D", "pygame", "textworld", "alfworld",
              "cwm_nb.bench.rtfm_env", "cwm_nb.bench.oracle", "cwm_nb.bench.collect", "cwm_nb.agent.minigrid",
              "cwm_nb.agent.sokoban", "cwm_nb.agent.alfworld", "cwm_nb.testing.doubles", "cwm_nb.testing.capable_model")
_REACH = r'''
import importlib, sys
got = {}
for codes, path in NAMES:
    name = "".join(map(chr, codes))
    try: importlib.import_module(name); got[name] = "imported"
    except BaseException as e: got[name] = type(e).__name__
    try:
        with open(path, "rb") as f: f.read(1)
        got[name] += ", read"
    except OSError: pass
    got[name] += ", loaded" if name in sys.modules else ""
print(sorted(got.items()))
'''


def _simulator_files() -> list:
    "(character codes of the module's name, the file it loads from) of each installed simulator of `SIMULATORS`."
    import importlib.util
    out = []
    for name in SIMULATORS:
        spec = importlib.util.find_spec(name)   # None: not installed here
        if spec is not None and spec.origin: out.append((tuple(map(ord, name)), spec.origin))
    return out


def test_no_simulator_is_importable_or_readable(sandbox):
    "gymnasium, MuJoCo, Box2D, MiniGrid and the project's environments: no import, no read, nothing preloaded."
    names = _simulator_files()
    assert {"".join(map(chr, c)) for c, _ in names} >= {"gymnasium", "mujoco", "cwm_nb.bench.rtfm_env", "cwm_nb.agent.sokoban"}
    res = sandbox.run(f"NAMES = {names!r}\n" + _REACH)
    assert res.ok, res.error
    got = dict(eval(res.stdout))
    assert set(got) == {"".join(map(chr, c)) for c, _ in names}, got
    assert all(v in ("ModuleNotFoundError", "PermissionError") for v in got.values()), got


def test_the_reach_probe_finds_every_simulator_where_jobs_read_everything(open_sandbox):
    "Isolation `none`: the same program imports and reads each of them (the check above can fail)."
    names = _simulator_files()
    res = open_sandbox.run(f"NAMES = {names!r}\n" + _REACH)
    assert res.ok, res.error
    assert set(dict(eval(res.stdout)).values()) == {"imported, read, loaded"}, res.stdout


RTFM_RULES = r'''
import importlib
import numpy as np

def _rules():
    "The module that holds RTFM's step and valid actions, imported by names the source does not spell; else None."
    for tail in ("rtfm", "rtfm_env"):
        try: m = importlib.import_module("cwm_nb.bench." + tail)
        except Exception: continue
        if hasattr(m, "rtfm_step"): return m
    return None

R = _rules()

class Environment:
    def set_state(self, state): self.s = state
    def step(self, action):
        if R is None: return self.s, np.arange(5), 0.0, False   # the fallback: nothing changes, every action valid
        board = R.as_board(np.array(self.s[0], dtype=object).reshape(6, 6, 2))
        board, inv, reward, outcome = R.rtfm_step(board, str(self.s[1]), int(action))
        valid = np.arange(5) if R.agent_position(board) is None else R.valid_actions(board)
        return (board, inv), valid, float(reward), outcome != ""
'''
RTFM_FALLBACK = RTFM_RULES.replace("R = _rules()", "R = None")


def test_a_program_cannot_run_rtfms_rules(sandbox, open_sandbox):
    """RTFM's rules (`rtfm_step`, `valid_actions`) live in `rtfm_env`, which no job reads; `rtfm`, which jobs read for
    its codec, holds none of them (found by a red team: a program that called `rtfm.rtfm_step` scored 1.0). Where jobs
    read everything the same program scores 1.0; in either mode it scores what its fallback scores."""
    from cwm_nb.bench.replay import load_buffer
    buf = load_buffer("rtfm")
    base = evaluate_program(RTFM_FALLBACK, buf, sandbox=sandbox)
    assert evaluate_program(RTFM_RULES, buf, sandbox=open_sandbox).accuracy == 1.0
    ev = evaluate_program(RTFM_RULES, buf, sandbox=sandbox)
    assert (ev.accuracy, ev.components, ev.bug) == (base.accuracy, base.components, base.bug), ev.error
    assert base.accuracy < 0.5


def _job_drivers() -> list:
    """The modules of the drivers a job can name: every "module:function" string in the package that names a cwm_nb
    module and a function taking the program's namespace first (a driver), not the parent's own hooks
    (`env_states.set_*`)."""
    import importlib, inspect, re
    found = set()
    for f in (ROOT/"cwm_nb").rglob("*.py"): found |= set(re.findall(r'"(cwm_nb\.[\w.]+):(\w+)"', f.read_text()))
    mods = set()
    for mod, fn in found:
        f = getattr(importlib.import_module(mod), fn, None)
        if callable(f) and next(iter(inspect.signature(f).parameters), None) == "namespace": mods.add(mod)
    return sorted(mods)


def test_every_job_driver_imports_only_what_a_job_may_read():
    """In a fresh interpreter, the modules of every driver a job can name import no simulator and no file outside what
    a job may read (`_needed_paths`: `JOB_MODULES`, `JOB_PACKAGES`, the standard library; `SYSTEM_READ`; 03_sandbox). A driver that starts importing one would
    fail in every job, or hand programs the real environment; this finds it without running one."""
    import json
    from cwm_nb.sandbox.jobs import _needed_paths
    from cwm_nb.sandbox.fork_server import SYSTEM_READ, _under
    drivers = _job_drivers()
    assert {"cwm_nb.sandbox.drivers", "cwm_nb.bench.plan_driver", "cwm_nb.apps.harness", "cwm_nb.agent.planning",
            "cwm_nb.bench.behaviour_tests", "cwm_nb.search.llm_simulator"} <= set(drivers), drivers
    code = ("import importlib, json, os, sys\n"
            "before = set(sys.modules)   # the interpreter's own start (site, the editable install's finder)\n"
            f"for m in {drivers!r}: importlib.import_module(m)\n"
            "print(json.dumps([[n, getattr(m, '__file__', None) and os.path.realpath(m.__file__)]\n"
            "                  for n, m in sorted(sys.modules.items()) if n not in before]))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    loaded = json.loads(p.stdout)
    assert [n for n, _ in loaded if n in SIMULATORS or n.split(".")[0] in SIMULATORS] == []
    readable = {os.path.realpath(p) for p in (*_needed_paths(), *SYSTEM_READ)}
    files = [(n, f) for n, f in loaded if f]   # built-in modules have no file
    assert sum(n.split(".")[0] == "cwm_nb" for n, _ in files) > 10
    assert [(n, f) for n, f in files if _under(f, readable) is None] == []   # cwm_nb's and numpy's files, the stdlib
