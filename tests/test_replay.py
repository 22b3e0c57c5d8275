"Replay buffers: seeded collection, the 5 + 5 episode structure, terminated/truncated kept apart, storage."
import json

import numpy as np
import pytest

from cwm_nb.core import CwmNbError
from cwm_nb.envs import make_env
from cwm_nb.replay import (CollectionPlan, ReplayBuffer, collect_buffer, default_buffer_path, get_collection_plan,
                           load_buffer)

ENV = "CartPole-v1"


@pytest.fixture(scope="module")
def buf():
    return collect_buffer(ENV, seed=7)


def test_collection_is_deterministic_for_a_seed(buf):
    again = collect_buffer(ENV, seed=7)
    assert again.same_transitions(buf) and again.meta == buf.meta
    assert again.fingerprint() == buf.fingerprint()
    other = collect_buffer(ENV, seed=8)
    assert not other.same_transitions(buf)


def test_ten_episodes_five_random_then_five_above_threshold(buf):
    plan = get_collection_plan(ENV)
    bounds = buf.episode_bounds()
    assert len(bounds) == 10
    assert buf.episode.tolist() == [k for k, (a, b) in enumerate(bounds) for _ in range(b - a)]
    kinds = [e["kind"] for e in buf.meta["episodes"]]
    assert kinds == ["random"] * 5 + ["good"] * 5
    # the random episodes are the first five seeds, unfiltered; the good ones all pass the threshold
    assert [e["attempt"] for e in buf.meta["episodes"][:5]] == [0, 1, 2, 3, 4]
    assert all(r > plan.return_threshold for r in buf.episode_returns()[5:])
    assert [e["ret"] for e in buf.meta["episodes"]] == buf.episode_returns()
    assert all(n <= plan.max_steps for n in buf.episode_lengths())
    assert buf.obs.dtype == np.float32 and buf.obs.shape[1:] == (4,)
    assert buf.rewards.dtype == np.float64 and set(buf.rewards.tolist()) == {1.0}
    for k in ("env", "gym_id", "gymnasium_version", "seed", "policy"):
        assert k in buf.meta
    assert buf.meta["seed"] == 7


def test_episodes_end_once_and_chain(buf):
    for a, b in buf.episode_bounds():
        assert not buf.done[a:b - 1].any() and buf.done[b - 1]
        np.testing.assert_array_equal(buf.next_obs[a:b - 1], buf.obs[a + 1:b])


def test_transitions_replay_in_the_real_env(buf):
    "Every stored transition is what gymnasium produces from the recorded reset seed and actions."
    env = make_env(ENV, max_episode_steps=buf.meta["max_episode_steps"])
    for (a, b), info in zip(buf.episode_bounds(), buf.meta["episodes"]):
        obs, _ = env.reset(seed=info["reset_seed"])
        np.testing.assert_array_equal(obs, buf.obs[a])
        for i in range(a, b):
            nobs, r, term, trunc, _ = env.step(int(buf.actions[i]))
            np.testing.assert_array_equal(nobs, buf.next_obs[i])
            assert (r, term, trunc) == (buf.rewards[i], buf.terminated[i], buf.truncated[i])


def test_terminated_and_truncated_are_kept_apart():
    # CartPole cannot fall within 6 steps of its start, so a 6-step cap truncates every episode
    capped = collect_buffer(ENV, seed=0, plan=CollectionPlan(n_random=4, n_good=1, max_steps=6, return_threshold=3))
    assert capped.episode_lengths() == [6] * 5
    assert capped.truncated.sum() == 5 and capped.terminated.sum() == 0
    assert capped.done.tolist() == (capped.terminated | capped.truncated).tolist()
    t = capped.transition(5)
    assert (t.terminated, t.truncated, t.done) == (False, True, True)
    natural = collect_buffer(ENV, seed=0)
    assert natural.terminated.sum() == 10 and natural.truncated.sum() == 0


def test_save_load_round_trip(buf, tmp_path):
    p = buf.save(tmp_path / "b")
    back = ReplayBuffer.load(p)
    assert back.same_transitions(buf) and back.meta == buf.meta
    assert back.obs.dtype == np.float32 and back.actions.dtype == np.int64 and back.terminated.dtype == bool
    t1, t2 = buf.transition(5), back.transition(5)
    assert (t1.action, t1.reward, t1.done) == (t2.action, t2.reward, t2.done)
    np.testing.assert_array_equal(t1.obs, t2.obs)
    assert ReplayBuffer.load(p / "transitions.npz").same_transitions(buf)   # the .npz path works too
    # plain formats: the npz loads without pickle, the metadata is JSON
    with np.load(p / "transitions.npz", allow_pickle=False) as z:
        assert {"obs", "actions", "next_obs", "rewards", "terminated", "truncated", "episode"} <= set(z.files)
    assert json.loads((p / "meta.json").read_text())["n_transitions"] == len(buf)
    # deterministic bytes
    assert (buf.save(tmp_path / "c") / "transitions.npz").read_bytes() == (p / "transitions.npz").read_bytes()


def test_load_errors_say_what_to_do(buf, tmp_path):
    with pytest.raises(CwmNbError, match="no replay buffer at"):
        ReplayBuffer.load(tmp_path / "missing")
    p = buf.save(tmp_path / "garbage"); (p / "transitions.npz").write_bytes(b"\x80\x04not an archive")
    with pytest.raises(CwmNbError, match="not an .npz archive") as e:
        ReplayBuffer.load(p)
    assert "What to do" in str(e.value)
    p = buf.save(tmp_path / "keys"); np.savez(p / "transitions.npz", obs=buf.obs)
    with pytest.raises(CwmNbError, match="has no array 'actions'"):
        ReplayBuffer.load(p)
    p = buf.save(tmp_path / "lens")
    with np.load(p / "transitions.npz") as z: arrays = dict(z)
    arrays["rewards"] = arrays["rewards"][:-1]
    np.savez(p / "transitions.npz", **arrays)
    with pytest.raises(CwmNbError, match="different lengths"):
        ReplayBuffer.load(p)
    p = buf.save(tmp_path / "pickled"); arrays["rewards"] = np.array([object()] * len(buf), dtype=object)
    np.savez(p / "transitions.npz", **arrays)
    with pytest.raises(CwmNbError, match="pickled objects"):
        ReplayBuffer.load(p)
    p = buf.save(tmp_path / "json"); (p / "meta.json").write_text("[1, 2")
    with pytest.raises(CwmNbError, match="not valid JSON"):
        ReplayBuffer.load(p)
    p = buf.save(tmp_path / "mixed"); collect_buffer(ENV, seed=1).save(tmp_path / "other")
    (p / "transitions.npz").write_bytes((tmp_path / "other" / "transitions.npz").read_bytes())
    with pytest.raises(CwmNbError, match=r"different saves|says \d+ transitions"):
        ReplayBuffer.load(p)


def test_shipped_buffer_is_the_seed0_collection():
    shipped = load_buffer(ENV)
    assert default_buffer_path(ENV).name == ENV
    assert shipped.meta["seed"] == 0 and shipped.meta["env"] == ENV
    assert shipped.same_transitions(collect_buffer(ENV, seed=0))
    with pytest.raises(CwmNbError, match="collect one"):
        load_buffer(ENV, path="/nonexistent/buffer")
