"""The inference-speed experiment (paper App. H, Table 8): the simulator prompt, the answer parser, the CWM timing job in the
real sandbox, and one real papermill run of nbs/experiments/inference_speed.ipynb with the embedded model."""
import json, os
from pathlib import Path
import numpy as np
import pytest

from cwm_nb.search import llm_simulator as S
from cwm_nb.llm.client import render_plain
from cwm_nb.bench.replay import load_buffer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cartpole():
    return load_buffer("CartPole-v1")


def _blocks(messages):
    "The transition blocks of the user turn, in order."
    body = messages[1]["content"].split("# Transitions\n\n", 1)[1]
    return ["### Transition" + b.rstrip("\n") for b in body.split("### Transition")[1:]]


# --- prompt building ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("env,k", [("CartPole-v1", 3), ("HalfCheetah-v4", 2), ("Humanoid-v4", 1)])
def test_default_example_count_really_limits(env, k):
    buf = load_buffer(env)
    assert S.default_examples(env) == k
    ex = S.example_indices(len(buf), 5, S.default_examples(env), seed=0)
    msgs = S.simulator_messages(env, ex, buf.obs[5], buf.actions[5], buffer=buf, description="(description)")
    blocks = _blocks(msgs)
    assert len(blocks) == k + 1                                   # k examples, then the query
    assert sum("Next observation:" in b for b in blocks) == k     # the query has no outcome
    assert 5 not in ex                                            # the query is never its own example


def test_query_is_formatted_like_the_examples(cartpole):
    msgs = S.simulator_messages("CartPole-v1", [3, 40], cartpole.obs[9], cartpole.actions[9], buffer=cartpole,
                                description="(description)")
    *examples, query = _blocks(msgs)
    for k, (i, block) in enumerate(zip([3, 40], examples), start=1):
        head, outcome = block.split("\n\n", 1)
        assert head == S.format_transition(k, cartpole.obs[i], cartpole.actions[i])   # same lines as a query block
        assert outcome.splitlines()[0].startswith("Next observation: [")
        assert outcome.splitlines()[1:] == [f"Reward: {S.format_number(cartpole.rewards[i])}",
                                            f"Done: {bool(cartpole.terminated[i])}"]
    assert query == S.format_transition(3, cartpole.obs[9], cartpole.actions[9])
    # with the pre-filled header, the rendered prompt ends exactly like an example block up to its answer
    full_query = S.format_transition(3, cartpole.obs[9], cartpole.actions[9],
                                     (cartpole.next_obs[9], cartpole.rewards[9], cartpole.terminated[9]))
    tail = render_plain(msgs)[-len(query) - 2 - len("Next observation:"):]
    assert full_query.startswith(tail)
    assert msgs[-1] == {"role": "assistant", "content": "Next observation:"}


def test_each_query_gets_its_own_prompt(cartpole):
    "The original overwrote the template on the first substitution, so later queries re-sent the first one."
    seen = []
    from cwm_nb.llm.demo import ScriptedLLM
    def answer(messages, draw):
        seen.append(messages[1]["content"])
        return " [0, 0, 0, 0]\nReward: 1\nDone: False"
    llm = ScriptedLLM(answer)
    for i in (4, 50, 200):
        S.time_llm_transition(llm, "CartPole-v1", i, buffer=cartpole)
    assert len(seen) == 3 and len(set(seen)) == 3
    for i, prompt in zip((4, 50, 200), seen):
        assert prompt.endswith(S.format_transition(4, cartpole.obs[i], cartpole.actions[i]))


# --- parsing -------------------------------------------------------------------------------------------------

def test_parse_good_answer():
    p = S.parse_prediction("Next observation: [0.5, -1e-3, 2, 3.25]\nReward: 1.0\nDone: True\n### Transition 9", 4)
    assert p.ok and p.obs.shape == (4,) and p.obs.tolist() == [0.5, -0.001, 2.0, 3.25]
    assert (p.reward, p.done) == (1.0, True)


@pytest.mark.parametrize("text", ["", "Sorry, I can't do that.", "Next observation: [1, 2, 3",
                                  "Next observation: [a, b, c, d]\nReward: ?\nDone: maybe", "\x00\x01", None,
                                  "Next observation: [1e999999, nan, 1, 2]\nReward: 1e400\nDone: 0"])
def test_parse_garbage_never_raises(text):
    p = S.parse_prediction(text, 4)
    assert isinstance(p, S.Prediction)
    if text and text.startswith("Next observation: [1e999999"):   # overflow is read as inf, not a crash
        assert p.ok and np.isinf(p.obs[0]) and p.done is False
    else:
        assert not p.ok and p.errors


def test_parse_wrong_length():
    p = S.parse_prediction("Next observation: [1, 2, 3, 4, 5]\nReward: -0.5\nDone: False", 4)
    assert p.obs is None and not p.ok and "5 numbers, expected 4" in p.errors[0]
    assert (p.reward, p.done) == (-0.5, False)                     # the readable parts are kept


def test_prediction_check_against_logged_transition(cartpole):
    i = int(np.flatnonzero(~cartpole.terminated)[0])
    right = S.Prediction(cartpole.next_obs[i].astype(np.float64), float(cartpole.rewards[i]), False)
    assert S.check_prediction(right, cartpole, i)["correct"]
    off = S.Prediction(cartpole.next_obs[i].astype(np.float64) + 1e-3, float(cartpole.rewards[i]), False)
    c = S.check_prediction(off, cartpole, i)
    assert not c["correct"] and not c["correct_obs"] and c["correct_reward"] and c["correct_done"]


# --- the CWM side, in the real sandbox ------------------------------------------------------------------------

def test_sandbox_timing_of_the_cartpole_reference(cartpole):
    src = S.reference_program_path("CartPole-v1").read_text()
    idx = [0, 17, 250, int(np.flatnonzero(cartpole.terminated)[0])]
    r = S.time_cwm_transitions(src, "CartPole-v1", idx, repeats=5, buffer=cartpole)
    assert r["ok"] and r["isolation"] in ("bwrap", "landlock", "none")
    assert r["seconds"] > 0 and len(r["per_transition"]) == 4 and all(s > 0 for s in r["per_transition"])
    assert r["correct"] == [True] * 4 and r["fraction_correct"] == 1.0 and r["accuracy"] == 1.0


def test_sandbox_timing_reports_wrong_predictions_and_crashes(cartpole):
    src = S.reference_program_path("CartPole-v1").read_text().replace("12 * 2", "1 * 2")   # falls far too early
    idx = [0, 1]
    r = S.time_cwm_transitions(src, "CartPole-v1", idx, repeats=2, buffer=cartpole)
    assert r["ok"] and r["seconds"] > 0 and r["correct"] is not None
    crash = S.time_cwm_transitions("class Environment:\n    def set_state(self, s): pass\n"
                                   "    def step(self, a): raise RuntimeError('boom')\n", "CartPole-v1", [0], buffer=cartpole)
    assert not crash["ok"] and "boom" in crash["error"] and crash["seconds"] is None



class _Calls:
    "A sandbox that notes which of its methods are called, in order (the real one runs them)."
    def __init__(self, sb): self.sb, self.calls = sb, []
    def __getattr__(self, name):
        attr = getattr(self.sb, name)
        if not callable(attr): return attr
        def noted(*a, **k): self.calls.append(name); return attr(*a, **k)
        return noted


def test_sandbox_timing_scores_before_the_buffer_is_handed_over(cartpole):
    "The timing job gets the whole buffer: every job that decides `correct` runs before it is stored (put_data)."
    from cwm_nb.sandbox.jobs import get_sandbox
    src = S.reference_program_path("CartPole-v1").read_text()
    sb = _Calls(get_sandbox())
    r = S.time_cwm_transitions(src, "CartPole-v1", [0, 1, 2], repeats=1, buffer=cartpole, sandbox=sb)
    assert r["ok"] and r["correct"] == [True] * 3
    stored = sb.calls.index("put_data")
    assert "open_session" in sb.calls[:stored] and "open_session" not in sb.calls[stored:], sb.calls

def test_program_resolution_reference_programs():
    for env in ("CartPole-v1", "HalfCheetah-v4", "Humanoid-v4"):
        src, where = S.resolve_program(env)
        assert "class Environment" in src and where.startswith("reference")


# --- one real papermill run with the embedded model -----------------------------------------------------------

@pytest.fixture
def cache_env(tmp_path_factory, model_cache, monkeypatch):   # conftest's, but set in this process's environment
    "A fresh LLM response cache and the session's model folder, in this process's environment (papermill's kernel inherits it)."
    d = tmp_path_factory.mktemp("llmcache")
    monkeypatch.setenv("CWM_NB_CACHE", str(model_cache))
    monkeypatch.setenv("CWM_NB_LLM_CACHE", str(d/"llm_cache.sqlite"))
    return dict(os.environ)


def test_inference_speed_notebook_with_the_embedded_model(tmp_path, cache_env):
    from cwm_nb.experiments.notebooks import run_notebook
    out = tmp_path/"speed"
    nb = run_notebook("inference_speed", dict(envs="CartPole-v1", n_transitions=1, max_tokens=48, repeats=5,
                                              out=str(out)), out/"notebook.ipynb", stream=False)
    assert nb.exists()
    res = json.loads((out/"results.json").read_text())
    for k in ("model", "seed", "rows", "records", "params", "timing"):
        assert k in res, k
    (row,) = res["rows"]
    for k in ("env", "llm_s", "cwm_s", "ratio", "llm_correct", "llm_parsed", "cwm_correct", "published_llm_s",
              "published_cwm_s", "n_transitions", "max_tokens"):
        assert k in row, k
    assert row["env"] == "CartPole-v1" and row["n_transitions"] == 1 and row["max_tokens"] == 48
    assert row["llm_s"] > 0 and row["cwm_s"] > 0 and row["ratio"] > 0
    assert row["cwm_correct"] == 1.0 and row["published_llm_s"] == 2.2
    assert res["model"].startswith("embedded:")
    (rec,) = res["records"]["CartPole-v1"]["llm"]
    assert rec["completion_tokens"] > 0 and isinstance(rec["parsed"], bool)
    for f in ("results.csv", "speed.png", "speed.pdf"):
        assert (out/f).exists(), f
    assert (out/"results.csv").read_text().startswith("env,")
