"Replay buffers: seeded collection for all 19 environments, observation formats, valid actions, storage, the shipped buffers."
import json
from dataclasses import asdict

import numpy as np
import pytest

from cwm_nb.core import CwmNbError, to_plain
from cwm_nb.bench.envs import env_names, get_env_spec, make_env
from cwm_nb.bench.replay import (CollectionPlan, ReplayBuffer, collect_buffer, collect_main, decode_obs, default_buffer_path,
                           encode_obs, get_collection_plan, load_buffer, summarize_buffer)

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
        assert {"obs", "actions", "next_obs__ends", "rewards", "terminated", "truncated", "episode"} <= set(z.files)
        assert len(z["next_obs__ends"]) == 10   # next_obs is chained: only each episode's last one is stored
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


# ---- all environments: observation formats, valid actions, the shipped buffers --------------------------------

OBS_SHAPE = {"int": (), "tuple": (3,), "rtfm": (73,)}


def _cheap_continuous_plan():
    return CollectionPlan(kind="cem", max_steps=15, cem_iterations=(1, 2), cem_samples=6, cem_elites=2, cem_horizon=6)


def test_registry_has_the_19_environments():
    assert len(env_names()) == 19 and env_names()[-1] == "rtfm"


@pytest.mark.parametrize("name", env_names())
def test_shipped_buffer_loads_with_the_planned_shape(name):
    "Each shipped buffer loads, was collected by the current plan with seed 0, and has that plan's structure."
    spec, plan, buf = get_env_spec(name), get_collection_plan(name), load_buffer(name)
    meta = buf.meta
    assert (meta["env"], meta["seed"], meta["gym_id"]) == (name, 0, spec.gym_id)
    assert meta["obs_format"] == spec.obs_format
    strip = lambda d: {k: v for k, v in d.items() if k != "rationale"}
    assert strip(meta["plan"]) == strip(to_plain(asdict(plan))), "shipped buffer is stale: re-ship it with ship_buffer(name)"
    cap = meta["max_episode_steps"]
    assert cap == min(plan.max_steps, spec.horizon)
    lens, kinds = buf.episode_lengths(), [e["kind"] for e in meta["episodes"]]
    assert [e["length"] for e in meta["episodes"]] == lens and max(lens) <= cap
    if plan.kind == "filtered":
        assert kinds == ["random"] * plan.n_random + ["good"] * plan.n_good
        for r, e in zip(buf.episode_returns()[plan.n_random:], meta["episodes"][plan.n_random:]):
            assert plan.return_threshold is None or r > plan.return_threshold
            assert e["terminated"] or not plan.require_terminated
    elif plan.kind == "cem":
        assert kinds == ["cem"] * len(plan.cem_iterations)
        assert [e["cem_iterations"] for e in meta["episodes"]] == list(plan.cem_iterations)
        assert buf.actions.dtype == np.float32 and buf.actions.shape[1:] == make_env(name).action_space.shape
    else:
        assert len(buf) == plan.n_transitions
    # observations in the env's format
    want = OBS_SHAPE.get(spec.obs_format) or make_env(name).observation_space.shape
    assert buf.obs.shape == (len(buf), *want) and buf.next_obs.shape == buf.obs.shape
    if spec.obs_format == "rtfm": assert buf.obs.dtype.kind == "U"
    elif spec.obs_format in ("int", "tuple"): assert buf.obs.dtype == np.int64
    assert (buf.next_valid_actions is not None) == spec.valid_actions
    # each episode ends once, and consecutive transitions chain; both flags only when the goal is reached at the cap
    both = np.flatnonzero(buf.terminated & buf.truncated)
    assert all(buf.episode_lengths()[buf.episode[i]] == cap for i in both)
    for a, b in buf.episode_bounds():
        assert not buf.done[a:b - 1].any() and buf.done[b - 1]
        np.testing.assert_array_equal(buf.next_obs[a:b - 1], buf.obs[a + 1:b])


@pytest.mark.parametrize("name", env_names())
def test_shipped_transitions_replay_in_the_real_env(name):
    "Resetting with each episode's recorded seed and replaying its actions reproduces every stored transition."
    buf = load_buffer(name)
    spec = get_env_spec(name)
    env = make_env(name, max_episode_steps=buf.meta["max_episode_steps"])
    exact = spec.state_kind == "discrete"
    for (a, b), info in zip(buf.episode_bounds(), buf.meta["episodes"]):
        obs, _ = env.reset(seed=info["reset_seed"])
        np.testing.assert_array_equal(np.asarray(encode_obs(obs, spec.obs_format)), buf.obs[a])
        for i in range(a, b):
            act = int(buf.actions[i]) if spec.action_kind == "discrete" else buf.actions[i]
            nobs, r, term, trunc, inf = env.step(act)
            got = np.asarray(encode_obs(nobs, spec.obs_format))
            if exact: np.testing.assert_array_equal(got, buf.next_obs[i])
            else: np.testing.assert_allclose(got, buf.next_obs[i], rtol=1e-5, atol=1e-5)
            assert np.isclose(r, buf.rewards[i], rtol=1e-5, atol=1e-6)
            cut = bool(info.get("cut")) and i == b - 1         # rtfm: the last episode was cut to fit
            assert (term, trunc or cut) == (buf.terminated[i], buf.truncated[i])
            if buf.next_valid_actions is not None:
                np.testing.assert_array_equal(np.asarray(inf["action_mask"]).astype(bool), buf.next_valid_actions[i])


@pytest.mark.parametrize("name", ["CartPole-v1", "Taxi-v3", "rtfm", "Blackjack-v1", "MountainCar-v0"])
def test_cheap_collections_are_deterministic_and_match_the_shipped_buffer(name):
    buf = collect_buffer(name, seed=0)
    assert buf.fingerprint() == collect_buffer(name, seed=0).fingerprint()
    assert buf.same_transitions(load_buffer(name))
    assert buf.fingerprint() != collect_buffer(name, seed=1).fingerprint()


def test_cem_collection_is_deterministic_for_a_seed():
    "CEM collection plans with cwm_nb.bench.planning, so it goes through cwm_nb.bench.collect; cwm_nb.bench.replay alone refuses it."
    from cwm_nb.bench.collect import collect_buffer as collect_with_cem
    plan = _cheap_continuous_plan()
    with pytest.raises(CwmNbError, match="no planner was given") as e:
        collect_buffer("InvertedPendulum-v4", seed=0, plan=plan)
    assert "cwm_nb.bench.collect.collect_buffer" in e.value.todo
    a = collect_with_cem("InvertedPendulum-v4", seed=0, plan=plan)
    b = collect_with_cem("InvertedPendulum-v4", seed=0, plan=plan)
    assert a.fingerprint() == b.fingerprint() and a.meta == b.meta
    assert a.fingerprint() != collect_with_cem("InvertedPendulum-v4", seed=1, plan=plan).fingerprint()
    assert [e["kind"] for e in a.meta["episodes"]] == ["cem", "cem"]
    assert all(e["plans"] == -(-e["length"] // plan.cem_horizon) for e in a.meta["episodes"])
    assert a.actions.dtype == np.float32 and np.all(np.abs(a.actions) <= 3.0)


def test_observation_formats():
    taxi = collect_buffer("Taxi-v3", seed=0, plan=CollectionPlan(n_random=1, n_good=0, max_steps=7))
    assert taxi.obs.dtype == np.int64 and taxi.obs.shape == (7,) and isinstance(decode_obs(taxi.obs[0], "int"), int)
    bj = collect_buffer("Blackjack-v1", seed=0)
    assert bj.obs.shape[1:] == (3,) and bj.obs.dtype == np.int64
    sum_, dealer, ace = decode_obs(bj.obs[0], "tuple")
    assert 4 <= sum_ <= 21 and 1 <= dealer <= 10 and ace in (0, 1)


def test_next_valid_actions_round_trip(tmp_path):
    from cwm_nb.bench.rtfm_env import valid_actions
    rt = collect_buffer("rtfm", seed=2, plan=CollectionPlan(kind="transitions", policy="random_valid", n_transitions=120))
    assert rt.next_valid_actions.shape == (120, 5) and rt.next_valid_actions.dtype == bool
    for i in range(len(rt)):
        if not rt.terminated[i]:   # the mask is that of next_obs
            np.testing.assert_array_equal(np.flatnonzero(rt.next_valid_actions[i]), valid_actions(decode_obs(rt.next_obs[i], "rtfm")))
    back = ReplayBuffer.load(rt.save(tmp_path / "rt"))
    assert back.same_transitions(rt) and back.fingerprint() == rt.fingerprint()
    np.testing.assert_array_equal(back.next_valid_actions, rt.next_valid_actions)
    assert back.obs.dtype.kind == "U" and back.obs.shape == (120, 73)
    board, inv = decode_obs(back.obs[0], "rtfm")
    assert board.shape == (6, 6, 2) and inv == "empty"
    # without the column, the buffer has none and its fingerprint differs
    plain = ReplayBuffer(rt.obs, rt.actions, rt.next_obs, rt.rewards, rt.terminated, rt.truncated, rt.episode)
    assert plain.next_valid_actions is None and plain.fingerprint() != rt.fingerprint()
    assert not plain.same_transitions(rt)


def test_malformed_valid_actions_and_versions(tmp_path):
    rt = collect_buffer("rtfm", seed=0, plan=CollectionPlan(kind="transitions", policy="random_valid", n_transitions=30))
    p = rt.save(tmp_path / "short")
    with np.load(p / "transitions.npz") as z: arrays = dict(z)
    arrays["next_valid_actions"] = arrays["next_valid_actions"][:-1]
    np.savez(p / "transitions.npz", **arrays)
    with pytest.raises(CwmNbError, match="different lengths"):
        ReplayBuffer.load(p)
    p = rt.save(tmp_path / "gone"); del arrays["next_valid_actions"]
    np.savez(p / "transitions.npz", **arrays)
    with pytest.raises(CwmNbError, match="has no array 'next_valid_actions'"):
        ReplayBuffer.load(p)
    p = rt.save(tmp_path / "version"); m = json.loads((p / "meta.json").read_text()); m["format_version"] = 99
    (p / "meta.json").write_text(json.dumps(m))
    with pytest.raises(CwmNbError, match="format version 99"):
        ReplayBuffer.load(p)
    with pytest.raises(CwmNbError, match=r"\(N, n_actions\)"):
        ReplayBuffer(rt.obs, rt.actions, rt.next_obs, rt.rewards, rt.terminated, rt.truncated, rt.episode,
                     next_valid_actions=np.ones(len(rt)))


def test_chained_next_obs_is_checked(tmp_path):
    buf = collect_buffer(ENV, seed=0)
    p = buf.save(tmp_path / "c")
    with np.load(p / "transitions.npz") as z: arrays = dict(z)
    arrays["next_obs__ends"] = arrays["next_obs__ends"][:-1]
    np.savez(p / "transitions.npz", **arrays)
    with pytest.raises(CwmNbError, match="chained column 'next_obs' does not fit"):
        ReplayBuffer.load(p)
    # a next_obs that does not chain (e.g. edited) is stored in full and round-trips
    nxt = buf.next_obs.copy(); nxt[3] += 1
    odd = ReplayBuffer(buf.obs, buf.actions, nxt, buf.rewards, buf.terminated, buf.truncated, buf.episode)
    p = odd.save(tmp_path / "odd")
    assert json.loads((p / "meta.json").read_text())["columns"]["next_obs"]["layout"] == "array"
    assert ReplayBuffer.load(p).same_transitions(odd)


def test_version1_buffers_still_load(tmp_path):
    p = collect_buffer(ENV, seed=0).save(tmp_path / "v1")
    m = json.loads((p / "meta.json").read_text()); m["format_version"] = 1
    (p / "meta.json").write_text(json.dumps(m))
    assert ReplayBuffer.load(p).same_transitions(load_buffer(ENV))


def test_load_buffer_reads_paper_pickles_and_rejects_other_files(tmp_path):
    from cwm_nb.bench.paper_pickles import paper_buffers_dir
    try: pkl = paper_buffers_dir() / "CartPole-v1.pkl"
    except CwmNbError: pytest.skip("the paper's buffers are not available")
    paper = load_buffer(ENV, pkl)
    assert len(paper) == 402 and len(paper.episode_bounds()) == 10 and paper.meta["env"] == ENV
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(CwmNbError, match="is not a replay buffer"):
        load_buffer(ENV, tmp_path / "x.txt")
    with pytest.raises(CwmNbError, match="not 'Taxi-v3'"):
        load_buffer("Taxi-v3", default_buffer_path(ENV))


def test_collect_main_prints_a_summary(tmp_path, capsys):
    p = collect_main("Taxi-v3", seed=5, out=tmp_path / "taxi")
    out = capsys.readouterr().out
    buf = load_buffer("Taxi-v3", p)
    s = summarize_buffer(buf)
    assert buf.meta["seed"] == 5 and s["episodes"] == 10
    assert f"{s['transitions']} transitions in 10 episodes" in out and "returns" in out and str(p) in out


# ---- the data must fit the environment, whatever the file name or meta.json say --------------------------------

def test_load_buffer_rejects_another_envs_data_under_this_envs_name(tmp_path):
    import shutil
    from cwm_nb.bench.replay import check_buffer_fits_env
    fake = tmp_path / "CartPole-v1"
    shutil.copytree(default_buffer_path("Acrobot-v1"), fake)
    info = json.loads((fake / "meta.json").read_text())
    info["meta"]["env"] = ENV                      # the checksum covers the .npz, so this copy still loads
    (fake / "meta.json").write_text(json.dumps(info))
    assert ReplayBuffer.load(fake).meta["env"] == ENV
    with pytest.raises(CwmNbError, match="does not hold CartPole-v1 data") as e:
        load_buffer(ENV, fake)
    msg = str(e.value)
    assert "(6,)" in msg and "(4,)" in msg and "[0, 2)" in msg
    assert "cwm-nb collect --env CartPole-v1" in msg and "--buffer" in msg
    # the formats other than "array": ints out of range, tuples, strings, continuous actions
    with pytest.raises(CwmNbError, match=r"observes one int in \[0, 48\)"):
        check_buffer_fits_env(load_buffer("Taxi-v3"), "CliffWalking-v0")
    with pytest.raises(CwmNbError, match="3 ints per row"):
        check_buffer_fits_env(load_buffer("CartPole-v1"), "Blackjack-v1")
    with pytest.raises(CwmNbError, match="73 strings"):
        check_buffer_fits_env(load_buffer("Taxi-v3"), "rtfm")
    with pytest.raises(CwmNbError, match=r"actions hold float32 rows of shape \(3,\).*rows of shape \(1,\)"):
        check_buffer_fits_env(load_buffer("Hopper-v4"), "InvertedDoublePendulum-v4")   # both observe 11 numbers
    pend = load_buffer("Pendulum-v1")
    with pytest.raises(CwmNbError, match=r"obs and next_obs hold float32 rows of shape \(3,\).*actions hold float32 rows of shape \(1,\), but Acrobot-v1's actions are ints in \[0, 3\)"):
        check_buffer_fits_env(pend, "Acrobot-v1")
    for name in env_names():                       # every shipped buffer fits its own environment
        assert check_buffer_fits_env(load_buffer(name), name) is not None


def test_load_buffer_rejects_a_renamed_paper_pickle(tmp_path):
    from cwm_nb.bench.paper_pickles import paper_buffers_dir
    try: src = paper_buffers_dir() / "Acrobot-v1.pkl"
    except CwmNbError: pytest.skip("the paper's buffers are not available (set $CWM_NB_PAPER_BUFFERS)")
    if not src.is_file(): pytest.skip(f"{src} is missing")
    bad = tmp_path / "CartPole-v1.pkl"
    bad.write_bytes(src.read_bytes())
    with pytest.raises(CwmNbError, match="does not hold CartPole-v1 data") as e:
        load_buffer(ENV, bad)
    assert "(6,)" in str(e.value) and "cwm-nb collect --env CartPole-v1" in str(e.value)
    assert len(load_buffer("Acrobot-v1", src)) == 4521


def test_errors_give_the_command_line_remedy_first(tmp_path):
    with pytest.raises(CwmNbError) as e:
        load_buffer(ENV, tmp_path / "nonexist")
    todo = e.value.todo
    assert todo.startswith(f"collect one with `cwm-nb collect --env {ENV} --out {tmp_path / 'nonexist'}`")
    assert todo.index("cwm-nb collect") < todo.index("collect_buffer(")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CwmNbError, match="missing transitions.npz") as e:
        load_buffer(ENV, tmp_path / "empty")
    assert e.value.todo.startswith("pass --buffer with a buffer folder (transitions.npz + meta.json)")
    assert f"--env {ENV}" in e.value.todo and "<env>" not in e.value.todo
    corrupt = default_buffer_path(ENV)
    p = tmp_path / "corrupt"
    p.mkdir()
    (p / "meta.json").write_bytes((corrupt / "meta.json").read_bytes())
    (p / "transitions.npz").write_text("not a zip")
    with pytest.raises(CwmNbError, match="malformed") as e:
        load_buffer(ENV, p)
    todo = e.value.todo
    assert todo.startswith(f"re-create it with `cwm-nb collect --env {ENV} --out {p}`")
    assert "git checkout data/buffers" in todo and todo.index("git checkout") < todo.index("collect_buffer(")
    with pytest.raises(CwmNbError) as e:
        load_buffer("Taxi-v3", default_buffer_path(ENV))
    assert e.value.todo.startswith("pass --buffer with a buffer of Taxi-v3") and f"--env {ENV}" in e.value.todo
    assert "env_name" not in e.value.todo
