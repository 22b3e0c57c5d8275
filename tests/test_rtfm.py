"""The stationary, deterministic RTFM env (cwm_nb.bench.rtfm): a CWM written from its description agrees with it on
thousands of random valid-action steps; seeding, masks, rewards, snapshots, registration and the row codec."""
import importlib.util
import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from cwm_nb.core import CwmNbError
from cwm_nb.bench import rtfm as R
from cwm_nb.bench import rtfm_env as RE   # the gymnasium env; importing it registers cwm_nb/RTFM-v0

PROGRAM = Path(__file__).resolve().parents[1]/"data"/"programs"/"rtfm.py"   # the shipped reference CWM


def _load_program():
    spec = importlib.util.spec_from_file_location("rtfm_reference", PROGRAM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Environment()


def _board(**cells):
    "An empty room with objects at named cells: _board(you=(2, 2), **{'cold dragon': (1, 2)})."
    b = R.empty_room()
    for name, (r, c) in cells.items(): b[r, c, 0] = name.replace("_", " ")
    return b


def test_correct_program_agrees_with_env_on_random_valid_steps():
    "set_state(obs) + step(a) of the independent program == RTFMEnv.step(a), for every component."
    cwm, env = _load_program(), gym.make(R.RTFM_GYM_ID)
    rng = np.random.default_rng(1234)
    n_steps, n_episodes, rewards = 0, 0, []
    while n_steps < 5000:
        obs, info = env.reset(seed=int(rng.integers(2**31)))
        n_episodes += 1
        done = False
        while not done:
            a = RE.random_valid_policy(env, obs, rng, info)
            cwm.set_state((obs[0].copy(), obs[1]))
            (p_board, p_inv), p_valid, p_reward, p_done = cwm.step(np.int64(a))
            obs, reward, terminated, truncated, info = env.step(a)
            n_steps += 1
            assert p_board.shape == (6, 6, 2) and np.array_equal(p_board, obs[0]), (a, obs[0], p_board)
            assert p_inv == obs[1]
            assert list(p_valid) == list(np.flatnonzero(info["action_mask"]))
            assert p_reward == reward and p_done == terminated
            rewards.append(reward)
            done = terminated or truncated
    # the sample covers every kind of transition, or the agreement would mean little
    assert {-1.0, 0.0, 1.0} <= set(rewards) and n_episodes > 100
    assert rewards.count(1.0) >= 10


def test_reset_is_deterministic_by_seed_and_only_placement_varies():
    env = RE.RTFMEnv()
    boards = []
    for seed in range(30):
        (b1, inv1), _ = env.reset(seed=seed)
        (b2, inv2), _ = RE.RTFMEnv().reset(seed=seed)
        assert np.array_equal(b1, b2) and inv1 == inv2 == "empty"
        objects = sorted(v for v in b1[:, :, 0].flat if v not in ("wall", "empty"))
        assert objects == sorted(["you", "cold dragon", "fire demon", "shimmering axe", "grandmasters bow"])
        assert set(b1[:, :, 1].flat) == {"empty"}
        ring = np.concatenate([b1[0, :, 0], b1[5, :, 0], b1[:, 0, 0], b1[:, 5, 0]])
        assert set(ring) == {"wall"} and "wall" not in set(b1[1:5, 1:5, 0].flat)
        assert all(type(v) is str for v in b1.flat)
        boards.append(tuple(b1.flat))
    assert len(set(boards)) == 30   # 30 seeds, 30 placements (16*15*14*13*12 placements exist)


def test_action_mask_matches_walls():
    env = RE.RTFMEnv()
    expected = {(1, 1): [0, 2, 4], (1, 4): [0, 2, 3], (4, 1): [0, 1, 4], (4, 4): [0, 1, 3], (2, 3): [0, 1, 2, 3, 4]}
    for (r, c), ids in expected.items():
        b = _board(you=(r, c))
        env.set_state({"board": b, "inventory": "empty"})
        assert list(RE.valid_actions(env)) == ids
        assert list(np.flatnonzero(RE.action_mask(b))) == ids
    # monsters and weapons do not block; a dead agent (no "you") blocks nothing
    b = _board(you=(2, 2), cold_dragon=(1, 2), fire_demon=(3, 2), shimmering_axe=(2, 1), grandmasters_bow=(2, 3))
    assert list(RE.valid_actions(b)) == [0, 1, 2, 3, 4]
    assert list(RE.valid_actions(R.empty_room())) == [0, 1, 2, 3, 4]
    # an invalid move (into a wall) leaves everything as it was
    env.set_state({"board": _board(you=(1, 1)), "inventory": "empty"})
    (b, inv), r, term, trunc, _ = env.step(1)
    assert b[1, 1, 0] == "you" and (r, term, trunc) == (0.0, False, False)


@pytest.mark.parametrize("item,action,reward,outcome,agent_at", [
    ("shimmering axe", 1, 1.0, "won", (1, 2)),                 # the axe (cold) beats the cold dragon: +1
    ("grandmasters bow", 2, -1.0, "killed_distractor", (3, 2)),  # the bow (fire) beats the fire demon: -1
    ("empty", 1, -1.0, "died", None),
    ("grandmasters bow", 1, -1.0, "died", None),
    ("empty", 2, -1.0, "died", None),
    ("shimmering axe", 2, -1.0, "died", None),
])
def test_fight_rewards(item, action, reward, outcome, agent_at):
    env = RE.RTFMEnv()
    b = _board(you=(2, 2), cold_dragon=(1, 2), fire_demon=(3, 2))
    env.set_state({"board": b, "inventory": item})
    (nb, inv), r, term, trunc, info = env.step(action)
    assert (r, term, trunc, info["outcome"], inv) == (reward, True, False, outcome, item)
    assert R.agent_position(nb) == agent_at
    monster_cell = (1, 2) if action == 1 else (3, 2)
    assert (nb[monster_cell][0] == "you") == (agent_at is not None)   # a beaten monster is gone, else it stays
    with pytest.raises(CwmNbError, match="over"):
        env.step(0)


def test_picking_up_a_weapon_replaces_and_destroys_the_one_held():
    env = RE.RTFMEnv()
    env.set_state({"board": _board(you=(2, 2), shimmering_axe=(2, 3)), "inventory": "grandmasters bow"})
    (b, inv), r, term, trunc, _ = env.step(4)
    assert inv == "shimmering axe" and (r, term, trunc) == (0.0, False, False)
    assert b[2, 3, 0] == "you" and "grandmasters bow" not in set(b.flat) and "shimmering axe" not in set(b.flat)


def test_get_state_set_state_round_trip():
    env, other = RE.RTFMEnv(), RE.RTFMEnv()
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=5)
    for _ in range(3):
        obs, *_ , info = env.step(0)
    snap = env.get_state()
    assert json.loads(json.dumps(snap)) == snap and snap["turn"] == 3
    other.set_state(json.loads(json.dumps(snap)))     # through JSON, into another instance
    assert other.get_state() == snap
    for _ in range(40):
        a = int(rng.integers(5))
        out1 = env.step(a) if not env.get_state()["over"] else None
        out2 = other.step(a) if not other.get_state()["over"] else None
        if out1 is None:
            assert out2 is None
            break
        assert np.array_equal(out1[0][0], out2[0][0]) and out1[0][1] == out2[0][1] and out1[1:4] == out2[1:4]
        assert env.get_state() == other.get_state()
    # restoring really rewinds
    env.set_state(snap)
    assert env.get_state() == snap
    with pytest.raises(CwmNbError, match="illegal RTFM board entry"):
        env.set_state({"board": [[["dragon", "empty"]] * 6] * 6, "inventory": "empty"})


def test_registration_and_horizon():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # registering again must be a silent no-op (gymnasium warns on overrides)
        RE.register_rtfm()
    env = gym.make(R.RTFM_GYM_ID)
    assert env.spec.max_episode_steps == R.RTFM_HORIZON == 100
    obs, info = env.reset(seed=0)
    assert info["action_mask"].dtype == np.int8 and info["action_mask"].shape == (5,)
    for t in range(R.RTFM_HORIZON):
        obs, r, term, trunc, info = env.step(0)
    assert (r, term, trunc) == (0.0, False, True)


def test_row_codec_round_trip():
    obs, _ = RE.RTFMEnv().reset(seed=11)
    row = R.rtfm_obs_to_row(obs)
    assert len(row) == 73 and all(type(v) is str for v in row)
    assert row == list(obs[0].reshape(-1)) + [obs[1]]
    col = np.array([row] * 3)          # a '<U' buffer column
    board, inv = R.rtfm_row_to_obs(col[1])
    assert board.dtype == object and np.array_equal(board, obs[0]) and inv == obs[1]
    with pytest.raises(CwmNbError, match="73"):
        R.rtfm_row_to_obs(row + ["empty"])


def _paper_rtfm_pickle():
    "The paper's RTFM buffer where the loader looks for it: $CWM_NB_PAPER_BUFFERS, else data/paper_buffers."
    from cwm_nb.bench.paper_pickles import paper_buffers_dir
    try: return paper_buffers_dir()/"rtfm-simple_stationary.pkl"
    except CwmNbError: return Path("data/paper_buffers/rtfm-simple_stationary.pkl (set $CWM_NB_PAPER_BUFFERS)")


def test_rtfm_step_reproduces_the_papers_buffer():
    "Every transition of the paper's RTFM buffer (999) follows our rules exactly, valid actions included."
    pb = pytest.importorskip("cwm_nb.bench.paper_buffers")
    path = _paper_rtfm_pickle()
    if not path.exists(): pytest.skip(f"{path} not present")
    buf = pb.load_paper_buffer(path, "rtfm")
    as_obs = lambda x: x if isinstance(x, tuple) else R.rtfm_row_to_obs(x)
    n = len(buf.rewards)
    assert n == 999
    for i in range(n):
        (b, inv), (nb, ninv) = as_obs(buf.obs[i]), as_obs(buf.next_obs[i])
        b2, inv2, r, outcome = RE.rtfm_step(b, inv, int(buf.actions[i]))
        assert np.array_equal(b2, nb) and inv2 == ninv, i
        assert r == buf.rewards[i] and (outcome != "") == bool(buf.terminated[i] or buf.truncated[i]), i
        if buf.next_valid_actions is not None:
            assert list(RE.valid_actions(b2)) == list(np.flatnonzero(buf.next_valid_actions[i])), i
