"""Evaluation beyond the paper's accuracy: held-out episodes, open-loop rollouts, the determinism check, and the run
settings that carry them (real sandbox, shipped buffers, scripted test-double LLMs)."""
import json, subprocess, sys
from pathlib import Path

import numpy as np
import pytest

from cwm_nb.bench.cwm import evaluate_program
from cwm_nb.bench.program_runs import fed_batches
from cwm_nb.bench.rollouts import rollout_segments
from cwm_nb.bench.replay import load_buffer, split_by_episode

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")
PROGRAMS = ROOT/"data"/"programs"
CARTPOLE = (PROGRAMS/"CartPole-v1.py").read_text()
PLANTED = json.loads((PROGRAMS/"planted_mistakes.json").read_text())
CARTPOLE_PLANTED = CARTPOLE.replace(PLANTED["CartPole-v1"]["old"], PLANTED["CartPole-v1"]["new"])
# a hidden call counter, which set_state does not reset: the reward drops to 0 after 300 calls of step
COUNTER = CARTPOLE.replace("class Environment:", "_calls = [0]\nclass Environment:").replace(
    "    def step(self, action):", "    def step(self, action):\n        _calls[0] += 1").replace(
    "return self.state.astype(np.float32), 1.0, done", "return self.state.astype(np.float32), float(_calls[0] <= 300), done")
assert COUNTER.count("_calls") == 3


def test_split_by_episode_keeps_episodes_whole_and_is_seeded():
    buf = load_buffer("CartPole-v1")
    s = split_by_episode(buf, 0.2, seed=0)
    assert len(s.heldout_episodes) == 2 and len(s.search_episodes) == 8
    assert set(np.unique(s.heldout.episode)) == set(s.heldout_episodes)
    assert set(np.unique(s.search.episode)).isdisjoint(s.heldout_episodes)
    assert len(s.search) + len(s.heldout) == len(buf)
    assert split_by_episode(buf, 0.2, seed=0).heldout_episodes == s.heldout_episodes
    assert split_by_episode(buf, 0.2, seed=1).heldout_episodes != s.heldout_episodes
    everything = split_by_episode(buf, 0)
    assert everything.heldout is None and everything.search.same_transitions(buf)
    info = s.info()
    assert info["holdout"] == 0.2 and info["holdout_seed"] == 0 and info["n_heldout_transitions"] == len(s.heldout)


def test_reference_programs_on_both_parts_and_a_planted_mistake():
    "The reference CartPole CWM is exact on the search part and on the held-out episodes; the planted mistake on neither."
    s = split_by_episode(load_buffer("CartPole-v1"), 0.2, seed=0)
    for part in (s.search, s.heldout):
        ev = evaluate_program(CARTPOLE, part, determinism=True, rollouts=True)
        assert ev.accuracy == 1.0 and ev.exact_replay == 1.0 and ev.deterministic is True
        h = ev.rollouts["horizons"]
        assert h["1"]["state_error"] < 1e-6 and h["end"]["done_disagreement"] == 0.0 and h["end"]["alive"] == 1.0
        bad = evaluate_program(CARTPOLE_PLANTED, part, rollouts=True)
        assert 0 < bad.accuracy < 0.5 and bad.rollouts["horizons"]["1"]["done_disagreement"] == 1.0


def test_determinism_flags_hidden_state_with_the_first_differing_transition():
    buf = load_buffer("CartPole-v1")
    ev = evaluate_program(COUNTER, buf, determinism=True)
    assert ev.deterministic is False and ev.accuracy < 1   # (in buffer order it already scores its own hidden state)
    fd = ev.determinism["first_difference"]
    fed = np.concatenate(fed_batches(buf))   # the order the transitions are fed in
    # each transition after one more call: from the 150th fed on, 2 * 150 + 2 > 300 (and the first run's 300th on: 0)
    assert fd["pass"] == "after_other" and fd["index"] == min(fed[150:300]), fd
    assert fd["first"][1] == 1.0 and fd["second"][1] == 0.0
    assert evaluate_program(CARTPOLE, buf, determinism=True).deterministic is True


def test_rollouts_show_drift_that_single_steps_hide():
    "A Pendulum CWM that steps its float32 observation is right one step at a time but drifts open loop."
    sys.path.insert(0, str(ROOT/"tests"))
    from test_planning import PENDULUM_OK, PENDULUM_FLIPPED
    buf = load_buffer("Pendulum-v1")
    assert rollout_segments(buf) == [(a, b - a) for a, b in buf.episode_bounds()]   # the shipped buffers chain
    ok = evaluate_program(PENDULUM_OK, buf, rollouts=True)
    flipped = evaluate_program(PENDULUM_FLIPPED, buf, rollouts=True)
    assert ok.accuracy == 1.0 and flipped.accuracy < 0.8
    h, f = ok.rollouts["horizons"], flipped.rollouts["horizons"]
    assert h["1"]["state_error"] < 1e-6 and h["end"]["state_error"] > 10 * h["1"]["state_error"]   # it drifts
    assert f["20"]["state_error"] > 100 * h["20"]["state_error"] and f["20"]["reward_error"] > 0.1
    by = ok.rollouts["by_step"]
    assert len(by["state_error"]) == 100 and by["rollouts"][0] == by["alive"][99] == 10


def test_run_searches_on_its_part_and_reports_both(tmp_path):
    "New runs hold out a fifth of the episodes: the search's value is the search part's accuracy; metrics say both."
    from cwm_nb.experiments.metrics import run_cwmb_search, write_metrics
    from cwm_nb.llm.demo import ScriptedLLM
    answer = "```python\n" + CARTPOLE_PLANTED + "\n```\n"
    out = run_cwmb_search(env="CartPole-v1", model="scripted", budget=1, out=tmp_path, llm=ScriptedLLM([answer]),
                          plan_preset="none", progress=False)
    write_metrics(out)
    m = json.loads((out.run_dir/"metrics.json").read_text())
    s = split_by_episode(load_buffer("CartPole-v1"), 0.2, seed=0)
    on_search, on_held = (evaluate_program(CARTPOLE_PLANTED, p).accuracy for p in (s.search, s.heldout))
    assert m["best_value"] == pytest.approx(on_search) and m["accuracy"] == pytest.approx(on_search)
    assert m["heldout_accuracy"] == pytest.approx(on_held) and m["heldout_episodes"] == s.heldout_episodes
    assert m["holdout"] == 0.2 and m["n_search_transitions"] + m["n_heldout_transitions"] == m["n_transitions"] == 494
    assert m["deterministic"] is True and m["nondeterminism"] is None
    assert set(m["rollouts"]) == {"search", "heldout"} and m["rollouts"]["heldout"]["n_rollouts"] == 2
    assert m["heldout_rows"] == [[15, 28], [426, 494]]   # episodes 1 and 9: rows of the whole buffer
    assert json.loads((out.run_dir/"settings.json").read_text())["holdout"] == 0.2


def test_an_old_run_folder_resumes_as_the_paper_setting(tmp_path):
    "A run folder whose settings.json predates held-out parts resumes with nothing held out; paper_compat holds none out."
    from cwm_nb.experiments.runs import check_run_settings
    from cwm_nb.experiments.metrics import run_cwmb_search
    from cwm_nb.experiments.runs import run_dir
    from cwm_nb.core import CwmNbError, atomic_write_json
    from cwm_nb.llm.demo import ScriptedLLM
    answer = "```python\n" + CARTPOLE + "\n```\n"
    rd = run_dir(tmp_path, "cwmb", "CartPole-v1", "gif-mcts", "scripted", 0)
    old = dict(env="CartPole-v1", method="gif-mcts", model="scripted", budget=1, seed=0, paper_compat=False, max_tokens=1500,
               base_url="", buffer="", plan_preset="none", plan_episodes=10, endpoint_caps="")
    atomic_write_json(rd/"settings.json", old)
    (rd/"program.py").write_text("")   # the folder holds a run's work: its settings are kept
    with pytest.raises(CwmNbError, match="holdout=0.0"):
        check_run_settings(rd, {**old, "holdout": 0.2})   # asking an old folder for a held-out part is a clash
    out = run_cwmb_search(env="CartPole-v1", model="scripted", budget=1, out=tmp_path, llm=ScriptedLLM([answer]),
                          plan_preset="none", progress=False)
    m = out.metrics
    assert m["holdout"] == 0.0 and m["heldout_accuracy"] is None and m["n_search_transitions"] == 494
    assert json.loads((rd/"settings.json").read_text())["holdout"] == 0.0
    pc = run_cwmb_search(env="CartPole-v1", model="scripted", budget=1, out=tmp_path, llm=ScriptedLLM([answer]),
                         plan_preset="none", paper_compat=True, progress=False)
    assert pc.metrics["holdout"] == 0.0 and pc.metrics["rollouts"]["heldout"] is None


def test_eval_program_prints_rollouts_determinism_and_both_parts():
    r = subprocess.run([CLI, "eval-program", str(PROGRAMS/"CartPole-v1.py"), "--env", "CartPole-v1", "--rollouts",
                        "--holdout", "0.2"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("accuracy 1.0000") == 2 and "[held-out part: episodes [1, 9]]" in r.stdout
    assert r.stdout.count("deterministic (repeat, after_other, twice, fresh passes agree)") == 2
    assert r.stdout.count("outcome probability 1.0000, log-likelihood 0.000 (step as a point mass)") == 2
    for k in ("1", "5", "20", "end"): assert f"\n  {k:>8s} " in r.stdout, k
    r = subprocess.run([CLI, "eval-program", str(PROGRAMS/"CartPole-v1.py"), "--env", "CartPole-v1", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    d = json.loads(r.stdout)
    assert d["deterministic"] is True and d["rollouts"] is None and d["n_transitions"] == 494
    assert (d["outcome_probability"], d["log_likelihood"], d["distribution"]) == (1.0, 0.0, False)
    assert d["value_metric"] == "accuracy"   # a deterministic world: a search ranks by accuracy


def test_eval_program_records_the_likelihood_as_the_value_on_a_random_world():
    "On Blackjack a search ranks by likelihood (14_cwm `search_metric`); eval-program's record says so, as metrics.json does."
    r = subprocess.run([CLI, "eval-program", str(PROGRAMS/"Blackjack-v1.py"), "--env", "Blackjack-v1", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["value_metric"], d["distribution"]) == ("likelihood", True)


def _after_calls(k: int, ret: str) -> str:
    "The reference CartPole CWM, but from the k-th step after set_state on it returns `ret` instead of its answer."
    return CARTPOLE.replace("        self.state = np.asarray(obs, dtype=np.float64)\n",
                            "        self.state = np.asarray(obs, dtype=np.float64)\n        self.k = 0\n").replace(
        "    def step(self, action):\n", f"    def step(self, action):\n        self.k = getattr(self, 'k', 0) + 1\n"
        f"        if self.k >= {k}: return {ret}\n")


@pytest.mark.parametrize("ret", ["np.full(4, np.nan), 1.0, False", "np.full(4, np.inf), 1.0, False",
                                 "np.zeros(4, np.float32), float('inf'), False", "np.zeros(4, np.float32), float('nan'), False",
                                 "np.zeros(4, np.float32), 1.0, None", "np.zeros(3, np.float32), 1.0, False"])
def test_a_nan_inf_or_malformed_rollout_step_fails_the_rollout(ret):
    "One-step scoring never sees step 3 (set_state resets k), open-loop rollouts do: they fail there, never look exact."
    buf = load_buffer("CartPole-v1")
    ev = evaluate_program(_after_calls(3, ret), buf, rollouts=True)
    h = ev.rollouts["horizons"]
    assert ev.accuracy == 1.0 and h["1"]["alive"] == 1.0 and h["1"]["state_error"] < 1e-6
    for k in ("5", "20", "end"):
        assert h[k]["alive"] == 0.0 and h[k]["state_error"] is None and h[k]["reward_error"] is None, (k, h[k])
        assert h[k]["done_disagreement"] == 1.0
    assert ev.rollouts["n_failed"] == 10 and ev.rollouts["errors"][0]["step"] == 2
    assert ev.rollouts["by_step"]["alive"][:3] == [10, 10, 0]


def test_a_hanging_rollout_keeps_the_rollouts_before_it():
    "The 3rd rollout (46 steps) hangs at step 40: the first two are kept, the 3rd failed, the rest not run."
    from cwm_nb.bench.rollouts import rollout_errors
    from cwm_nb.sandbox.programs import SandboxLimits
    hang = _after_calls(40, "(time.sleep(3600), None)").replace("import math", "import math, time", 1)
    r = rollout_errors(hang, load_buffer("CartPole-v1"), limits=SandboxLimits(wall_s=1.0))
    assert (r["n_rollouts"], r["n_failed"], r["n_not_run"]) == (10, 1, 7)
    assert "wall-clock limit" in r["errors"][0]["message"] and "transition 28" in r["errors"][0]["message"]
    assert r["horizons"]["end"]["rollouts"] == 3 and r["horizons"]["end"]["alive"] == pytest.approx(2 / 3)
    assert r["horizons"]["1"]["state_error"] < 1e-6


def test_a_pass_that_runs_out_of_time_is_not_checked():
    "A program that hangs after N steps in one process: scoring (N steps) and repeat pass, after_other (2N) times out."
    from cwm_nb.sandbox.programs import SandboxLimits
    buf = load_buffer("CartPole-v1").select(np.arange(20))
    slow = COUNTER.replace("_calls[0] += 1", "_calls[0] += 1\n        if _calls[0] > 20:\n            while True: pass")
    ev = evaluate_program(slow, buf, determinism=True, limits=SandboxLimits(wall_s=1.0))
    assert ev.accuracy == 1.0 and ev.deterministic is None and ev.determinism["first_difference"] is None
    nc = ev.determinism["not_checked"]
    assert nc["pass"] == "after_other" and "2 s" in nc["error"], nc   # twice the wall-clock limit of the first run


def test_final_evaluation_scales_both_parts_by_the_whole_buffer():
    from cwm_nb.bench.rollouts import rollout_errors, state_scale
    from cwm_nb.experiments.metrics import final_evaluation
    sys.path.insert(0, str(ROOT/"tests"))
    from test_planning import PENDULUM_FLIPPED
    buf = load_buffer("Pendulum-v1")
    s = split_by_episode(buf, 0.2, seed=0)
    _, held = final_evaluation(PENDULUM_FLIPPED, s, buffer=buf)
    whole = rollout_errors(PENDULUM_FLIPPED, s.heldout, scale=state_scale(buf))["horizons"]["20"]["state_error"]
    own = rollout_errors(PENDULUM_FLIPPED, s.heldout)["horizons"]["20"]["state_error"]
    assert held.rollouts["horizons"]["20"]["state_error"] == pytest.approx(whole) and whole != pytest.approx(own)


def test_cli_messages_and_holdout_checks(tmp_path):
    r = subprocess.run([CLI, "eval-program", str(PROGRAMS/"CartPole-v1.py"), "--env", "CartPole-v1", "--no-determinism"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and "determinism not checked (--no-determinism)" in r.stdout, r.stdout + r.stderr
    for args in (["eval-program", str(PROGRAMS/"CartPole-v1.py"), "--env", "CartPole-v1", "--holdout", "-1"],
                 ["sweep", "cwmb", "--envs", "CartPole-v1", "--holdout", "1.5", "--out", str(tmp_path/"sw")]):
        r = subprocess.run([CLI, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.returncode != 0 and "--holdout must be a fraction of the episodes in [0, 1)" in r.stderr, r.stderr
    assert not (tmp_path/"sw").exists()
