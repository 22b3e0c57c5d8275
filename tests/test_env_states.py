"The real environment behind a program's interface (nbs/11a_env_states.ipynb)."
import math
import numpy as np
import pytest
from cwm_nb.core import CwmNbError
from cwm_nb.bench.envs import REGISTRY, make_env, spec_from_gym
from cwm_nb.bench.env_states import (STATE_SETTINGS, RealEnvironment, real_environment_class,
                                     real_predictions, state_setter, state_setting_table,
                                     with_state_setter)


def test_every_benchmark_env_says_how_its_state_is_set():
    for name, spec in REGISTRY.items():
        assert spec.state_setting in STATE_SETTINGS, name
        assert spec.state_note, name
        if spec.state_setting == "none": assert spec.state_setter == "", name
        else: assert callable(state_setter(spec)), name
    assert {r["name"] for r in state_setting_table()} == set(REGISTRY)


def test_the_issue_example_ends_the_cartpole_episode():
    Environment = real_environment_class("CartPole-v1")
    env = Environment(); env.set_state([2.39, 1.0, 0.0, 0.0])
    nxt, reward, done = env.step(1)
    assert done is True and reward == 1.0 and type(nxt) is list and nxt[0] > 2.4
    env.set_state([0.0, 0.0, 0.0, 0.0])
    assert env.step(1)[2] is False


@pytest.mark.parametrize("name", ["CartPole-v1", "MountainCar-v0", "Acrobot-v1", "Pendulum-v1",
                                  "Taxi-v3", "CliffWalking-v0", "HalfCheetah-v4",
                                  "InvertedPendulum-v4"])
def test_a_set_state_replays_the_environments_own_episode(name):
    "Set to each observation of a seeded episode, the adapter gives its next observation, reward."
    episode = make_env(name)
    obs, _ = episode.reset(seed=7)
    env = real_environment_class(name)()
    episode.action_space.seed(0)
    for _ in range(20):
        action = episode.action_space.sample()
        nxt, reward, terminated, _, _ = episode.step(action)
        env.set_state(obs)
        got = env.step(action)
        assert np.allclose(got[0], nxt, rtol=1e-5, atol=1e-5)
        assert math.isclose(got[1], reward, rel_tol=1e-5, abs_tol=1e-6)
        assert got[2] == terminated
        if terminated: break
        obs = nxt


def test_rtfm_returns_four_values_and_takes_its_own_pair():
    from cwm_nb.bench.rtfm import empty_room
    board = empty_room()
    board[2, 2, 0], board[2, 3, 0] = "fire demon", "you"
    env = real_environment_class("rtfm")()
    env.set_state((board, "empty"))
    nxt, valid, reward, done = env.step(3)        # no weapon: the agent dies
    assert (reward, done) == (-1.0, True) and nxt[1] == "empty" and valid == [0, 1, 2, 3, 4]
    env.set_state((board, "empty"))
    nxt, valid, reward, done = env.step(0)        # staying changes nothing
    assert (reward, done) == (0.0, False) and nxt[0][2][3][0] == "you" and valid == [0, 1, 2, 3, 4]


def test_errors_say_what_to_do():
    with pytest.raises(CwmNbError, match="cannot be put into the state") as e:
        real_environment_class("Blackjack-v1")
    assert "unchecked" in str(e.value)
    with pytest.raises(CwmNbError, match="given no environment"): RealEnvironment()
    env = real_environment_class("Taxi-v3")()
    with pytest.raises(CwmNbError, match="before set_state"): env.step(0)
    with pytest.raises(CwmNbError, match="outside 0..499"): env.set_state(500)
    env.set_state(328)
    with pytest.raises(CwmNbError, match="not in Discrete"): env.step(6)
    ant = real_environment_class("Ant-v4")()
    with pytest.raises(CwmNbError, match="shape"): ant.set_state([0.0] * 5)
    ant.set_state(make_env("Ant-v4").reset(seed=0)[0])
    with pytest.raises(CwmNbError, match="shape"): ant.step([0.0] * 3)


def test_a_user_env_gets_a_setter_by_name():
    fl = spec_from_gym("FrozenLake-v1", {"is_slippery": False})
    with pytest.raises(CwmNbError): real_environment_class(fl)
    fl = with_state_setter(fl, "cwm_nb.bench.env_states:set_toy_text")
    env = real_environment_class(fl)()
    env.set_state(14)                  # one step left of the goal on the 4x4 map
    assert env.step(2) == (15, 1.0, True)
    with pytest.raises(CwmNbError, match="does not import"):
        with_state_setter(fl, "cwm_nb.bench.env_states:" + "nope")
    with pytest.raises(CwmNbError, match="'direct' or 'partial'"):
        with_state_setter(fl, "cwm_nb.bench.env_states:set_toy_text", "none")


def test_real_predictions_score_as_the_buffer_on_a_direct_env():
    from cwm_nb.bench.replay import load_buffer
    from cwm_nb.bench.cwm import score_predictions
    buf = load_buffer("CartPole-v1")
    preds = real_predictions("CartPole-v1", buf.obs[:100], buf.actions[:100])
    ev = score_predictions(preds, buf.select(range(100)))
    assert ev.exact_replay == 1.0


def test_a_setter_added_to_an_env_registered_without_one_replaces_it():
    from cwm_nb.bench.envs import resolve_env
    plain = resolve_env("FrozenLake-v1", '{"is_slippery": false, "map_name": "8x8"}')   # registered, no setter
    with pytest.raises(CwmNbError): real_environment_class(plain)
    env = real_environment_class(with_state_setter(plain, "cwm_nb.bench.env_states:set_toy_text"))()
    env.set_state(62)                  # one step left of the goal on the 8x8 map
    assert env.step(2) == (63, 1.0, True)
