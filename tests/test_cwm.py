"Evaluation of Code World Models: the paper's weighted accuracy, the corrected metrics, crashes, paper_compat."
import json
from pathlib import Path

import numpy as np
import pytest

from cwm_nb.core import CwmNbError, Program
from cwm_nb.cwm import Evaluation, evaluate_program, score_predictions
from cwm_nb.replay import ReplayBuffer, load_buffer

# A CartPole CWM written from the physics (explicit Euler), not from gymnasium's code.
CARTPOLE = (Path(__file__).parent/'programs'/'cartpole_correct.py').read_text()


@pytest.fixture(scope="module")
def cartpole():
    return load_buffer("CartPole-v1")


@pytest.fixture(scope="module")
def sandbox():
    from cwm_nb.sandbox import Sandbox
    with Sandbox() as sb:
        yield sb


def test_correct_cartpole_program_is_perfect(cartpole, sandbox):
    ev = evaluate_program(Program(CARTPOLE), cartpole, sandbox=sandbox)
    assert not ev.bug and ev.error is None
    assert ev.accuracy == 1.0 and ev.exact_replay == 1.0 and ev.mean_accuracy == 1.0
    assert ev.components == {"next_state": 1.0, "reward": 1.0, "done": 1.0}
    assert ev.perfect and ev.failures == [] and ev.n_transitions == len(cartpole)
    assert ev.n_terminal == int(cartpole.terminated.sum()) == 10
    # the paper's rules agree on this buffer (no truncations, reward exactly 1.0)
    pc = evaluate_program(CARTPOLE, cartpole, sandbox=sandbox, paper_compat=True)
    assert pc.accuracy == 1.0 and pc.perfect


def test_wrong_threshold_fails_on_terminal_transitions(cartpole, sandbox):
    ev = evaluate_program(CARTPOLE.replace("12 * 2", "15 * 2"), cartpole, sandbox=sandbox)
    assert not ev.bug and 0.5 < ev.accuracy < 1.0 and ev.exact_replay < 1.0 and not ev.perfect
    first = ev.failures[0]
    assert first["terminal"] and first["wrong"] == ["done"]
    assert first["expected"]["done"] is True and first["predicted"]["done"] is False
    assert first["index"] == int(np.flatnonzero(cartpole.terminated)[0])
    assert len(ev.failures) == 3 and [f["index"] for f in ev.failures] == sorted(f["index"] for f in ev.failures)
    assert isinstance(first["obs"], list) and isinstance(first["obs"][0], float)   # plain lists, not numpy reprs
    # every failure is a missed termination: credit 1/2 on each of them
    assert ev.components["next_state"] == 1.0 and ev.components["reward"] == 1.0
    assert ev.mean_accuracy == pytest.approx(1 - 0.5 * ev.n_failed / len(cartpole))
    json.dumps(ev.to_dict(), allow_nan=False)


def test_crashing_program_is_a_bug_naming_the_line(cartpole, sandbox):
    src = CARTPOLE.replace("        c, s = math.cos(theta), math.sin(theta)\n",
                           "        c, s = math.cos(theta), math.sin(theta)\n        c = c / 0.0 if x > 0 else c / 0\n")
    line = src.splitlines().index("        c = c / 0.0 if x > 0 else c / 0") + 1
    ev = evaluate_program(src, cartpole, sandbox=sandbox)
    assert ev.bug and ev.accuracy == 0.0 and ev.exact_replay == 0.0 and not ev.perfect
    assert f"line {line}" in ev.error and "ZeroDivisionError" in ev.error
    ev = evaluate_program("class Environment:\n    def step(self, action:\n", cartpole, sandbox=sandbox)
    assert ev.bug and "SyntaxError" in ev.error


def test_malformed_output_fails_a_component_not_the_harness(cartpole, sandbox):
    src = CARTPOLE.replace("return self.state.astype(np.float32), 1.0, done",
                           "return np.append(self.state, 0.0).astype(np.float32), 1.0, done")
    ev = evaluate_program(src, cartpole, sandbox=sandbox)
    assert not ev.bug and ev.components["next_state"] == 0.0 and ev.components["done"] == 1.0
    assert "shape (5,)" in ev.failures[0]["problems"][0]
    pc = evaluate_program(src, cartpole, sandbox=sandbox, paper_compat=True)
    assert pc.bug and pc.accuracy == 0.0


# A hand-made buffer: 2-D continuous state, rewards {0, 0, 0, 1}, the last transition terminal.
HAND = ReplayBuffer(obs=[[0., 0.], [1., 1.], [2., 2.], [3., 3.]], actions=[0, 1, 0, 1],
                    next_obs=[[1., 1.], [2., 2.], [3., 3.], [4., 4.]], rewards=[0., 0., 0., 1.],
                    terminated=[False, False, False, True], truncated=[False] * 4, episode=[0] * 4,
                    meta={"state_kind": "continuous"})
HAND_PREDS = [[[1., 1.], 0., False],    # all right                      credit 1
              [[2., 9.], 0., False],    # one of two elements wrong      credit 1/6 + 1/3 + 1/3 = 5/6
              [[3., 3.], 5., True],     # reward and done wrong          credit 1/3
              [[0., 0.], 1., False]]    # terminal: state ignored, done wrong: credit 1/2


def test_weighted_accuracy_by_hand():
    ev = score_predictions(HAND_PREDS, HAND)
    # reward classes {0: 3 transitions, 1: 1 transition} weigh 1/2 each
    assert ev.accuracy == pytest.approx(0.5 * (1 + 5 / 6 + 1 / 3) / 3 + 0.5 * 0.5, abs=1e-12)   # 11/18
    assert ev.mean_accuracy == pytest.approx((1 + 5 / 6 + 1 / 3 + 1 / 2) / 4, abs=1e-12)
    assert ev.exact_replay == 0.25 and ev.n_failed == 3 and ev.n_terminal == 1
    assert ev.components == pytest.approx({"next_state": 2 / 3, "reward": 0.75, "done": 0.5})
    assert [f["wrong"] for f in ev.failures] == [["next_state"], ["reward", "done"], ["done"]]
    assert score_predictions(HAND_PREDS, HAND, n_failures=1).failures[0]["index"] == 1


def test_weighted_accuracy_by_hand_through_the_sandbox(sandbox):
    "The same predictions, produced by a program in the sandbox, give the same numbers."
    src = ("PRED = " + repr({i: p for i, p in enumerate(HAND_PREDS)}) + "\n"
           "class Environment:\n"
           "    def set_state(self, obs): self.i = int(obs[0])\n"
           "    def step(self, action): p = PRED[self.i]; return p[0], p[1], p[2]\n")
    ev = evaluate_program(src, HAND, sandbox=sandbox)
    assert not ev.bug, ev.error
    assert ev.accuracy == pytest.approx(11 / 18, abs=1e-12) and ev.exact_replay == 0.25


def test_truncation_scored_against_terminated_by_default():
    buf = ReplayBuffer(obs=[[0.], [1.]], actions=[0, 0], next_obs=[[1.], [2.]], rewards=[1., 1.],
                       terminated=[False, False], truncated=[False, True], episode=[0, 0],
                       meta={"state_kind": "continuous"})
    honest = [[[1.], 1., False], [[2.], 1., False]]
    assert score_predictions(honest, buf).perfect
    pc = score_predictions(honest, buf, paper_compat=True)   # the paper's done = terminated or truncated
    assert pc.accuracy == 0.75 and pc.failures[0]["index"] == 1 and pc.failures[0]["wrong"] == ["done"]


def test_reward_tolerance_and_paper_exact_equality():
    preds = [[s, r + 1e-7, d] for s, r, d in zip(HAND.next_obs.tolist(), HAND.rewards.tolist(), HAND.terminated.tolist())]
    assert score_predictions(preds, HAND).perfect
    pc = score_predictions(preds, HAND, paper_compat=True)
    assert pc.components["reward"] == 0.0 and pc.accuracy == pytest.approx(0.5 * 2 / 3 + 0.5 * 0.5)


def test_evaluation_dict_is_json_safe():
    ev = score_predictions([[[float("nan"), 1.], float("inf"), False]] + HAND_PREDS[1:], HAND)
    d = ev.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["failures"][0]["predicted"]["reward"] == "inf" and d["perfect"] is False
    assert Evaluation.crashed("boom", 4).to_dict()["bug"] is True


def test_malformed_buffer_file_gives_a_clear_error(tmp_path):
    p = HAND.save(tmp_path / "buf")
    (p / "transitions.npz").write_bytes(b"garbage")
    with pytest.raises(CwmNbError, match="not an .npz archive") as e:
        ReplayBuffer.load(p)
    assert "What to do" in str(e.value)
