"""The reference Code World Models of data/programs and their planted mistakes (data/programs/planted_mistakes.json).

Each reference program reproduces every transition of its shipped replay buffer, except Blackjack's, whose random
cards no deterministic program can foresee; each planted mistake is a one-place edit that still runs and scores
strictly between 0 and 1. Evaluated with the real evaluator in the shared sandbox (`get_sandbox()`)."""
import json
from pathlib import Path

import pytest

from cwm_nb.bench.cwm import evaluate_program
from cwm_nb.bench.replay import load_buffer

PROGRAMS = Path(__file__).resolve().parents[1]/"data"/"programs"
MISTAKES = json.loads((PROGRAMS/"planted_mistakes.json").read_text())
APPROXIMATE = {"HalfCheetah-v4", "Humanoid-v4"}   # speed stand-ins for the inference-speed experiment, not faithful models
EXACT = sorted(set(MISTAKES) - {"Blackjack-v1"})


def source(env: str) -> str: return (PROGRAMS/f"{env}.py").read_text()


@pytest.fixture(scope="module")
def buffers():
    cache = {}
    def get(env):
        if env not in cache: cache[env] = load_buffer(env)
        return cache[env]
    return get


def test_every_faithful_program_has_a_planted_mistake():
    shipped = {p.stem for p in PROGRAMS.glob("*.py")}
    assert set(MISTAKES) == shipped - APPROXIMATE
    assert {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "CliffWalking-v0", "Taxi-v3", "Blackjack-v1", "rtfm"} <= set(MISTAKES)
    for env, m in MISTAKES.items():
        assert set(m) == {"old", "new", "what"} and m["old"] != m["new"] and m["what"].strip(), env


@pytest.mark.parametrize("env", EXACT)
def test_reference_program_reproduces_its_buffer(env, buffers):
    ev = evaluate_program(source(env), buffers(env))
    assert not ev.bug, ev.error
    assert ev.accuracy == pytest.approx(1.0) and ev.exact_replay == 1.0 and ev.perfect, ev.failures


def test_blackjack_misses_only_random_cards(buffers):
    "Hits whose card was an ace (the program predicts a 10, the most likely card) and one stick the dealer busted on."
    buf = buffers("Blackjack-v1")
    ev = evaluate_program(source("Blackjack-v1"), buf, n_failures=len(buf))
    assert not ev.bug and ev.n_transitions == 14
    assert ev.accuracy == pytest.approx(41 / 45) and ev.exact_replay == pytest.approx(10 / 14)
    failed = {f["index"]: f for f in ev.failures}
    assert sorted(failed) == [7, 9, 10, 12]
    for i in (7, 10, 12):   # hit on a hard 10: an ace came (soft 21), the program said a 10 (hard 20)
        f = failed[i]
        assert f["action"] == 1 and f["wrong"] == ["next_state"] and f["obs"][0] == 10
        assert f["expected"]["next_obs"] == [21, f["obs"][1], 1] and f["predicted"]["next_obs"] == [20, f["obs"][1], 0]
    f = failed[9]           # stick on 13 against a 2: the dealer busted (+1), losing is more likely (-1)
    assert f["action"] == 0 and f["wrong"] == ["reward"] and f["obs"] == [13, 2, 0]
    assert f["expected"]["reward"] == 1.0 and f["predicted"]["reward"] == -1.0


@pytest.mark.parametrize("env", sorted(MISTAKES))
def test_planted_mistake_is_one_edit_that_scores_below_one(env, buffers):
    src, m = source(env), MISTAKES[env]
    assert src.count(m["old"]) == 1
    ev = evaluate_program(src.replace(m["old"], m["new"]), buffers(env))
    assert not ev.bug, ev.error
    assert 0 < ev.accuracy < 0.95 and ev.exact_replay < 1 and not ev.perfect
