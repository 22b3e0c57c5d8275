"Planning with CWMs: exact snapshots, the oracle and random baselines, MCTS and CEM with programs, hostile programs."
import json
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from cwm_nb.bench.envs import make_env
from cwm_nb.bench.planning import CEMConfig, MCTSConfig, normalized_return
from cwm_nb.bench.oracle import baseline_episodes, evaluate_planning, oracle_cem_plan, oracle_mcts_action, restore, snapshot
from cwm_nb.sandbox.programs import SandboxLimits

RTFM_CWM = Path(__file__).resolve().parents[1]/"data"/"programs"/"rtfm.py"   # the shipped reference CWM
CARTPOLE_CWM = Path(__file__).resolve().parents[1]/"data"/"programs"/"CartPole-v1.py"   # the shipped reference CWM
CARTPOLE = CARTPOLE_CWM.read_text()
CARTPOLE_SWAPPED = CARTPOLE.replace("force = FORCE_MAG if action == 1 else -FORCE_MAG",
                                    "force = FORCE_MAG if action == 0 else -FORCE_MAG")
assert CARTPOLE_SWAPPED != CARTPOLE

# A Pendulum-v1 model written from the environment's description (torque-driven pendulum, explicit Euler on
# the angular velocity, cost on the pre-step angle and the clipped torque).
PENDULUM = '''
import math
import numpy as np

class Environment:
    def __init__(self):
        self.th, self.thdot = 0.0, 0.0

    def set_state(self, obs):
        self.th = math.atan2(float(obs[1]), float(obs[0]))
        self.thdot = float(obs[2])

    def step(self, action):
        u = min(max(float(action[0]), -2.0), 2.0)
        th, thdot = self.th, self.thdot
        wrapped = ((th + math.pi) % (2 * math.pi)) - math.pi
        cost = wrapped ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
        thdot = thdot + (3 * 10.0 / 2 * math.sin(th) + 3.0 * SIGN * u) * 0.05
        thdot = min(max(thdot, -8.0), 8.0)
        self.th, self.thdot = th + thdot * 0.05, thdot
        return np.array([math.cos(self.th), math.sin(self.th), self.thdot], dtype=np.float32), -cost, False
'''
PENDULUM_OK, PENDULUM_FLIPPED = PENDULUM.replace("SIGN", "1"), PENDULUM.replace("SIGN", "-1")

# A "model" that knows nothing: random rewards, never done. Planning with it is a random policy.
RANDOM_MODEL = '''
import random
class Environment:
    def set_state(self, s): self.s = s
    def step(self, a): return self.s, random.random(), False
'''
FAILS_EVERY_STEP = "class Environment:\n    def set_state(self, s): pass\n    def step(self, a): raise ValueError('no model')\n"

EPISODES = 2


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    "Baselines go to a cache of this module only."
    old = os.environ.get("CWM_NB_CACHE")
    os.environ["CWM_NB_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield Path(os.environ["CWM_NB_CACHE"])
    if old is None: os.environ.pop("CWM_NB_CACHE", None)
    else: os.environ["CWM_NB_CACHE"] = old


@pytest.fixture(scope="module")
def sandbox():
    from cwm_nb.sandbox.jobs import Sandbox
    with Sandbox() as sb:
        yield sb


def quick(env, program, sandbox, **kw):
    return evaluate_planning(env, program, episodes=kw.pop("episodes", EPISODES), preset="quick", seed=0,
                             sandbox=sandbox, progress=False, **kw)


# ------------------------------------------------------------------------------------------------ snapshots
def _same(a, b) -> bool:
    "Bit-identical observations: arrays by dtype, shape and bytes; RTFM by board and inventory; others by ==."
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, tuple) and a and isinstance(a[0], np.ndarray):
        return _same(a[0].astype(str), b[0].astype(str)) and a[1] == b[1]
    return type(a) is type(b) and a == b


SNAPSHOT_ENVS = ["CartPole-v1", "MountainCar-v0", "Acrobot-v1", "Pendulum-v1", "Taxi-v3", "CliffWalking-v0",
                 "Blackjack-v1", "HalfCheetah-v4", "Hopper-v4", "Ant-v4", "rtfm"]


@pytest.mark.parametrize("name", SNAPSHOT_ENVS)
def test_restore_then_step_is_bit_identical(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real, other = make_env(name), make_env(name)
    real.reset(seed=11)
    other.reset(seed=12)
    real.action_space.seed(3)
    for _ in range(7):   # move away from the reset state
        _, _, term, trunc, _ = real.step(real.action_space.sample() if name != "rtfm" else 0)
        if term or trunc: real.reset(seed=13)
    snap = snapshot(real)
    restore(other, snap, rng=True)        # a second instance
    actions = [real.action_space.sample() for _ in range(25)]
    for a in actions:
        o1, r1, t1, _, _ = real.unwrapped.step(a)
        o2, r2, t2, _, _ = other.unwrapped.step(a)
        assert _same(o1, o2) and r1 == r2 and t1 == t2, (name, o1, o2, r1, r2)
        if t1: break
    restore(real, snap, rng=True); restore(other, snap, rng=True)   # both instances moved on: back again
    for a in actions:
        o1, r1, t1, _, _ = real.unwrapped.step(a)
        o2, r2, t2, _, _ = other.unwrapped.step(a)
        assert _same(o1, o2) and r1 == r2 and t1 == t2
        if t1: break


def test_mujoco_restore_needs_derived_quantities():
    "Ant's reward reads the torso position MuJoCo computed in the previous step: restoring qpos/qvel only is not exact."
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real, other = make_env("Ant-v4"), make_env("Ant-v4")
    real.reset(seed=0); other.reset(seed=1)
    a = np.full(8, 0.5)
    for _ in range(5): real.unwrapped.step(a)
    snap = snapshot(real)
    u = other.unwrapped
    u.set_state(real.unwrapped.data.qpos.copy(), real.unwrapped.data.qvel.copy())   # positions and velocities only
    r_naive = u.step(a)[1]
    restore(other, snap)
    assert u.step(a)[1] == real.unwrapped.step(a)[1] != r_naive


def test_blackjack_oracle_sees_the_cards_only_in_paper_compat():
    real, sim = make_env("Blackjack-v1"), make_env("Blackjack-v1")
    same_fresh = same_compat = 0
    for s in range(40):
        real.reset(seed=s); sim.reset(seed=1000 + s)
        snap = snapshot(real)
        restore(sim, snap, rng=True)
        same_compat += sim.unwrapped.step(1)[0] == real.unwrapped.step(1)[0]   # hit: the next card
        real.reset(seed=s); snap = snapshot(real)
        restore(sim, snap, rng=False)
        sim.unwrapped.np_random = np.random.default_rng(5000 + s)
        same_fresh += sim.unwrapped.step(1)[0] == real.unwrapped.step(1)[0]
    assert same_compat == 40 and same_fresh < 30


def test_oracle_planners_leave_the_env_exactly_as_it_was():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env, twin = make_env("HalfCheetah-v4"), make_env("HalfCheetah-v4")
    env.reset(seed=4); twin.reset(seed=4)
    plan = oracle_cem_plan(env, CEMConfig(horizon=8, iterations=2, samples=10, elites=3), np.random.default_rng(0))
    assert plan.shape == (8, 6) and np.isfinite(plan).all() and (np.abs(plan) <= 1).all()
    a = np.linspace(-1, 1, 6)
    o1, r1, *_ = env.step(a); o2, r2, *_ = twin.step(a)
    assert o1.tobytes() == o2.tobytes() and r1 == r2
    c = make_env("Taxi-v3"); c.reset(seed=2); before = snapshot(c)
    assert 0 <= oracle_mcts_action(c, MCTSConfig(simulations=6, rollout_steps=10), np.random.default_rng(0)) < 6
    assert c.unwrapped.s == before.attrs["s"]
    assert c.unwrapped.np_random.bit_generator.state == before.rng_state


# ------------------------------------------------------------------------------------------------ the metric
def test_normalized_return_and_baselines(sandbox, private_cache):
    assert normalized_return(3.0, 3.0, 3.0) is None and normalized_return(1.0, 0.0, 2.0) == 0.5
    oracle, cached = baseline_episodes("CartPole-v1", "oracle", episodes=EPISODES, preset="quick", progress=False)
    assert not cached and any(private_cache.glob("baselines/CartPole-v1-oracle-*.json"))
    again, cached = baseline_episodes("CartPole-v1", "oracle", episodes=EPISODES, preset="quick", progress=False)
    assert cached and again == oracle
    fresh, _ = baseline_episodes("CartPole-v1", "oracle", episodes=EPISODES, preset="quick", progress=False, use_cache=False)
    assert [e["ret"] for e in fresh] == [e["ret"] for e in oracle]      # seeded: the oracle replays itself
    rand, _ = baseline_episodes("CartPole-v1", "random", episodes=EPISODES, preset="quick", progress=False)
    r_o, r_r = np.mean([e["ret"] for e in oracle]), np.mean([e["ret"] for e in rand])
    assert normalized_return(r_o, r_r, r_o) == 1.0 and r_o > r_r + 30      # the oracle scores 1 by construction

    # a program that fails at every step is played by the random fallback: exactly the random baseline, R = 0
    res = quick("CartPole-v1", FAILS_EVERY_STEP, sandbox)
    assert res.returns_cwm == res.returns_random and res.normalized_return == 0.0
    assert res.fallbacks == res.decisions and res.abandoned and "exception" in res.fallback_kinds
    assert res.baselines_cached and res.return_oracle == r_o
    # a model that knows nothing plans like the random policy: R near 0
    res = quick("CartPole-v1", RANDOM_MODEL, sandbox, episodes=3)
    assert res.fallbacks == 0 and abs(res.normalized_return) < 0.35, res.to_dict()
    json.dumps(res.to_dict())


def test_no_program_or_one_that_does_not_load(sandbox):
    res = quick("CartPole-v1", None, sandbox)
    assert res.return_cwm is None and res.normalized_return is None and res.reason == "no program"
    assert res.return_oracle > res.return_random
    for src, why in [("class Environment(:\n", "does not load"), ("x = 1\n", "Environment"),
                     ("class Environment:\n    def __init__(self): raise OSError('no')\n", "OSError")]:
        res = quick("CartPole-v1", src, sandbox)
        assert res.return_cwm is None and res.normalized_return is None and why in res.reason, res.reason


def test_mountaincar_ties_give_na(sandbox):
    res = quick("MountainCar-v0", None, sandbox, episodes=1)
    assert res.return_oracle == res.return_random == -100.0 and res.normalized_return is None


# ------------------------------------------------------------------------------------------------ MCTS and CEM
def test_correct_cartpole_program_plans_like_the_oracle(sandbox):
    good = quick("CartPole-v1", CARTPOLE, sandbox, episodes=3)
    assert good.fallbacks == 0 and good.normalized_return > 0.9, good.to_dict()
    bad = quick("CartPole-v1", CARTPOLE_SWAPPED, sandbox, episodes=3)
    assert bad.fallbacks == 0 and bad.normalized_return < 0.3, bad.to_dict()
    assert good.model_steps_cwm > 1000 and good.decisions == sum(good.steps_cwm)


def test_cem_pendulum(sandbox):
    good = quick("Pendulum-v1", PENDULUM_OK, sandbox)
    assert good.planner == "cem" and good.fallbacks == 0
    assert good.return_oracle > good.return_random + 100
    assert good.normalized_return > 0.8, good.to_dict()
    assert good.decisions == sum(math.ceil(s / 30) for s in good.steps_cwm)   # open-loop plans of T = 30 steps
    bad = quick("Pendulum-v1", PENDULUM_FLIPPED, sandbox)
    assert bad.normalized_return < 0.5, bad.to_dict()


def test_rtfm_planning_with_valid_actions(sandbox):
    res = quick("rtfm", RTFM_CWM.read_text(), sandbox)
    assert res.fallbacks == 0 and res.returns_cwm == res.returns_oracle, res.to_dict()


# ------------------------------------------------------------------------------------------------ hostile programs
_PATCH_DRIVER = '''
import sys
def evil(namespace, args, data):
    import numpy as np
    return {RESULT}
D = sys.modules.get("cwm_nb.bench.plan_driver")
D.plan_driver.__code__ = evil.__code__       # the very function object the sandbox resolved as the driver
class Environment:
    def set_state(self, s): self.s = s
    def step(self, a): return self.s, 1.0, False
'''

HOSTILE_MCTS = {
    "reads_proc_of_the_parent": '''
import os
seen = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try: seen.append(open(f"/proc/{p}/cmdline", "rb").read())
        except OSError: pass
        try:
            with open(f"/proc/{p}/mem", "r+b") as f: f.seek(4096); f.write(b"x")
        except (OSError, ValueError): pass
for p in (os.getppid(), 1):
    try: os.kill(p, 19)
    except OSError: pass
class Environment:
    def set_state(self, s): pass
    def step(self, a): raise RuntimeError(f"saw {len(seen)} processes, none of them the parent")
''',
    "gc_finds_the_driver": '''
import gc
def evil(namespace, args, data): return {"action": 10 ** 6, "model_steps": 10 ** 12}
for o in gc.get_objects():
    if getattr(o, "__name__", None) == "plan_driver" and hasattr(o, "__code__"): o.__code__ = evil.__code__
import sys
sys.modules["cwm_nb.bench.plan_driver"].plan_driver.__code__ = evil.__code__
class Environment:
    def set_state(self, s): pass
    def step(self, a): return 0, 0.0, False
''',
    "returns_a_bool_action": _PATCH_DRIVER.replace("{RESULT}", '{"action": True}'),
    "returns_a_string_action": _PATCH_DRIVER.replace("{RESULT}", '{"action": "1"}'),
    "sleeps_past_the_limit": "import time\nclass Environment:\n    def set_state(self, s): pass\n"
                             "    def step(self, a): time.sleep(1000)\n",
    "burns_cpu": "class Environment:\n    def set_state(self, s): pass\n    def step(self, a):\n        while True: pass\n",
    "exits_the_process": "import os\nclass Environment:\n    def set_state(self, s): os._exit(0)\n    def step(self, a): pass\n",
}


def _writes_files(cache: Path) -> str:
    return f'''
import os, glob, json
targets = glob.glob({str(cache)!r} + "/baselines/*.json") + [{str(cache)!r} + "/baselines/x.json",
           {str(Path(__file__).resolve().parents[1])!r} + "/hacked.txt", os.path.expanduser("~/hacked.txt")]
wrote = []
for t in targets:
    try:
        with open(t, "w") as f: json.dump({{"episodes": [{{"ret": 1e9}}]}}, f)
        wrote.append(t)
    except OSError: pass
class Environment:
    def set_state(self, s): pass
    def step(self, a): raise RuntimeError(f"wrote {{wrote}}")
'''


def _assert_random_fallback(res):
    assert res.returns_cwm == res.returns_random, res.to_dict()   # the real episode is the random baseline's
    assert res.fallbacks == res.decisions > 0 and res.normalized_return == 0.0
    assert res.model_steps_cwm == 0


@pytest.mark.parametrize("name", sorted(HOSTILE_MCTS))
def test_hostile_program_cannot_change_the_return(name, sandbox):
    lim = SandboxLimits(wall_s=1.5, cpu_s=1, result_mb=1)
    res = quick("CartPole-v1", HOSTILE_MCTS[name], sandbox, limits=lim, max_consecutive_failures=2)
    _assert_random_fallback(res)
    assert res.abandoned and res.fallback_kinds.get("abandoned", 0) == res.decisions - 2
    if name == "sleeps_past_the_limit": assert "timeout" in res.fallback_kinds
    if name == "burns_cpu": assert set(res.fallback_kinds) & {"cpu", "timeout"}
    if "action" in name or name == "gc_finds_the_driver":   # it replaced its job's driver: refused at the first answer
        assert "exception" in res.fallback_kinds and "did not start as the model side" in res.errors[0], res.errors


def test_program_cannot_write_the_cache_or_the_project(sandbox, private_cache):
    quick("CartPole-v1", None, sandbox)                       # the baselines are cached now
    files = {p: p.read_bytes() for p in private_cache.glob("baselines/*.json")}
    assert files
    res = quick("CartPole-v1", _writes_files(private_cache), sandbox)
    _assert_random_fallback(res)
    assert {p: p.read_bytes() for p in private_cache.glob("baselines/*.json")} == files
    assert not (Path(__file__).resolve().parents[1]/"hacked.txt").exists()
    fresh = quick("CartPole-v1", None, sandbox, use_cache=False)
    assert fresh.returns_random == res.returns_random and fresh.returns_oracle == res.returns_oracle


HOSTILE_CEM = {
    "nan_plan": '{"plan": np.full((30, 1), np.nan)}',
    "huge_plan": '{"plan": np.zeros((2_000_000, 1))}',
    "plan_of_the_wrong_shape": '{"plan": np.zeros((31, 1))}',
    "plan_of_strings": '{"plan": [["0.5"]] * 30}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_CEM))
def test_hostile_cem_plans_are_rejected(name, sandbox):
    res = quick("Pendulum-v1", _PATCH_DRIVER.replace("{RESULT}", HOSTILE_CEM[name]), sandbox, max_consecutive_failures=None)
    _assert_random_fallback(res)
    assert set(res.fallback_kinds) == {"exception"}, res.fallback_kinds   # the model side stopped answering
    assert "ended without answering" in res.errors[0]
    assert res.fallback_steps == sum(res.steps_cwm)


# ------------------------------------------------------------------------------------------------ planner replaced
# The reviewer's cheat: the program replaces the planner at its top level by a hand-written policy; its step() is
# garbage. When the planner shared the program's process, this scored R ~ 1 (and forging the model-step count got
# it past the plausibility check). The planner now runs in a process the program does not run in (MCTS: the parent,
# which replays the job's tape; CEM: the job's planner process): the replacement is made in the program's process
# only, and the real planner plans with the garbage model, i.e. like random.
CHEAT_MCTS = '''
import cwm_nb.bench.planning as P
class _Result:
    def __init__(self, a): self.action = a
def _policy(model, root, actions, config, rng, n_actions=None):
    FORGE
    return _Result(1 if float(root[2]) + float(root[3]) > 0 else 0)   # push the way the pole falls
P.mcts_search = _policy
class Environment:
    def set_state(self, s): pass
    def step(self, a): return 0, 0.0, False
'''

# For CEM: the genuine cem_plan, but run on a private correct Pendulum the parent never sees; step() is garbage.
CHEAT_CEM = PENDULUM_OK.replace("class Environment:", "class _Hidden:") + '''
import cwm_nb.bench.planning as P
_real_cem = P.cem_plan
def _plan(model, root, low, high, config, rng):
    FORGE
    return _real_cem(_Hidden(), root, low, high, config, rng)
P.cem_plan = _plan
class Environment:
    def set_state(self, s): pass
    def step(self, a): return np.zeros(3, np.float32), 0.0, False
'''

# Replaces the driver itself (name and code) and the in-process fallback path.
CHEAT_DRIVER = '''
import cwm_nb.bench.plan_driver as D
def _driver(namespace, args, data):
    s = args["state"]
    return {"action": 1 if s[2] + s[3] > 0 else 0, "model_steps": 10 ** 6, "plan_s": 0.5}
D.plan_driver.__code__ = _driver.__code__
D.plan_driver = D._plan = _driver
D._SERVE = None
class Environment:
    def set_state(self, s): pass
    def step(self, a): return 0, 0.0, False
'''

# Writes a forged job result (the sandbox's frame: 8-byte length, then JSON) to every file descriptor it may have
# inherited, hoping one is the job's result pipe.
CHEAT_FRAMES = '''
import os, json, struct
_body = json.dumps({"ok": True, "value": {"action": 1, "model_steps": 10 ** 6, "plan_s": 0.5}}).encode()
_frame = struct.pack("<Q", len(_body)) + _body
_hits = 0
for fd in range(3, 4096):
    try: os.write(fd, _frame); _hits += 1
    except OSError: pass
class Environment:
    def set_state(self, s): pass
    def step(self, a): return 0, 0.0, False
'''

GARBAGE_MCTS = "class Environment:\n    def set_state(self, s): pass\n    def step(self, a): return 0, 0.0, False\n"


@pytest.mark.parametrize("env,cheat", [("CartPole-v1", CHEAT_MCTS), ("Pendulum-v1", CHEAT_CEM)])
def test_replacing_the_planner_scores_like_random(env, cheat, sandbox):
    for forge in ("pass", "model.steps += 10 ** 4"):
        res = quick(env, cheat.replace("FORGE", forge), sandbox)
        assert res.fallbacks == 0 and res.decisions > 0, res.to_dict()        # genuine decisions of the real planner
        assert res.normalized_return < (0.3 if env == "CartPole-v1" else 0.5), res.to_dict()
        assert res.model_steps_cwm >= res.decisions * res.min_model_steps
        assert "own" in res.integrity_note


def test_a_forged_step_count_or_result_frame_no_longer_helps(sandbox):
    "Forged counts, a replaced driver, or forged result frames: the planner is unaffected (same as a garbage model)."
    garbage = quick("CartPole-v1", GARBAGE_MCTS, sandbox)
    assert garbage.fallbacks == 0 and garbage.normalized_return < 0.3, garbage.to_dict()
    forged = quick("CartPole-v1", CHEAT_MCTS.replace("FORGE", "model.steps += 10 ** 4"), sandbox)
    assert forged.returns_cwm == garbage.returns_cwm and forged.model_steps_cwm == garbage.model_steps_cwm
    # MCTS plans in the parent, and the program runs in the job's own process: a frame it forges on the job's result
    # pipe is the job's first answer, which is not the driver's: the session is refused
    frames = quick("CartPole-v1", CHEAT_FRAMES, sandbox)
    _assert_random_fallback(frames)
    assert frames.fallback_kinds.get("exception", 0) >= 1 and "not the driver's" in frames.errors[0], frames.errors
    driver = quick("CartPole-v1", CHEAT_DRIVER, sandbox)
    assert driver.normalized_return == 0.0 and driver.fallbacks == driver.decisions > 0, driver.to_dict()
    # the swapped-in driver fails on the session's arguments (they hold no state): the program's own error, its line
    assert driver.fallback_kinds.get("exception", 0) >= 1 and "(line 4: " in driver.errors[0], driver.errors


# ------------------------------------------------------------------------------------------------ sessions
def test_one_session_per_episode_and_a_fresh_one_after_a_failure(sandbox):
    "The planner keeps the program's process for a whole episode; a failed decision ends the session."
    good = quick("CartPole-v1", CARTPOLE, sandbox, episodes=2)
    assert good.fallbacks == 0 and good.sessions_cwm == 2 and good.decisions == sum(good.steps_cwm) > 2
    # fails on every third step it is asked for: each failure ends the session, the next decision opens another
    flaky = CARTPOLE.replace("class Environment:", "_calls = [0]\nclass Environment:").replace(
        "    def step(self, action):", "    def step(self, action):\n        _calls[0] += 1\n"
        "        if _calls[0] % 3000 == 0: raise RuntimeError('every 3000th step')")
    assert flaky != CARTPOLE
    res = quick("CartPole-v1", flaky, sandbox, episodes=2, max_consecutive_failures=None)
    assert res.fallbacks >= 1 and res.sessions_cwm == 2 + res.fallbacks, res.to_dict()
    assert "every 3000th step" in res.errors[0]


def test_a_session_decides_as_one_shot_jobs_do(sandbox):
    "Decisions of a session (tape replayed by the planner) equal one-shot jobs (live queries after a tampered tape)."
    from dataclasses import asdict
    static = {"planner": "mcts", "config": asdict(MCTSConfig(simulations=12, rollout_steps=20)), "obs_format": "array",
              "space": {"kind": "discrete", "n": 2}, "valid_actions": False, "session": True}
    calls = [{"state": [0.01 * k, 0.0, -0.02 * k, 0.1], "obs_dtype": "<f4", "root_actions": None, "seed": k} for k in range(4)]
    tampered = ("import cwm_nb.bench.planning as P, cwm_nb.bench.plan_driver as D\nP.mcts_search = None\n"   # neither search of the model
                "D._FAST[:] = [lambda *a, **k: 1 / 0]\n" + CARTPOLE)   # side records a tape: live queries
    first, s = sandbox.open_session(CARTPOLE, "cwm_nb.bench.plan_driver:plan_driver", args=static, limits=SandboxLimits(wall_s=20, cpu_s=200))
    assert first.ok and first.value == {"ok": True}
    with s:
        in_session = [s.call(c).value for c in calls]
    for c, v in zip(calls, in_session):
        for src in (CARTPOLE, tampered):
            one = sandbox.run(src, "cwm_nb.bench.plan_driver:plan_driver", args={**static, **c, "session": False}).value
            assert (one["action"], one["model_steps"]) == (v["action"], v["model_steps"]), (c, one, v)


def test_a_sandboxed_decisions_error_names_the_programs_line_once(sandbox):
    """A program that fails during planning: the error a sandboxed decision reports (the model side's, passed on by
    the planner) is the one the same decision reports in process, with the program's line named once."""
    from dataclasses import asdict
    from cwm_nb.sandbox.programs import run_in_process
    static = {"planner": "mcts", "config": asdict(MCTSConfig(simulations=4, rollout_steps=5)), "obs_format": "array",
              "space": {"kind": "discrete", "n": 2}, "valid_actions": False, "session": False,
              "state": [0.01, 0.0, 0.02, 0.0], "obs_dtype": "<f4", "root_actions": None, "seed": 0}
    wrap = "\n_real = Environment.step\ndef _step(self, a):\n    o, r, d = _real(self, a)\n    return o, {}, d\nEnvironment.step = _step\n"
    for src in (CARTPOLE + wrap.format("float('nan')"), CARTPOLE + wrap.format("1 / 0")):   # a bad value; an exception
        here = run_in_process(src, "cwm_nb.bench.plan_driver:plan_driver", args=static)
        there = sandbox.run(src, "cwm_nb.bench.plan_driver:plan_driver", args=static)
        assert not here.ok and not there.ok and there.error["message"] == here.error["message"], (here.error, there.error)
        assert there.error["message"].count("line ") == 1 and there.error["line"] == here.error["line"], there.error


# A program whose step never returns; the second first raises its own CPU soft limit to the hard one.
ENDLESS_STEP = "class Environment:\n    def set_state(self, s): pass\n    def step(self, a):\n        while True: pass\n"
RAISES_ITS_CPU_LIMIT = ENDLESS_STEP.replace("        while True", "        import resource\n"
    "        resource.setrlimit(resource.RLIMIT_CPU, (resource.getrlimit(resource.RLIMIT_CPU)[1],) * 2)\n        while True")
assert RAISES_ITS_CPU_LIMIT != ENDLESS_STEP


@pytest.mark.parametrize("program", [ENDLESS_STEP, RAISES_ITS_CPU_LIMIT], ids=["endless", "raises-its-limit"])
@pytest.mark.parametrize("mode", ["bwrap", "landlock"])
def test_a_decision_keeps_its_cpu_cap(mode, program):
    """The planner's model side gets `decision_cpu_s` of CPU time per decision in every mode: the decision ends as a
    `cpu` error, not at the call's wall-clock limit (which is far longer), and the session's next call says it ended."""
    import shutil
    from dataclasses import asdict
    from cwm_nb.sandbox.jobs import Sandbox
    from cwm_nb.sandbox.landlock import landlock_support
    if mode == "bwrap" and shutil.which("bwrap") is None: pytest.skip("bubblewrap is not installed")
    if mode == "landlock" and landlock_support(): pytest.skip(landlock_support())
    static = {"planner": "mcts", "config": asdict(MCTSConfig(simulations=4, rollout_steps=5)), "obs_format": "array",
              "space": {"kind": "discrete", "n": 2}, "valid_actions": False, "session": True, "decision_cpu_s": 1}
    with Sandbox(isolation=mode) as sb:
        first, s = sb.open_session(program, "cwm_nb.bench.plan_driver:plan_driver", args=static,
                                   limits=SandboxLimits(wall_s=60, cpu_s=100))
        assert first.ok, first.error
        with s:
            r = s.call({"state": [0.0, 0.0, 0.0, 0.0], "obs_dtype": "<f4", "root_actions": None, "seed": 0})
        assert not r.ok and r.error["kind"] == "cpu", r.error


# ------------------------------------------------------------------------------------------------ the parent plans
_STATIC = {"planner": "mcts", "config": {"simulations": 12, "rollout_steps": 20}, "obs_format": "array",
           "space": {"kind": "discrete", "n": 2}, "valid_actions": False, "session": True}
_CALLS = [{"state": [0.01 * k, 0.0, -0.02 * k, 0.1], "obs_dtype": "<f4", "root_actions": None, "seed": k} for k in range(4)]
_BOTH_BROKEN = ("import cwm_nb.bench.planning as P, cwm_nb.bench.plan_driver as D\nP.mcts_search = None\n"
                "D._FAST[:] = [lambda *a, **k: 1 / 0]\n")                 # neither search of the job records a tape
_FORGED = ("import cwm_nb.bench.plan_driver as D\n"                      # a tape that pays for every step
           "D._record_search = lambda model, root, a, send: (send([['s', 1, 0, 1e6, False, None]] * 50), send([['e']]))\n")
_ENDLESS_TAPE = ("import cwm_nb.bench.plan_driver as D\n"                # junk parts, no end mark, until stopped
                 "def _junk(model, root, a, send):\n    while True: send([['s', 0, 0, 0.0, False, None]] * 1000)\n"
                 "D._record_search = _junk\n")
_NO_TAPE = "import cwm_nb.bench.plan_driver as D\nD._record_search = lambda *a: None\n"   # ends its answer at once
_EMPTY_PARTS = ("import cwm_nb.bench.plan_driver as D\n"                 # empty parts without end
                "def _empty(model, root, a, send):\n    while True: send([]); send([])\n"
                "D._record_search = _empty\n")


def _decide_here(sandbox, src, calls, **extra):
    from cwm_nb.bench.plan_session import decide_in_session
    args = {**_STATIC, "model_only": True, **extra}
    first, s = sandbox.open_session(src, "cwm_nb.bench.plan_driver:plan_driver", args=args, poll=True, apart=True,
                                    limits=SandboxLimits(wall_s=20, cpu_s=200))
    assert first.ok and first.value == {"ok": True} and s.direct, first.error
    with s: return [decide_in_session(s, src, args, c) for c in calls], s


def test_decisions_planned_here_are_the_jobs_planners_whatever_the_job_sends(sandbox):
    """MCTS planned in the parent (`decide_in_session`: the job is the model side and streams its search's tape)
    decides as the job's own planner and as the same search in process; a job whose searches are broken, that forges
    its tape or sends none at all changes nothing (the parent searches with live requests); a tape without end is
    refused once it is longer than the search could record. The session's calls tell the paths apart: a tape comes in
    a few parts a decision, a live search asks at least once a simulation."""
    from cwm_nb.bench.plan_driver import _plan, _program_model
    from cwm_nb.sandbox.programs import _new_program_module
    ns = _new_program_module().__dict__; exec(compile(CARTPOLE, "<cwm-program>", "exec"), ns)
    here = [_plan(_program_model(ns, _STATIC), {**_STATIC, **c, "session": False}) for c in _CALLS]
    first, s = sandbox.open_session(CARTPOLE, "cwm_nb.bench.plan_driver:plan_driver", args=_STATIC)
    with s: job = [s.call(c).value for c in _CALLS]
    want = [(d["action"], d["model_steps"]) for d in here]
    assert [(d["action"], d["model_steps"]) for d in job] == want
    live = len(_CALLS) * _STATIC["config"]["simulations"]   # the fewest calls of live searches
    for src in (CARTPOLE, _BOTH_BROKEN + CARTPOLE, _FORGED + CARTPOLE, _NO_TAPE + CARTPOLE):
        got, s = _decide_here(sandbox, src, _CALLS)
        assert all(r.ok for r in got), [r.error for r in got]
        assert [(r.value["action"], r.value["model_steps"]) for r in got] == want, src[:60]
        assert (s.calls < live) == (src == CARTPOLE), (src[:60], s.calls, live)   # the tape, only where it is honest
    for src in (_ENDLESS_TAPE, _EMPTY_PARTS):
        got, s = _decide_here(sandbox, src + CARTPOLE, _CALLS[:1])
        assert not got[0].ok and got[0].error["kind"] == "output_limit" and not s.alive, got[0].error


@pytest.mark.parametrize("program", [ENDLESS_STEP, RAISES_ITS_CPU_LIMIT], ids=["endless", "raises-its-limit"])
@pytest.mark.parametrize("mode", ["bwrap", "landlock"])
def test_a_decision_planned_here_keeps_its_cpu_cap(mode, program):
    """Planned in the parent, a decision's `decision_cpu_s` still caps the job (the model side) in every mode: the parent
    reads the job's CPU clock while it waits, so the decision ends as a `cpu` error long before its wall-clock limit."""
    import shutil, time
    from cwm_nb.sandbox.jobs import Sandbox
    from cwm_nb.sandbox.landlock import landlock_support
    from cwm_nb.bench.plan_session import decide_in_session
    if mode == "bwrap" and shutil.which("bwrap") is None: pytest.skip("bubblewrap is not installed")
    if mode == "landlock" and landlock_support(): pytest.skip(landlock_support())
    args = {**_STATIC, "model_only": True, "decision_cpu_s": 1}
    with Sandbox(isolation=mode) as sb:
        first, s = sb.open_session(program, "cwm_nb.bench.plan_driver:plan_driver", args=args, poll=True,
                                   limits=SandboxLimits(wall_s=60, cpu_s=100))
        assert first.ok and s.direct, first.error
        t = time.monotonic()
        r = decide_in_session(s, program, args, _CALLS[0])
        assert not r.ok and r.error["kind"] == "cpu" and not s.alive, r.error
        assert time.monotonic() - t < 20
