"""Random worlds: the step_distribution contract, outcome probability and log-likelihood, hidden state caught by the
determinism check, and the stochastic reference programs checked against the environments' own probabilities.

Evaluated with the real evaluator in the shared sandbox; buffers of real gymnasium environments (`gym_buffer`)."""
import json, math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from cwm_nb.bench.cwm import LOG_FLOOR, evaluate_program, search_metric
from cwm_nb.bench.rollouts import check_determinism
from cwm_nb.bench.replay import gym_buffer, load_buffer, world_is_stochastic

PROGRAMS = Path(__file__).resolve().parents[1]/"data"/"programs"
VARIANTS = json.loads((PROGRAMS/"stochastic"/"variants.json").read_text())


def source(name: str, variant: str | None = None) -> str:
    src = (PROGRAMS/VARIANTS[name]["file"]).read_text()
    for old, new in (VARIANTS[name][variant]["edits"] if variant else []):
        assert src.count(old) == 1, (name, variant, old)
        src = src.replace(old, new)
    return src


def program_env(src: str):
    "Our own reference program's Environment() (trusted code, run here to compare with the environment's tables)."
    ns = {}
    exec(compile(src, "<reference>", "exec"), ns)
    return ns["Environment"]()


def merged(entries) -> dict:
    out = {}
    for p, s, r, d in entries:
        k = (int(s), float(r), bool(d))
        out[k] = out.get(k, 0.0) + p
    return out


@pytest.fixture(scope="module")
def buffers():
    cache = {}
    def get(name, n=400):
        if (name, n) not in cache:
            v = VARIANTS[name]
            cache[name, n] = gym_buffer(v["gym_id"], n, seed=0, **v["make_kwargs"])
        return cache[name, n]
    return get


@pytest.mark.parametrize("name", ["FrozenLake-v1", "CliffWalking-v1-slippery"])
def test_reference_distribution_is_the_environments_P_table(name):
    v = VARIANTS[name]
    env = gym.make(v["gym_id"], **v["make_kwargs"]).unwrapped
    model, checked = program_env(source(name)), 0
    for s, by_action in env.P.items():
        if all(len(t) == 1 and t[0][3] and t[0][1] == s for t in by_action.values()): continue   # a terminal cell
        for a, table in by_action.items():
            model.set_state(s)
            got, want = merged(model.step_distribution(a)), merged(table)
            assert got.keys() == want.keys(), (s, a, got, want)
            assert all(math.isclose(got[k], want[k], abs_tol=1e-12) for k in want), (s, a, got, want)
            checked += 1
    assert checked >= 4 * 10   # FrozenLake: 11 non-terminal cells; CliffWalking: 47


def test_blackjack_distribution_matches_sampled_frequencies():
    "Blackjack exposes no table: 20,000 sticks on 13 against a 2, and hits on a soft 15, are counted instead."
    from gymnasium.envs.toy_text.blackjack import draw_card
    env = gym.make("Blackjack-v1", sab=True).unwrapped
    env.reset(seed=0)
    model = program_env(source("Blackjack-v1"))
    n = 20_000
    for obs, hand, action in (((13, 2, 0), [10, 3], 0), ((15, 6, 1), [1, 4], 1)):
        counts = {}
        for _ in range(n):
            env.player, env.dealer = list(hand), [obs[1], draw_card(env.np_random)]
            o, r, term, _, _ = env.step(action)
            k = (tuple(int(x) for x in o), float(r), bool(term))
            counts[k] = counts.get(k, 0) + 1
        model.set_state(obs)
        dist = {(tuple(s), float(r), bool(d)): p for p, s, r, d in model.step_distribution(action)}
        assert set(counts) <= set(dist)
        for k, p in dist.items():   # within 4.5 standard errors
            assert abs(counts.get(k, 0) / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1e-9, (obs, action, k, p, counts.get(k, 0) / n)


@pytest.mark.parametrize("name", ["FrozenLake-v1", "CliffWalking-v1-slippery", "Blackjack-v1"])
def test_exact_distribution_has_the_best_log_likelihood(name, buffers):
    buf = buffers(name)
    exact, det, wrong = (evaluate_program(source(name, v), buf) for v in (None, "ignores_randomness", "wrong_distribution"))
    for ev in (exact, det, wrong): assert not ev.bug, ev.error
    assert exact.distribution and wrong.distribution and not det.distribution
    assert exact.log_likelihood > wrong.log_likelihood > det.log_likelihood
    assert det.outcome_probability == pytest.approx(exact.exact_replay if name == "Blackjack-v1" else det.exact_replay)
    assert LOG_FLOOR < exact.log_likelihood < 0 and 0 < exact.outcome_probability < 1


def test_a_point_mass_is_exact_replay_and_a_crash_is_the_floor():
    buf = load_buffer("CartPole-v1")
    ev = evaluate_program((PROGRAMS/"CartPole-v1.py").read_text(), buf)
    assert (ev.outcome_probability, ev.log_likelihood, ev.distribution) == (1.0, 0.0, False)
    crash = evaluate_program("class Environment:\n    def set_state(self, s): pass\n    def step(self, a): raise ValueError('no')\n", buf)
    assert crash.bug and (crash.outcome_probability, crash.log_likelihood) == (0.0, LOG_FLOOR)


BAD = {"the probabilities sum to 0.9, not 1": "return [(0.5, self.state, 0.0, False), (0.4, self.state, 0.0, False)]",
       "outcome 0: a probability is -0.5": "return [(-0.5, self.state, 0.0, False), (1.5, self.state, 0.0, False)]",
       "outcome 1 must be (probability, next_state, reward, done)": "return [(0.5, self.state, 0.0, False), (0.5, self.state)]",
       "returned no outcomes": "return []",
       "outcome 0: a probability must be a number": "return [('1', self.state, 0.0, False)]"}


@pytest.mark.parametrize("message", sorted(BAD))
def test_a_bad_distribution_is_the_programs_error_naming_the_transition(message, buffers):
    src = source("FrozenLake-v1").replace("    def step_distribution(self, action):\n",
                                          f"    def step_distribution(self, action):\n        if self.state == 4: {BAD[message]}\n")
    buf = buffers("FrozenLake-v1")
    from cwm_nb.bench.program_runs import fed_batches
    first = next(int(i) for i in np.concatenate(fed_batches(buf)) if int(buf.obs[i]) == 4)   # the first fed
    ev = evaluate_program(src, buf)
    assert ev.bug and f"bad distribution on transition {first}" in ev.error and message in ev.error, ev.error


def test_equal_outcomes_are_merged(buffers):
    "From the top-left corner, left and up both stay put: one outcome of probability 2/3 (the table lists it twice)."
    buf = buffers("FrozenLake-v1")
    i = next(i for i in range(len(buf)) if int(buf.obs[i]) == 0 and int(buf.actions[i]) == 0 and int(buf.next_obs[i]) == 0)
    ev = evaluate_program(source("FrozenLake-v1"), buf.select([i]))
    assert ev.outcome_probability == pytest.approx(2 / 3)


CARTPOLE = (PROGRAMS/"CartPole-v1.py").read_text()
HIDDEN = {   # each: exact on a first pass in buffer order, wrong where its hidden state lines up differently
    "counter on the instance": [("        self.state = np.zeros(4)\n", "        self.state = np.zeros(4)\n        self.calls = 0\n"),
                                ("        x, x_dot, theta, theta_dot = self.state\n",
                                 "        x, x_dot, theta, theta_dot = self.state\n        self.calls += 1\n"),
                                ("return self.state.astype(np.float32), 1.0, done", "return self.state.astype(np.float32), 1.0 if self.calls % 97 else 0.5, done")],
    "cache keyed on the last state": [("    def set_state(self, obs):\n",
                                       "    def set_state(self, obs):\n        if getattr(self, 'last', None) is not None and np.array_equal(obs, self.last): return\n        self.last = np.array(obs)\n")],
    "module global": [("X_LIMIT = 2.4\n", "X_LIMIT = 2.4\nCALLS = [0]\n"),
                      ("        x, x_dot, theta, theta_dot = self.state\n", "        x, x_dot, theta, theta_dot = self.state\n        CALLS[0] += 1\n"),
                      ("return self.state.astype(np.float32), 1.0, done", "return self.state.astype(np.float32), 1.0 if CALLS[0] % 97 else 0.5, done")],
}


@pytest.mark.parametrize("kind", sorted(HIDDEN))
def test_hidden_state_is_flagged(kind):
    src = CARTPOLE
    for old, new in HIDDEN[kind]:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    ev = evaluate_program(src, load_buffer("CartPole-v1"), determinism=True)
    assert not ev.bug and ev.deterministic is False, (kind, ev.determinism)
    assert isinstance(ev.determinism["first_difference"]["index"], int)


def test_the_cache_is_missed_by_the_old_passes_and_caught_by_twice():
    src = CARTPOLE
    for old, new in HIDDEN["cache keyed on the last state"]: src = src.replace(old, new)
    buf = load_buffer("CartPole-v1")
    ev = evaluate_program(src, buf)
    assert ev.accuracy == 1.0   # each transition once, in order: nothing shows
    verdict, info = check_determinism(src, buf, _predictions(src, buf), passes=("repeat", "after_other"))
    assert verdict is True
    verdict, info = check_determinism(src, buf, _predictions(src, buf))
    assert verdict is False and info["first_difference"]["pass"] == "twice"


def _predictions(src, buf):
    from cwm_nb.bench.program_runs import run_on_buffer
    from cwm_nb.sandbox.jobs import get_sandbox
    return run_on_buffer(get_sandbox(), src, buf, "cwm_nb.sandbox.drivers:cwm_predict").value["predictions"]


@pytest.mark.parametrize("name", ["FrozenLake-v1", "Blackjack-v1"])
def test_exact_programs_are_not_flagged(name, buffers):
    ev = evaluate_program(source(name), buffers(name), determinism=True)
    assert ev.deterministic is True and ev.determinism["compared"] == "distributions", ev.determinism
    assert set(ev.determinism["pass_s"]) == {"repeat", "after_other", "twice", "fresh"}


def test_random_worlds_are_known_and_ranked_by_likelihood():
    assert world_is_stochastic("Blackjack-v1") and world_is_stochastic("FrozenLake-v1") and not world_is_stochastic("CartPole-v1")
    assert (search_metric(True), search_metric(True, paper_compat=True), search_metric(False)) == ("likelihood", "accuracy", "accuracy")


def test_a_model_with_chance_is_searched_by_the_generic_loop_with_chance_nodes():
    "The model side never gives a program with step_distribution to the compiled loop; its tape branches on drawn outcomes."
    from dataclasses import asdict
    from cwm_nb.bench.plan_driver import _program_model, _record_search
    from cwm_nb.bench.planning import MCTSConfig
    ns = {}
    exec(compile(source("FrozenLake-v1"), "<cwm-program>", "exec"), ns)
    args = {"space": {"kind": "discrete", "n": 4}, "obs_format": "int", "valid_actions": False,
            "config": asdict(MCTSConfig(simulations=60, rollout_steps=5)), "seed": 3}
    model = _program_model(ns, args)
    assert model.chance
    fast = _record_search(model, 0, args)                                   # the compiled loop allowed
    generic = _record_search(_program_model(ns, args), 0, {**args, "fast_search": False})
    assert fast == generic
    outcomes = {(e[1], e[2]) for e in fast if e[0] == "s"}                  # (action, next-state number)
    assert any(len({k for a, k in outcomes if a == act}) > 1 for act in range(4))   # one action, several outcomes


def test_cem_scores_a_plan_on_the_mean_of_drawn_outcomes():
    "A continuous toy with chance: reward +1 or -1 with probability 1/2; a plan's score is the mean of CHANCE_SAMPLES draws."
    from cwm_nb.bench.planning import CHANCE_SAMPLES, _score_plan
    from cwm_nb.bench.plan_driver import ProgramModel

    class Coin:
        def set_state(self, s): self.s = np.asarray(s, dtype=np.float64)
        def step(self, a): return self.s, 1.0, False
        def step_distribution(self, a): return [(0.5, self.s, 1.0, False), (0.5, self.s, -1.0, False)]

    model = ProgramModel(Coin(), obs_format="array")
    model.reseed(0)
    plan = np.zeros((5, 1))
    scores = [_score_plan(model, np.zeros(2), plan) for _ in range(200)]
    assert model.steps == 200 * CHANCE_SAMPLES * 5
    assert all(abs(s * CHANCE_SAMPLES - round(s * CHANCE_SAMPLES)) < 1e-9 for s in scores)   # means of 8 sums
    assert abs(np.mean(scores)) < 0.3 and np.std(scores) < 5 / np.sqrt(CHANCE_SAMPLES) * 1.5


def test_a_run_on_a_random_world_records_the_value_it_ranked_by(tmp_path):
    "metrics.json's value_metric is what the search ranked by (likelihood on Blackjack), and best_value is that value."
    import math
    from cwm_nb.experiments.metrics import run_cwmb_search
    from cwm_nb.llm.demo import ScriptedLLM
    good = "```python\n" + source("Blackjack-v1") + "\n```\n"   # the scripted model (a test double) answers the reference
    out = run_cwmb_search(env="Blackjack-v1", model="scripted", budget=1, out=tmp_path, llm=ScriptedLLM([good]),
                          progress=False)
    m = out.metrics   # what write_metrics puts in metrics.json
    assert (m["stochastic"], m["value_metric"]) == (True, "likelihood")
    assert m["best_value"] == pytest.approx(math.exp(m["log_likelihood"]))
