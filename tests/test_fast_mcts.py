"""The compiled MCTS loop (nbs/15c_fast_mcts.ipynb): built by the install, the same search as `mcts_search` (result,
model steps, tape, and the planner's replay of that tape) compiled and as Python, used by planning sessions, and
refused when its build no longer matches the source."""
import importlib.util, json, shutil, subprocess, sys
from dataclasses import asdict
from pathlib import Path
import numpy as np
import pytest
from cwm_nb.bench import fast_mcts
from cwm_nb.bench.envs import get_env_spec, make_env
from cwm_nb.bench import plan_driver
from cwm_nb.bench.plan_driver import TapeModel, _program_model, _record_search, decode_state, encode_state
import math, random
from cwm_nb.bench.planning import MCTSConfig, _Node, _pick, mcts_search, uct
from cwm_nb.sandbox.programs import SandboxLimits

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = {"CartPole-v1": "CartPole-v1.py", "MountainCar-v0": "MountainCar-v0.py", "Acrobot-v1": "Acrobot-v1.py",
            "Blackjack-v1": "Blackjack-v1.py", "CliffWalking-v0": "CliffWalking-v0.py", "Taxi-v3": "Taxi-v3.py",
            "rtfm": "rtfm.py"}
CONFIGS = [MCTSConfig(), MCTSConfig(simulations=10, rollout_steps=20), MCTSConfig(simulations=40, rollout_steps=0, c_uct=0.0),
           MCTSConfig(simulations=30, temperature=0.01, default_q=0.0)]


def _pure_module():
    "cwm_nb/bench/fast_mcts.py run as Python, even where the compiled copy is built (a module of its own name)."
    spec = importlib.util.spec_from_file_location("cwm_nb.bench._fast_mcts_as_python", ROOT/"cwm_nb"/"bench"/"fast_mcts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_compiled_loop_is_built_from_the_current_source():
    assert fast_mcts.compiled_search() is not None, (
        "cwm_nb.bench._fast_mcts is missing or was built from another fast_mcts.py: rebuild it with "
        "`.venv/bin/pip install --no-deps -e .` (it needs a C compiler and the Python headers)")
    from cwm_nb.bench import _fast_mcts
    assert _fast_mcts.__file__.endswith(".so") and fast_mcts.compiled_search() is _fast_mcts.search


def _loop_module(impl: str):
    "The compiled loop's module, or fast_mcts.py run as Python."
    if impl == "python": return _pure_module()
    assert fast_mcts.compiled_search() is not None, "the compiled loop is not built (see the first test)"
    from cwm_nb.bench import _fast_mcts
    return _fast_mcts


@pytest.mark.parametrize("impl", ["compiled", "python"])
def test_one_uct_rule(impl):
    """The loop's `_uct` is `planning.uct` and its `_pick` is `planning._pick`, bit for bit on random inputs: an edit
    of the rule in 15_planning fails here until the loop computes the same."""
    mod, rng = _loop_module(impl), np.random.default_rng(0)
    for _ in range(20_000):
        args = (float(rng.normal(0, 10) * 10.0 ** rng.integers(-3, 4)), math.log(int(rng.integers(1, 10**7))),
                int(rng.integers(0, 10**4)), float(rng.choice([0.0, 1.0, rng.uniform(0, 5)])),
                float(rng.choice([1e-3, 1.0, rng.uniform(1e-9, 2)])))
        assert mod._uct(*args).hex() == uct(*args).hex(), args
    for _ in range(5_000):   # ties included: equal counts and sums
        k = int(rng.integers(1, 6))
        counts, sums = [int(x) for x in rng.integers(0, 4, size=k)], [float(x) for x in rng.integers(-2, 3, size=k)]
        if rng.random() < 0.5: sums = [s + float(rng.normal()) for s in sums]
        cfg = (float(rng.choice([0.0, 0.5, 1.0, rng.uniform(0, 3)])), float(rng.choice([1e-3, 1.0])),
               float(rng.choice([0.0, 1.0, rng.normal()])))
        fast, generic = mod.Node(tuple(range(k))), _Node(tuple(range(k)))
        for nd in (fast, generic): nd.n, nd.counts, nd.sums = sum(counts), list(counts), list(sums)
        r1, r2 = random.Random(k), random.Random(k)
        assert mod._pick(fast, *cfg, r1.random) == _pick(generic, *cfg, r2.random), (counts, sums, cfg)
        assert r1.random() == r2.random()


@pytest.mark.parametrize("impl", ["compiled", "python"])
@pytest.mark.parametrize("env_name", list(PROGRAMS))
def test_the_same_search_as_mcts_search(env_name, impl):
    "Result, model steps, tape and chunks, and the planner's replay of the tape, from 6 roots under 4 settings."
    search = fast_mcts.compiled_search() if impl == "compiled" else _pure_module().search
    assert search is not None
    spec, env = get_env_spec(env_name), make_env(env_name)
    n = int(env.action_space.n)
    args = {"space": {"kind": "discrete", "n": n}, "obs_format": spec.obs_format,
            "valid_actions": bool(getattr(spec, "valid_actions", False))}
    ns: dict = {}
    src = (ROOT/"data"/"programs"/PROGRAMS[env_name]).read_text()   # Blackjack's step alone: a model with chance
    src = src.replace("def step_distribution(", "def _no_chance(")          # never reaches the compiled loop
    exec(compile(src, "<cwm-program>", "exec"), ns)
    generic, fused = _program_model(ns, args), _program_model(ns, args)
    obs, _ = env.reset(seed=0); env.action_space.seed(0)
    for t in range(6):
        state, dtype = encode_state(obs, spec.obs_format)
        root = decode_state(state, spec.obs_format, dtype)
        for k, cfg in enumerate(CONFIGS):
            seed = 10 * t + k
            g0, f0, chunks, rec = generic.steps, fused.steps, [], []
            g = mcts_search(generic, root, list(range(n)), cfg, np.random.default_rng(seed), n_actions=n)
            f = search(fused, root, list(range(n)), cfg, np.random.default_rng(seed), n, chunks.append)
            assert (f, fused.steps - f0) == (g, generic.steps - g0), (t, cfg)
            _record_search(generic, root, {**args, "config": asdict(cfg), "seed": seed, "fast_search": False}, rec.append)
            assert json.dumps(chunks + [[["e"]]]) == json.dumps(rec), (t, cfg)
            tape = json.loads(json.dumps([e for c in chunks for e in c]))
            tm = TapeModel(tape, n_actions=n)
            r = mcts_search(tm, root, list(range(n)), cfg, np.random.default_rng(seed), n_actions=n)
            assert (r, tm.i, tm.steps) == (g, len(tape), fused.steps - f0), (t, cfg)
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc: obs, _ = env.reset(seed=t + 1)


@pytest.fixture(scope="module")
def sandbox():
    from cwm_nb.sandbox.jobs import Sandbox
    with Sandbox() as sb:
        yield sb


# A test double: a program that can tell who calls its `step`. Called from the generic search's wrappers
# (ProgramModel.step, ProgramModel.rollout_rewards) every state is terminal, so a decision takes exactly
# `simulations` model steps; called from the compiled loop (whose caller is the Python frame of _record_search or
# _plan) episodes last 5 steps, so it takes more.
TELLS_THE_CALLER = """
import sys
class Environment:
    def set_state(self, s): self.s = int(s)
    def step(self, a):
        self.s += 1
        generic = sys._getframe(1).f_code.co_name in ("step", "rollout_rewards")
        return self.s, 1.0, generic or self.s >= 5
"""


def test_planning_sessions_search_in_the_compiled_loop(sandbox):
    static = {"planner": "mcts", "config": asdict(MCTSConfig(simulations=25, rollout_steps=10)), "obs_format": "int",
              "space": {"kind": "discrete", "n": 2}, "valid_actions": False, "session": True}
    call = {"state": 0, "obs_dtype": None, "root_actions": None, "seed": 0}
    steps = {}
    for name, extra in (("default", {}), ("generic", {"fast_search": False})):
        first, s = sandbox.open_session(TELLS_THE_CALLER, "cwm_nb.bench.plan_driver:plan_driver", args={**static, **extra},
                                        limits=SandboxLimits(wall_s=60, cpu_s=60))
        assert s is not None, first.error
        with s:
            r = s.call(call)
            assert r.ok, r.error
            steps[name] = r.value["model_steps"]
    assert steps["generic"] == 25 and steps["default"] > 25, steps


@pytest.mark.parametrize("edited", ["fast_mcts.py", "planning.py"])
def test_a_build_of_another_source_is_refused(tmp_path, edited):
    """A copy of the package whose fast_mcts.py, or planning.py (the UCT rule the loop compiles), changed after the
    build: planning falls back to the generic search, which calls the edited rule, with one warning."""
    pkg = tmp_path/"cwm_nb"
    shutil.copytree(ROOT/"cwm_nb", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    assert list((pkg/"bench").glob("_fast_mcts*.so")), "the compiled loop is not built (see the first test)"
    (pkg/"bench"/edited).write_text((pkg/"bench"/edited).read_text() + "\n# edited after the build\n")
    code = ("import warnings, cwm_nb\nwarnings.simplefilter('always')\nassert cwm_nb.__file__.startswith(%r)\n"
            "from cwm_nb.bench import fast_mcts, plan_driver\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    print(plan_driver._fast_search({}), plan_driver._fast_search({}), len(w), str(w[0].message))\n" % str(pkg))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("None None 1 ") and "another version of fast_mcts.py" in r.stdout, r.stdout


def test_a_compiled_search_that_fails_sends_no_tape(monkeypatch):
    "What a program that breaks the compiled search in its own process gets: no tape, so the planner queries live."
    ns: dict = {}
    exec(compile((ROOT/"data"/"programs"/"CartPole-v1.py").read_text(), "<cwm-program>", "exec"), ns)
    args = {"space": {"kind": "discrete", "n": 2}, "obs_format": "array", "config": asdict(MCTSConfig(simulations=5)), "seed": 0}
    model, root = _program_model(ns, args), np.float32([0.0, 0.0, 0.05, 0.0])
    sent: list = []
    assert _record_search(model, root, args, sent.append) is None and sent[-1] == [["e"]]   # a tape, then its end
    monkeypatch.setattr(plan_driver, "_FAST", [lambda *a, **k: 1 / 0])
    sent.clear()
    assert _record_search(model, root, args, sent.append) is None and sent == [[["x"]]]
