"The benchmark registry: all 19 environments made, stepped and described as the spec's tables say."
import os, subprocess, sys, warnings
from pathlib import Path

import numpy as np
import pytest

from cwm_nb.core import CwmNbError
from cwm_nb.bench import envs
from cwm_nb.bench.envs import (KEPT_SECTIONS, mujoco_v4_docstrings, REGISTRY, cwmb_names, describe_env, env_docstring,
                         env_names, env_table, get_env_spec, kept_sections, make_env, paper_order)

ROOT = Path(__file__).resolve().parents[1]

# the paper's Table 9 (the CWMB's environments): idx, |A| or action dims, observation size (None: not an array)
SPEC_TABLE = {
    "Blackjack-v1": (0, 2, None), "CliffWalking-v0": (1, 4, None), "Taxi-v3": (2, 6, None),
    "CartPole-v1": (3, 2, 4), "MountainCar-v0": (4, 3, 2), "Acrobot-v1": (5, 3, 6), "Pendulum-v1": (6, 1, 3),
    "Reacher-v4": (7, 2, 11), "Pusher-v4": (8, 7, 23), "InvertedPendulum-v4": (9, 1, 4),
    "InvertedDoublePendulum-v4": (10, 1, 11), "HalfCheetah-v4": (11, 6, 17), "Hopper-v4": (12, 3, 11),
    "Swimmer-v4": (13, 2, 8), "Walker2d-v4": (14, 6, 17), "Ant-v4": (15, 8, 27), "Humanoid-v4": (16, 17, 376),
    "HumanoidStandup-v4": (17, 17, 376),
}
POINTERS = ("http", "github", ".py", "gymnasium.envs", "source")


def test_registry_order_and_helpers():
    assert env_names() == sorted(SPEC_TABLE) + ["rtfm"]
    assert cwmb_names() == sorted(SPEC_TABLE)
    assert paper_order() == sorted(SPEC_TABLE, key=lambda n: SPEC_TABLE[n][0])
    assert {n: REGISTRY[n].paper_idx for n in SPEC_TABLE} == {n: t[0] for n, t in SPEC_TABLE.items()}
    assert REGISTRY["rtfm"].paper_idx is None and REGISTRY["rtfm"].suite == "rtfm"
    assert {s.suite for n, s in REGISTRY.items() if n != "rtfm"} == {"cwmb"}


def test_fields_follow_the_spec():
    discrete_actions = {"Blackjack-v1", "CliffWalking-v0", "Taxi-v3", "CartPole-v1", "MountainCar-v0", "Acrobot-v1", "rtfm"}
    for name, s in REGISTRY.items():
        assert (s.action_kind == "discrete") == (name in discrete_actions), name
        assert s.planner == ("mcts" if s.action_kind == "discrete" else "cem"), name
        assert (s.state_kind == "discrete") == (name in {"Blackjack-v1", "CliffWalking-v0", "Taxi-v3", "rtfm"}), name
        assert s.valid_actions == (name == "rtfm"), name
        assert s.notes.strip(), name
    assert {n: s.obs_format for n, s in REGISTRY.items() if s.obs_format != "array"} == \
        {"Blackjack-v1": "tuple", "CliffWalking-v0": "int", "Taxi-v3": "int", "rtfm": "rtfm"}
    assert {n: s.gym_id for n, s in REGISTRY.items() if s.gym_id != n} == \
        {"CliffWalking-v0": "CliffWalking-v1", "Pusher-v4": "Pusher-v5", "Taxi-v3": "Taxi-v4", "rtfm": "cwm_nb/RTFM-v0"}


def test_notes_name_the_known_differences():
    n = {k: s.notes for k, s in REGISTRY.items()}
    assert "-100" in n["CliffWalking-v0"] and "WITHOUT ending the episode" in n["CliffWalking-v0"]
    assert "sab=True" in n["Blackjack-v1"] and "horizon is 100" in n["Blackjack-v1"]
    assert "AFTER the physics step" in n["Pusher-v4"] and "density" in n["Pusher-v4"]
    assert "BEFORE the step" in n["Pendulum-v1"] and "clipped torque" in n["Pendulum-v1"]
    assert "is_rainy" in n["Taxi-v3"] and "fickle_passenger" in n["Taxi-v3"]
    assert "contact_cost" in n["Humanoid-v4"]


@pytest.mark.parametrize("name", env_names())
def test_make_reset_step(name):
    spec = get_env_spec(name)
    env = make_env(name)
    try:
        assert env.spec.id == spec.gym_id
        assert env.render_mode is None                      # never renders: MuJoCo runs headless
        assert (env.spec.max_episode_steps or 100) == spec.horizon
        from gymnasium import spaces
        assert isinstance(env.action_space, spaces.Discrete if spec.action_kind == "discrete" else spaces.Box)
        obs, info = env.reset(seed=3)
        if spec.obs_format == "array":
            assert isinstance(obs, np.ndarray) and obs.ndim == 1
        elif spec.obs_format == "int":
            assert type(obs) is int
        elif spec.obs_format == "tuple":
            assert type(obs) is tuple and all(type(v) is int for v in obs)
        else:
            board, inventory = obs
            assert board.shape == (6, 6, 2) and board.dtype == object and isinstance(inventory, str)
        if spec.valid_actions:
            mask = np.asarray(info["action_mask"])
            assert mask.shape == (env.action_space.n,) and mask.any()
            action = int(np.flatnonzero(mask)[0])
        else:
            action = env.action_space.sample()
        out = env.step(action)
        assert len(out) == 5 and isinstance(out[2], bool) and isinstance(out[3], bool)
        if name in SPEC_TABLE:
            n_actions, obs_size = SPEC_TABLE[name][1:]
            sp = env.action_space
            assert (sp.n if spec.action_kind == "discrete" else sp.shape[0]) == n_actions
            if obs_size is not None: assert obs.shape == (obs_size,)
    finally:
        env.close()


@pytest.mark.parametrize("name", env_names())
def test_description(name):
    d = describe_env(name)
    assert len(d) > 200
    in_source = [h for h in KEPT_SECTIONS if f"## {h}" in kept_sections(env_docstring(name))]
    assert in_source == list(KEPT_SECTIONS), (name, in_source)   # every source we use has all six
    for h in in_source: assert f"## {h}" in d, (name, h)
    for bad in POINTERS: assert bad not in d.lower(), (name, bad)
    for gone in ("## Arguments", "## Version History", "Vectorized", "<a ", "```{figure}"): assert gone not in d, (name, gone)


def test_description_drops_and_cuts_apply():
    assert "slippery" not in describe_env("CliffWalking-v0")
    assert "sutton_barto" not in describe_env("CartPole-v1")
    assert "use_contact_forces" not in describe_env("Ant-v4") and "(27,)" in describe_env("Ant-v4")
    assert "exclude_current_positions_from_observation=False` during construction" not in describe_env("Hopper-v4")
    assert "natural is" not in describe_env("Blackjack-v1")
    assert "Once can find" not in describe_env("InvertedDoublePendulum-v4")
    assert "## Episode End" in describe_env("Pendulum-v1") and "200 time steps" in describe_env("Pendulum-v1")
    assert "Box(-Inf, Inf, (11,), float64)" in describe_env("Reacher-v4")  # the v4 text, not v5's (10,)


def test_mujoco_v4_descriptions_cover_exactly_the_undocumented_classes():
    assert sorted(mujoco_v4_docstrings()) == sorted(envs.undocumented_entry_points())
    for gym_id, doc in mujoco_v4_docstrings().items(): assert doc == kept_sections(doc), gym_id


@pytest.mark.skipif(not os.environ.get("CWM_NB_GYMNASIUM_0291_WHEEL"),
                    reason="set CWM_NB_GYMNASIUM_0291_WHEEL to a gymnasium-0.29.1 wheel to check the stored docstrings")
def test_mujoco_v4_docstrings_match_gymnasium_0291():
    docs = envs.docstrings_from_wheel(os.environ["CWM_NB_GYMNASIUM_0291_WHEEL"], envs.undocumented_entry_points())
    assert docs == mujoco_v4_docstrings()


def test_semantics_pinned_as_the_paper_ran_them():
    bj = make_env("Blackjack-v1").unwrapped
    assert (bj.sab, bj.natural) == (True, False)
    cw = make_env("CliffWalking-v0")
    assert cw.reset(seed=0)[0] == 36
    assert cw.step(1)[:4] == (36, -100, False, False)   # the cliff sends the agent back; not terminal
    taxi = make_env("Taxi-v3")
    taxi.reset(seed=0)
    assert all(len(taxi.unwrapped.P[s][a]) == 1 for s in range(500) for a in range(6))  # deterministic
    assert make_env("CartPole-v1").unwrapped._sutton_barto_reward is False
    assert make_env("Pusher-v4").observation_space.shape == (23,)


def test_v4_deprecation_warning_is_silenced_only_in_make_env():
    import gymnasium as gym
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        gym.make("Swimmer-v4").close()
    assert any("out of date" in str(x.message) for x in w)          # gymnasium does warn ...
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        make_env("Swimmer-v4").close()
    assert not any("out of date" in str(x.message) for x in w)      # ... make_env silences exactly that


def test_unknown_names():
    with pytest.raises(CwmNbError, match="gymnasium id of benchmark environment 'CliffWalking-v0'"):
        get_env_spec("CliffWalking-v1")
    with pytest.raises(CwmNbError, match="did you mean 'Walker2d-v4'"):
        make_env("walker2d-v4")


def test_env_table():
    names = env_names()
    rows = env_table(names)
    assert [r["name"] for r in rows] == names
    assert set(rows[0]) == {"name", "gym_id", "actions", "planner", "horizon", "obs_format"}
    by = {r["name"]: r for r in rows}
    for name, (_, n_actions, _) in SPEC_TABLE.items():
        kind = "Discrete" if REGISTRY[name].action_kind == "discrete" else "Box"
        assert by[name]["actions"] == f"{kind}({n_actions})", name
    assert by["rtfm"]["actions"] == "Discrete(5)" and by["rtfm"]["obs_format"] == "rtfm"


def test_import_is_light():
    code = "import sys, cwm_nb.bench.envs; print('gymnasium' in sys.modules, 'mujoco' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
