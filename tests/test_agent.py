"""The WorldCoder agent (33_agent_planning, 33b_scripted_model, 34_agent, 34a_agent_curriculum, 35_agent_rl,
52_agent_experiments): the reference programs against the real environments, the curriculum Empty -> DoorKey -> Unlock
with the scripted capable model (`ScriptedWorldCoderModel`, a demonstration whose numbers are not results),
the optimism ablation failing where the agent succeeds, resume after a kill and after an LLM outage without repeating a
call, the run's one definition (`--set` options reaching `AgentConfig` and `PlannerConfig`, bad ones refused before any
work, `--from`, the code fingerprint, old folders), bad input, and one end-to-end run with the embedded model (slow)."""
import json, os, subprocess, sys
from pathlib import Path
import numpy as np
import pytest

from cwm_nb.core import CwmNbError, data_dir, derive_seed
from cwm_nb.agent.oo_state import entity_api_source, state_to_plain, state_from_plain
from cwm_nb.agent.planning import predict_steps
from cwm_nb.agent.planning import PlannerConfig
from cwm_nb.agent.worldcoder import AgentConfig, ABLATIONS, WorldModel, get_domain, make_env
from cwm_nb.agent.curriculum import run_curriculum
from cwm_nb.agent.scripted import ScriptedWorldCoderModel, scripted_llm
from cwm_nb.experiments.agent import run_agent
from cwm_nb.llm.demo import ScriptedLLM
from cwm_nb.llm.cache import CachedLLM
from cwm_nb.agent.minigrid import MINIGRID_CURRICULUM

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("cwm-nb"))
TEST3 = ["MiniGrid-Empty-5x5-v0", "MiniGrid-DoorKey-5x5-v0", "MiniGrid-Unlock-v0"]
DOUBLE = ScriptedWorldCoderModel()


# ---------------------------------------------------------------------------------------------------------------
# the reference programs the test double answers with reproduce the real environments
def _random_steps(env, actions, n_episodes, steps, seed):
    rng = np.random.default_rng(seed)
    out = []
    for ep in range(n_episodes):
        s, info = env.reset(seed=ep + 100 * seed)
        for _ in range(steps):
            a = actions[int(rng.integers(len(actions)))]
            n, r, term, trunc, _ = env.step(a)
            out.append((s, a, float(r), n, bool(term), info["mission"]))
            s = n
            if term or trunc: break
    return out


@pytest.mark.parametrize("domain,env_name", [("minigrid", e) for e in MINIGRID_CURRICULUM] +
                         [("sokoban", "Sokoban-v0"), ("sokoban", "SokobanTeleporter-v0")])
def test_reference_programs_reproduce_the_environment(domain, env_name):
    dom = get_domain(domain)
    api = entity_api_source(dom.entity_names)
    steps = _random_steps(make_env(dom, env_name), dom.actions, 6, 60, seed=1)
    items = [(state_to_plain(s), a) for s, a, *_ in steps]
    out = predict_steps(api, items, "transition", transition=DOUBLE.tier_program(domain, 2))
    wrong = [i for i, (o, x) in enumerate(zip(out, steps)) if o[3] or state_from_plain(o[0]) != x[3]]
    assert not wrong, (steps[wrong[0]][1], out[wrong[0]][3])
    by_goal = {}
    for s, a, r, n, d, g in steps: by_goal.setdefault(g, []).append((s, a, r, n, d))
    for g, xs in by_goal.items():
        res = predict_steps(api, [(state_to_plain(s), a, state_to_plain(n)) for s, a, _, n, _ in xs], "reward",
                            reward=DOUBLE.reward_program(domain, g))
        assert [(o[1], o[2]) for o in res] == [(pytest.approx(r), d) for _, _, r, _, d in xs], g


def test_reference_rewards_on_successful_episodes():
    "Each MiniGrid goal's program gives reward 1 and done on the step that really succeeds (played by the planner)."
    from cwm_nb.agent.planning import plan_with_model
    dom = get_domain("minigrid")
    api = entity_api_source(dom.entity_names)
    for name in TEST3 + ["MiniGrid-UnlockPickup-v0"]:
        env = make_env(dom, name)
        s, info = env.reset(seed=3)
        p = plan_with_model(api, DOUBLE.tier_program("minigrid", 2), DOUBLE.reward_program("minigrid", info["mission"]),
                            s, dom.actions, dom.entity_names, info["mission"])
        assert p.found, (name, p.reason, p.first_error)
        for a, (_, r, d) in zip(p.actions, p.predicted):
            s, rr, term, trunc, _ = env.step(a)
            assert (rr, term) == (r, d)
        assert term and rr == 1.0


# ---------------------------------------------------------------------------------------------------------------
# the mechanism: the curriculum with the scripted capable model, and the optimism ablation
def test_curriculum_with_the_scripted_model():
    res = run_curriculum(scripted_llm(), "minigrid", TEST3, AgentConfig(max_episodes=15), seed=0, progress=False)
    assert [e["solved"] for e in res.envs] == [True, True, True]
    assert all(e["first_success_episode"] <= 3 for e in res.envs)
    kinds = [c["kind"] for c in res.calls]
    assert kinds[:2] == ["init_transition", "init_reward"] and "refine_plan" in kinds and "guess_reward" in kinds
    assert kinds.count("guess_reward") == 2                # a new goal in DoorKey and in Unlock, one call each
    assert res.envs[2]["llm_calls"] <= 3                   # Unlock: only a new goal; the transition carried over
    assert "def can_overlap" in res.model["transition"]    # the full MiniGrid program, learned in DoorKey
    assert set(res.model["rewards"]) == {"get to the green goal square", "open the door",
                                         "use the key to open the door and then get to the goal"}
    assert len(res.calls) <= 20


def test_without_optimism_the_sparse_goal_is_never_reached():
    cfg = dict(max_episodes=12)
    on = run_curriculum(scripted_llm(), "minigrid", ["MiniGrid-DoorKey-5x5-v0"], AgentConfig(**cfg), seed=0, progress=False)
    off = run_curriculum(scripted_llm(), "minigrid", ["MiniGrid-DoorKey-5x5-v0"], AgentConfig(**cfg, **ABLATIONS["no-optimism"]),
                         seed=0, progress=False)
    assert on.envs[0]["solved"] and on.envs[0]["episodes"] <= 12
    assert off.envs[0]["successes"] == 0 and off.envs[0]["episodes"] == 12     # the same budget of episodes
    assert off.envs[0]["steps"] == 1200 and len(off.calls) <= len(on.calls) + 5
    # without φ2 the reward program only fits the (unrewarded) data: it never rewards, so no plan exists
    assert "return 0.0, False" in off.model["rewards"]["use the key to open the door and then get to the goal"]


def test_prompt4reward_keeps_a_wrong_guess():
    fast = PlannerConfig(check_budget=3000, act_budget=3000)    # enough for these rooms; a failed search ends sooner
    res = run_curriculum(scripted_llm(), "minigrid", TEST3, AgentConfig(max_episodes=12, planner=fast, **ABLATIONS["prompt4reward"]),
                         seed=0, progress=False)
    assert [e["solved"] for e in res.envs] == [True, True, False]
    assert "refine_plan" not in [c["kind"] for c in res.calls] and "refine_reward" not in [c["kind"] for c in res.calls]


def test_sokoban_two_boxes_with_the_scripted_model():
    res = run_curriculum(scripted_llm(), "sokoban", ["Sokoban-v0"], AgentConfig(max_episodes=15), seed=0, progress=False)
    e = res.envs[0]
    assert e["solved"] and e["first_success_steps"] is not None
    assert "Box(" in res.model["transition"] and "10.0" in res.model["rewards"]["win the game"]


# ---------------------------------------------------------------------------------------------------------------
# resume after a kill, and after an LLM outage, without repeating an LLM call
class _Fails:
    "Wraps an LLM; raises `exc` on call number `at` (counting from 1) of this object."
    def __init__(self, inner, at, exc):
        self.inner, self.at, self.exc, self.n = inner, at, exc, 0
        self.name, self.usage = inner.name, inner.usage
    def complete(self, *a, **kw):
        self.n += 1
        if self.n == self.at: raise self.exc
        return self.inner.complete(*a, **kw)


@pytest.fixture(scope="module")
def uninterrupted():
    return run_curriculum(scripted_llm(), "minigrid", TEST3[:2], AgentConfig(max_episodes=15), seed=1, progress=False)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), CwmNbError("the endpoint is down after 5 retries", "try later")],
                         ids=["kill", "outage"])
def test_resume_repeats_no_llm_call(tmp_path, exc, uninterrupted):
    cfg, full = AgentConfig(max_episodes=15), uninterrupted
    same = lambda c: (c["env"], c["episode"])
    at = max(i + 1 for i in range(1, len(full.calls)) if same(full.calls[i]) == same(full.calls[i - 1]))
    assert full.calls[at - 1]["env"] == TEST3[1]              # mid-synthesis in DoorKey, after Empty's episodes are on disk
    cache, ck = tmp_path/"cache.sqlite", tmp_path/"checkpoint.json"
    first = CachedLLM(ScriptedLLM(ScriptedWorldCoderModel(), name="scripted-worldcoder"), cache)
    with pytest.raises(type(exc)):
        run_curriculum(_Fails(first, at, exc), "minigrid", TEST3[:2], cfg, seed=1, checkpoint=ck, progress=False)
    assert json.loads(ck.read_text())["episodes"] and first.inner.n_answered == at - 1
    second = CachedLLM(ScriptedLLM(ScriptedWorldCoderModel(), name="scripted-worldcoder"), cache)
    res = run_curriculum(second, "minigrid", TEST3[:2], cfg, seed=1, checkpoint=ck, progress=False)
    assert res.episodes == [dict(e, wall_s=r["wall_s"], llm_s=r["llm_s"]) for e, r in zip(full.episodes, res.episodes)]
    assert len(res.calls) == len(full.calls)
    # every call of the run was answered by a model exactly once: the replayed ones came from the cache
    assert first.inner.n_answered + second.inner.n_answered == len(full.calls)
    assert second.usage.cached_calls >= 1
    # the model and cached call counts cover both sessions (kept in the checkpoint), not only the last
    assert res.usage["calls"] + res.usage["cached_calls"] == len(res.calls)
    assert res.usage["calls"] > second.usage.calls and res.usage["cached_calls"] == second.usage.cached_calls


def test_run_agent_outage_is_a_clear_error_and_the_rerun_completes(tmp_path):
    kw = dict(domain="minigrid", curriculum="MiniGrid-Empty-5x5-v0", model="scripted", max_episodes=12, progress=False)
    boom = _Fails(scripted_llm(tmp_path/"c.sqlite"), 2, CwmNbError("the endpoint is down", "rerun to resume"))
    with pytest.raises(CwmNbError, match="the endpoint is down"):
        run_agent(tmp_path, llm=boom, **kw)
    rd = tmp_path/"agent"/"minigrid-MiniGrid-Empty-5x5-v0"/"none"/"scripted"/"seed0"
    assert (rd/"settings.json").exists() and not (rd/"metrics.json").exists()
    m = run_agent(tmp_path, llm=scripted_llm(tmp_path/"c.sqlite"), **kw)
    assert m["status"] == "complete" and m["solved"] and m["cached_calls"] >= 1
    assert m["model_calls"] + m["cached_calls"] == m["llm_calls"]


def test_a_folder_with_no_work_done_takes_corrected_settings(tmp_path):
    kw = dict(domain="minigrid", curriculum="MiniGrid-Empty-5x5-v0", model="scripted", max_episodes=12, progress=False)
    down = _Fails(scripted_llm(), 1, CwmNbError("nothing listens at http://127.0.0.1:9/v1", "check --base-url"))
    with pytest.raises(CwmNbError, match="nothing listens"):   # the first call fails: no call answered, no step taken
        run_agent(tmp_path, llm=down, base_url="http://127.0.0.1:9/v1", **kw)
    m = run_agent(tmp_path, llm=scripted_llm(), base_url="http://127.0.0.1:8000/v1", **kw)
    assert m["status"] == "complete" and m["base_url"] == "http://127.0.0.1:8000/v1"
    with pytest.raises(CwmNbError, match="holds a run made with base_url='http://127.0.0.1:8000/v1'"):   # now it holds work
        run_agent(tmp_path, llm=scripted_llm(), base_url="http://127.0.0.1:9/v1", **kw)


# ---------------------------------------------------------------------------------------------------------------
# the method in one place (34_agent's `play_episode`), the scripted model in the product
def test_every_episode_runs_through_play_episode(monkeypatch):
    "run_curriculum plays each episode with `play_episode`, the loop at the top of 34_agent: editing it changes runs."
    import cwm_nb.agent.curriculum as A
    seeds, real = [], A.play_episode
    monkeypatch.setattr(A, "play_episode", lambda agent, env, reset_seed, max_steps: seeds.append(reset_seed)
                        or real(agent, env, reset_seed, max_steps))
    res = run_curriculum(ScriptedLLM([]), "minigrid", ["MiniGrid-Empty-5x5-v0"],
                         AgentConfig(llm_budget=0, max_episodes=2, episode_steps=3), progress=False)
    assert len(res.episodes) == 2
    assert seeds == [derive_seed(0, "MiniGrid-Empty-5x5-v0", k) % 2**31 for k in range(2)]


def test_the_scripted_model_is_a_demonstration_of_the_product():
    "`--model scripted` is `ScriptedWorldCoderModel` of cwm_nb.agent.scripted; the test doubles do not define it."
    from cwm_nb.testing import doubles
    assert type(scripted_llm().answers) is ScriptedWorldCoderModel
    assert not hasattr(doubles, "WorldCoderTestDouble") and not hasattr(doubles, "ScriptedWorldCoderModel")


# ---------------------------------------------------------------------------------------------------------------
# one definition of a run (issue 33): `cwm-nb agent ... --set NAME=VALUE`, `--from`, the code fingerprint
EMPTY = ["agent", "minigrid", "--curriculum", "MiniGrid-Empty-5x5-v0", "--model", "scripted"]

def _main(*args) -> int:
    "`cwm-nb ARGS` in this process (its errors: exit status 2 and a message on stderr)."
    from cwm_nb.experiments.cli import main
    return main([str(a) for a in args])


def test_set_epsilon_reaches_the_agents_config_through_the_command_line(tmp_path, monkeypatch, capsys):
    "The option goes through papermill into the notebook's run: the folder, settings.json and the agent's own config."
    from cwm_nb.experiments.definition import code_fingerprint
    monkeypatch.setenv("CWM_NB_LLM_CACHE", str(tmp_path/"cache.sqlite"))
    assert _main(*EMPTY, "--max-episodes", 12, "--set", "epsilon=0.1", "--out", tmp_path/"r") == 0
    rd = tmp_path/"r"/"agent"/"minigrid-MiniGrid-Empty-5x5-v0"/"none+epsilon=0.1"/"scripted"/"seed0"
    s, m = json.loads((rd/"settings.json").read_text()), json.loads((rd/"metrics.json").read_text())
    assert s["options"] == m["options"] == {"method.epsilon": 0.1}
    assert s["method_config"]["epsilon"] == 0.1 and s["method_config"]["planner"]["planner"] == "bfs"
    assert s["max_episodes"] == s["method_config"]["max_episodes"] == 12 and s["llm_budget"] == 300
    assert s["code"] == m["code"] == code_fingerprint("agent") and m["status"] == "complete"
    ran = json.loads((rd/"checkpoint.json").read_text())["identity"]["config"]   # what `run_curriculum` ran with
    assert ran["epsilon"] == 0.1 and ran == s["method_config"]
    assert "none+epsilon=0.1" in capsys.readouterr().err
    # the record repeats the run: found complete, not run again
    assert _main("agent", "--from", rd/"settings.json", "--out", tmp_path/"r") == 0
    assert capsys.readouterr().err.startswith(f"complete run found, skipped: {rd}")


@pytest.mark.parametrize("item,message", [
    ("epsilon=lots", "must be float, got 'lots'"),
    ("epsilon=1.5", "epsilon=1.5\n  What to do: use 0 <= epsilon <= 1"),   # AgentConfig's own check
    ("epsilom=0.1", "unknown option 'epsilom' (did you mean 'epsilon'?)"),
    ("planner.max_depth=0", "PlannerConfig.max_depth must be at least 1"),
    ("planner.nope=1", "unknown option 'planner.nope'")])
def test_a_bad_option_is_refused_before_any_work(tmp_path, capsys, item, message):
    assert _main(*EMPTY, "--set", item, "--out", tmp_path) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    if "unknown" in message: assert "`cwm-nb methods --agent` lists them all" in err
    assert list(tmp_path.iterdir()) == []   # no folder, no notebook, no call


def test_the_ppo_baseline_takes_no_agent_option(tmp_path, capsys):
    assert _main("agent", "minigrid", "--method", "ppo", "--set", "epsilon=0.1", "--out", tmp_path) == 2
    assert "the PPO baseline has no option method.epsilon" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_agents_options_are_listed(capsys):
    assert _main("methods", "--agent") == 0
    out = capsys.readouterr().out
    for line in ("  epsilon ", "  planner.max_depth ", "  phi1_scope ", "C is REx's prior strength"):
        assert line in out
    assert "  llm_budget " not in out and "  planner.planner " not in out   # settings, with flags of their own


def test_planner_max_depth_reaches_the_planner(tmp_path, monkeypatch):
    import cwm_nb.agent.worldcoder as W
    depths, real = [], W.plan_with_model
    monkeypatch.setattr(W, "plan_with_model", lambda *a, **kw: depths.append(a[7].max_depth) or real(*a, **kw))
    m = run_agent(tmp_path, llm=scripted_llm(tmp_path/"c.sqlite"), domain="minigrid", curriculum="MiniGrid-Empty-5x5-v0",
                  model="scripted", max_episodes=3, options=["planner.max_depth=10"], progress=False)
    assert Path(m["run_dir"]).parent.parent.name == "none+planner.max_depth=10"
    assert m["method_config"]["planner"]["max_depth"] == 10 and m["options"] == {"planner.max_depth": 10}
    assert depths and set(depths) == {10}   # every search of the run


def test_a_rerun_after_a_code_edit_is_refused_unless_forced(tmp_path, capsys):
    kw = dict(domain="minigrid", curriculum="MiniGrid-Empty-5x5-v0", model="scripted", max_episodes=2, progress=False)
    m = run_agent(tmp_path, llm=scripted_llm(tmp_path/"c.sqlite"), **kw)
    rd = Path(m["run_dir"])
    s = json.loads((rd/"settings.json").read_text())   # as if made before an edit of agent.worldcoder and an export
    s["code"] = dict(fingerprint="0" * 12, modules={**s["code"]["modules"], "cwm_nb.agent.worldcoder": "0" * 12})
    (rd/"settings.json").write_text(json.dumps(s))
    assert _main(*EMPTY, "--max-episodes", 2, "--out", tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{rd} holds a run made by other code: cwm_nb.agent.worldcoder changed since" in err and "--force" in err
    with pytest.raises(CwmNbError, match="cwm_nb.agent.worldcoder changed since"):
        run_agent(tmp_path, llm=scripted_llm(tmp_path/"c.sqlite"), **kw)
    again = run_agent(tmp_path, llm=scripted_llm(tmp_path/"c.sqlite"), force=True, **kw)
    assert again["code"]["fingerprint"] != "0" * 12 and again["status"] == "complete"


def test_an_old_agent_folder_resumes(tmp_path):
    "A folder written before runs recorded their options, configs and code (no such keys) resumes without a new call."
    kw = dict(domain="minigrid", curriculum="MiniGrid-Empty-5x5-v0", model="scripted", max_episodes=12, progress=False)
    boom = _Fails(scripted_llm(tmp_path/"c.sqlite"), 2, CwmNbError("the endpoint is down", "rerun to resume"))
    with pytest.raises(CwmNbError, match="the endpoint is down"):
        run_agent(tmp_path, llm=boom, **kw)
    rd = tmp_path/"agent"/"minigrid-MiniGrid-Empty-5x5-v0"/"none"/"scripted"/"seed0"
    s = json.loads((rd/"settings.json").read_text())
    old = {k: v for k, v in s.items() if k not in ("options", "method_config", "code", "definition")}
    (rd/"settings.json").write_text(json.dumps(old))
    m = run_agent(tmp_path, llm=scripted_llm(tmp_path/"c.sqlite"), **kw)
    assert m["status"] == "complete" and m["cached_calls"] >= 1 and m["model_calls"] + m["cached_calls"] == m["llm_calls"]
    # complete, in the old format: skipped
    (rd/"settings.json").write_text(json.dumps(old))
    (rd/"metrics.json").write_text(json.dumps({k: v for k, v in m.items() if k not in ("options", "code")}))
    llm = scripted_llm(tmp_path/"c2.sqlite")
    assert run_agent(tmp_path, llm=llm, **kw)["llm_calls"] == m["llm_calls"] and llm.inner.n_answered == 0


# ---------------------------------------------------------------------------------------------------------------
# bad input
def test_unknown_environment_and_settings():
    with pytest.raises(CwmNbError, match="unknown minigrid environment 'MiniGrid-Nope-v0'"):
        run_curriculum(scripted_llm(), "minigrid", ["MiniGrid-Nope-v0"], progress=False)
    with pytest.raises(CwmNbError, match="setting domain must be 'minigrid' | 'sokoban', got 'atari'"):
        run_agent("unused", domain="atari")
    with pytest.raises(CwmNbError, match="setting ablation must be 'none' | 'no-optimism'"):
        run_agent("unused", domain="minigrid", ablation="no-brain")
    r = subprocess.run([CLI, "agent", "minigrid", "--curriculum", "MiniGrid-Nope-v0", "--model", "scripted"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "unknown minigrid environment" in r.stderr


def test_a_goal_the_programs_cannot_parse_is_a_recorded_failure(monkeypatch):
    import cwm_nb.agent.curriculum as A
    real = A.make_env
    class Weird:
        "Empty-5x5 with a goal text no reward program understands."
        def __init__(self, env): self.env = env
        def reset(self, **kw):
            s, info = self.env.reset(**kw); return s, dict(info, mission="xyzzy the frobnicator")
        def step(self, a):
            s, r, term, trunc, info = self.env.step(a); return s, r, term, trunc, dict(info, mission="xyzzy the frobnicator")
        def close(self): self.env.close()
    monkeypatch.setattr(A, "make_env", lambda dom, name: Weird(real(dom, name)))
    res = run_curriculum(scripted_llm(), "minigrid", ["MiniGrid-Empty-5x5-v0"], AgentConfig(max_episodes=3, llm_budget=12),
                         seed=0, progress=False)
    e = res.envs[0]
    assert not e["solved"] and e["episodes"] == 3 and len(res.calls) <= 12
    assert res.syntheses and not any(s["satisfied"] for s in res.syntheses)
    assert res.status in ("complete", "budget")


def test_a_program_blocked_in_c_costs_the_job_limit_not_minutes(monkeypatch):
    # `sum(range(10**12))` runs in C: the per-call SIGALRM waits for it; the job's wall limit (scaled to the work) ends it
    import cwm_nb.agent.planning as AP
    monkeypatch.setattr(AP, "JOB_BASE_S", 2.0)
    api = entity_api_source(get_domain("minigrid").entity_names)
    env = make_env(get_domain("minigrid"), "MiniGrid-Empty-5x5-v0")
    s = state_to_plain(env.reset(seed=0)[0])
    out = predict_steps(api, [(s, "left")], "transition", "def transition(state, action):\n    sum(range(10**12))\n",
                        call_timeout_s=0.1)
    assert AP.job_wall_s(1, 0.1) == 3.0
    assert out[0][3].startswith("the sandbox job failed") and "wall-clock limit of 3 s" in out[0][3]


def test_a_program_that_hangs_is_a_recorded_failure():
    hang = "def transition(state, action):\n    while True:\n        pass\n"
    llm = ScriptedLLM(lambda messages, draw: f"```python\n{hang}```" if "transition" in messages[-1]["content"].split("\n")[0]
                      else "```python\ndef reward_func(s, a, n):\n    return 0.0, False\n```")
    cfg = AgentConfig(max_episodes=2, llm_budget=4, episode_steps=20)
    cfg.planner.call_timeout_s = 0.05
    res = run_curriculum(llm, "minigrid", ["MiniGrid-Empty-5x5-v0"], cfg, seed=0, progress=False)
    assert res.envs[0]["episodes"] == 2 and not res.envs[0]["solved"] and len(res.calls) <= 4
    assert all(not c["phi1"] for s in res.syntheses for c in s["candidates"])


# ---------------------------------------------------------------------------------------------------------------
# the PPO baseline runs (a few hundred steps: no learning is expected)
def test_ppo_runs_and_counts_episodes():
    pytest.importorskip("stable_baselines3")
    from cwm_nb.agent.rl import train_ppo
    r = train_ppo("minigrid", "MiniGrid-Empty-5x5-v0", 300, seed=0, n_envs=2, n_steps=64, batch_size=64)
    assert r["steps"] == 384 and r["episodes"] >= 2 and len(r["curve"]) == r["episodes"]
    assert all(s <= r["steps"] for s, _ in r["curve"])


# ---------------------------------------------------------------------------------------------------------------
# the embedded model runs the same loop end to end (its result is what it is: a 270M model is not expected to learn)
@pytest.mark.slow
def test_the_embedded_model_runs_the_loop(tmp_path, cache_env):
    r = subprocess.run([CLI, "agent", "minigrid", "--curriculum", "MiniGrid-Empty-5x5-v0", "--model", "embedded",
                        "--budget", "3", "--max-episodes", "2", "--seed", "0", "--out", str(tmp_path)],
                       capture_output=True, text=True, env=cache_env, timeout=1800, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    rd = tmp_path/"agent"/"minigrid-MiniGrid-Empty-5x5-v0"/"none"/"embedded"/"seed0"
    m = json.loads((rd/"metrics.json").read_text())
    assert m["status"] in ("complete", "budget") and 1 <= m["llm_calls"] <= 3 and m["model_calls"] == m["llm_calls"]
    assert m["envs_results"][0]["episodes"] == 2 and (rd/"notebook.ipynb").exists()
    print("embedded model:", json.dumps({k: m[k] for k in ("solved", "llm_calls", "calls_by_kind", "env_steps")}),
          m["envs_results"][0])
